// test_passes.c: the optimizing passes fold, simplify, stability and dce, and the
// lowering choice (golden schedules after fuse and lower).
//
//   test_passes GOLDEN_DIR          (KILN_UPDATE_GOLDEN=1: rewrite the golden files)
//
// Per case: the IR before and after the passes must match GOLDEN_DIR/<case>.ir,
// every graph a pass returns must type-check node by node with its outputs'
// shapes and dtypes unchanged, and a double-precision reference interpreter
// must give the same values before and after (on two sets of inputs). Then
// constant folding is checked bit for bit against C evaluated here the way the
// emitter's code evaluates it. One line per check, then "N passed, N failed";
// exits nonzero on any failure.
#include "ir/ir.h"
#include "passes/passes.h"
#define KILN_OPMATH_HOST
#include "ir/opmath.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

// ---- building test graphs ------------------------------------------------------------
// "B,3" -> [B, 3] (names are symbols); "" -> a scalar.
static int shape_of(IrCtx *c, const char *s, Dim *out) {
  int nd = 0;
  while (*s) {
    if (isdigit((unsigned char)*s)) {
      out[nd++] = dim_c(strtoll(s, (char **)&s, 10));
    } else {
      char name[32];
      int k = 0;
      while (*s && *s != ',' && k < 31) name[k++] = *s++;
      name[k] = 0;
      out[nd++] = (Dim){1, ir_sym(c, name)};
    }
    if (*s == ',') s++;
  }
  return nd;
}

static Node *input(IrCtx *c, const char *name, DType t, const char *shape) {
  Dim d[IR_MAXDIM];
  int nd = shape_of(c, shape, d);
  return ir_input(c, name, ROLE_INPUT, t, nd, d);
}

static Node *cst(IrCtx *c, DType t, const char *shape, const double *v) {
  Dim d[IR_MAXDIM];
  int nd = shape_of(c, shape, d);
  int64_t m = 1;
  for (int i = 0; i < nd; i++) m *= d[i].k;
  unsigned char *buf = calloc((size_t)m + 1, 8);
  for (int64_t i = 0; i < m; i++) {
    switch (t) {
    case DT_BOOL: buf[i] = v[i] != 0; break;
    case DT_I32: ((int32_t *)buf)[i] = (int32_t)v[i]; break;
    case DT_I64: ((int64_t *)buf)[i] = (int64_t)v[i]; break;
    case DT_F32: ((float *)buf)[i] = (float)v[i]; break;
    default: ((double *)buf)[i] = v[i]; break;
    }
  }
  Node *n = ir_const(c, t, nd, d, buf);
  free(buf);
  return n;
}

static Node *f(IrCtx *c, double v) { return ir_scalar(c, DT_F32, v); }
static Node *d64(IrCtx *c, double v) { return ir_scalar(c, DT_F64, v); }
static Node *un(IrCtx *c, Op op, Node *a) { return ir_unary(c, op, a); }
static Node *bin(IrCtx *c, Op op, Node *a, Node *b) { return ir_binary(c, op, a, b); }

// A node the builders would not make (they simplify on the way): interned raw.
static Node *raw(IrCtx *c, Op op, DType t, int nd, const Dim *shape, Node *src) {
  Node n;
  memset(&n, 0, sizeof n);
  n.op = op; n.dtype = t; n.ndim = nd; n.nsrc = 1; n.src = &src;
  memcpy(n.shape, shape, sizeof(Dim) * nd);
  return ir_intern(c, &n);
}

// A graph of the given outputs; its inputs are the INPUT nodes they reach, in creation order.
static IrGraph *graph(IrCtx *c, Node **outs, int nout) {
  int count, nin = 0;
  for (int i = 0; i < nout; i++)
    if (!outs[i]) {   // a test bug: say which builder refused and why
      fprintf(stderr, "test_passes: building output %d failed: %s\n", i, c->err);
      exit(2);
    }
  Node **order = ir_topo(c, outs, nout, &count), *ins[64];
  for (int i = 0; i < count; i++) if (order[i]->op == OP_INPUT && nin < 64) ins[nin++] = order[i];
  for (int i = 1; i < nin; i++)
    for (int j = i; j > 0 && ins[j]->a.u < ins[j - 1]->a.u; j--) { Node *t = ins[j]; ins[j] = ins[j - 1]; ins[j - 1] = t; }
  free(order);
  return ir_graph_new(c, outs, nout, ins, nin);
}
static IrGraph *g1(IrCtx *c, Node *out) { return graph(c, &out, 1); }

// ---- the type checker: each node's shape and dtype follow from its operands ------------
static int64_t dimval(Dim d, int64_t symval) { return d.k * (d.sym ? symval : 1); }

static int64_t numel_at(int nd, const Dim *s, int64_t symval) {
  int64_t m = 1;
  for (int i = 0; i < nd; i++) m *= dimval(s[i], symval);
  return m;
}

static int same_dims(int nd, const Dim *a, const Dim *b) {
  for (int i = 0; i < nd; i++) if (!dim_eq(a[i], b[i])) return 0;
  return 1;
}

static const char *type_error(const Node *n) {
  const OpInfo *oi = &ir_ops[n->op];
  const Node *s = n->nsrc ? n->src[0] : NULL;
  if (oi->nsrc >= 0 && n->nsrc != oi->nsrc) return "wrong operand count";
  switch (oi->kind) {
  case K_LEAF:
    if (n->op == OP_CONST && n->a.nbytes != (size_t)numel_at(n->ndim, n->shape, 1) * ir_dtype_size(n->dtype))
      return "constant payload size";
    return NULL;
  case K_EW:
    for (int i = 0; i < n->nsrc; i++)
      if (n->src[i]->ndim != n->ndim || !same_dims(n->ndim, n->src[i]->shape, n->shape)) return "operand shape differs";
    if (n->op == OP_CAST) return NULL;
    if (n->op == OP_WHERE)
      return s->dtype != DT_BOOL || n->src[1]->dtype != n->dtype || n->src[2]->dtype != n->dtype ? "where dtypes" : NULL;
    for (int i = 1; i < n->nsrc; i++) if (n->src[i]->dtype != s->dtype) return "operand dtypes differ";
    if ((oi->flags & F_LOGIC) && s->dtype != DT_BOOL) return "logic op on non-bool";
    if (oi->flags & F_BOOL) return n->dtype == DT_BOOL ? NULL : "comparison not bool";
    if ((oi->flags & F_FLOAT) && !ir_is_float(n->dtype)) return "float op with integer dtype";
    return s->dtype == n->dtype ? NULL : "result dtype differs from operands";
  case K_REDUCE: {
    uint32_t axes = (uint32_t)n->a.i[0];
    int nd = 0;
    Dim want[IR_MAXDIM];
    if (axes >> s->ndim) return "reduction axis out of range";
    for (int d = 0; d < s->ndim; d++) {
      if (!(axes & (1u << d))) want[nd++] = s->shape[d];
      else if (n->a.i[1]) want[nd++] = dim_c(1);
    }
    if (nd != n->ndim || !same_dims(nd, want, n->shape)) return "reduction shape";
    DType t = n->op == OP_ARGMAX || n->op == OP_ARGMIN ? DT_I64 : s->dtype;
    return n->dtype == t ? NULL : "reduction dtype";
  }
  case K_MOVE:
    for (int i = 0; i < n->nsrc; i++) {
      if (n->src[i]->dtype != n->dtype) return "movement changes dtype";
      if (n->op != OP_RESHAPE && n->op != OP_IM2COL && n->op != OP_COL2IM && n->src[i]->ndim != n->ndim) return "movement changes rank";
    }
    switch (n->op) {
    case OP_RESHAPE:
      for (int64_t v = 2; v <= 3; v++)
        if (numel_at(n->ndim, n->shape, v) != numel_at(s->ndim, s->shape, v)) return "reshape changes the element count";
      return NULL;
    case OP_TRANSPOSE: {
      int seen = 0;
      for (int i = 0; i < n->ndim; i++) {
        int p = (int)n->a.i[i];
        if (p < 0 || p >= n->ndim || (seen & (1 << p)) || !dim_eq(n->shape[i], s->shape[p])) return "transpose perm";
        seen |= 1 << p;
      }
      return NULL;
    }
    case OP_BROADCAST:
      for (int i = 0; i < n->ndim; i++)
        if (!dim_eq(n->shape[i], s->shape[i]) && !dim_is(s->shape[i], 1)) return "broadcast of a non-1 dim";
      return NULL;
    case OP_CONCAT: {
      int ax = (int)n->a.i[0];
      int64_t k = 0;
      for (int i = 0; i < n->nsrc; i++) {
        for (int d = 0; d < n->ndim; d++)
          if (d != ax && !dim_eq(n->src[i]->shape[d], n->shape[d])) return "concat shapes";
        k += n->src[i]->shape[ax].k;
      }
      return k == n->shape[ax].k ? NULL : "concat length";
    }
    default: return NULL;   // SLICE, PAD: the rank check above
    }
  case K_MATMUL: {
    const Node *b = n->src[1];
    int nd = n->ndim;
    if (nd < 2 || s->ndim != nd || b->ndim != nd || s->dtype != n->dtype || b->dtype != n->dtype) return "matmul operands";
    if (!dim_eq(s->shape[nd - 1], b->shape[nd - 2]) || !dim_eq(n->shape[nd - 2], s->shape[nd - 2]) ||
        !dim_eq(n->shape[nd - 1], b->shape[nd - 1]))
      return "matmul shapes";
    return NULL;
  }
  case K_SCATTER:
    return n->src[0]->dtype != n->dtype || ir_is_float(n->src[1]->dtype) ? "scatter_add dtypes" : NULL;
  case K_ROW: {
    int ax = (int)n->a.i[0];
    if (!ir_is_float(n->dtype) || s->dtype != n->dtype || ax < 0 || ax >= s->ndim) return "row op dtype or axis";
    if (n->op == OP_SCE) {
      const Node *l = n->src[1];
      if (ax != s->ndim - 1 || l->ndim != s->ndim - 1 || n->ndim != l->ndim || !same_dims(l->ndim, l->shape, s->shape) ||
          !same_dims(n->ndim, n->shape, l->shape) || ir_is_float(l->dtype))
        return "softmax_cross_entropy shapes";
      return NULL;
    }
    if (n->op == OP_LOGSUMEXP) {
      Dim want[IR_MAXDIM];
      int nd = 0;
      for (int d = 0; d < s->ndim; d++) if (d != ax) want[nd++] = s->shape[d];
      return nd == n->ndim && same_dims(nd, want, n->shape) ? NULL : "logsumexp shape";
    }
    return n->ndim == s->ndim && same_dims(n->ndim, n->shape, s->shape) ? NULL : "row op shape";
  }
  }
  return NULL;
}

// Every node type-checks, and the outputs keep the types they had before.
static int graph_ok(const IrCtx *c, const IrGraph *before, const IrGraph *after, char *why, size_t len) {
  if (!after) { snprintf(why, len, "pass failed: %.200s", c->err); return 0; }
  if (after->nout != before->nout || after->nin != before->nin) { snprintf(why, len, "outputs or inputs changed"); return 0; }
  for (int i = 0; i < after->nin; i++)
    if (after->ins[i] != before->ins[i]) { snprintf(why, len, "input %d changed", i); return 0; }
  for (int i = 0; i < after->nout; i++) {
    const Node *a = before->outs[i], *b = after->outs[i];
    if (a->dtype != b->dtype || a->ndim != b->ndim || !same_dims(a->ndim, a->shape, b->shape)) {
      snprintf(why, len, "output %d changed type", i);
      return 0;
    }
  }
  int count;
  Node **order = ir_topo((IrCtx *)c, after->outs, after->nout, &count);
  for (int i = 0; i < count; i++) {
    const char *e = type_error(order[i]);
    if (e) {
      snprintf(why, len, "node %d (%s): %s", order[i]->id, ir_ops[order[i]->op].name, e);
      free(order);
      return 0;
    }
  }
  free(order);
  return 1;
}

// ---- the reference interpreter: every value as double -----------------------------------------------------------
enum { SYMVAL = 3 };

typedef struct { IrCtx *c; double **val; int trial; } Interp;

static int64_t nel(const Node *n) { return numel_at(n->ndim, n->shape, SYMVAL); }

static void unrav(const Node *n, int64_t o, int64_t *idx) {
  for (int d = n->ndim - 1; d >= 0; d--) {
    int64_t k = dimval(n->shape[d], SYMVAL);
    idx[d] = k ? o % k : 0;
    o = k ? o / k : 0;
  }
}

static int64_t rav(const Node *n, const int64_t *idx) {
  int64_t o = 0;
  for (int d = 0; d < n->ndim; d++) o = o * dimval(n->shape[d], SYMVAL) + idx[d];
  return o;
}

// Inputs: floats in [0.2, 1.7) (trial 0) or [-1.7, 1.7) (trial 1); integers in [0, 3); bools 0/1.
static double input_at(const Node *n, int64_t i, int trial) {
  uint64_t h = (n->a.u * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i * 0xbf58476d1ce4e5b9ull) ^ (uint64_t)trial;
  h ^= h >> 31; h *= 0x94d049bb133111ebull; h ^= h >> 29;
  double u = (double)(h >> 11) / 9007199254740992.0;
  if (n->dtype == DT_BOOL) return h & 1;
  if (!ir_is_float(n->dtype)) return (double)(h % 3);
  return trial ? -1.7 + 3.4 * u : 0.2 + 1.5 * u;
}

static double ew_ref(const Node *n, const double *x) {
  double a = x[0], b = x[1];
  switch (n->op) {
  case OP_NEG: return -a;
  case OP_EXP: return exp(a);
  case OP_LOG: return log(a);
  case OP_LOG1P: return log1p(a);
  case OP_EXPM1: return expm1(a);
  case OP_SQRT: return sqrt(a);
  case OP_RSQRT: return 1 / sqrt(a);
  case OP_ABS: return fabs(a);
  case OP_SIGN: return (a > 0) - (a < 0);
  case OP_TANH: return tanh(a);
  case OP_SIGMOID: return 1 / (1 + exp(-a));
  case OP_RELU: return a > 0 ? a : 0;
  case OP_SOFTPLUS: return log1p(exp(a));
  case OP_ERF: return erf(a);
  case OP_SIN: return sin(a);
  case OP_COS: return cos(a);
  case OP_FLOOR: return floor(a);
  case OP_CEIL: return ceil(a);
  case OP_ROUND: return rint(a);
  case OP_NOT: return !a;
  case OP_CAST:
    if (n->dtype == DT_BOOL) return a != 0;
    if (!ir_is_float(n->dtype)) return trunc(a);
    return n->dtype == DT_F32 ? (float)a : a;
  case OP_ADD: return a + b;
  case OP_SUB: return a - b;
  case OP_MUL: return a * b;
  case OP_DIV: return a / b;
  case OP_POW: return pow(a, b);
  case OP_MAXIMUM: return a > b || a != a ? a : b;
  case OP_MINIMUM: return a < b || a != a ? a : b;
  case OP_ISNAN: return isnan(a);
  case OP_ISINF: return isinf(a);
  case OP_ISFINITE: return isfinite(a);
  case OP_LT: return a < b;
  case OP_LE: return a <= b;
  case OP_GT: return a > b;
  case OP_GE: return a >= b;
  case OP_EQ: return a == b;
  case OP_NE: return a != b;
  case OP_AND: return a && b;
  case OP_OR: return a || b;
  case OP_WHERE: return a ? b : x[2];
  default: return NAN;
  }
}

static double *eval(Interp *I, Node *n);

static void reduce_ref(const Node *n, const double *x, double *out) {
  const Node *s = n->src[0];
  uint32_t axes = (uint32_t)n->a.i[0];
  int64_t m = nel(n), idx[IR_MAXDIM], *cnt = calloc((size_t)m + 1, sizeof *cnt);
  double *best = calloc((size_t)m + 1, sizeof *best);
  for (int64_t o = 0; o < m; o++)
    out[o] = n->op == OP_SUM ? 0 : n->op == OP_PROD ? 1 : n->op == OP_RMIN ? INFINITY : n->op == OP_RMAX ? -INFINITY : 0;
  for (int64_t i = 0; i < nel(s); i++) {
    unrav(s, i, idx);
    int64_t o = 0;
    for (int d = 0; d < s->ndim; d++) if (!(axes & (1u << d))) o = o * dimval(s->shape[d], SYMVAL) + idx[d];
    double v = x[i];
    switch (n->op) {
    case OP_SUM: out[o] += v; break;
    case OP_PROD: out[o] *= v; break;
    case OP_RMAX: out[o] = v > out[o] || v != v ? v : out[o]; break;   // NaN wins, as in ops.def
    case OP_RMIN: out[o] = v < out[o] || v != v ? v : out[o]; break;
    default:
      if (cnt[o] == 0 || (n->op == OP_ARGMAX ? v > best[o] : v < best[o])) { best[o] = v; out[o] = (double)cnt[o]; }
      cnt[o]++;
    }
  }
  free(cnt); free(best);
}

static int64_t move_ref(const Node *n, int64_t o, int *which) {
  int64_t idx[IR_MAXDIM], sidx[IR_MAXDIM];
  const Node *s = n->src[0];
  *which = 0;
  unrav(n, o, idx);
  switch (n->op) {
  case OP_RESHAPE: return o;
  case OP_TRANSPOSE: for (int d = 0; d < n->ndim; d++) sidx[n->a.i[d]] = idx[d]; break;
  case OP_BROADCAST: for (int d = 0; d < n->ndim; d++) sidx[d] = dimval(s->shape[d], SYMVAL) == 1 ? 0 : idx[d]; break;
  case OP_SLICE: for (int d = 0; d < n->ndim; d++) sidx[d] = n->a.i[d] + idx[d] * n->a.i[IR_MAXDIM + d]; break;
  case OP_IM2COL: {   // [N, OH, OW, C, KH, KW] from [N, C, H, W]; -1 in the padding
    const int64_t *w = n->a.i;
    sidx[0] = idx[0], sidx[1] = idx[3];
    for (int d = 0; d < 2; d++) {
      sidx[2 + d] = idx[1 + d] * w[2 + d] - w[4 + d] + idx[4 + d] * w[6 + d];
      if (sidx[2 + d] < 0 || sidx[2 + d] >= dimval(s->shape[2 + d], SYMVAL)) return -1;
    }
    break;
  }
  case OP_PAD:
    for (int d = 0; d < n->ndim; d++) {
      int64_t q = idx[d] - n->a.i[d], st = n->a.i[IR_MAXDIM + d];
      if (q % st || q / st < 0 || q / st >= dimval(s->shape[d], SYMVAL)) return -1;
      sidx[d] = q / st;
    }
    break;
  default: {   // CONCAT
    int ax = (int)n->a.i[0];
    for (int k = 0; k < n->nsrc; k++) {
      int64_t len = dimval(n->src[k]->shape[ax], SYMVAL);
      if (idx[ax] < len) { *which = k; break; }
      idx[ax] -= len;
    }
    s = n->src[*which];
    memcpy(sidx, idx, sizeof idx);
  }
  }
  return rav(s, sidx);
}

// Row ops: rows along `ax` of s; out gets one value per element (softmax,
// log_softmax) or per row (logsumexp).
static void row_ref(const Node *n, const Node *s, const double *x, double *out) {
  int ax = (int)n->a.i[0];
  int64_t len = dimval(s->shape[ax], SYMVAL), inner = 1, outer = 1;
  for (int d = ax + 1; d < s->ndim; d++) inner *= dimval(s->shape[d], SYMVAL);
  for (int d = 0; d < ax; d++) outer *= dimval(s->shape[d], SYMVAL);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t b = 0; b < inner; b++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; j++) mx = fmax(mx, x[(a * len + j) * inner + b]);
      for (int64_t j = 0; j < len; j++) sum += exp(x[(a * len + j) * inner + b] - mx);
      double lse = mx + log(sum);
      if (n->op == OP_LOGSUMEXP || n->op == OP_SCE) { out[a * inner + b] = lse; continue; }
      for (int64_t j = 0; j < len; j++) {
        int64_t i = (a * len + j) * inner + b;
        out[i] = n->op == OP_SOFTMAX ? exp(x[i] - lse) : x[i] - lse;
      }
    }
}

static double *eval(Interp *I, Node *n) {
  if (I->val[n->id]) return I->val[n->id];
  int64_t m = nel(n);
  double *out = calloc((size_t)m + 1, sizeof *out), *src[3] = {0};
  for (int i = 0; i < n->nsrc && i < 3; i++) src[i] = eval(I, n->src[i]);
  int64_t idx[IR_MAXDIM];
  switch (ir_ops[n->op].kind) {
  case K_LEAF:
    for (int64_t i = 0; i < m; i++) {
      if (n->op == OP_CONST) out[i] = ir_const_at(n, i);
      else if (n->op == OP_INPUT) out[i] = input_at(n, i, I->trial);
      else if (n->op == OP_IOTA) { unrav(n, i, idx); out[i] = (double)idx[n->a.i[0]]; }
      else if (n->op == OP_DIMV) out[i] = SYMVAL;
      else out[i] = NAN;
    }
    break;
  case K_EW:
    for (int64_t i = 0; i < m; i++) {
      double x[3] = {0, 0, 0};
      for (int s = 0; s < n->nsrc; s++) x[s] = src[s][i];
      out[i] = ew_ref(n, x);
      if (n->dtype == DT_I32 && out[i] == out[i]) out[i] = (double)(int32_t)(int64_t)out[i];
    }
    break;
  case K_REDUCE: reduce_ref(n, src[0], out); break;
  case K_MOVE:
    if (n->op == OP_COL2IM) {   // IM2COL's adjoint: each window position adds into the pixel it read
      const Node *cols = n->src[0];
      const int64_t *w = n->a.i;
      for (int64_t i = 0; i < nel(cols); i++) {
        unrav(cols, i, idx);
        int64_t px[4] = {idx[0], idx[3], 0, 0}, inside = 1;
        for (int d = 0; d < 2; d++) {
          px[2 + d] = idx[1 + d] * w[2 + d] - w[4 + d] + idx[4 + d] * w[6 + d];
          inside &= px[2 + d] >= 0 && px[2 + d] < dimval(n->shape[2 + d], SYMVAL);
        }
        if (inside) out[rav(n, px)] += src[0][i];
      }
      break;
    }
    for (int64_t i = 0; i < m; i++) {
      int which;
      int64_t j = move_ref(n, i, &which);
      out[i] = j >= 0 ? eval(I, n->src[which])[j] : n->op == OP_IM2COL && n->a.i[8] ? -INFINITY : 0;
    }
    break;
  case K_MATMUL: {
    const Node *a = n->src[0];
    int nd = n->ndim;
    int64_t M = dimval(n->shape[nd - 2], SYMVAL), N = dimval(n->shape[nd - 1], SYMVAL), K = dimval(a->shape[nd - 1], SYMVAL);
    for (int64_t bt = 0; M > 0 && N > 0 && bt < m / (M * N); bt++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          double acc = 0;
          for (int64_t k = 0; k < K; k++) acc += src[0][(bt * M + i) * K + k] * src[1][(bt * K + k) * N + j];
          out[(bt * M + i) * N + j] = acc;
        }
    break;
  }
  case K_ROW:
    if (n->op == OP_SCE) {
      const Node *z = n->src[0];
      int64_t C = dimval(z->shape[z->ndim - 1], SYMVAL);
      row_ref(n, z, src[0], out);
      for (int64_t r = 0; r < m; r++) {
        int64_t l = (int64_t)src[1][r];
        out[r] = l >= 0 && l < C ? out[r] - src[0][r * C + l] : NAN;
      }
    } else {
      row_ref(n, n->src[0], src[0], out);
    }
    break;
  case K_SCATTER:   // not generated by this test's random graphs
    for (int64_t i = 0; i < m; i++) out[i] = NAN;
    break;
  }
  if (n->dtype == DT_F32)   // f32's range, in double's precision: what overflows compiled overflows here
    for (int64_t i = 0; i < m; i++) if (fabs(out[i]) > 3.4028234663852886e38) out[i] = copysign(INFINITY, out[i]);
  I->val[n->id] = out;
  return out;
}

static int close_to(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= 1e-4 * fmax(1, fmax(fabs(a), fabs(b)));
}

// The outputs of two graphs agree on the same inputs; *why says where not.
static int same_values(IrCtx *c, const IrGraph *a, const IrGraph *b, int trial, char *why, size_t len) {
  Interp I = {c, calloc((size_t)c->nnodes + 1, sizeof(double *)), trial};
  int ok = 1;
  for (int o = 0; o < a->nout && ok; o++) {
    double *x = eval(&I, a->outs[o]), *y = eval(&I, b->outs[o]);
    for (int64_t i = 0; i < nel(a->outs[o]) && ok; i++)
      if (!close_to(x[i], y[i])) {
        snprintf(why, len, "output %d element %lld: %.9g before, %.9g after", o, (long long)i, x[i], y[i]);
        ok = 0;
      }
  }
  for (int i = 0; i < c->nnodes; i++) free(I.val[i]);
  free(I.val);
  return ok;
}

// ---- golden cases ---------------------------------------------------------------------
typedef IrGraph *(*Build)(IrCtx *c);

// convgrad: col2im(reshape(dy @ w)) of an [N, C, H, W] image with a kh x kw
// window (stride, padding top/left, dilation); dy [N*OH*OW, O], w [O, C*kh*kw].
static IrGraph *col2im_of_product(IrCtx *c, const char *dy, const char *wt, int64_t n, int64_t ch, int64_t h, int64_t w, int64_t o, const int64_t *win) {
  int64_t oh = (h + 2 * win[4] - win[6] * (win[0] - 1) - 1) / win[2] + 1, ow = (w + 2 * win[5] - win[7] * (win[1] - 1) - 1) / win[3] + 1;
  char sa[64], sb[64];
  snprintf(sa, sizeof sa, "%lld,%lld", (long long)(n * oh * ow), (long long)o);
  snprintf(sb, sizeof sb, "%lld,%lld", (long long)o, (long long)(ch * win[0] * win[1]));
  Node *mm = ir_matmul(c, input(c, dy, DT_F32, sa), input(c, wt, DT_F32, sb));
  Dim six[6] = {dim_c(n), dim_c(oh), dim_c(ow), dim_c(ch), dim_c(win[0]), dim_c(win[1])};
  return g1(c, ir_col2im(c, ir_reshape(c, mm, 6, six), win, h, w));
}
static IrGraph *convgrad_same(IrCtx *c) {   // 3x3, padding 1: dy's windows padded 1 both sides
  int64_t win[9] = {3, 3, 1, 1, 1, 1, 1, 1, 0};
  return col2im_of_product(c, "dy", "w", 2, 16, 5, 5, 3, win);
}
static IrGraph *convgrad_dilated(IrCtx *c) {   // 3x2 dilated 1x2, padding 2 top (none bottom), 1 left and right
  int64_t win[9] = {3, 2, 1, 1, 2, 1, 1, 2, 0};
  Node *mm = ir_matmul(c, input(c, "dy", DT_F32, "30,2"), input(c, "w", DT_F32, "2,96"));
  Dim six[6] = {dim_c(1), dim_c(6), dim_c(5), dim_c(16), dim_c(3), dim_c(2)};
  return g1(c, ir_col2im(c, ir_reshape(c, mm, 6, six), win, 6, 5));
}
// Stride 2, 3x3, padding 1 on a 5x5 image: four phases (3 or 2 pixels a side,
// 1 or 2 taps a side), summed.
static IrGraph *convgrad_strided(IrCtx *c) {
  int64_t win[9] = {3, 3, 2, 2, 1, 1, 1, 1, 0};
  return col2im_of_product(c, "dy", "w", 2, 16, 5, 5, 3, win);
}
// Strides 3 and 2, a 2x3 kernel dilated 1x2, padding 0 and 2 on a 7x8 image:
// rows 2 and 5 and the odd columns get no tap (zeros), and the columns' taps
// i*2 = r + 2 (mod 2) are all three kernel columns (dilation 1 in dY).
static IrGraph *convgrad_strided_gaps(IrCtx *c) {
  int64_t win[9] = {2, 3, 3, 2, 0, 2, 1, 2, 0};
  return col2im_of_product(c, "dy", "w", 1, 16, 7, 8, 2, win);
}
// Padding larger than the window. A 2x2 kernel at stride 3, padding 1: phase
// 2 (rows and columns) reads dY from its second row on, and phase 1 gets no
// tap. A 3x3 kernel at stride 2, padding 3, on a 4x4 image: phase 0's one tap
// reads dY less its first and last rows (and columns).
static IrGraph *convgrad_cropped(IrCtx *c) {
  int64_t s3[9] = {2, 2, 3, 3, 1, 1, 1, 1, 0}, s2[9] = {3, 3, 2, 2, 3, 3, 1, 1, 0};
  IrGraph *a = col2im_of_product(c, "dy", "w", 1, 16, 8, 8, 2, s3), *b = col2im_of_product(c, "dy2", "w2", 2, 16, 4, 4, 2, s2);
  Node *outs[2] = {a->outs[0], b->outs[0]};
  return graph(c, outs, 2);
}
// Left as it is: 4 channels, too few for the transposed convolution's product.
static IrGraph *convgrad_kept(IrCtx *c) {
  int64_t s1[9] = {3, 3, 1, 1, 1, 1, 1, 1, 0};
  return col2im_of_product(c, "dy2", "w2", 1, 4, 5, 5, 2, s1);
}
// biasgrad: a conv's weight gradient windows^T @ dY (3x3 windows, padding 1, of
// an [N, C, H, W] image x: [C*9, N*H*W]) and its bias's gradient, dY summed over
// N, OH, OW.
static Node *windows_t(IrCtx *c, Node *x) {
  int64_t win[9] = {3, 3, 1, 1, 1, 1, 1, 1, 0}, pad_end[2] = {1, 1};
  Dim w2[2] = {dim_c(x->shape[0].k * x->shape[2].k * x->shape[3].k), dim_c(x->shape[1].k * 9)};
  return ir_transpose(c, ir_reshape(c, ir_im2col(c, x, win, pad_end), 2, w2), NULL);
}
static Node *rows_of(IrCtx *c, Node *dy) {   // [N, OH, OW, O] as [N*OH*OW, O]
  Dim d2[2] = {dim_c(dy->shape[0].k * dy->shape[1].k * dy->shape[2].k), dy->shape[3]};
  return ir_reshape(c, dy, 2, d2);
}
static IrGraph *biasgrad_conv(IrCtx *c) {
  Node *dy = input(c, "dy", DT_F32, "2,5,6,4");
  Node *outs[2] = {ir_matmul(c, windows_t(c, input(c, "x", DT_F32, "2,3,5,6")), rows_of(c, dy)),
                   ir_reduce(c, OP_SUM, dy, 7, 1)};
  return graph(c, outs, 2);
}
// The same with dY in NCHW, transposed to channels last for the product.
static IrGraph *biasgrad_nchw(IrCtx *c) {
  int hwc[4] = {0, 2, 3, 1};
  Node *dy = input(c, "dy", DT_F32, "2,4,5,6");
  Node *outs[2] = {ir_matmul(c, windows_t(c, input(c, "x", DT_F32, "2,3,5,6")), rows_of(c, ir_transpose(c, dy, hwc))),
                   ir_reduce(c, OP_SUM, dy, 13, 0)};
  return graph(c, outs, 2);
}
// Left alone: a sum over other axes than dY's rows; dY's rows summed where the
// product's left operand is not windows (a dense layer's x^T @ dY).
static IrGraph *biasgrad_kept(IrCtx *c) {
  Node *dy = input(c, "dy", DT_F32, "1,4,4,3");
  Node *wt = windows_t(c, input(c, "x", DT_F32, "1,2,4,4"));
  Node *h = input(c, "h", DT_F32, "5,7"), *dz = input(c, "dz", DT_F32, "5,3");
  Node *outs[4] = {ir_matmul(c, wt, rows_of(c, dy)), ir_reduce(c, OP_SUM, dy, 3, 0),
                   ir_matmul(c, ir_transpose(c, h, NULL), dz), ir_reduce(c, OP_SUM, dz, 1, 1)};
  return graph(c, outs, 4);
}
typedef struct { const char *name, *passes; Build build; } Case;

// fold
static IrGraph *fold_elementwise(IrCtx *c) {
  double v[4] = {1, 2, 3, 4};
  return g1(c, bin(c, OP_ADD, bin(c, OP_MUL, cst(c, DT_F32, "4", v), f(c, 2)), f(c, 0.5)));
}
static IrGraph *fold_too_big(IrCtx *c) {
  double v[65];
  for (int i = 0; i < 65; i++) v[i] = i;
  return g1(c, un(c, OP_EXP, cst(c, DT_F32, "65", v)));
}
static IrGraph *fold_scalar_chain(IrCtx *c) {   // 2*3 in x*(2*3) folds; x*1 keeps its broadcast 1
  Node *x = input(c, "x", DT_F32, "B,3");
  return g1(c, bin(c, OP_MUL, bin(c, OP_MUL, x, bin(c, OP_MUL, f(c, 2), f(c, 3))), f(c, 1)));
}
static IrGraph *fold_big_scalar(IrCtx *c) {   // a scalar constant of 1000 elements stays a broadcast
  Dim s[1] = {dim_c(1000)};
  return g1(c, un(c, OP_EXP, ir_broadcast(c, f(c, 0), 1, s)));
}
static IrGraph *fold_reduce(IrCtx *c) {
  double v[6] = {1, 2, 3, 4, 5, 6};
  Node *k = cst(c, DT_F32, "2,3", v);
  Node *outs[3] = {ir_reduce(c, OP_SUM, k, 2, 0), ir_reduce(c, OP_RMAX, k, 1, 1), ir_reduce(c, OP_ARGMAX, k, 2, 0)};
  return graph(c, outs, 3);
}
static IrGraph *fold_movement(IrCtx *c) {
  double v[6] = {1, 2, 3, 4, 5, 6};
  Dim s[2] = {dim_c(2), dim_c(3)};
  int64_t st[2] = {0, 1}, cn[2] = {-1, 1}, sp[2] = {1, 1};
  Node *r = ir_transpose(c, ir_reshape(c, cst(c, DT_I32, "6", v), 2, s), NULL);
  return g1(c, ir_slice(c, r, st, cn, sp));
}
static IrGraph *fold_uniform(IrCtx *c) {   // all-equal results become a broadcast scalar
  double v[4] = {1, 2, 3, 4};
  Node *x = input(c, "x", DT_F32, "4");
  return g1(c, bin(c, OP_ADD, x, bin(c, OP_MUL, cst(c, DT_F32, "4", v), f(c, 0))));
}
static IrGraph *fold_cast_undefined(IrCtx *c) {   // (int)NaN is undefined in C: not folded
  double v[2] = {NAN, 1.5};
  return g1(c, ir_cast(c, cst(c, DT_F32, "2", v), DT_I32));
}
static IrGraph *fold_runtime_leaves(IrCtx *c) {   // iota and dim are runtime values
  Dim s[1] = {dim_c(4)};
  Node *i = ir_iota(c, DT_I64, 1, s, 0);
  return g1(c, bin(c, OP_ADD, bin(c, OP_MUL, i, ir_scalar(c, DT_I64, 2)), ir_dimv(c, ir_sym(c, "B"))));
}

// simplify
static IrGraph *simp_add_zero(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,3");
  return g1(c, bin(c, OP_ADD, f(c, 0), bin(c, OP_ADD, x, f(c, 0))));
}
static IrGraph *simp_sub(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "3"), *y = input(c, "y", DT_F32, "3");
  Node *outs[4] = {bin(c, OP_SUB, x, f(c, 0)), bin(c, OP_SUB, f(c, 0), x), bin(c, OP_SUB, y, y),
                   bin(c, OP_SUB, x, un(c, OP_NEG, y))};
  return graph(c, outs, 4);
}
static IrGraph *simp_mul(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "2,3"), *i = input(c, "i", DT_I32, "3");
  Node *outs[4] = {bin(c, OP_MUL, f(c, 1), x), bin(c, OP_MUL, x, f(c, 0)), bin(c, OP_MUL, i, ir_scalar(c, DT_I32, 0)),
                   bin(c, OP_MUL, x, f(c, -1))};
  return graph(c, outs, 4);
}
static IrGraph *simp_div(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "3");
  Node *outs[4] = {bin(c, OP_DIV, x, f(c, 1)), bin(c, OP_DIV, x, f(c, 4)), bin(c, OP_DIV, x, f(c, 3)),
                   bin(c, OP_DIV, x, f(c, 0.125))};
  return graph(c, outs, 4);
}
static IrGraph *simp_pow(IrCtx *c) {
  Node *x = input(c, "x", DT_F64, "3");
  Node *outs[5] = {bin(c, OP_POW, x, d64(c, 1)), bin(c, OP_POW, x, d64(c, 2)), bin(c, OP_POW, x, d64(c, 0.5)),
                   bin(c, OP_POW, x, d64(c, 0)), bin(c, OP_POW, x, d64(c, 3))};
  return graph(c, outs, 5);
}
static IrGraph *simp_neg_log_where(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "3"), *y = input(c, "y", DT_F32, "3"), *b = input(c, "b", DT_BOOL, "3");
  Node *outs[5] = {un(c, OP_NEG, un(c, OP_NEG, x)), un(c, OP_LOG, un(c, OP_EXP, x)), un(c, OP_EXP, un(c, OP_LOG, x)),
                   ir_where(c, b, x, x), ir_where(c, ir_scalar(c, DT_BOOL, 0), x, y)};
  return graph(c, outs, 5);
}
// x or true, x or false, x and false, x and true (either side); then where() on the result
static IrGraph *simp_logic(IrCtx *c) {
  Node *b = input(c, "b", DT_BOOL, "3"), *x = input(c, "x", DT_F32, "2,3"), *y = input(c, "y", DT_F32, "2,3");
  Node *t = ir_scalar(c, DT_BOOL, 1), *f = ir_scalar(c, DT_BOOL, 0);
  Node *outs[5] = {bin(c, OP_OR, b, t), bin(c, OP_OR, f, b), bin(c, OP_AND, b, f), bin(c, OP_AND, t, b),
                   ir_where(c, bin(c, OP_OR, b, t), x, y)};
  return graph(c, outs, 5);
}
static IrGraph *simp_add_neg(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "3"), *y = input(c, "y", DT_F32, "3");
  Node *outs[2] = {bin(c, OP_ADD, x, un(c, OP_NEG, y)), bin(c, OP_ADD, un(c, OP_NEG, y), x)};
  return graph(c, outs, 2);
}
static IrGraph *simp_movement(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "2,3,4");
  int p1[3] = {1, 2, 0}, p2[3] = {2, 0, 1}, p3[3] = {0, 2, 1};
  Dim s6[2] = {dim_c(6), dim_c(4)}, s24[1] = {dim_c(24)};
  Node *y = input(c, "y", DT_F32, "1,3");
  Dim b1[2] = {dim_c(1), dim_c(3)}, b2[2] = {dim_c(4), dim_c(3)};
  Node *outs[6] = {
      ir_transpose(c, ir_transpose(c, x, p1), p2),                       // identity
      ir_transpose(c, ir_transpose(c, x, p1), p3),                       // composed
      raw(c, OP_RESHAPE, DT_F32, 1, s24, ir_reshape(c, x, 2, s6)),       // reshape of reshape
      raw(c, OP_RESHAPE, DT_F32, 3, x->shape, x),                         // to the same shape
      raw(c, OP_BROADCAST, DT_F32, 2, b2, raw(c, OP_BROADCAST, DT_F32, 2, b1, y)),
      raw(c, OP_CAST, DT_F32, 3, x->shape, x),                            // cast to the same dtype
  };
  return graph(c, outs, 6);
}
static IrGraph *simp_sum_broadcast(IrCtx *c) {
  Node *y = input(c, "y", DT_F32, "3");
  Dim s43[2] = {dim_c(4), dim_c(3)}, s5[2] = {dim_c(5), dim_c(7)};
  Node *outs[3] = {
      ir_reduce(c, OP_SUM, ir_broadcast(c, y, 2, s43), 1, 0),             // y*4
      ir_reduce(c, OP_SUM, ir_broadcast(c, y, 2, s43), 1, 1),             // y*4, keepdims
      ir_reduce(c, OP_SUM, ir_broadcast(c, f(c, 0.5), 2, s5), 3, 0),      // 0.5*35
  };
  return graph(c, outs, 3);
}
// sum over batch axes of a batched product: one product, the summed axes folded
// into the inner dimension (x[B, 4, 5] @ w[5, 6]: w's gradient is then one GEMM).
static IrGraph *simp_sum_matmul(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,4,5"), *dy = input(c, "dy", DT_F32, "B,4,6");
  Node *p = input(c, "p", DT_F32, "2,3,4,5"), *q = input(c, "q", DT_F32, "2,3,5,6");
  int tr[3] = {0, 2, 1};
  Node *outs[3] = {
      ir_reduce(c, OP_SUM, ir_matmul(c, ir_transpose(c, x, tr), dy), 1, 0),   // [5, 6]: B*4 folded
      ir_reduce(c, OP_SUM, ir_matmul(c, p, q), 1, 1),                          // [1, 3, 4, 6], keepdims
      ir_reduce(c, OP_SUM, ir_matmul(c, p, q), 3, 0),                          // [4, 6]: 2*3*5 folded
  };
  return graph(c, outs, 3);
}
// Transpose sinking: elementwise ops on a product's transposed result run in
// the product's layout, their other operands read transposed (an input, a
// gather), unless those outnumber the product's, or one is another product's
// value in its own layout; and reductions of the result reduce the product's.
static IrGraph *simp_sink_transpose(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "6,3"), *w = input(c, "w", DT_F32, "3,4"), *b = input(c, "b", DT_F32, "4,1");
  Node *u = input(c, "u", DT_F32, "2,4,3"), *v = input(c, "v", DT_F32, "2,4,3"), *m = input(c, "m", DT_BOOL, "2,4,3");
  Node *x2 = input(c, "x2", DT_F32, "8,3"), *w2 = input(c, "w2", DT_F32, "3,3");
  Dim s3[3] = {dim_c(2), dim_c(3), dim_c(4)}, s8[3] = {dim_c(2), dim_c(4), dim_c(3)};
  int p[3] = {0, 2, 1};
  Node *y = ir_transpose(c, ir_reshape(c, ir_matmul(c, x, w), 3, s3), p);   // [2, 4, 3]
  Node *z = ir_reshape(c, ir_matmul(c, x2, w2), 3, s8);                      // [2, 4, 3], not transposed
  Node *h = un(c, OP_RELU, bin(c, OP_ADD, y, b));
  Node *outs[7] = {
      h,                                                          // sinks twice: relu(x@w + b')^T
      bin(c, OP_MUL, h, u),                                       // sinks, u read transposed
      ir_where(c, m, y, v),                                       // two inputs to one product's: stays
      bin(c, OP_SUB, y, z),                                       // z in its own product's layout: stays
      ir_where(c, bin(c, OP_GT, y, f(c, 0)), y, f(c, 1)),         // a mask and a select: both sink
      ir_reduce(c, OP_SUM, h, 5, 1),                              // over axes 0, 2 of h: 0, 1 of relu(...)
      ir_reduce(c, OP_RMAX, bin(c, OP_MUL, y, y), 2, 0),          // [2, 3]: x@w's axes 0, 2
  };
  return graph(c, outs, 7);
}
// Max pooling (nn.c's form) of a product's channels-last result seen as NCHW:
// relu runs in the product's layout, the max over the windows in their
// [N, OH, OW, C] order (along the channels), transposed back to NCHW.
static IrGraph *simp_sink_pool(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "16,3"), *w = input(c, "w", DT_F32, "3,5");
  Dim nhwc[4] = {dim_c(1), dim_c(4), dim_c(4), dim_c(5)};
  int to_nchw[4] = {0, 3, 1, 2}, wperm[6] = {0, 3, 1, 2, 4, 5};
  int64_t win[9] = {2, 2, 2, 2, 0, 0, 1, 1, 1}, pad_end[2] = {0, 0};
  Node *y = un(c, OP_RELU, ir_transpose(c, ir_reshape(c, ir_matmul(c, x, w), 4, nhwc), to_nchw));
  return g1(c, ir_reduce(c, OP_RMAX, ir_transpose(c, ir_im2col(c, y, win, pad_end), wperm), 3u << 4, 0));
}
// A transpose of a reshape that only adds or drops axes of size 1 moves the
// reshaped value's own axes: max pooling's gradient reads the NCHW max as
// [N, C, OH, OW, 1, 1] transposed back to channels-last, which is the
// channels-last max itself, reshaped. A reshape that merges axes, and one of
// a product's value (transpose sinking's pattern), stay.
static IrGraph *simp_transpose_reshaped(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,3,3,4"), *y = input(c, "y", DT_F32, "2,3");
  Node *z = input(c, "z", DT_F32, "2,3,4"), *w = input(c, "w", DT_F32, "3,5");
  int nchw[4] = {0, 3, 1, 2}, back[6] = {0, 2, 3, 1, 4, 5}, rev[3] = {2, 1, 0}, t2[2] = {1, 0};
  Dim s6[6] = {x->shape[0], dim_c(4), dim_c(3), dim_c(3), dim_c(1), dim_c(1)};
  Dim s213[3] = {dim_c(2), dim_c(1), dim_c(3)}, s64[2] = {dim_c(6), dim_c(4)}, s251[3] = {dim_c(2), dim_c(5), dim_c(1)};
  Node *outs[4] = {
      ir_transpose(c, ir_reshape(c, ir_transpose(c, x, nchw), 6, s6), back),   // reshape(x)
      ir_transpose(c, ir_reshape(c, y, 3, s213), rev),                         // reshape(y^T)
      ir_transpose(c, ir_reshape(c, z, 2, s64), t2),                           // merges axes: stays
      ir_transpose(c, ir_reshape(c, ir_matmul(c, y, w), 3, s251), rev),        // a product's: stays
  };
  return graph(c, outs, 4);
}
// sum(x*k) -> sum(x)*k for k constant along the summed axes (likewise -x, x+x,
// x/k): batch norm's backward. dy*g*x and dy*(x*h) summed over the batch are
// one sum(dy*x) times g and times h; -(t+t) with t = dy/g, -2*sum(dy)/g; a
// factor that varies along the summed axis stays inside.
static IrGraph *simp_sum_factors(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,3"), *dy = input(c, "dy", DT_F32, "B,3");
  Node *g = input(c, "g", DT_F32, "3"), *h = input(c, "h", DT_F32, "1,3"), *r = input(c, "r", DT_F32, "B,1");
  Node *t = bin(c, OP_DIV, dy, g);
  Node *outs[5] = {
      ir_reduce(c, OP_SUM, bin(c, OP_MUL, bin(c, OP_MUL, dy, g), x), 1, 0),   // sum(dy*x)*g
      ir_reduce(c, OP_SUM, bin(c, OP_MUL, dy, bin(c, OP_MUL, x, h)), 1, 0),   // the same sum, *h
      ir_reduce(c, OP_SUM, un(c, OP_NEG, bin(c, OP_ADD, t, t)), 1, 1),        // sum(dy)/g*(-2), keepdims
      ir_reduce(c, OP_SUM, bin(c, OP_MUL, dy, r), 2, 0),                      // over axis 1: sum(dy)*r
      ir_reduce(c, OP_SUM, bin(c, OP_MUL, dy, r), 1, 0),                      // r varies along B: stays
  };
  return graph(c, outs, 5);
}
static IrGraph *simp_nothing(IrCtx *c) {   // no rule applies: the graph comes back as it was
  Node *x = input(c, "x", DT_F32, "B,3"), *y = input(c, "y", DT_F32, "3");
  return g1(c, bin(c, OP_SUB, un(c, OP_EXP, bin(c, OP_MUL, x, y)), bin(c, OP_DIV, x, f(c, 3))));
}

// stability
static IrGraph *stab_log_softmax(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,5");
  return g1(c, un(c, OP_LOG, ir_row(c, OP_SOFTMAX, x, -1)));
}
static IrGraph *stab_log1p_expm1(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "4");
  Node *outs[5] = {un(c, OP_LOG, bin(c, OP_ADD, f(c, 1), x)), un(c, OP_LOG, bin(c, OP_ADD, x, f(c, 1))),
                   un(c, OP_LOG, bin(c, OP_SUB, f(c, 1), x)), bin(c, OP_SUB, un(c, OP_EXP, x), f(c, 1)),
                   bin(c, OP_ADD, f(c, -1), un(c, OP_EXP, x))};
  return graph(c, outs, 5);
}
static IrGraph *stab_logsumexp(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,4,5");
  Node *e = un(c, OP_EXP, x);
  Node *outs[4] = {un(c, OP_LOG, ir_reduce(c, OP_SUM, e, 4, 0)), un(c, OP_LOG, ir_reduce(c, OP_SUM, e, 2, 1)),
                   un(c, OP_LOG, ir_reduce(c, OP_SUM, e, 6, 0)), un(c, OP_LOG, ir_reduce(c, OP_SUM, e, 5, 0))};
  return graph(c, outs, 4);   // the last (axes 0 and 2, not contiguous) stays
}
static IrGraph *stab_sigmoid(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "4");
  Node *hand = bin(c, OP_DIV, f(c, 1), bin(c, OP_ADD, f(c, 1), un(c, OP_EXP, un(c, OP_NEG, x))));
  Node *outs[4] = {hand, un(c, OP_LOG, un(c, OP_SIGMOID, x)), un(c, OP_LOG, bin(c, OP_ADD, f(c, 1), un(c, OP_EXP, x))),
                   un(c, OP_LOG, bin(c, OP_SUB, f(c, 1), un(c, OP_SIGMOID, x)))};
  return graph(c, outs, 4);
}
static IrGraph *stab_softmax_by_hand(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,5");
  Node *e = un(c, OP_EXP, x);
  Node *m = ir_reduce(c, OP_RMAX, x, 2, 1);
  Node *lse = ir_row(c, OP_LOGSUMEXP, x, 1);
  Dim kd[2] = {x->shape[0], dim_c(1)};
  Node *outs[3] = {bin(c, OP_DIV, e, ir_reduce(c, OP_SUM, e, 2, 1)),                      // softmax
                   bin(c, OP_SUB, x, ir_reshape(c, lse, 2, kd)),                          // log_softmax
                   ir_row(c, OP_LOG_SOFTMAX, bin(c, OP_SUB, x, m), 1)};                   // shift dropped
  return graph(c, outs, 3);
}
static IrGraph *stab_cross_entropy(IrCtx *c) {   // mean(-sum(onehot(y) * log(softmax(z)), -1))
  Node *z = input(c, "z", DT_F32, "B,4"), *y = input(c, "y", DT_I32, "B");
  Dim s4[1] = {dim_c(4)}, col[2] = {y->shape[0], dim_c(1)};
  Node *onehot = ir_cast(c, bin(c, OP_EQ, ir_iota(c, DT_I64, 1, s4, 0), ir_reshape(c, y, 2, col)), DT_F32);
  Node *ll = ir_reduce(c, OP_SUM, bin(c, OP_MUL, onehot, un(c, OP_LOG, ir_row(c, OP_SOFTMAX, z, 1))), 2, 0);
  Node *loss = bin(c, OP_DIV, ir_reduce(c, OP_SUM, un(c, OP_NEG, ll), 1, 0), f(c, 3));
  Node *outs[2] = {loss, ir_sce(c, z, y)};
  return graph(c, outs, 2);
}

// dce and the whole pipeline
static IrGraph *dce_unused_input(IrCtx *c) {   // y stays declared though nothing uses it
  Node *x = input(c, "x", DT_F32, "3"), *y = input(c, "y", DT_F32, "3");
  Node *out = bin(c, OP_ADD, bin(c, OP_MUL, x, f(c, 1)), bin(c, OP_MUL, y, f(c, 0)));
  Node *ins[2] = {x, y};
  return ir_graph_new(c, &out, 1, ins, 2);
}
static IrGraph *pipeline_mlp(IrCtx *c) {   // a softmax regression loss with constant folding to do
  Node *x = input(c, "x", DT_F32, "B,3"), *y = input(c, "y", DT_I64, "B");
  double wv[9] = {0.5, -1, 2, 0.25, 1, -0.5, 0, 1.5, -2}, bv[3] = {0.1, -0.2, 0.3};
  Node *w = bin(c, OP_MUL, cst(c, DT_F32, "3,3", wv), bin(c, OP_DIV, f(c, 1), f(c, 2)));
  Node *z = bin(c, OP_ADD, ir_matmul(c, bin(c, OP_ADD, x, f(c, 0)), w), cst(c, DT_F32, "3", bv));
  Dim s3[1] = {dim_c(3)}, col[2] = {y->shape[0], dim_c(1)};
  Node *onehot = ir_cast(c, bin(c, OP_EQ, ir_iota(c, DT_I64, 1, s3, 0), ir_reshape(c, y, 2, col)), DT_F32);
  Node *p = bin(c, OP_DIV, un(c, OP_EXP, z), ir_reduce(c, OP_SUM, un(c, OP_EXP, z), 2, 1));
  Node *ll = ir_reduce(c, OP_SUM, bin(c, OP_MUL, onehot, un(c, OP_LOG, p)), 2, 0);
  return g1(c, un(c, OP_NEG, ir_reduce(c, OP_SUM, ll, 1, 0)));
}

static const Case cases[] = {
    {"fold_elementwise", "fold", fold_elementwise},
    {"fold_too_big", "fold", fold_too_big},
    {"fold_scalar_chain", "fold", fold_scalar_chain},
    {"fold_big_scalar", "fold", fold_big_scalar},
    {"fold_reduce", "fold", fold_reduce},
    {"fold_movement", "fold", fold_movement},
    {"fold_uniform", "fold", fold_uniform},
    {"fold_cast_undefined", "fold", fold_cast_undefined},
    {"fold_runtime_leaves", "fold", fold_runtime_leaves},
    {"simplify_add_zero", "simplify", simp_add_zero},
    {"simplify_sub", "simplify", simp_sub},
    {"simplify_mul", "simplify", simp_mul},
    {"simplify_div", "simplify", simp_div},
    {"simplify_pow", "simplify", simp_pow},
    {"simplify_neg_log_where", "simplify", simp_neg_log_where},
    {"simplify_add_neg", "simplify", simp_add_neg},
    {"simplify_logic", "simplify", simp_logic},
    {"simplify_movement", "simplify", simp_movement},
    {"simplify_sum_broadcast", "simplify", simp_sum_broadcast},
    {"simplify_sum_matmul", "simplify", simp_sum_matmul},
    {"simplify_sink_transpose", "simplify", simp_sink_transpose},
    {"simplify_sink_pool", "simplify", simp_sink_pool},
    {"simplify_transpose_reshaped", "simplify", simp_transpose_reshaped},
    {"simplify_sum_factors", "simplify", simp_sum_factors},
    {"simplify_nothing", "simplify", simp_nothing},
    {"stability_log_softmax", "stability", stab_log_softmax},
    {"stability_log1p_expm1", "stability", stab_log1p_expm1},
    {"stability_logsumexp", "stability", stab_logsumexp},
    {"stability_sigmoid", "stability", stab_sigmoid},
    {"stability_softmax_by_hand", "stability", stab_softmax_by_hand},
    {"stability_cross_entropy", "simplify,stability", stab_cross_entropy},
    {"dce_unused_input", "simplify,dce", dce_unused_input},
    {"convgrad_same", "convgrad,simplify", convgrad_same},
    {"convgrad_dilated", "convgrad,simplify", convgrad_dilated},
    {"convgrad_strided", "convgrad,simplify", convgrad_strided},
    {"convgrad_strided_gaps", "convgrad,simplify", convgrad_strided_gaps},
    {"convgrad_cropped", "convgrad,simplify", convgrad_cropped},
    {"convgrad_kept", "convgrad", convgrad_kept},
    {"biasgrad_conv", "biasgrad", biasgrad_conv},
    {"biasgrad_nchw", "biasgrad", biasgrad_nchw},
    {"biasgrad_kept", "biasgrad", biasgrad_kept},
    {"pipeline_mlp", "fold,simplify,stability,dce", pipeline_mlp},
};

static char *graph_text(const IrCtx *c, const IrGraph *g) {
  char *s = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&s, &n);
  ir_print_graph(f, c, g);
  fclose(f);
  return s;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  return s;
}

// The folder with the limits the unit tests use: wider than the pipeline's
// (which folds scalar arithmetic only), so the evaluator is checked bit for bit.
static IrGraph *fold_wide(IrCtx *c, IrGraph *g) {
  static const FoldLimits wide = {64, 4096, 4096};
  return pass_fold_limits(c, g, &wide);
}

static IrGraph *run_pass(IrCtx *c, const char *name, IrGraph *g) {
  if (!strcmp(name, "fold")) return fold_wide(c, g);
  if (!strcmp(name, "simplify")) return pass_simplify(c, g);
  if (!strcmp(name, "convgrad")) return pass_convgrad(c, g);
  if (!strcmp(name, "biasgrad")) return pass_biasgrad(c, g);
  if (!strcmp(name, "stability")) return pass_stability(c, g);
  if (!strcmp(name, "dce")) return pass_dce(c, g);
  return NULL;
}

static void compare_golden(const char *name, const char *dir, const char *text, int update) {
  char why[512] = "", path[1024];
  snprintf(path, sizeof path, "%s/%s.ir", dir, name);
  if (update) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
    check(f != NULL, "%s: golden written to %s", name, path);
  } else {
    char *want = read_file(path);
    int ok = want && !strcmp(want, text);
    if (!ok && want) {   // show the first line that differs
      const char *a = want, *b = text;
      int line = 1;
      while (*a && *a == *b) { if (*a == '\n') line++; a++; b++; }
      snprintf(why, sizeof why, "line %d differs: want \"%.*s\", got \"%.*s\"", line, (int)strcspn(a, "\n"), a,
               (int)strcspn(b, "\n"), b);
    }
    check(ok, "%s: matches %s%s%s", name, path, ok ? "" : ": ", ok ? "" : want ? why : "missing (KILN_UPDATE_GOLDEN=1 writes it)");
    free(want);
  }
}

static void run_case(const Case *k, const char *dir, int update) {
  IrCtx *c = ir_ctx_new();
  IrGraph *g0 = k->build(c), *g = g0;
  char why[512] = "", *before = graph_text(c, g0), *text = NULL;
  size_t tn = 0;
  FILE *t = open_memstream(&text, &tn);
  fprintf(t, "# %s: %s\n%s", k->name, k->passes, before);
  int typed = 1;
  char passes[128];
  snprintf(passes, sizeof passes, "%s", k->passes);
  for (char *p = strtok(passes, ","); p; p = strtok(NULL, ",")) {
    IrGraph *r = run_pass(c, p, g);
    if (typed && !graph_ok(c, g, r, why, sizeof why)) typed = 0;
    if (!r) break;
    char *after = graph_text(c, r);
    fprintf(t, "# after %s\n%s", p, after);
    free(after);
    g = r;
  }
  fclose(t);
  check(typed, "%s: every node type-checks, outputs keep their types%s%s", k->name, typed ? "" : ": ", why);
  if (typed) {
    for (int trial = 0; trial < 2; trial++) {
      int ok = same_values(c, g0, g, trial, why, sizeof why);
      check(ok, "%s: same values before and after (%s inputs)%s%s", k->name, trial ? "signed" : "positive", ok ? "" : ": ", why);
    }
  }
  compare_golden(k->name, dir, text, update);
  free(text);
  free(before);
  ir_ctx_free(c);
}

// ---- lowering: the schedule after fuse and lower, golden too --------------------------
// Matrix products on both sides of lower.c's thresholds, symbolic sizes, and
// transposed and broadcast operands, which are read through strides: no kernel
// copies them (every matmul kernel reads the inputs' own buffers).
static IrGraph *lower_matmuls(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,64"), *dy = input(c, "dy", DT_F32, "B,10");
  Node *w = input(c, "w", DT_F32, "64,10"), *v = input(c, "v", DT_F32, "64,48"), *u = input(c, "u", DT_F32, "64,40");
  Node *vt = input(c, "vt", DT_F32, "48,64");
  Node *x3 = input(c, "x3", DT_F32, "5,16,64"), *r = input(c, "r", DT_F32, "64,7"), *r2 = input(c, "r2", DT_F32, "7,64");
  Node *p = input(c, "p", DT_F32, "16,16"), *q = input(c, "q", DT_F32, "16,16");
  Node *p2 = input(c, "p2", DT_F32, "16,15"), *q2 = input(c, "q2", DT_F32, "15,16");
  Node *d = input(c, "d", DT_F64, "48,64"), *e = input(c, "e", DT_F64, "64,40");
  Node *t3 = input(c, "t3", DT_F32, "B,28,128"), *g3 = input(c, "g3", DT_F32, "B,28,64");
  static const int perm201[] = {2, 0, 1};
  Node *outs[] = {
      ir_matmul(c, x, w),                           // B*10*64: by size
      ir_matmul(c, ir_transpose(c, x, NULL), dy),   // autodiff's transpose(x) @ dy: k = B
      ir_matmul(c, ir_transpose(c, v, NULL), u),    // 48*40*64: gemm, v read transposed
      ir_matmul(c, x3, v),                          // a mini-batch against one weight
      ir_matmul(c, x3, ir_transpose(c, vt, NULL)),  // ... stored transposed: [1, 64, 48] is a view
      ir_matmul(c, p, q),                           // 4096: gemm
      ir_matmul(c, p2, q2),                         // 3840: loops
      ir_matmul(c, r, ir_transpose(c, r, NULL)),    // inner dimension 7, b transposed: gemm
      ir_matmul(c, r, r2),                          // inner dimension 7, b not transposed: gemm
      ir_matmul(c, d, e),                           // f64
      // a dense layer's weight gradient over [B, 28, 128] tokens: transpose(t3)
      // merged to [128, 28*B] is a transposed view of t3 (sched_merge_view)
      ir_matmul(c, ir_reshape(c, ir_transpose(c, t3, perm201), 2, (Dim[]){dim_c(128), dim_c(-1)}),
                ir_reshape(c, g3, 2, (Dim[]){dim_c(-1), dim_c(64)})),
  };
  return graph(c, outs, sizeof outs / sizeof *outs);
}
static IrGraph *lower_small(IrCtx *c) {
  Node *x = input(c, "x", DT_F32, "B,64"), *w = input(c, "w", DT_F32, "64,10");
  Node *v = input(c, "v", DT_F32, "64,48"), *u = input(c, "u", DT_F32, "64,40");
  Node *outs[] = {ir_matmul(c, x, w), ir_matmul(c, ir_transpose(c, v, NULL), u)};
  return graph(c, outs, 2);
}

static void run_lower_case(const char *name, Build build, int gemm, const char *dir, int update) {
  IrCtx *c = ir_ctx_new();
  IrGraph *g = build(c);
  char *text = NULL, *gt = graph_text(c, g);
  size_t tn = 0;
  FILE *t = open_memstream(&text, &tn);
  fprintf(t, "# %s: fuse,lower (BLIS %s)\n%s# after lower\n", name, gemm ? "available" : "absent", gt);
  Schedule *s = pass_fuse(c, g, NULL);
  LowerOpts o = {.gemm = gemm};
  pass_lower(s, &o);
  sched_print(t, s);
  fclose(t);
  int copies = 0;   // kernels that are not matmuls: a materialized operand
  for (int k = 0; k < s->nk; k++) copies += s->ks[k].kind != KS_MATMUL;
  check(!copies, "%s: operands read in place, %d copy kernels", name, copies);
  compare_golden(name, dir, text, update);
  sched_free(s);
  free(gt);
  free(text);
  ir_ctx_free(c);
}

// Reshapes of transposes as views (ir/sched.c): a merged run of axes is a view
// when its axes are consecutive in the transposed buffer, in order; the
// heads of attention put back beside the features ([B, 4, 28, 16] as
// [B, 28, 4*16]) are not, and get a buffer.
static int merge_view(IrCtx *c, Node *x, const int *perm, int nd, const Dim *shape, int *materialized) {
  Node *t = ir_transpose(c, x, perm), *r = ir_reshape(c, t, nd, shape);
  Node *outs[] = {ir_matmul(c, r, ir_transpose(c, r, NULL))};
  Schedule *s = pass_fuse(c, graph(c, outs, 1), NULL);
  int ok = sched_merge_view(s, r);
  *materialized = sched_buf(s, t) >= 0 || sched_buf(s, r) >= 0;
  sched_free(s);
  return ok;
}

static void test_merge_views(void) {
  IrCtx *c = ir_ctx_new();
  Node *x = input(c, "x", DT_F32, "B,28,128"), *h = input(c, "h", DT_F32, "B,4,28,16");
  Node *u = input(c, "u", DT_F32, "B,1,28,128");
  int mat, last[IR_MAXDIM];
  int ok = merge_view(c, x, (int[]){2, 0, 1}, 2, (Dim[]){dim_c(128), dim_c(-1)}, &mat);
  check(ok && !mat, "merge view: transpose([B, 28, 128], [2, 0, 1]) as [128, 28*B] reads x in place");
  ok = merge_view(c, u, (int[]){3, 1, 0, 2}, 2, (Dim[]){dim_c(128), dim_c(-1)}, &mat);
  check(ok && !mat, "merge view: an axis of length 1 between merged axes is skipped");
  ok = merge_view(c, h, (int[]){0, 2, 1, 3}, 2, (Dim[]){dim_c(-1), dim_c(64)}, &mat);
  check(!ok && mat, "merge view: [B, 4, 28, 16] -> [B, 28, 4, 16] merged to [28*B, 64] is not a view: a buffer");
  ok = merge_view(c, x, (int[]){0, 2, 1}, 2, (Dim[]){dim_c(-1), dim_c(28)}, &mat);
  check(!ok && mat, "merge view: axes merged out of their order (B with 128) get a buffer");
  // the runs: [B, 1, 28, 128] -> [28*B, 1, 128] is a merge; [B, 28, 128] -> [B, 56, 64] splits
  Node *r = ir_reshape(c, u, 3, (Dim[]){dim_c(-1), dim_c(1), dim_c(128)});
  ok = sched_reshape_runs(r, last);
  check(ok && last[0] == 2 && last[1] == -1 && last[2] == 3,
        "reshape runs: [B, 1, 28, 128] -> [28*B, 1, 128] (%d %d %d)", last[0], last[1], last[2]);
  r = ir_reshape(c, x, 3, (Dim[]){(Dim){1, ir_sym(c, "B")}, dim_c(56), dim_c(64)});
  check(!sched_reshape_runs(r, last), "reshape runs: [B, 28, 128] -> [B, 56, 64] splits an axis: not runs");
  ir_ctx_free(c);
}

// Rematerialization (fuse.c): a value read by several kernels is computed in
// each when a few cheap ops over at most as many buffers moves less memory
// than a buffer of its own; not a transcendental one, nor one of a product's
// result (the product's epilogue writes it from the hot tile).
static int has_buffer(IrCtx *c, Node **outs, int nout, Node *n) {
  Schedule *s = pass_fuse(c, graph(c, outs, nout), NULL);
  int b = sched_buf(s, n) >= 0;
  sched_free(s);
  return b;
}

static void test_fuse_remat(void) {
  IrCtx *c = ir_ctx_new();
  Node *x = input(c, "x", DT_F32, "B,8"), *m = input(c, "m", DT_F32, "8"), *y = input(c, "y", DT_F32, "B,8");
  Node *w = input(c, "w", DT_F32, "8,8");
  Node *cen = bin(c, OP_MUL, bin(c, OP_SUB, x, m), f(c, 0.5));   // one full buffer under it
  Node *o1[3] = {ir_reduce(c, OP_SUM, bin(c, OP_MUL, cen, cen), 2, 0), un(c, OP_EXP, cen), un(c, OP_TANH, cen)};
  check(!has_buffer(c, o1, 3, cen), "fuse: (x - m) * 0.5 read by three kernels is computed in each");
  Node *sum = bin(c, OP_ADD, x, y);   // two: with 3 readers 6 reads against 6, with 4 8 against 7
  Node *o2[4] = {un(c, OP_EXP, sum), un(c, OP_LOG, sum), un(c, OP_TANH, sum), un(c, OP_SIN, sum)};
  check(!has_buffer(c, o2, 3, sum), "fuse: x + y read by three kernels is computed in each");
  check(has_buffer(c, o2, 4, sum), "fuse: x + y read by four kernels has a buffer");
  Node *e = un(c, OP_EXP, x);
  Node *o3[2] = {un(c, OP_LOG, e), un(c, OP_TANH, e)};
  check(has_buffer(c, o3, 2, e), "fuse: exp(x) read by two kernels has a buffer");
  Node *z = bin(c, OP_ADD, ir_matmul(c, x, w), m);
  Node *o4[2] = {un(c, OP_LOG, z), un(c, OP_TANH, z)};
  check(has_buffer(c, o4, 2, z), "fuse: x @ w + m read by two kernels has a buffer (the product's epilogue)");
  ir_ctx_free(c);
}

// Small reductions computed where they are read (fuse.c): a 3-term sum read
// by one elementwise kernel has no kernel of its own; a 16-term one does, and so
// does a 3-term max read by a transpose (a mover's strided walk), or by two
// kernels, or a sum read broadcast by many more elements than its own.
static int reduce_kernels(IrCtx *c, Node **outs, int nout) {
  Schedule *s = pass_fuse(c, graph(c, outs, nout), NULL);
  int n = 0;
  for (int k = 0; k < s->nk; k++) n += s->ks[k].kind == KS_REDUCE;
  sched_free(s);
  return n;
}

static void test_fuse_inline_reduce(void) {
  IrCtx *c = ir_ctx_new();
  Node *x = input(c, "x", DT_F32, "B,5,3"), *z = input(c, "z", DT_F32, "B,5,16");
  Node *small = ir_reduce(c, OP_SUM, x, 1u << 2, 1), *big = ir_reduce(c, OP_SUM, z, 1u << 2, 1);
  Node *o1 = ir_binary(c, OP_MUL, x, small), *o2 = ir_binary(c, OP_MUL, z, big);
  check(reduce_kernels(c, &o1, 1) == 0, "fuse: a 3-term sum read by one elementwise kernel is computed there");
  check(reduce_kernels(c, &o2, 1) == 1, "fuse: a 16-term sum keeps its kernel");
  int perm[2] = {1, 0};
  Node *mx = ir_reduce(c, OP_RMAX, x, 1u << 2, 0);
  Node *t = ir_transpose(c, mx, perm);
  check(reduce_kernels(c, &t, 1) == 1, "fuse: a small max read by a transpose keeps its kernel");
  Node *both[2] = {ir_unary(c, OP_EXP, mx), ir_unary(c, OP_NEG, mx)};
  check(reduce_kernels(c, both, 2) == 1, "fuse: a small max read by two kernels keeps its kernel");
  Node *wide = input(c, "w", DT_F32, "B,5,3,40");   // each sum read by 120 elements
  Node *o3 = ir_binary(c, OP_MUL, wide, ir_reshape(c, small, 4, (Dim[4]){wide->shape[0], dim_c(5), dim_c(1), dim_c(1)}));
  check(o3 && reduce_kernels(c, &o3, 1) == 1, "fuse: a small sum read broadcast over 120 elements each keeps its kernel");
  ir_ctx_free(c);
}

// Random numbers read broadcast get a buffer, not a draw per copy, also under
// a transpose and a reshape (the direct lowering's kernel gradient reads dY
// transposed, once per tap); an elementwise chain read so stays inline.
static void test_fuse_broadcast_source(void) {
  IrCtx *c = ir_ctx_new();
  Dim s2[2] = {dim_c(4), dim_c(6)}, s3[3] = {dim_c(6), dim_c(4), dim_c(1)}, s9[3] = {dim_c(6), dim_c(4), dim_c(9)};
  int perm[2] = {1, 0};
  Node *w = input(c, "w", DT_F32, "6,4,9");
  Node *srcs[2] = {ir_rng(c, DT_F32, 2, s2, 1, 1), ir_unary(c, OP_EXP, input(c, "x", DT_F32, "4,6"))};
  const char *what[2] = {"random numbers read transposed and broadcast get a buffer",
                         "an elementwise chain read transposed and broadcast stays inline"};
  for (int i = 0; i < 2; i++) {
    Node *b = ir_broadcast(c, ir_reshape(c, ir_transpose(c, srcs[i], perm), 3, s3), 3, s9);
    Node *out = ir_reduce(c, OP_SUM, ir_binary(c, OP_MUL, b, w), 7u, 0);
    Schedule *s = pass_fuse(c, graph(c, &out, 1), NULL);
    check((sched_buf(s, srcs[i]) >= 0) == (i == 0), "fuse: %s", what[i]);
    sched_free(s);
  }
  ir_ctx_free(c);
}

// lower.c's Winograd choice for a conv's window products (the forward one,
// and with grad the weights' gradient, windows^T @ dY, batch 2): taken for
// 2..5-tap kernels at stride 1 with 16 channels or more in and out where it
// saves a third of the multiplies, with its reason; never for f64, strides,
// dilation, 1-wide kernels, few channels, or with the option off.
typedef struct {
  const char *what;
  int64_t c, h, o, kh, kw, stride, dil;
  DType t;
  int on, want;
  const char *why;
  int grad;
} WinoPick;

static void test_lower_winograd(void) {
  static const WinoPick cases[] = {
      {"the CNN's second layer (8x8 tiles)", 32, 14, 64, 5, 5, 1, 1, DT_F32, 1, 1, "winograd F(4x4, 5x5): "},
      {"3x3 on 7x7 images (tiles overhang)", 16, 7, 16, 3, 3, 1, 1, DT_F32, 1, 1, "winograd F(4x4, 3x3): "},
      {"3x3 on 16x16 (8x8 tiles no fewer products)", 16, 16, 16, 3, 3, 1, 1, DT_F32, 1, 1, "winograd F(4x4, 3x3): "},
      {"3x3 on 18x18 (8x8 tiles 0.64 of the products)", 16, 18, 16, 3, 3, 1, 1, DT_F32, 1, 1, "winograd F(6x6, 3x3): "},
      {"a 5x3 kernel", 16, 14, 16, 5, 3, 1, 1, DT_F32, 1, 1, "winograd F(4x6, 5x3): "},
      {"a 4x2 kernel (6x6 tiles: F(7, 2) errs the most)", 24, 12, 20, 4, 2, 1, 1, DT_F32, 1, 1, "winograd F(3x5, 4x2): "},
      {"the option off", 32, 14, 64, 5, 5, 1, 1, DT_F32, 0, 0, "gemm: "},
      {"f64", 32, 14, 64, 5, 5, 1, 1, DT_F64, 1, 0, "gemm: "},
      {"stride 2", 32, 14, 64, 3, 3, 2, 1, DT_F32, 1, 0, "gemm: "},
      {"dilation 2", 32, 14, 64, 3, 3, 1, 2, DT_F32, 1, 0, "gemm: "},
      {"8 input channels", 8, 14, 64, 5, 5, 1, 1, DT_F32, 1, 0, "gemm: "},
      {"8 outputs", 32, 14, 8, 5, 5, 1, 1, DT_F32, 1, 0, "gemm: "},
      {"a 1x5 kernel", 32, 14, 64, 1, 5, 1, 1, DT_F32, 1, 0, "gemm: "},
      {"a 7x7 kernel (no tile size of its own)", 32, 14, 64, 7, 7, 1, 1, DT_F32, 1, 0, "gemm: "},
      {"a 9x3 kernel", 32, 14, 64, 9, 3, 1, 1, DT_F32, 1, 0, "gemm: "},
      {"a 2x2 kernel on 3x3 images (too few outputs per tile)", 32, 3, 32, 2, 2, 1, 1, DT_F32, 1, 0, "gemm: "},
      {"the weights' gradient", 32, 14, 64, 5, 5, 1, 1, DT_F32, 1, 1, "winograd F(4x4, 5x5) (weights' gradient): ", 1},
      {"the weights' gradient, stride 2", 32, 14, 64, 3, 3, 2, 1, DT_F32, 1, 0, "gemm: ", 1},
      {"the weights' gradient, the option off", 32, 14, 64, 3, 3, 1, 1, DT_F32, 0, 0, "gemm: ", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const WinoPick *t = &cases[i];
    IrCtx *c = ir_ctx_new();
    char xs[64], ws[64];
    snprintf(xs, sizeof xs, "%s,%" PRId64 ",%" PRId64 ",%" PRId64, t->grad ? "2" : "B", t->c, t->h, t->h);
    snprintf(ws, sizeof ws, "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64, t->o, t->c, t->kh, t->kw);
    Node *x = input(c, "x", t->t, xs), *w = input(c, "w", t->t, ws);
    int64_t pt = (t->kh - 1) * t->dil / 2, pl = (t->kw - 1) * t->dil / 2;
    int64_t win[9] = {t->kh, t->kw, t->stride, t->stride, pt, pl, t->dil, t->dil, 0}, pad_end[2] = {pt, pl};
    Node *cols = ir_im2col(c, x, win, pad_end);
    int64_t kk = t->c * t->kh * t->kw;
    Dim rows = x->shape[0];
    rows.k *= cols->shape[1].k * cols->shape[2].k;
    Dim m2[2] = {rows, dim_c(kk)}, w2[2] = {dim_c(t->o), dim_c(kk)};
    int tr[2] = {1, 0};
    Node *y = ir_matmul(c, ir_reshape(c, cols, 2, m2), ir_transpose(c, ir_reshape(c, w, 2, w2), tr));
    if (t->grad) {   // windows^T @ dY: [C*KH*KW, O]
      char ds[64];
      snprintf(ds, sizeof ds, "%" PRId64 ",%" PRId64, rows.k, t->o);
      y = ir_matmul(c, ir_transpose(c, ir_reshape(c, cols, 2, m2), tr), input(c, "dy", t->t, ds));
    }
    LowerOpts o = {.gemm = 1, .windows = 1, .winograd = t->on};
    Schedule *s = pass_fuse(c, g1(c, y), &o);
    pass_lower(s, &o);
    const Kernel *K = NULL;
    for (int k = 0; k < s->nk; k++)
      if (s->ks[k].kind == KS_MATMUL) K = &s->ks[k];
    check(K && K->winograd == t->want && !strncmp(K->why, t->why, strlen(t->why)), "lower: %s: %s (%s)", t->what,
          t->want ? "winograd" : "the window product", K ? K->why : "no product");
    sched_free(s);
    ir_ctx_free(c);
  }
}

// Max pooling's gradient, optimized and scheduled as the pipeline does: the
// forward max, the upstream gradient over the tie count (computed inline, a
// 2x2 window per pooled value: fuse.c's small reductions), and one kernel
// that routes it to the maxima and (col2im over disjoint windows) back to the
// pixels. No tie mask is stored, no count, no window-sized gradient either.
static void run_pool_grad_case(const char *dir, int update) {
  const char *name = "lower_maxpool_grad";
  IrCtx *c = ir_ctx_new();
  Node *x = input(c, "x", DT_F32, "B,3,7,7"), *dy = input(c, "dy", DT_F32, "B,3,3,3"), *gx = NULL;
  int64_t win[9] = {2, 2, 2, 2, 0, 0, 1, 1, 1}, pad_end[2] = {0, 0};
  int perm[6] = {0, 3, 1, 2, 4, 5};
  Node *y = ir_reduce(c, OP_RMAX, ir_transpose(c, ir_im2col(c, x, win, pad_end), perm), 3u << 4, 0);
  check(pass_grad(c, y, dy, &x, 1, &gx) == 0 && gx, "%s: builds", name);
  IrGraph *g = g1(c, gx);
  const char *passes[] = {"fold", "simplify", "stability", "dce"};
  for (int i = 0; i < 4; i++) g = run_pass(c, passes[i], g);
  char *text = NULL, *gt = graph_text(c, g);
  size_t tn = 0;
  FILE *t = open_memstream(&text, &tn);
  fprintf(t, "# %s: fold,simplify,stability,dce,fuse,lower\n%s# after lower\n", name, gt);
  Schedule *s = pass_fuse(c, g, NULL);
  LowerOpts o = {.gemm = 1};
  pass_lower(s, &o);
  sched_print(t, s);
  fclose(t);
  int masks = 0;
  for (int b = 0; b < s->nbufs; b++) masks += s->bufs[b].kind == BUF_TEMP && s->bufs[b].node->dtype == DT_BOOL;
  check(s->nk == 3 && !masks, "%s: 3 kernels (got %d), no stored mask (got %d)", name, s->nk, masks);
  compare_golden(name, dir, text, update);
  sched_free(s);
  free(gt);
  free(text);
  ir_ctx_free(c);
}

// ---- epilogue fusion: the schedule after lower, epilogue and plan, golden ----------------
// A two-layer network's training step with a momentum-free SGD whose rate is
// a scalar kernel (a step counter cast to f32, as Adam's bias corrections are):
// the bias and relu join the forward products' epilogues, the relu masks the
// backward products', the updates the weight gradients' (after the scalar is
// hoisted above the product). The plan keeps each group's buffers apart: what
// a GEMM or its epilogue reads is never overwritten by the epilogue, which runs
// while other threads still compute other blocks.
static int epilogue_plan_ok(const Schedule *s, char *why, size_t len) {
  for (int m = 0; m < s->nk; m++) {
    const Kernel *M = &s->ks[m];
    if (!M->nepi) continue;
    int lo = m, hi = m + M->nepi;
    for (int k = lo + 1; k <= hi; k++) {
      const Kernel *K = &s->ks[k];
      if (K->epi_of != m + 1 || K->kind != KS_EW || !ir_numel_eq(K->node, M->node) ||
          !dim_eq(K->node->shape[K->node->ndim - 1], M->node->shape[M->node->ndim - 1]))
        return snprintf(why, len, "k%d is not an elementwise kernel of k%d's rows", k, m), 0;
    }
    for (int k = lo; k <= hi; k++)
      for (int r = 0; r < s->ks[k].nreads; r++) {
        const Buffer *in = &s->bufs[s->ks[k].reads[r]];
        if (in->kind != BUF_TEMP || (in->first >= lo && in->first <= hi)) continue;
        for (int j = lo; j <= hi; j++) {
          const Buffer *o = &s->bufs[s->ks[j].out];
          if (o->kind == BUF_TEMP && o->slot == in->slot)
            return snprintf(why, len, "k%d writes slot %d, which k%d reads", j, o->slot, k), 0;
        }
      }
  }
  return 1;
}

// The SGD step on gradients wrt[0..n) of loss, after the pipeline's graph passes.
// As the trainer does: each new value (output i > 0) may take the storage of
// the input it replaces, wrt[i - 1].
static void donate_params(IrCtx *c, IrGraph *g, Node **wrt) {
  g->donate = arena_alloc(c->arena, sizeof(int) * g->nout);
  for (int o = 0; o < g->nout; o++) {
    g->donate[o] = -1;
    for (int i = 0; o > 0 && i < g->nin; i++) if (g->ins[i] == wrt[o - 1]) g->donate[o] = i;
  }
}

// The plan computes a donated output over its input only where that is safe:
// w - g is updated over w, but not when a later kernel still reads w, nor
// when the update reads w transposed (another element than it writes).
static void test_donate(void) {
  IrCtx *c = ir_ctx_new();
  Node *w = input(c, "w", DT_F32, "8,8"), *gr = input(c, "g", DT_F32, "8,8");
  Node *next = bin(c, OP_SUB, w, gr);
  Node *late = ir_reduce(c, OP_SUM, bin(c, OP_MUL, next, w), 3, 0);   // reads w after the update
  Node *turned = bin(c, OP_SUB, ir_transpose(c, w, NULL), gr);
  struct { const char *what; Node *outs[2]; int nout, want; } cases[] = {
      {"an update over its input", {f(c, 0), next}, 2, 0},
      {"no update over an input read later", {late, next}, 2, -1},
      {"no update over an input read transposed", {f(c, 0), turned}, 2, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    IrGraph *g = graph(c, cases[i].outs, cases[i].nout);
    Node *wrt[1] = {w};
    donate_params(c, g, wrt);
    Schedule *s = pass_fuse(c, g, NULL);
    LowerOpts o = {.gemm = 1, .epilogue = 1};
    pass_lower(s, &o);
    pass_epilogue(s);
    pass_plan(s);
    int shares = -2, w_arg = -1;
    for (int b = 0; b < s->nbufs; b++) {
      if (s->bufs[b].kind == BUF_OUTPUT && s->bufs[b].arg == 1) shares = s->bufs[b].shares;
      if (s->bufs[b].kind == BUF_INPUT && s->bufs[b].node == w) w_arg = s->bufs[b].arg;
    }
    int want = cases[i].want < 0 ? -1 : w_arg;
    check(shares == want, "plan: %s (shares %d, want %d)", cases[i].what, shares, want);
    sched_free(s);
  }
  ir_ctx_free(c);
}

static IrGraph *sgd_step(IrCtx *c, Node *loss, Node **wrt, int n, Node *step, const char *name) {
  Node *gr[4], *outs[5] = {loss};
  check(n <= 4 && pass_grad(c, loss, NULL, wrt, n, gr) == 0, "%s: builds", name);
  Node *lr = bin(c, OP_DIV, f(c, 0.1), ir_cast(c, step, DT_F32));
  for (int i = 0; i < n; i++) outs[i + 1] = bin(c, OP_SUB, wrt[i], bin(c, OP_MUL, lr, gr[i]));
  IrGraph *g = graph(c, outs, n + 1);
  donate_params(c, g, wrt);
  const char *passes[] = {"fold", "simplify", "stability", "dce"};
  for (int i = 0; i < 4; i++) g = run_pass(c, passes[i], g);
  return g;
}

static IrGraph *epi_mlp(IrCtx *c, const char *name) {
  Node *x = input(c, "x", DT_F32, "B,64"), *y = input(c, "y", DT_I64, "B"), *step = input(c, "step", DT_F64, "");
  Node *w1 = input(c, "w1", DT_F32, "64,32"), *b1 = input(c, "b1", DT_F32, "32");
  Node *w2 = input(c, "w2", DT_F32, "32,10");
  Node *h = un(c, OP_RELU, bin(c, OP_ADD, ir_matmul(c, x, w1), b1));
  Node *loss = ir_reduce(c, OP_SUM, ir_sce(c, ir_matmul(c, h, w2), y), 1, 0);
  Node *wrt[3] = {w1, b1, w2};
  return sgd_step(c, loss, wrt, 3, step, name);
}

// A 3x3 convolution as nn.kiln's conv builds it: im2col, one product of
// [N*H*W, C*9] rows, the NCHW view of its [N, H, W, 4] result, a bias, relu.
// Transpose sinking (simplify) computes the bias and relu in the product's
// layout, so they join its epilogue, in place, unravelling its rows into [N, H, W].
static IrGraph *epi_conv(IrCtx *c, const char *name) {
  Node *x = input(c, "x", DT_F32, "B,2,5,5"), *r = input(c, "r", DT_F32, "B,4,5,5"), *step = input(c, "step", DT_F64, "");
  Node *w = input(c, "w", DT_F32, "4,2,3,3"), *b = input(c, "b", DT_F32, "4,1,1");
  int64_t win[9] = {3, 3, 1, 1, 1, 1, 1, 1, 0}, pad_end[2] = {1, 1};
  Dim rows[2] = {{-1, 0}, dim_c(18)}, wm[2] = {dim_c(4), dim_c(18)}, nhwc[4] = {x->shape[0], dim_c(5), dim_c(5), dim_c(4)};
  int to_nchw[4] = {0, 3, 1, 2};
  Node *cols = ir_reshape(c, ir_im2col(c, x, win, pad_end), 2, rows);
  Node *prod = ir_matmul(c, cols, ir_transpose(c, ir_reshape(c, w, 2, wm), NULL));
  Node *y = ir_transpose(c, ir_reshape(c, prod, 4, nhwc), to_nchw);
  Node *h = un(c, OP_RELU, bin(c, OP_ADD, y, b));
  Node *loss = ir_reduce(c, OP_SUM, bin(c, OP_MUL, h, r), 15, 0);
  Node *wrt[2] = {w, b};
  return sgd_step(c, loss, wrt, 2, step, name);
}

// groups: products with an epilogue; fused: kernels in them, at least.
static void run_epilogue_case(const char *name, IrGraph *(*build)(IrCtx *, const char *), int groups_want,
                              int fused_want, const char *dir, int update) {
  IrCtx *c = ir_ctx_new();
  IrGraph *g = build(c, name);
  char *text = NULL;
  size_t tn = 0;
  FILE *t = open_memstream(&text, &tn);
  fprintf(t, "# %s: fold,simplify,stability,dce,fuse,lower,epilogue,plan\n", name);
  Schedule *s = pass_fuse(c, g, NULL);
  LowerOpts o = {.gemm = 1, .epilogue = 1};
  pass_lower(s, &o);
  pass_epilogue(s);
  pass_plan(s);
  sched_print(t, s);
  fclose(t);
  int groups = 0, fused = 0;
  for (int k = 0; k < s->nk; k++) groups += s->ks[k].nepi > 0, fused += s->ks[k].nepi;
  char why[160] = "";
  check(epilogue_plan_ok(s, why, sizeof why), "%s: the plan keeps each group's buffers apart %s", name, why);
  check(groups == groups_want && fused >= fused_want, "%s: %d products with epilogues (got %d), at least %d kernels in them (got %d)",
        name, groups_want, groups, fused_want, fused);
  compare_golden(name, dir, text, update);
  sched_free(s);
  free(text);
  ir_ctx_free(c);
}

// ---- folding, bit for bit ---------------------------------------------------------------
// The values an op is folded on: signs, zeros, fractions, NaN and infinities.
static volatile double fold_a[10] = {-2.5, -1, -0.5, 0, 0.25, 1, 1.5, 3, NAN, INFINITY};
static volatile double fold_b[10] = {1.5, -2, 0.5, 2, -0.75, 3, 0.3, -1, 2, -INFINITY};


// ir/opmath.h's f32 exp, tanh, erf, log1p and expm1, and // and %, as the emitters print them.
#ifdef __clang__
#define REF_NOCONTRACT _Pragma("STDC FP_CONTRACT OFF")
#else
#define REF_NOCONTRACT
#endif
KILN_OPMATH(static, REF_NOCONTRACT)
KILN_OPMATH_LOG(static, REF_NOCONTRACT)
KILN_OPMATH_DIVMOD(static inline)

// The emitter's C for each elementwise op (ops.def c_f32), written out.
static int ref_f32(Op op, float a, float b, float *r) {
  switch (op) {
  case OP_NEG: *r = (-a); return 1;
  case OP_EXP: *r = kiln_expf(a); return 1;
  case OP_LOG: *r = logf(a); return 1;
  case OP_LOG1P: *r = kiln_log1pf(a); return 1;
  case OP_EXPM1: *r = kiln_expm1f(a); return 1;
  case OP_SQRT: *r = sqrtf(a); return 1;
  case OP_RSQRT: *r = (1.0f / sqrtf(a)); return 1;
  case OP_ABS: *r = fabsf(a); return 1;
  case OP_SIGN: *r = (float)((a > 0) - (a < 0)); return 1;
  case OP_TANH: *r = kiln_tanhf(a); return 1;
  case OP_SIGMOID: *r = (1.0f / (1.0f + kiln_expf(-a))); return 1;
  case OP_RELU: *r = (a > 0 ? a : 0.0f); return 1;
  case OP_SOFTPLUS: *r = (fmaxf(a, 0.0f) + kiln_log1pf(kiln_expf(-fabsf(a)))); return 1;
  case OP_ERF: *r = kiln_erff(a); return 1;
  case OP_SIN: *r = sinf(a); return 1;
  case OP_COS: *r = cosf(a); return 1;
  case OP_FLOOR: *r = floorf(a); return 1;
  case OP_CEIL: *r = ceilf(a); return 1;
  case OP_ROUND: *r = rintf(a); return 1;
  case OP_ADD: *r = (a + b); return 1;
  case OP_SUB: *r = (a - b); return 1;
  case OP_MUL: *r = (a * b); return 1;
  case OP_DIV: *r = (a / b); return 1;
  case OP_POW: *r = powf(a, b); return 1;
  case OP_FLOORDIV: *r = kiln_floordiv_f32(a, b); return 1;
  case OP_MOD: *r = kiln_mod_f32(a, b); return 1;
  case OP_MAXIMUM: *r = (a > b || a != a ? a : b); return 1;
  case OP_MINIMUM: *r = (a < b || a != a ? a : b); return 1;
  case OP_ISNAN: *r = (a != a); return 1;
  case OP_ISINF: *r = (a == a && a - a != 0); return 1;
  case OP_ISFINITE: *r = (a - a == 0); return 1;
  case OP_LT: *r = (a < b); return 1;
  case OP_LE: *r = (a <= b); return 1;
  case OP_GT: *r = (a > b); return 1;
  case OP_GE: *r = (a >= b); return 1;
  case OP_EQ: *r = (a == b); return 1;
  case OP_NE: *r = (a != b); return 1;
  default: return 0;
  }
}

// ops.def c_f64, written out.
static int ref_f64(Op op, double a, double b, double *r) {
  switch (op) {
  case OP_NEG: *r = (-a); return 1;
  case OP_EXP: *r = exp(a); return 1;
  case OP_LOG: *r = log(a); return 1;
  case OP_LOG1P: *r = log1p(a); return 1;
  case OP_EXPM1: *r = expm1(a); return 1;
  case OP_SQRT: *r = sqrt(a); return 1;
  case OP_RSQRT: *r = (1.0 / sqrt(a)); return 1;
  case OP_ABS: *r = (a < 0 ? -a : a); return 1;
  case OP_SIGN: *r = ((a > 0) - (a < 0)); return 1;
  case OP_TANH: *r = tanh(a); return 1;
  case OP_SIGMOID: *r = (1.0 / (1.0 + exp(-a))); return 1;
  case OP_RELU: *r = (a > 0 ? a : 0); return 1;
  case OP_SOFTPLUS: *r = (fmax(a, 0.0) + log1p(exp(-fabs(a)))); return 1;
  case OP_ERF: *r = erf(a); return 1;
  case OP_SIN: *r = sin(a); return 1;
  case OP_COS: *r = cos(a); return 1;
  case OP_FLOOR: *r = floor(a); return 1;
  case OP_CEIL: *r = ceil(a); return 1;
  case OP_ROUND: *r = rint(a); return 1;
  case OP_ADD: *r = (a + b); return 1;
  case OP_SUB: *r = (a - b); return 1;
  case OP_MUL: *r = (a * b); return 1;
  case OP_DIV: *r = (a / b); return 1;
  case OP_POW: *r = pow(a, b); return 1;
  case OP_FLOORDIV: *r = kiln_floordiv_f64(a, b); return 1;
  case OP_MOD: *r = kiln_mod_f64(a, b); return 1;
  case OP_MAXIMUM: *r = (a > b || a != a ? a : b); return 1;
  case OP_MINIMUM: *r = (a < b || a != a ? a : b); return 1;
  case OP_ISNAN: *r = (a != a); return 1;
  case OP_ISINF: *r = (a == a && a - a != 0); return 1;
  case OP_ISFINITE: *r = (a - a == 0); return 1;
  case OP_LT: *r = (a < b); return 1;
  case OP_LE: *r = (a <= b); return 1;
  case OP_GT: *r = (a > b); return 1;
  case OP_GE: *r = (a >= b); return 1;
  case OP_EQ: *r = (a == b); return 1;
  case OP_NE: *r = (a != b); return 1;
  default: return 0;
  }
}

// The single output of a folded graph: a CONST, or a broadcast scalar CONST
// (read element i through it). NULL if it did not fold.
static const Node *folded(IrCtx *c, Node *out, IrGraph **gp) {
  IrGraph *g = fold_wide(c, g1(c, out));
  if (gp) *gp = g;
  if (!g) return NULL;
  const Node *r = g->outs[0];
  if (r->op == OP_BROADCAST) r = r->src[0];
  return r->op == OP_CONST ? r : NULL;
}

static double folded_at(const Node *k, int64_t i) {
  int64_t m;
  ir_numel_const(k, &m);
  return ir_const_at(k, m == 1 ? 0 : i);
}

static int same_bits(double a, double b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

// ir/opmath.h against libm in double: the worst error in ulps over every 61st
// float of each sign (all of them, in steps), and the special values.
static double ulps_off(float got, double want) {
  if (isnan(want)) return isnan(got) ? 0 : INFINITY;
  if (isinf(want) || fabs(want) >= 3.4028234e38) return got == (float)want ? 0 : INFINITY;
  float w = (float)want;
  double ulp = w == 0 ? 1.4e-45 : fabs((double)nextafterf(w, INFINITY) - (double)w);
  if (fabs(want) < 1.1754944e-38) ulp = 1.4e-45;
  return fabs((double)got - want) / ulp;
}

static void test_opmath_accuracy(void) {
  static const struct { const char *name; float (*f)(float); double (*ref)(double); double max_ulps; } fs[] = {
    {"exp", kiln_expf, exp, 1}, {"tanh", kiln_tanhf, tanh, 2}, {"erf", kiln_erff, erf, 3}, {"log1p", kiln_log1pf, log1p, 4}, {"expm1", kiln_expm1f, expm1, 5},
  };
  for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
    double worst = 0;
    float at = 0;
    for (uint64_t b = 0; b < 0xFFFFFFFFull; b += 61) {
      uint32_t u = (uint32_t)b;
      float x;
      memcpy(&x, &u, 4);
      double e = ulps_off(fs[k].f(x), fs[k].ref((double)x));
      if (e > worst) worst = e, at = x;
    }
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 88.0f, -88.0f, -1.0f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
      double e = ulps_off(fs[k].f(special[i]), fs[k].ref((double)special[i]));
      if (e > worst || (e == INFINITY)) worst = e, at = special[i];
    }
    check(worst <= fs[k].max_ulps, "opmath %s: within %g ulp of libm's double over all floats (worst %.2f at %g)", fs[k].name,
          fs[k].max_ulps, worst, (double)at);
  }
}

static void test_fold_float_ops(void) {
  for (int op = 0; op < OP_COUNT; op++) {
    const OpInfo *oi = &ir_ops[op];
    if (oi->kind != K_EW || (oi->flags & F_LOGIC) || op == OP_CAST || op == OP_WHERE) continue;
    for (int t = DT_F32; t <= DT_F64; t++) {
      IrCtx *c = ir_ctx_new();
      double av[10], bv[10];
      for (int i = 0; i < 10; i++) { av[i] = fold_a[i]; bv[i] = fold_b[i]; }
      Node *a = cst(c, (DType)t, "10", av), *b = cst(c, (DType)t, "10", bv);
      Node *n = oi->nsrc == 1 ? un(c, (Op)op, a) : bin(c, (Op)op, a, b);
      const Node *k = folded(c, n, NULL);
      int ok = k != NULL, have = 1;
      for (int i = 0; ok && i < 10; i++) {
        double want;
        if (t == DT_F32) {
          float r;
          have = ref_f32((Op)op, (float)av[i], (float)bv[i], &r);
          want = r;
        } else {
          have = ref_f64((Op)op, av[i], bv[i], &want);
        }
        ok = have && same_bits(folded_at(k, i), want);
      }
      check(ok, "fold %s %s: bit for bit with the emitter's C on 10 values%s", oi->name, ir_dtype_name((DType)t),
            !k ? " (did not fold)" : !have ? " (no reference here: add one)" : "");
      ir_ctx_free(c);
    }
  }
}

static void test_fold_int_ops(void) {
  static const Op ops[] = {OP_NEG, OP_ABS, OP_SIGN, OP_RELU, OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_MOD,
                           OP_MAXIMUM, OP_MINIMUM, OP_LT, OP_EQ, OP_GE};
  double av[7] = {-7, 0, 5, 2147483647, -2147483648.0, 3, 7}, bv[7] = {2, -3, 5, 1, -1, -4, 0};
  for (size_t j = 0; j < sizeof ops / sizeof ops[0]; j++)
    for (int t = DT_I32; t <= DT_I64; t++) {
      Op op = ops[j];
      IrCtx *c = ir_ctx_new();
      Node *a = cst(c, (DType)t, "7", av), *b = cst(c, (DType)t, "7", bv);
      Node *n = ir_ops[op].nsrc == 1 ? un(c, op, a) : bin(c, op, a, b);
      const Node *k = folded(c, n, NULL);
      int ok = k && k->dtype == n->dtype;
      for (int i = 0; ok && i < 7; i++) {
        int64_t x = (int64_t)av[i], y = (int64_t)bv[i], r;
        uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
        switch (op) {   // two's complement wrap-around, as int32_t/int64_t temporaries give
        case OP_NEG: r = (int64_t)(0 - ux); break;
        case OP_ABS: r = x < 0 ? (int64_t)(0 - ux) : x; break;
        case OP_SIGN: r = (x > 0) - (x < 0); break;
        case OP_RELU: r = x > 0 ? x : 0; break;
        case OP_ADD: r = (int64_t)(ux + uy); break;
        case OP_SUB: r = (int64_t)(ux - uy); break;
        case OP_MUL: r = (int64_t)(ux * uy); break;
        // Python's // and % (NumPy's: 0 for a zero divisor; -2^31 // -1 wraps in i32)
        case OP_FLOORDIV: r = y == 0 ? 0 : (int64_t)floor((double)x / (double)y); break;
        case OP_MOD: r = y == 0 ? 0 : x - (int64_t)floor((double)x / (double)y) * y; break;
        case OP_MAXIMUM: r = x > y ? x : y; break;
        case OP_MINIMUM: r = x < y ? x : y; break;
        case OP_LT: r = x < y; break;
        case OP_EQ: r = x == y; break;
        default: r = x >= y; break;
        }
        if (t == DT_I32 && !(ir_ops[op].flags & F_BOOL)) r = (int32_t)r;
        ok = folded_at(k, i) == (double)r;
      }
      check(ok, "fold %s %s: wraps like the emitter's integer C", ir_ops[op].name, ir_dtype_name((DType)t));
      ir_ctx_free(c);
    }
  IrCtx *c = ir_ctx_new();
  double p[4] = {0, 1, 0, 1}, q[4] = {0, 0, 1, 1};
  Node *a = cst(c, DT_BOOL, "4", p), *b = cst(c, DT_BOOL, "4", q);
  const Node *kn = folded(c, un(c, OP_NOT, a), NULL), *ka = folded(c, bin(c, OP_AND, a, b), NULL), *ko = folded(c, bin(c, OP_OR, a, b), NULL);
  int ok = kn && ka && ko;
  for (int i = 0; ok && i < 4; i++)
    ok = folded_at(kn, i) == !p[i] && folded_at(ka, i) == (p[i] && q[i]) && folded_at(ko, i) == (p[i] || q[i]);
  check(ok, "fold not/and/or on bool");
  double cv[4] = {1, 0, 1, 0};
  Node *w = ir_where(c, cst(c, DT_BOOL, "4", cv), cst(c, DT_F32, "4", p), cst(c, DT_F32, "4", q));
  const Node *kw = folded(c, w, NULL);
  ok = kw != NULL;
  for (int i = 0; ok && i < 4; i++) ok = folded_at(kw, i) == (cv[i] ? p[i] : q[i]);
  check(ok, "fold where");
  ir_ctx_free(c);
}

static void test_fold_casts(void) {
  IrCtx *c = ir_ctx_new();
  double v[6] = {1.7, -1.7, 0.5, 0, -0.0, 2147483000.0};
  Node *x = cst(c, DT_F32, "6", v);
  const Node *ki = folded(c, ir_cast(c, x, DT_I32), NULL), *kb = folded(c, ir_cast(c, x, DT_BOOL), NULL);
  const Node *kd = folded(c, ir_cast(c, x, DT_F64), NULL);
  int ok = ki && kb && kd;
  for (int i = 0; ok && i < 6; i++) {
    float s = (float)v[i];
    ok = folded_at(ki, i) == (double)(int32_t)s && folded_at(kb, i) == (double)(s != 0) && same_bits(folded_at(kd, i), (double)s);
  }
  check(ok, "fold casts f32 -> i32 (truncation), bool (x != 0), f64");
  double big[2] = {3e9, 1};
  check(folded(c, ir_cast(c, cst(c, DT_F32, "2", big), DT_I32), NULL) == NULL, "fold: an out-of-range float-to-int cast is not folded");
  double l[2] = {16777217.0, -3};
  const Node *kf = folded(c, ir_cast(c, cst(c, DT_I64, "2", l), DT_F32), NULL);
  check(kf && folded_at(kf, 0) == (double)(float)16777217LL && folded_at(kf, 1) == -3, "fold cast i64 -> f32 rounds as C does");
  ir_ctx_free(c);
}

// Reductions as cgen.c writes them: per output, the reduced axes in row-major
// order; f32 sums and products in double; argmax keeps the first maximum.
static void test_fold_reductions(void) {
  static const Op ops[] = {OP_SUM, OP_PROD, OP_RMAX, OP_RMIN, OP_ARGMAX, OP_ARGMIN};
  static const uint32_t axes[] = {1, 2, 3};
  double v[12];
  for (int i = 0; i < 12; i++) v[i] = (i * 7 % 5) * 0.1 + 0.3 - (i % 3) * 0.7;
  for (size_t j = 0; j < sizeof ops / sizeof ops[0]; j++)
    for (size_t a = 0; a < 3; a++) {
      IrCtx *c = ir_ctx_new();
      Node *n = ir_reduce(c, ops[j], cst(c, DT_F32, "3,4", v), axes[a], (int)a == 1);
      const Node *k = folded(c, n, NULL);
      int ok = k && k->dtype == n->dtype && k->ndim == n->ndim;
      for (int64_t o = 0; ok && o < (axes[a] == 3 ? 1 : axes[a] == 1 ? 4 : 3); o++) {
        double acc = ops[j] == OP_PROD ? 1 : 0;
        float best = ops[j] == OP_RMIN || ops[j] == OP_ARGMIN ? INFINITY : -INFINITY;
        int64_t pos = 0, bi = 0;
        for (int r = 0; r < 3; r++)
          for (int q = 0; q < 4; q++) {
            int in = axes[a] == 3 || (axes[a] == 1 ? q == o : r == o);
            if (!in) continue;
            float x = (float)v[r * 4 + q];
            if (ops[j] == OP_SUM) acc = acc + (double)x;
            else if (ops[j] == OP_PROD) acc = acc * (double)x;
            else if (ops[j] == OP_RMAX ? x > best : ops[j] == OP_RMIN ? x < best : 0) best = x;
            else if (ops[j] == OP_ARGMAX ? x > best : ops[j] == OP_ARGMIN ? x < best : 0) { best = x; bi = pos; }
            pos++;
          }
        double want = ops[j] == OP_SUM || ops[j] == OP_PROD ? (double)(float)acc
                      : ops[j] == OP_ARGMAX || ops[j] == OP_ARGMIN ? (double)bi : (double)best;
        ok = same_bits(folded_at(k, o), want);
      }
      check(ok, "fold %s over axes %s of f32[3, 4]%s", ir_ops[ops[j]].name, a == 0 ? "[0]" : a == 1 ? "[1] keepdims" : "[0,1]",
            k ? "" : " (did not fold)");
      ir_ctx_free(c);
    }
  IrCtx *c = ir_ctx_new();
  double iv[4] = {2147483647, 1, 5, -2};
  Node *s = ir_reduce(c, OP_SUM, cst(c, DT_I32, "4", iv), 1, 0);
  const Node *k = folded(c, s, NULL);
  check(k && k->dtype == DT_I64 && folded_at(k, 0) == 2147483651.0, "fold sum of i32 accumulates in i64");
  double big[100] = {0};
  Node *b = ir_reduce(c, OP_SUM, ir_reshape(c, cst(c, DT_F32, "100", big), 2, (Dim[]){dim_c(10), dim_c(10)}), 1, 0);
  check(folded(c, b, NULL) != NULL, "fold a reduction of a 100-element constant to 10 elements");
  ir_ctx_free(c);
}

// Movement ops against the reference interpreter's index arithmetic.
static void test_fold_movement(void) {
  IrCtx *c = ir_ctx_new();
  double v[24];
  for (int i = 0; i < 24; i++) v[i] = i;
  Node *x = cst(c, DT_F64, "2,3,4", v);
  int perm[3] = {2, 0, 1};
  int64_t st[3] = {1, 2, 3}, cn[3] = {1, 2, 2}, sp[3] = {1, -1, -2}, pst[2] = {1, 0}, psp[2] = {1, 2};
  Dim ps[2] = {dim_c(3), dim_c(5)}, bs[3] = {dim_c(2), dim_c(2), dim_c(4)}, rs[2] = {dim_c(4), dim_c(6)};
  double one[4] = {1, 2, 3, 4};
  Node *row = cst(c, DT_F64, "1,1,4", one), *small = cst(c, DT_F64, "2,3", v), *cat[2] = {x, bin(c, OP_ADD, x, ir_scalar(c, DT_F64, 100))};
  struct { const char *what; Node *n; } t[] = {
      {"transpose", ir_transpose(c, x, perm)},
      {"slice with negative steps", ir_slice(c, x, st, cn, sp)},
      {"pad with a step", ir_pad(c, small, ps, pst, psp)},
      {"broadcast", ir_broadcast(c, row, 3, bs)},
      {"reshape", ir_reshape(c, x, 2, rs)},
      {"concat", ir_concat(c, cat, 2, 1)},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    IrGraph *g;
    const Node *k = folded(c, t[i].n, &g);
    char why[256] = "";
    int ok = k && same_values(c, g1(c, t[i].n), g, 0, why, sizeof why);
    check(ok, "fold %s of constants%s%s", t[i].what, k ? "" : " (did not fold)", why);
  }
  ir_ctx_free(c);
}

// The pass returns the same graph when nothing changes, and is idempotent.
static void test_fixpoints(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    IrCtx *c = ir_ctx_new();
    IrGraph *g = cases[i].build(c);
    IrGraph *(*pass[4])(IrCtx *, IrGraph *) = {fold_wide, pass_simplify, pass_stability, pass_dce};
    int ok = 1;
    for (int p = 0; p < 4 && g; p++) g = pass[p](c, g);
    IrGraph *h = g;
    for (int p = 0; p < 4 && h; p++) h = pass[p](c, h);
    for (int o = 0; ok && g && h && o < g->nout; o++) ok = g->outs[o] == h->outs[o];
    check(g && h && ok, "%s: the whole pipeline twice changes nothing the second time", cases[i].name);
    ir_ctx_free(c);
  }
}

// ---- random graphs through the whole pipeline ------------------------------------------
static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static unsigned rnd(unsigned n) {
  rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
  return (unsigned)(rng_state % n);
}

// One random node over the pool's nodes: the patterns the rules look for, and
// noise around them. Shapes stay [2,3], [3] or scalars so most ops apply.
static Node *random_node(IrCtx *c, Node **pool, int n) {
  static const Op un_ops[] = {OP_NEG, OP_EXP, OP_LOG, OP_LOG1P, OP_SQRT, OP_TANH, OP_SIGMOID, OP_SOFTPLUS, OP_ABS};
  static const Op bin_ops[] = {OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAXIMUM};
  static const double ks[] = {0, 1, -1, 2, 0.5, 4, 3};
  Node *a = pool[rnd(n)], *b = pool[rnd(n)], *k = d64(c, ks[rnd(7)]);
  switch (rnd(12)) {
  case 0: case 1: return un(c, un_ops[rnd(9)], a);
  case 2: case 3: return bin(c, bin_ops[rnd(5)], a, b);
  case 4: return bin(c, bin_ops[rnd(5)], rnd(2) ? a : k, rnd(2) ? k : a);
  case 5: return bin(c, OP_POW, un(c, OP_ABS, a), k);
  case 6: return a->ndim ? ir_reduce(c, rnd(2) ? OP_SUM : OP_RMAX, a, 1u << rnd(a->ndim), (int)rnd(2)) : un(c, OP_EXP, a);
  case 7: return a->ndim ? ir_row(c, rnd(2) ? OP_SOFTMAX : OP_LOG_SOFTMAX, a, -1) : un(c, OP_LOG, a);
  case 8: {
    Dim s23[2] = {dim_c(2), dim_c(3)};
    Node *x = ir_broadcast(c, a, 2, s23);
    return x ? ir_reduce(c, OP_SUM, x, 1u << rnd(2), (int)rnd(2)) : bin(c, OP_ADD, a, k);
  }
  case 9: return a->ndim == 2 ? ir_transpose(c, ir_transpose(c, a, NULL), NULL) : un(c, OP_NEG, un(c, OP_NEG, a));
  case 10: {
    Node *gt = bin(c, OP_GT, a, b);
    return gt ? ir_where(c, gt, a, rnd(2) ? b : a) : NULL;
  }
  default: return un(c, OP_LOG, bin(c, OP_ADD, k, un(c, OP_EXP, a)));
  }
}

// In f64, so that folding (exact in the dtype) and the interpreter (double)
// agree; values are compared on the inputs where every value of the graph
// before is finite (the rules assume finite x).
static int all_finite(Interp *I, const IrGraph *g) {
  int count, ok = 1;
  Node **order = ir_topo(I->c, g->outs, g->nout, &count);
  for (int i = 0; i < count && ok; i++) {
    double *v = eval(I, order[i]);
    for (int64_t j = 0; j < nel(order[i]) && ok; j++) ok = isfinite(v[j]);
  }
  free(order);
  return ok;
}

static void test_random_graphs(void) {
  int typed = 0, same = 0, compared = 0, total = 200;
  char why[512] = "", first[600] = "";
  for (int t = 0; t < total; t++) {
    IrCtx *c = ir_ctx_new();
    Node *pool[64];
    int n = 0;
    double kv[3] = {0.5, 1, 2};
    pool[n++] = input(c, "x", DT_F64, "2,3");
    pool[n++] = input(c, "y", DT_F64, "3");
    pool[n++] = input(c, "s", DT_F64, "");
    pool[n++] = cst(c, DT_F64, "3", kv);
    for (int i = 0; i < 12; i++) {
      Node *r = random_node(c, pool, n);
      c->err[0] = 0;
      if (r && n < 64) pool[n++] = r;
    }
    IrGraph *g0 = graph(c, pool + n - 3, 3), *g = g0;
    IrGraph *(*pass[4])(IrCtx *, IrGraph *) = {fold_wide, pass_simplify, pass_stability, pass_dce};
    int ok = 1;
    for (int p = 0; p < 4 && ok; p++) {
      IrGraph *r = pass[p](c, g);
      ok = graph_ok(c, g, r, why, sizeof why);
      g = r;
    }
    typed += ok;
    // Values: compared where the graph before is finite (the rules assume finite x).
    int agree = ok;
    for (int trial = 0; ok && agree && trial < 2; trial++) {
      Interp I = {c, calloc((size_t)c->nnodes + 1, sizeof(double *)), trial};
      int fin = all_finite(&I, g0);
      compared += fin;
      for (int o = 0; fin && o < g0->nout && agree; o++) {
        double *x = eval(&I, g0->outs[o]), *y = eval(&I, g->outs[o]);
        for (int64_t i = 0; i < nel(g0->outs[o]) && agree; i++)
          if (!close_to(x[i], y[i])) {
            agree = 0;
            snprintf(why, sizeof why, "graph %d output %d: %.9g before, %.9g after", t, o, x[i], y[i]);
          }
      }
      for (int i = 0; i < c->nnodes; i++) free(I.val[i]);
      free(I.val);
    }
    same += agree;
    if ((!ok || !agree) && !first[0]) {
      snprintf(first, sizeof first, "%s", why);
      if (getenv("KILN_TEST_VERBOSE")) { ir_print_graph(stdout, c, g0); ir_print_graph(stdout, c, g); }
    }
    ir_ctx_free(c);
  }
  check(typed == total, "random graphs: %d of %d keep their types through fold, simplify, stability, dce%s%s", typed, total,
        typed == total ? "" : ": ", typed == total ? "" : first);
  check(same == total && compared >= total / 2, "random graphs: %d of %d keep their values (%d of %d input sets compared)%s%s",
        same, total, compared, 2 * total, same == total ? "" : ": ", same == total ? "" : first);
}

// dce: the graph is what the outputs reach; declared inputs stay declared.
static void test_dce(void) {
  IrCtx *c = ir_ctx_new();
  IrGraph *g0 = dce_unused_input(c), *g = pass_dce(c, pass_simplify(c, g0));
  int count;
  Node **order = g ? ir_topo(c, g->outs, g->nout, &count) : NULL;
  check(g && count == 1 && c->nnodes > count && g->nin == 2 && g->ins[1] == g0->ins[1],
        "dce: 1 live node of %d in the context; the unused input y is still declared", c->nnodes);
  free(order);
  ir_ctx_free(c);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
    return 2;
  }
  const char *up = getenv("KILN_UPDATE_GOLDEN");
  int update = up && *up && strcmp(up, "0");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], argv[1], update);
  run_lower_case("lower_matmul", lower_matmuls, 1, argv[1], update);
  run_lower_case("lower_matmul_noblis", lower_small, 0, argv[1], update);
  run_pool_grad_case(argv[1], update);
  test_fuse_inline_reduce();
  test_fuse_remat();
  test_merge_views();
  test_fuse_broadcast_source();
  test_lower_winograd();
  // MLP: bias+relu (1 kernel) on x@w1; backward: the relu mask on dh's product;
  // the updates of w1 and w2 on their gradients' products.
  run_epilogue_case("epilogue_sgd", epi_mlp, 4, 4, argv[1], update);
  // Conv: bias+relu on the forward product (w's update reads its [C*9, 4]
  // gradient product transposed: not an epilogue).
  run_epilogue_case("epilogue_conv", epi_conv, 1, 1, argv[1], update);
  test_donate();
  test_fold_float_ops();
  test_opmath_accuracy();
  test_fold_int_ops();
  test_fold_casts();
  test_fold_reductions();
  test_fold_movement();
  test_dce();
  test_fixpoints();
  test_random_graphs();
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail != 0;
}
