// Constant folding. Needs: a well-formed graph. Keeps: shapes, dtypes and
// values bit for bit (each op is computed as the C emitter computes it, see
// codegen/cexpr.c and cgen.c). Breaks nothing.
//
// An elementwise, reduction or movement node whose operands are all constant
// becomes a CONST when it is within the limits below; bigger results stay
// kernels, so big math happens in compiled code only. A result whose elements
// are all equal is kept as a broadcast of a one-element CONST (a "scalar
// constant", cheap at any size and visible to simplify's `x*1`). Not folded:
// leaves (IOTA, RNG, DIMV: runtime values), matmuls and row ops (their
// compiled summation order is the emitter's business), float-to-int casts out
// of range (undefined in C) and anything with a symbolic element count.
#include "passes.h"
#define KILN_OPMATH_HOST
#include "ir/opmath.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// How much is folded. The pipeline folds arithmetic on scalars only: tensor
// math belongs to the compiled kernels (one implementation to trust), while
// moving constant data (reshape, transpose, slice ...) is folded when small.
// The unit test raises the limits to check the folder bit for bit.
static const FoldLimits pipeline_limits = {1, 1, 4096};

// One element, as the C emitter holds it: float, double, or any integer
// (bool, i32, i64) widened to int64_t.
typedef union { float f; double d; int64_t i; } Num;

static Num num_get(const Node *k, int64_t i) {
  Num v;
  memset(&v, 0, sizeof v);
  switch (k->dtype) {
  case DT_BOOL: v.i = ((const uint8_t *)k->a.data)[i]; break;
  case DT_I32: v.i = ((const int32_t *)k->a.data)[i]; break;
  case DT_I64: v.i = ((const int64_t *)k->a.data)[i]; break;
  case DT_F32: v.f = ((const float *)k->a.data)[i]; break;
  default: v.d = ((const double *)k->a.data)[i]; break;
  }
  return v;
}

static void num_put(DType t, void *buf, int64_t i, Num v) {
  switch (t) {
  case DT_BOOL: ((uint8_t *)buf)[i] = (uint8_t)v.i; break;
  case DT_I32: ((int32_t *)buf)[i] = (int32_t)v.i; break;   // wraps, as the emitter's int32_t temporaries
  case DT_I64: ((int64_t *)buf)[i] = v.i; break;
  case DT_F32: ((float *)buf)[i] = v.f; break;
  default: ((double *)buf)[i] = v.d; break;
  }
}

// ---- shapes: concrete dims only (callers check ir_numel_const first) ----------------
static int concrete(const Node *n, int64_t *m) { return ir_numel_const(n, m); }

static void unravel(const Node *n, int64_t o, int64_t *idx) {
  for (int d = n->ndim - 1; d >= 0; d--) {
    int64_t k = n->shape[d].k;
    idx[d] = k ? o % k : 0;
    o = k ? o / k : 0;
  }
}

static int64_t ravel(const Node *n, const int64_t *idx) {
  int64_t o = 0;
  for (int d = 0; d < n->ndim; d++) o = o * n->shape[d].k + idx[d];
  return o;
}

// ---- constant operands ---------------------------------------------------------------
// A scalar constant (a one-element CONST seen through broadcasts and reshapes,
// of any shape), a CONST, or a view of constants (movement ops, concrete shapes).
static int is_scalar_const(const Node *a) { return ir_is_scalar_const(a, NULL); }

static int is_const(const Node *a, int depth) {
  int64_t m;
  if (a->op == OP_CONST || is_scalar_const(a)) return 1;
  if (ir_ops[a->op].kind != K_MOVE || (ir_ops[a->op].flags & F_SPECIAL) || depth > 8 || !concrete(a, &m)) return 0;
  for (int s = 0; s < a->nsrc; s++)
    if (!is_const(a->src[s], depth + 1) || (!is_scalar_const(a->src[s]) && !concrete(a->src[s], &m))) return 0;
  return 1;
}

static int move_at(const Node *n, int64_t o, Num *r);

static Num operand_at(const Node *a, int64_t i) {
  Num v;
  if (is_scalar_const(a)) {
    while (a->op != OP_CONST) a = a->src[0];
    return num_get(a, 0);
  }
  if (a->op == OP_CONST) return num_get(a, i);
  move_at(a, i, &v);
  return v;
}

// ---- elementwise: the op table's C text, per dtype -------------------------------------
// exp, tanh, erf, log1p, expm1 in f32 and // and % as the kernels compute them
// (ir/opmath.h); a clang build of Kiln would otherwise contract their a * b + c,
// which the kernels do not.
#ifdef __clang__
#define FOLD_NOCONTRACT _Pragma("STDC FP_CONTRACT OFF")
#else
#define FOLD_NOCONTRACT
#endif
KILN_OPMATH(static, FOLD_NOCONTRACT)
KILN_OPMATH_LOG(static, FOLD_NOCONTRACT)
KILN_OPMATH_DIVMOD(static inline)

static int ew_f32(Op op, const Num *x, Num *r) {
  float a = x[0].f, b = x[1].f, v;
  switch (op) {
  case OP_NEG: v = -a; break;
  case OP_EXP: v = kiln_expf(a); break;
  case OP_LOG: v = logf(a); break;
  case OP_LOG1P: v = kiln_log1pf(a); break;
  case OP_EXPM1: v = kiln_expm1f(a); break;
  case OP_SQRT: v = sqrtf(a); break;
  case OP_RSQRT: v = 1.0f / sqrtf(a); break;
  case OP_ABS: v = fabsf(a); break;
  case OP_SIGN: v = (float)((a > 0) - (a < 0)); break;
  case OP_TANH: v = kiln_tanhf(a); break;
  case OP_SIGMOID: v = 1.0f / (1.0f + kiln_expf(-a)); break;
  case OP_RELU: v = a > 0 ? a : 0.0f; break;
  case OP_SOFTPLUS: v = fmaxf(a, 0.0f) + kiln_log1pf(kiln_expf(-fabsf(a))); break;
  case OP_ERF: v = kiln_erff(a); break;
  case OP_SIN: v = sinf(a); break;
  case OP_COS: v = cosf(a); break;
  case OP_FLOOR: v = floorf(a); break;
  case OP_CEIL: v = ceilf(a); break;
  case OP_ROUND: v = rintf(a); break;
  case OP_ADD: v = a + b; break;
  case OP_SUB: v = a - b; break;
  case OP_MUL: v = a * b; break;
  case OP_DIV: v = a / b; break;
  case OP_POW: v = powf(a, b); break;
  case OP_FLOORDIV: v = kiln_floordiv_f32(a, b); break;
  case OP_MOD: v = kiln_mod_f32(a, b); break;
  case OP_MAXIMUM: v = a > b || a != a ? a : b; break;
  case OP_MINIMUM: v = a < b || a != a ? a : b; break;
  default: return 0;
  }
  r->f = v;
  return 1;
}

static int ew_f64(Op op, const Num *x, Num *r) {
  double a = x[0].d, b = x[1].d, v;
  switch (op) {
  case OP_NEG: v = -a; break;
  case OP_EXP: v = exp(a); break;
  case OP_LOG: v = log(a); break;
  case OP_LOG1P: v = log1p(a); break;
  case OP_EXPM1: v = expm1(a); break;
  case OP_SQRT: v = sqrt(a); break;
  case OP_RSQRT: v = 1.0 / sqrt(a); break;
  case OP_ABS: v = a < 0 ? -a : a; break;
  case OP_SIGN: v = (a > 0) - (a < 0); break;
  case OP_TANH: v = tanh(a); break;
  case OP_SIGMOID: v = 1.0 / (1.0 + exp(-a)); break;
  case OP_RELU: v = a > 0 ? a : 0; break;
  case OP_SOFTPLUS: v = fmax(a, 0.0) + log1p(exp(-fabs(a))); break;
  case OP_ERF: v = erf(a); break;
  case OP_SIN: v = sin(a); break;
  case OP_COS: v = cos(a); break;
  case OP_FLOOR: v = floor(a); break;
  case OP_CEIL: v = ceil(a); break;
  case OP_ROUND: v = rint(a); break;
  case OP_ADD: v = a + b; break;
  case OP_SUB: v = a - b; break;
  case OP_MUL: v = a * b; break;
  case OP_DIV: v = a / b; break;
  case OP_POW: v = pow(a, b); break;
  case OP_FLOORDIV: v = kiln_floordiv_f64(a, b); break;
  case OP_MOD: v = kiln_mod_f64(a, b); break;
  case OP_MAXIMUM: v = a > b || a != a ? a : b; break;
  case OP_MINIMUM: v = a < b || a != a ? a : b; break;
  default: return 0;
  }
  r->d = v;
  return 1;
}

// Integers wrap (computed in uint64_t, truncated to the dtype when stored):
// what the emitter's int32_t/int64_t temporaries give on every target we run.
static int ew_int(Op op, const Num *x, Num *r) {
  int64_t a = x[0].i, b = x[1].i, v;
  switch (op) {
  case OP_NEG: v = (int64_t)(0 - (uint64_t)a); break;
  case OP_ABS: v = a < 0 ? (int64_t)(0 - (uint64_t)a) : a; break;
  case OP_SIGN: v = (a > 0) - (a < 0); break;
  case OP_RELU: v = a > 0 ? a : 0; break;
  case OP_NOT: v = !a; break;
  case OP_ADD: v = (int64_t)((uint64_t)a + (uint64_t)b); break;
  case OP_SUB: v = (int64_t)((uint64_t)a - (uint64_t)b); break;
  case OP_MUL: v = (int64_t)((uint64_t)a * (uint64_t)b); break;
  case OP_FLOORDIV: v = kiln_floordiv_i64(a, b); break;
  case OP_MOD: v = kiln_mod_i64(a, b); break;
  case OP_MAXIMUM: v = a > b ? a : b; break;
  case OP_MINIMUM: v = a < b ? a : b; break;
  case OP_AND: v = a && b; break;
  case OP_OR: v = a || b; break;
  default: return 0;   // float-only ops never have integer operands
  }
  r->i = v;
  return 1;
}

// Comparisons and the float classes in the operands' dtype (float widens to
// double exactly; an integer is always finite).
static int64_t compare(Op op, DType t, Num a, Num b) {
  int lt, eq, gt;
  if (op == OP_ISNAN || op == OP_ISINF || op == OP_ISFINITE) {
    double x = t == DT_F32 ? a.f : t == DT_F64 ? a.d : 0;
    return op == OP_ISNAN ? isnan(x) : op == OP_ISINF ? isinf(x) : isfinite(x);
  }
  if (ir_is_float(t)) {
    double x = t == DT_F32 ? a.f : a.d, y = t == DT_F32 ? b.f : b.d;
    lt = x < y; eq = x == y; gt = x > y;
  } else {
    lt = a.i < b.i; eq = a.i == b.i; gt = a.i > b.i;
  }
  switch (op) {
  case OP_LT: return lt;
  case OP_LE: return lt || eq;
  case OP_GT: return gt;
  case OP_GE: return gt || eq;
  case OP_EQ: return eq;
  default: return !eq;   // NE
  }
}

// C's conversions, as `(T)x` and `(x != 0)` for bool; 0 where C leaves it undefined.
static int convert(DType from, DType to, Num v, Num *r) {
  double x = from == DT_F32 ? v.f : v.d;
  memset(r, 0, sizeof *r);
  if (to == DT_BOOL) { r->i = ir_is_float(from) ? x != 0 : v.i != 0; return 1; }
  if (!ir_is_float(to)) {
    if (!ir_is_float(from)) { r->i = to == DT_I32 ? (int32_t)v.i : v.i; return 1; }
    double lo = to == DT_I32 ? -2147483649.0 : -9223372036854775808.0;
    double hi = to == DT_I32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(x > lo && x < hi)) return 0;   // NaN, infinities, out of range
    r->i = (int64_t)x;
    return 1;
  }
  if (to == DT_F32) r->f = from == DT_F64 ? (float)v.d : from == DT_F32 ? v.f : (float)v.i;
  else r->d = from == DT_F32 ? (double)v.f : from == DT_F64 ? v.d : (double)v.i;
  return 1;
}

// One element of an elementwise node from its operands' elements x.
static int ew_eval(const Node *n, const Num *x, Num *r) {
  DType t = n->src[n->nsrc - 1]->dtype;   // the operands' dtype (WHERE: its values')
  int fl = ir_ops[n->op].flags;
  if (n->op == OP_CAST) return convert(n->src[0]->dtype, n->dtype, x[0], r);
  if (n->op == OP_WHERE) {
    if (n->src[0]->dtype != DT_BOOL || n->src[1]->dtype != n->dtype || t != n->dtype) return 0;
    *r = x[0].i ? x[1] : x[2];
    return 1;
  }
  if ((fl & F_BOOL) && !(fl & F_LOGIC)) {
    if (n->src[0]->dtype != t) return 0;
    r->i = compare(n->op, t, x[0], x[1]);
    return 1;
  }
  for (int s = 0; s < n->nsrc; s++) if (n->src[s]->dtype != n->dtype) return 0;
  if (n->dtype == DT_BOOL && !(fl & F_LOGIC)) return 0;   // arithmetic on bools is promoted by the builders
  if (n->dtype == DT_F32) return ew_f32(n->op, x, r);
  if (n->dtype == DT_F64) return ew_f64(n->op, x, r);
  return ew_int(n->op, x, r);
}

static int ew_at(const Node *n, int64_t i, Num *r) {
  Num x[3];
  memset(x, 0, sizeof x);
  for (int s = 0; s < n->nsrc; s++) x[s] = operand_at(n->src[s], i);
  memset(r, 0, sizeof *r);
  return ew_eval(n, x, r);
}

// ---- movement: which operand element each result element is --------------------------
// Returns the operand's flat index (operand number in *which), or -1 for a
// padding zero.
static int64_t move_src(const Node *n, int64_t o, int *which) {
  int64_t idx[IR_MAXDIM], sidx[IR_MAXDIM];
  const Node *s = n->src[0];
  *which = 0;
  if (n->op == OP_RESHAPE) return o;
  unravel(n, o, idx);
  switch (n->op) {
  case OP_TRANSPOSE:
    for (int d = 0; d < n->ndim; d++) sidx[n->a.i[d]] = idx[d];
    break;
  case OP_BROADCAST:
    for (int d = 0; d < n->ndim; d++) sidx[d] = dim_is(s->shape[d], 1) ? 0 : idx[d];
    break;
  case OP_SLICE:
    for (int d = 0; d < n->ndim; d++) sidx[d] = n->a.i[d] + idx[d] * n->a.i[IR_MAXDIM + d];
    break;
  case OP_PAD:
    for (int d = 0; d < n->ndim; d++) {
      int64_t q = idx[d] - n->a.i[d], step = n->a.i[IR_MAXDIM + d];
      if (!step || q % step) return -1;
      sidx[d] = q / step;
      if (sidx[d] < 0 || sidx[d] >= s->shape[d].k) return -1;
    }
    break;
  default: {   // CONCAT
    int ax = (int)n->a.i[0];
    for (int k = 0; k < n->nsrc; k++) {
      if (idx[ax] < n->src[k]->shape[ax].k || k == n->nsrc - 1) { *which = k; s = n->src[k]; break; }
      idx[ax] -= n->src[k]->shape[ax].k;
    }
    memcpy(sidx, idx, sizeof idx);
    break;
  }
  }
  return ravel(s, sidx);
}

static int move_at(const Node *n, int64_t o, Num *r) {
  int which;
  int64_t i = move_src(n, o, &which);
  memset(r, 0, sizeof *r);   // a padding zero in any dtype
  if (i >= 0) *r = operand_at(n->src[which], i);
  return 1;
}

// ---- reductions: per output, the reduced axes in row-major order ------------------------
// As cgen.c: f32 sums and products accumulate in double; max/min start at the
// dtype's lowest/highest value; argmax/argmin keep the first best position
// (the first NaN, if any: NumPy's rule).
static int fold_reduce(const Node *n, Num *out, int64_t nout, int64_t max_in) {
  const Node *s = n->src[0];
  uint32_t axes = (uint32_t)n->a.i[0];
  int arg = n->op == OP_ARGMAX || n->op == OP_ARGMIN;
  DType t = s->dtype;
  int64_t nin, idx[IR_MAXDIM];
  if (!concrete(s, &nin) || nin > max_in) return 0;
  if (!arg && n->dtype != t) return 0;
  if (t == DT_BOOL && n->op != OP_RMAX && n->op != OP_RMIN && !arg) return 0;
  int wide = t == DT_F32 && (n->op == OP_SUM || n->op == OP_PROD);
  Num *acc = calloc((size_t)nout + 1, sizeof *acc);
  int64_t *pos = calloc((size_t)nout + 1, sizeof *pos), *best = calloc((size_t)nout + 1, sizeof *best);
  if (!acc || !pos || !best) abort();
  for (int64_t o = 0; o < nout; o++) {
    int lo = n->op == OP_RMAX || n->op == OP_ARGMAX;
    if (n->op == OP_SUM || n->op == OP_PROD) {
      int one = n->op == OP_PROD;
      if (wide || t == DT_F64) acc[o].d = one; else acc[o].i = one;
    } else if (t == DT_F32) {
      acc[o].f = lo ? -INFINITY : INFINITY;
    } else if (t == DT_F64) {
      acc[o].d = lo ? -INFINITY : INFINITY;
    } else {
      acc[o].i = lo ? (t == DT_I32 ? INT32_MIN : t == DT_I64 ? INT64_MIN : 0)
                    : (t == DT_I32 ? INT32_MAX : t == DT_I64 ? INT64_MAX : 1);
    }
  }
  for (int64_t i = 0; i < nin; i++) {
    unravel(s, i, idx);
    int64_t o = 0;
    for (int d = 0; d < s->ndim; d++) if (!(axes & (1u << d))) o = o * s->shape[d].k + idx[d];
    Num v = operand_at(s, i), *a = &acc[o];
    double x = t == DT_F32 ? v.f : v.d;
    switch (n->op) {
    case OP_SUM:
      if (wide) a->d = a->d + (double)v.f;
      else if (t == DT_F64) a->d = a->d + v.d;
      else a->i = (int64_t)((uint64_t)a->i + (uint64_t)v.i);
      break;
    case OP_PROD:
      if (wide) a->d = a->d * (double)v.f;
      else if (t == DT_F64) a->d = a->d * v.d;
      else a->i = (int64_t)((uint64_t)a->i * (uint64_t)v.i);
      break;
    case OP_RMAX: case OP_RMIN: {
      int mx = n->op == OP_RMAX;
      if (t == DT_F32) { if (mx ? v.f > a->f || v.f != v.f : v.f < a->f || v.f != v.f) a->f = v.f; }
      else if (t == DT_F64) { if (mx ? v.d > a->d || v.d != v.d : v.d < a->d || v.d != v.d) a->d = v.d; }
      else if (mx ? v.i > a->i : v.i < a->i) a->i = v.i;
      break;
    }
    default: {   // ARGMAX, ARGMIN
      int mx = n->op == OP_ARGMAX, better;
      if (ir_is_float(t)) {
        double cur = t == DT_F32 ? a->f : a->d;
        better = (mx ? x > cur : x < cur) || (x != x && cur == cur);   // the first NaN wins, as in NumPy
      } else {
        better = mx ? v.i > a->i : v.i < a->i;
      }
      if (better) { *a = v; best[o] = pos[o]; }
      pos[o]++;
      break;
    }
    }
  }
  for (int64_t o = 0; o < nout; o++) {
    memset(&out[o], 0, sizeof out[o]);
    if (arg) out[o].i = best[o];
    else if (wide) out[o].f = (float)acc[o].d;
    else out[o] = acc[o];
  }
  free(acc); free(pos); free(best);
  return 1;
}

// ---- results ------------------------------------------------------------------------------
// v everywhere in n's shape: a one-element CONST of n's rank, broadcast.
static Node *uniform(IrCtx *c, const Node *n, Num v) {
  Dim ones[IR_MAXDIM];
  unsigned char buf[8];
  for (int d = 0; d < n->ndim; d++) ones[d] = dim_c(1);
  num_put(n->dtype, buf, 0, v);
  Node *k = ir_const(c, n->dtype, n->ndim, ones, buf);
  return k ? ir_broadcast(c, k, n->ndim, n->shape) : NULL;
}

static int all_equal(DType t, const void *buf, int64_t m) {
  size_t w = ir_dtype_size(t);
  for (int64_t i = 1; i < m; i++)
    if (memcmp((const char *)buf + i * w, buf, w)) return 0;
  return 1;
}

static Node *fold_rule(IrCtx *c, Node *n, void *ud) {
  const FoldLimits *lim = ud;
  OpKind kind = ir_ops[n->op].kind;
  int64_t m, ms;
  if (kind != K_EW && kind != K_REDUCE && kind != K_MOVE) return NULL;
  if (kind == K_MOVE && (ir_ops[n->op].flags & F_SPECIAL)) return NULL;   // windows and gathers run compiled
  if (n->op == OP_BROADCAST && n->src[0]->op == OP_CONST && is_scalar_const(n)) return NULL;   // canonical already
  int scalar = 1;
  for (int s = 0; s < n->nsrc; s++) {
    if (!is_const(n->src[s], 0)) return NULL;
    scalar &= is_scalar_const(n->src[s]);
  }
  Num one;
  // Elementwise ops and views of scalar constants are scalar constants, at any
  // size (PAD adds zeros and CONCAT joins different values: not views here).
  int view = kind == K_MOVE && n->op != OP_PAD && n->op != OP_CONCAT;
  if (scalar && (kind == K_EW || view) && !(concrete(n, &m) && m <= 1)) {
    if (kind == K_EW ? !ew_at(n, 0, &one) : !move_at(n, 0, &one)) return NULL;
    return uniform(c, n, one);
  }
  // Casts convert exactly, like moves: folded as data, not arithmetic.
  int data = kind == K_MOVE || n->op == OP_CAST;
  if (!concrete(n, &m) || m > (data ? lim->max_move : lim->max_compute)) return NULL;
  if (kind == K_EW)
    for (int s = 0; s < n->nsrc; s++)
      if (!ir_shape_eq(n->src[s], n)) return NULL;
  for (int s = 0; s < n->nsrc; s++) if (!concrete(n->src[s], &ms)) return NULL;
  Num *v = calloc((size_t)m + 1, sizeof *v);
  if (!v) abort();
  int ok = 1;
  if (kind == K_REDUCE) ok = fold_reduce(n, v, m, lim->max_reduce_in);
  for (int64_t i = 0; ok && kind != K_REDUCE && i < m; i++)
    ok = kind == K_EW ? ew_at(n, i, &v[i]) : move_at(n, i, &v[i]);
  Node *r = NULL;
  if (ok) {
    void *buf = calloc((size_t)m + 1, ir_dtype_size(n->dtype));
    if (!buf) abort();
    for (int64_t i = 0; i < m; i++) num_put(n->dtype, buf, i, v[i]);
    r = m > 1 && all_equal(n->dtype, buf, m) ? uniform(c, n, v[0]) : ir_const(c, n->dtype, n->ndim, n->shape, buf);
    free(buf);
  }
  free(v);
  return r;
}

IrGraph *pass_fold_limits(IrCtx *c, IrGraph *g, const FoldLimits *lim) { return pass_rewrite(c, g, fold_rule, (void *)lim); }
IrGraph *pass_fold(IrCtx *c, IrGraph *g) { return pass_fold_limits(c, g, &pipeline_limits); }
