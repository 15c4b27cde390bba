// Autodiff tests: every gradient rule against central finite differences, in
// f64, through a small reference interpreter for the IR (the oracle; it is not
// product code). Second-order checks differentiate the emitted gradient again.
// Prints one line per check and `N passed, N failed`; exits nonzero on failure.
#include "passes/passes.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// ---- the reference interpreter ----------------------------------------------------
// Every value is a dense row-major array of doubles. Float casts do not round
// (exact-real semantics); casts to integers truncate, to bool test != 0.

typedef struct { int nd; int64_t sh[IR_MAXDIM]; int64_t n; double *v; } Ten;

typedef struct {
  IrCtx *c;
  Node *in[32]; Ten val[32]; int nin;  // bound inputs
  unsigned long long rng;
  int pass, fail;
} Tst;

static Ten ten_new(const Node *n) {
  Ten t = {n->ndim, {0}, 1, NULL};
  for (int d = 0; d < n->ndim; d++) {
    if (n->shape[d].sym && n->shape[d].k) { fprintf(stderr, "eval: symbolic shape\n"); exit(2); }
    t.sh[d] = n->shape[d].k;
    t.n *= t.sh[d];
  }
  t.v = calloc(t.n + 1, sizeof(double));
  if (!t.v) abort();
  return t;
}

static void unravel(int64_t i, const Ten *t, int64_t *ix) {
  for (int d = t->nd - 1; d >= 0; d--) { ix[d] = i % t->sh[d]; i /= t->sh[d]; }
}

static int64_t ravel(const int64_t *ix, const Ten *t) {
  int64_t i = 0;
  for (int d = 0; d < t->nd; d++) i = i * t->sh[d] + ix[d];
  return i;
}

static double cast_to(DType t, double v) {
  if (t == DT_BOOL) return v != 0;
  if (t == DT_I32 || t == DT_I64) return trunc(v);
  return v;
}

static double ew(const Node *n, double a, double b, double c) {
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
  case OP_SOFTPLUS: return fmax(a, 0) + log1p(exp(-fabs(a)));
  case OP_ERF: return erf(a);
  case OP_SIN: return sin(a);
  case OP_COS: return cos(a);
  case OP_FLOOR: return floor(a);
  case OP_CEIL: return ceil(a);
  case OP_ROUND: return rint(a);
  case OP_NOT: return !a;
  case OP_CAST: return cast_to(n->dtype, a);
  case OP_ADD: return a + b;
  case OP_SUB: return a - b;
  case OP_MUL: return a * b;
  case OP_DIV: return a / b;
  case OP_POW: return pow(a, b);
  case OP_FLOORDIV: return floor(a / b);   // exact away from the jumps, where the checks sample
  case OP_MOD: return a - floor(a / b) * b;
  case OP_MAXIMUM: return a > b || a != a ? a : b;
  case OP_MINIMUM: return a < b || a != a ? a : b;
  case OP_LT: return a < b;
  case OP_LE: return a <= b;
  case OP_GT: return a > b;
  case OP_GE: return a >= b;
  case OP_EQ: return a == b;
  case OP_NE: return a != b;
  case OP_AND: return a && b;
  case OP_OR: return a || b;
  case OP_WHERE: return a ? b : c;
  default: fprintf(stderr, "eval: no elementwise rule for %s\n", ir_ops[n->op].name); exit(2);
  }
}

static void eval_reduce(const Node *n, const Ten *x, Ten *r) {
  uint32_t ax = (uint32_t)n->a.i[0];
  int64_t ix[IR_MAXDIM], ox[IR_MAXDIM];
  double *best = calloc(r->n + 1, sizeof(double));
  if (!best) abort();
  for (int64_t o = 0; o < r->n; o++) {
    switch (n->op) {
    case OP_PROD: r->v[o] = 1; break;
    case OP_RMAX: case OP_ARGMAX: r->v[o] = -INFINITY; best[o] = -INFINITY; break;
    case OP_RMIN: case OP_ARGMIN: r->v[o] = INFINITY; best[o] = INFINITY; break;
    default: r->v[o] = 0;
    }
    if (n->op == OP_ARGMAX || n->op == OP_ARGMIN) r->v[o] = 0;
  }
  for (int64_t i = 0; i < x->n; i++) {
    unravel(i, x, ix);
    int k = 0;
    int64_t sub = 0;  // flat index over the reduced axes (argmax)
    for (int d = 0; d < x->nd; d++) {
      if (ax >> d & 1) { sub = sub * x->sh[d] + ix[d]; if (n->a.i[1]) ox[k++] = 0; }
      else ox[k++] = ix[d];
    }
    int64_t o = ravel(ox, r);
    double v = x->v[i];
    switch (n->op) {
    case OP_SUM: r->v[o] += v; break;
    case OP_PROD: r->v[o] *= v; break;
    case OP_RMAX: if (v > r->v[o] || v != v) r->v[o] = v; break;
    case OP_RMIN: if (v < r->v[o] || v != v) r->v[o] = v; break;
    case OP_ARGMAX: if (v > best[o]) { best[o] = v; r->v[o] = (double)sub; } break;
    case OP_ARGMIN: if (v < best[o]) { best[o] = v; r->v[o] = (double)sub; } break;
    default: break;
    }
  }
  free(best);
}

static void eval_move(const Node *n, Ten *const *s, Ten *r) {
  int64_t ox[IR_MAXDIM], ix[IR_MAXDIM];
  const Ten *x = s[0];
  if (n->op == OP_PAD) {
    for (int64_t i = 0; i < x->n; i++) {
      unravel(i, x, ix);
      for (int d = 0; d < x->nd; d++) ox[d] = n->a.i[d] + ix[d] * n->a.i[IR_MAXDIM + d];
      r->v[ravel(ox, r)] = x->v[i];
    }
    return;
  }
  for (int64_t o = 0; o < r->n; o++) {
    unravel(o, r, ox);
    const Ten *src = x;
    for (int d = 0; d < r->nd; d++) {
      switch (n->op) {
      case OP_TRANSPOSE: ix[n->a.i[d]] = ox[d]; break;
      case OP_BROADCAST: ix[d] = x->sh[d] == 1 ? 0 : ox[d]; break;
      case OP_SLICE: ix[d] = n->a.i[d] + ox[d] * n->a.i[IR_MAXDIM + d]; break;
      default: ix[d] = ox[d];
      }
    }
    if (n->op == OP_RESHAPE) { r->v[o] = x->v[o]; continue; }
    if (n->op == OP_CONCAT) {
      int ax = (int)n->a.i[0], j = 0;
      while (ix[ax] >= s[j]->sh[ax]) ix[ax] -= s[j++]->sh[ax];
      src = s[j];
    }
    r->v[o] = src->v[ravel(ix, src)];
  }
}

static void eval_matmul(const Ten *a, const Ten *b, Ten *r) {
  int nd = r->nd;
  int64_t m = a->sh[nd - 2], k = a->sh[nd - 1], nn = b->sh[nd - 1], batch = r->n / (m * nn);
  for (int64_t p = 0; p < batch; p++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < nn; j++) {
        double acc = 0;
        for (int64_t q = 0; q < k; q++) acc += a->v[(p * m + i) * k + q] * b->v[(p * k + q) * nn + j];
        r->v[(p * m + i) * nn + j] = acc;
      }
}

// Whole-row ops: rows along `axis` of x, outer x len x inner.
static void eval_row(const Node *n, Ten *const *s, Ten *r) {
  const Ten *x = s[0];
  int axis = (int)n->a.i[0];
  int64_t len = x->sh[axis], inner = 1, outer = 1;
  for (int d = 0; d < axis; d++) outer *= x->sh[d];
  for (int d = axis + 1; d < x->nd; d++) inner *= x->sh[d];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      double mx = -INFINITY, se = 0;
      for (int64_t k = 0; k < len; k++) mx = fmax(mx, x->v[(o * len + k) * inner + in]);
      for (int64_t k = 0; k < len; k++) se += exp(x->v[(o * len + k) * inner + in] - mx);
      double lse = mx + log(se);
      if (n->op == OP_LOGSUMEXP) { r->v[o * inner + in] = lse; continue; }
      if (n->op == OP_SCE) {  // axis is last, inner == 1
        int64_t lab = (int64_t)s[1]->v[o];
        r->v[o] = lse - x->v[o * len + lab];
        continue;
      }
      for (int64_t k = 0; k < len; k++) {
        int64_t i = (o * len + k) * inner + in;
        r->v[i] = n->op == OP_SOFTMAX ? exp(x->v[i] - lse) : x->v[i] - lse;
      }
    }
}

static void eval_node(Tst *t, const Node *n, Ten *const *s, Ten *r) {
  switch (ir_ops[n->op].kind) {
  case K_LEAF:
    if (n->op == OP_CONST) for (int64_t i = 0; i < r->n; i++) r->v[i] = ir_const_at(n, i);
    else if (n->op == OP_IOTA) {
      int64_t ix[IR_MAXDIM];
      for (int64_t i = 0; i < r->n; i++) { unravel(i, r, ix); r->v[i] = (double)ix[n->a.i[0]]; }
    } else if (n->op == OP_INPUT) {
      int j = 0;
      while (j < t->nin && t->in[j] != n) j++;
      if (j == t->nin) { fprintf(stderr, "eval: unbound input\n"); exit(2); }
      memcpy(r->v, t->val[j].v, sizeof(double) * r->n);
    } else { fprintf(stderr, "eval: no rule for %s\n", ir_ops[n->op].name); exit(2); }
    return;
  case K_EW:
    for (int64_t i = 0; i < r->n; i++)
      r->v[i] = ew(n, s[0]->v[i], n->nsrc > 1 ? s[1]->v[i] : 0, n->nsrc > 2 ? s[2]->v[i] : 0);
    return;
  case K_REDUCE: eval_reduce(n, s[0], r); return;
  case K_MOVE: eval_move(n, s, r); return;
  case K_MATMUL: eval_matmul(s[0], s[1], r); return;
  case K_ROW: eval_row(n, s, r); return;
  case K_SCATTER: fprintf(stderr, "eval: no rule for %s\n", ir_ops[n->op].name); exit(2);
  }
}

// The value of root under t's bindings (caller frees .v).
static Ten eval(Tst *t, Node *root) {
  int count;
  Node **order = ir_topo(t->c, &root, 1, &count);
  Ten *memo = calloc(t->c->nnodes + 1, sizeof *memo);
  if (!memo) abort();
  for (int k = 0; k < count; k++) {
    Node *n = order[k];
    Ten *s[64];
    for (int j = 0; j < n->nsrc && j < 64; j++) s[j] = &memo[n->src[j]->id];
    memo[n->id] = ten_new(n);
    eval_node(t, n, s, &memo[n->id]);
  }
  Ten r = memo[root->id];
  for (int k = 0; k < count; k++) if (order[k] != root) free(memo[order[k]->id].v);
  free(memo);
  free(order);
  return r;
}

// ---- test scaffolding ----------------------------------------------------------------

static double urand(Tst *t, double lo, double hi) {
  t->rng = t->rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(t->rng >> 11) / 9007199254740992.0;
}

static void reset(Tst *t) {
  for (int i = 0; i < t->nin; i++) free(t->val[i].v);
  t->nin = 0;
  ir_ctx_free(t->c);
  t->c = ir_ctx_new();
}

static void report(Tst *t, int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
  if (ok) t->pass++; else t->fail++;
}

static Node *input_v(Tst *t, DType dt, double lo, double hi, int integer, int nd, va_list ap) {
  Dim sh[IR_MAXDIM];
  for (int d = 0; d < nd; d++) sh[d] = dim_c(va_arg(ap, int));
  char name[16];
  snprintf(name, sizeof name, "x%d", t->nin);
  Node *n = ir_input(t->c, name, ROLE_INPUT, dt, nd, sh);
  Ten v = ten_new(n);
  for (int64_t i = 0; i < v.n; i++) v.v[i] = integer ? floor(urand(t, lo, hi)) : urand(t, lo, hi);
  t->in[t->nin] = n;
  t->val[t->nin++] = v;
  return n;
}

// A bound f64 input with uniform values in [lo, hi): in(t, lo, hi, ndim, dims...).
static Node *in(Tst *t, double lo, double hi, int nd, ...) {
  va_list ap;
  va_start(ap, nd);
  Node *n = input_v(t, DT_F64, lo, hi, 0, nd, ap);
  va_end(ap);
  return n;
}

static Node *in_int(Tst *t, DType dt, int hi, int nd, ...) {
  va_list ap;
  va_start(ap, nd);
  Node *n = input_v(t, dt, 0, hi, 1, nd, ap);
  va_end(ap);
  return n;
}

static Ten *value_of(Tst *t, Node *n) {
  for (int i = 0; i < t->nin; i++) if (t->in[i] == n) return &t->val[i];
  return NULL;
}

static Node *rand_const(Tst *t, const Node *like) {
  int64_t m;
  ir_numel_const(like, &m);
  double *v = malloc(sizeof(double) * (m + 1));
  if (!v) abort();
  for (int64_t i = 0; i < m; i++) v[i] = urand(t, -1, 1);
  Node *r = ir_const(t->c, DT_F64, like->ndim, like->shape, v);
  free(v);
  return r;
}

// sum(seed * eval(y))
static double objective(Tst *t, Node *y, Node *seed) {
  Ten v = eval(t, y), s = eval(t, seed);
  double acc = 0;
  for (int64_t i = 0; i < v.n; i++) acc += s.v[i] * v.v[i];
  free(v.v); free(s.v);
  return acc;
}

static int close_to(double a, double b, double tol) {
  return fabs(a - b) <= tol * fmax(1.0, fmax(fabs(a), fabs(b)));
}

// pass_grad(y, random seed) vs central differences for each wrt input. With
// order2, differentiate z = sum_i sum(r_i * grad_i) again and check that too.
static void check(Tst *t, const char *name, Node *y, Node **wrt, int nwrt, int order2) {
  Node *seed = rand_const(t, y), *out[8];
  if (pass_grad(t->c, y, seed, wrt, nwrt, out)) { report(t, 0, "%s: pass_grad: %s", name, t->c->err); return; }
  double worst = 0;
  int ok = 1;
  const double eps = 1e-6;
  for (int w = 0; w < nwrt; w++) {
    Ten g = eval(t, out[w]), *x = value_of(t, wrt[w]);
    ok &= g.n == x->n && out[w]->dtype == wrt[w]->dtype && ir_shape_eq(out[w], wrt[w]);
    for (int64_t i = 0; ok && i < x->n; i++) {
      double v0 = x->v[i];
      x->v[i] = v0 + eps; double fp = objective(t, y, seed);
      x->v[i] = v0 - eps; double fm = objective(t, y, seed);
      x->v[i] = v0;
      double fd = (fp - fm) / (2 * eps), err = fabs(fd - g.v[i]) / fmax(1.0, fabs(fd));
      if (err > worst) worst = err;
      if (!close_to(g.v[i], fd, 1e-6)) ok = 0;
    }
    free(g.v);
  }
  report(t, ok, "%s: gradient vs finite differences (max rel err %.1e)", name, worst);
  if (!order2 || !ok) return;
  Node *z = NULL;
  for (int w = 0; w < nwrt; w++) {
    Node *term = ir_reduce(t->c, OP_SUM, ir_binary(t->c, OP_MUL, rand_const(t, out[w]), out[w]), (1u << out[w]->ndim) - 1, 0);
    z = z ? ir_binary(t->c, OP_ADD, z, term) : term;
  }
  char name2[128];
  snprintf(name2, sizeof name2, "%s (2nd order)", name);
  check(t, name2, z, wrt, nwrt, 0);
}

// ---- the checks ----------------------------------------------------------------------

static void t_unary(Tst *t) {
  static const struct { Op op; double lo, hi; } u[] = {
    {OP_NEG, -2, 2}, {OP_EXP, -2, 2}, {OP_LOG, 0.2, 3}, {OP_LOG1P, -0.7, 2}, {OP_EXPM1, -2, 2},
    {OP_SQRT, 0.2, 3}, {OP_RSQRT, 0.2, 3}, {OP_ABS, -2, 2}, {OP_SIGN, -2, 2}, {OP_TANH, -2, 2},
    {OP_SIGMOID, -3, 3}, {OP_RELU, -2, 2}, {OP_SOFTPLUS, -3, 3}, {OP_ERF, -2, 2}, {OP_SIN, -3, 3}, {OP_COS, -3, 3},
    {OP_FLOOR, -3, 3}, {OP_CEIL, -3, 3}, {OP_ROUND, -3, 3},
  };
  for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) {
    reset(t);
    Node *x = in(t, u[k].lo, u[k].hi, 2, 3, 4);
    // times x, so even the zero-gradient ops are checked inside a live graph
    Node *y = ir_binary(t->c, OP_MUL, ir_unary(t->c, u[k].op, x), x);
    char name[64];
    snprintf(name, sizeof name, "%s(x)*x", ir_ops[u[k].op].name);
    check(t, name, y, &x, 1, 1);
  }
}

static void t_cast(Tst *t) {
  reset(t);
  Node *x = in(t, -2, 2, 2, 2, 3);
  Node *y = ir_binary(t->c, OP_MUL, ir_cast(t->c, ir_cast(t->c, x, DT_F32), DT_F64), x);
  check(t, "cast f64->f32->f64", y, &x, 1, 1);
  reset(t);
  x = in(t, -2, 2, 2, 2, 3);
  Node *i = ir_cast(t->c, ir_binary(t->c, OP_MUL, x, ir_scalar(t->c, DT_F64, 3.1)), DT_I32);
  y = ir_binary(t->c, OP_MUL, x, ir_cast(t->c, i, DT_F64));
  check(t, "x * cast(cast(3.1x, i32), f64): no gradient through ints", y, &x, 1, 1);
}

static void t_binary(Tst *t) {
  static const struct { Op op; double alo, ahi, blo, bhi; } b[] = {
    {OP_ADD, -2, 2, -2, 2}, {OP_SUB, -2, 2, -2, 2}, {OP_MUL, -2, 2, -2, 2}, {OP_DIV, -2, 2, 0.5, 2},
    {OP_POW, 0.5, 2, -1.5, 1.5}, {OP_MAXIMUM, -2, 2, -2, 2}, {OP_MINIMUM, -2, 2, -2, 2},
    {OP_FLOORDIV, 2.2, 2.8, 1, 1.05}, {OP_MOD, 2.2, 2.8, 1, 1.05}, {OP_MOD, -2.8, -2.2, -1.05, -1},   // a / b in (2, 3)
  };
  for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) {
    reset(t);
    Node *w[2] = {in(t, b[k].alo, b[k].ahi, 3, 3, 1, 4), in(t, b[k].blo, b[k].bhi, 2, 2, 1)};
    Node *y = ir_binary(t->c, b[k].op, w[0], w[1]);
    char name[64];
    snprintf(name, sizeof name, "%s([3,1,4], [2,1])", ir_ops[b[k].op].name);
    check(t, name, y, w, 2, 1);
  }
  reset(t);
  Node *x = in(t, -2, 2, 1, 5);
  check(t, "mul(x, x)", ir_binary(t->c, OP_MUL, x, x), &x, 1, 1);
  reset(t);
  x = in(t, -2, 2, 2, 2, 3);
  check(t, "pow(x, 3) negative base", ir_binary(t->c, OP_POW, x, ir_scalar(t->c, DT_F64, 3)), &x, 1, 1);
  reset(t);
  x = in(t, 0.5, 2, 2, 2, 3);
  check(t, "pow(x, -0.5)", ir_binary(t->c, OP_POW, x, ir_scalar(t->c, DT_F64, -0.5)), &x, 1, 1);
  reset(t);
  x = in(t, 0.5, 2, 1, 4);
  Node *e = in(t, -1, 1, 0);
  Node *w2[2] = {x, e};
  check(t, "pow(x[4], e[]) scalar exponent", ir_binary(t->c, OP_POW, x, e), w2, 2, 1);
}

static void t_where(Tst *t) {
  reset(t);
  Node *cv = in(t, -1, 1, 2, 3, 4), *a = in(t, -2, 2, 2, 3, 4), *b = in(t, -2, 2, 1, 4);
  Node *cond = ir_binary(t->c, OP_GT, cv, ir_scalar(t->c, DT_F64, 0));
  Node *w[3] = {a, b, cv};
  Node *y = ir_binary(t->c, OP_MUL, ir_where(t->c, cond, a, b), a);
  check(t, "where(c>0, a[3,4], b[4]) * a", y, w, 3, 1);
}

static void t_reduce(Tst *t) {
  static const struct { Op op; uint32_t axes; int keep; double lo, hi; } r[] = {
    {OP_SUM, 5, 0, -2, 2}, {OP_SUM, 2, 1, -2, 2}, {OP_SUM, 7, 0, -2, 2}, {OP_PROD, 2, 0, 0.5, 1.5},
    {OP_PROD, 5, 1, -1.5, -0.5}, {OP_RMAX, 5, 0, -2, 2}, {OP_RMAX, 1, 1, -2, 2}, {OP_RMIN, 2, 1, -2, 2},
    {OP_RMIN, 7, 0, -2, 2},
  };
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
    reset(t);
    Node *x = in(t, r[k].lo, r[k].hi, 3, 2, 3, 4);
    Node *y = ir_reduce(t->c, r[k].op, x, r[k].axes, r[k].keep);
    if (r[k].op != OP_SUM) y = ir_binary(t->c, OP_MUL, y, y);  // nonlinear on top
    char name[64];
    snprintf(name, sizeof name, "%s([2,3,4], axes=0x%x%s)", ir_ops[r[k].op].name, r[k].axes, r[k].keep ? ", keepdims" : "");
    check(t, name, y, &x, 1, 1);
  }
}

static void t_move(Tst *t) {
  IrCtx *c;
  reset(t); c = t->c;
  Node *x = in(t, -2, 2, 3, 2, 3, 4);
  Dim rs[2] = {dim_c(4), dim_c(6)};
  check(t, "reshape [2,3,4] -> [4,6] (sin)", ir_unary(c, OP_SIN, ir_reshape(c, x, 2, rs)), &x, 1, 1);

  reset(t); c = t->c;
  x = in(t, -2, 2, 3, 2, 3, 4);
  int perm[3] = {2, 0, 1};
  Node *tr = ir_transpose(c, x, perm);
  Node *y = ir_binary(c, OP_MUL, tr, rand_const(t, tr));
  check(t, "transpose perm=[2,0,1] (times const)", ir_unary(c, OP_TANH, y), &x, 1, 1);

  reset(t); c = t->c;
  x = in(t, -2, 2, 2, 3, 1);
  Dim bs[3] = {dim_c(2), dim_c(3), dim_c(5)};
  Node *bc = ir_broadcast(c, x, 3, bs);
  check(t, "broadcast [3,1] -> [2,3,5]", ir_binary(c, OP_MUL, bc, rand_const(t, bc)), &x, 1, 1);

  reset(t); c = t->c;
  x = in(t, -2, 2, 3, 3, 4, 5);
  int64_t st[3] = {1, 0, 4}, cn[3] = {2, -1, 3}, sp[3] = {1, 1, -2};
  check(t, "slice [3,4,5] start=[1,0,4] count=[2,-1,3] step=[1,1,-2]",
        ir_unary(c, OP_EXP, ir_slice(c, x, st, cn, sp)), &x, 1, 1);

  reset(t); c = t->c;
  x = in(t, -2, 2, 2, 2, 3);
  Dim ps[2] = {dim_c(5), dim_c(7)};
  int64_t pst[2] = {1, 0}, psp[2] = {2, 3};
  Node *pd = ir_pad(c, x, ps, pst, psp);
  check(t, "pad [2,3] -> [5,7] start=[1,0] step=[2,3]",
        ir_binary(c, OP_MUL, ir_unary(c, OP_EXP, pd), rand_const(t, pd)), &x, 1, 1);

  reset(t); c = t->c;
  Node *cs[3] = {in(t, -2, 2, 2, 2, 1), in(t, -2, 2, 2, 2, 3), in(t, -2, 2, 2, 2, 2)};
  Node *cat = ir_concat(c, cs, 3, 1);
  check(t, "concat [2,1],[2,3],[2,2] axis=1", ir_binary(c, OP_MUL, cat, cat), cs, 3, 1);

  reset(t); c = t->c;
  Node *cs0[2] = {in(t, -2, 2, 2, 1, 3), in(t, -2, 2, 2, 2, 3)};
  Node *cat0 = ir_concat(c, cs0, 2, 0);
  check(t, "concat [1,3],[2,3] axis=0 (log_softmax)", ir_row(c, OP_LOG_SOFTMAX, cat0, 0), cs0, 2, 1);
}

static void t_matmul(Tst *t) {
  static const int sh[][2][5] = {  // {ndim, dims...} for a and b
    {{4, 2, 1, 3, 4}, {3, 5, 4, 2}}, {{2, 3, 4}, {1, 4}}, {{1, 4}, {2, 4, 5}}, {{1, 4}, {1, 4}},
    {{3, 2, 3, 4}, {2, 4, 5}},
  };
  for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
    reset(t);
    const int *p = sh[k][0], *q = sh[k][1];
    Node *a = p[0] == 4 ? in(t, -1, 1, 4, p[1], p[2], p[3], p[4])
            : p[0] == 3 ? in(t, -1, 1, 3, p[1], p[2], p[3])
            : p[0] == 2 ? in(t, -1, 1, 2, p[1], p[2]) : in(t, -1, 1, 1, p[1]);
    Node *b = q[0] == 3 ? in(t, -1, 1, 3, q[1], q[2], q[3])
            : q[0] == 2 ? in(t, -1, 1, 2, q[1], q[2]) : in(t, -1, 1, 1, q[1]);
    Node *w[2] = {a, b}, *y = ir_matmul(t->c, a, b);
    char name[64];
    snprintf(name, sizeof name, "matmul %d-d @ %d-d (case %zu)", p[0], q[0], k);
    check(t, name, ir_unary(t->c, OP_TANH, y), w, 2, 1);
  }
}

static void t_row(Tst *t) {
  IrCtx *c;
  reset(t); c = t->c;
  Node *x = in(t, -2, 2, 2, 3, 4);
  check(t, "softmax [3,4] axis=0", ir_row(c, OP_SOFTMAX, x, 0), &x, 1, 1);
  reset(t); c = t->c;
  x = in(t, -2, 2, 3, 2, 3, 4);
  check(t, "softmax [2,3,4] axis=1", ir_row(c, OP_SOFTMAX, x, 1), &x, 1, 1);
  reset(t); c = t->c;
  x = in(t, -2, 2, 3, 2, 3, 4);
  check(t, "log_softmax [2,3,4] axis=1", ir_row(c, OP_LOG_SOFTMAX, x, 1), &x, 1, 1);
  reset(t); c = t->c;
  x = in(t, -2, 2, 2, 3, 4);
  check(t, "log_softmax [3,4] axis=-1", ir_row(c, OP_LOG_SOFTMAX, x, -1), &x, 1, 1);
  reset(t); c = t->c;
  x = in(t, -2, 2, 2, 3, 4);
  check(t, "logsumexp [3,4] axis=0", ir_row(c, OP_LOGSUMEXP, x, 0), &x, 1, 1);
  reset(t); c = t->c;
  x = in(t, -2, 2, 3, 2, 3, 4);
  check(t, "logsumexp [2,3,4] axis=-1", ir_row(c, OP_LOGSUMEXP, x, -1), &x, 1, 1);
  reset(t); c = t->c;
  x = in(t, -2, 2, 3, 2, 3, 5);
  Node *lab = in_int(t, DT_I32, 5, 2, 2, 3);
  check(t, "sce logits [2,3,5] labels i32[2,3]", ir_sce(c, x, lab), &x, 1, 1);
  reset(t); c = t->c;
  x = in(t, -2, 2, 1, 5);
  lab = in_int(t, DT_I64, 5, 0);
  check(t, "sce logits [5] labels i64[]", ir_sce(c, x, lab), &x, 1, 1);
}

// mean(sce(relu(x @ W1 + b1) @ W2, labels)) w.r.t. W1, b1, W2
static void t_mlp(Tst *t) {
  reset(t);
  IrCtx *c = t->c;
  Node *x = in(t, -1, 1, 2, 4, 3), *w1 = in(t, -1, 1, 2, 3, 5), *b1 = in(t, -1, 1, 1, 5);
  Node *w2 = in(t, -1, 1, 2, 5, 2), *lab = in_int(t, DT_I64, 2, 1, 4);
  Node *h = ir_unary(c, OP_RELU, ir_binary(c, OP_ADD, ir_matmul(c, x, w1), b1));
  Node *loss = ir_reduce(c, OP_SUM, ir_sce(c, ir_matmul(c, h, w2), lab), 1, 0);
  loss = ir_binary(c, OP_DIV, loss, ir_scalar(c, DT_F64, 4));
  Node *w[4] = {w1, b1, w2, x};
  check(t, "mlp: mean sce(relu(x@W1+b1)@W2)", loss, w, 4, 1);
}

static double at(Tst *t, Node *n, int64_t i) {
  Ten v = eval(t, n);
  double r = v.v[i];
  free(v.v);
  return r;
}

static void t_higher(Tst *t) {
  reset(t);
  IrCtx *c = t->c;
  Node *x = in(t, -2, 2, 1, 5), *g1, *g2;
  Node *y = ir_reduce(c, OP_SUM, ir_binary(c, OP_POW, x, ir_scalar(c, DT_F64, 3)), 1, 0);
  int ok = !pass_grad(c, y, NULL, &x, 1, &g1) && !pass_grad(c, g1, NULL, &x, 1, &g2);
  for (int64_t i = 0; ok && i < 5; i++) {
    double xv = value_of(t, x)->v[i];
    ok = close_to(at(t, g1, i), 3 * xv * xv, 1e-12) && close_to(at(t, g2, i), 6 * xv, 1e-12);
  }
  report(t, ok, "d/dx sum(x^3) = 3x^2, d2 = 6x");

  reset(t); c = t->c;
  x = in(t, -2, 2, 1, 6);
  y = ir_reduce(c, OP_SUM, ir_binary(c, OP_MUL, ir_unary(c, OP_TANH, x), x), 1, 0);
  ok = !pass_grad(c, y, NULL, &x, 1, &g1) && !pass_grad(c, g1, NULL, &x, 1, &g2);
  for (int64_t i = 0; ok && i < 6; i++) {  // diagonal Hessian: 2(1-t^2) - 2x t (1-t^2)
    double xv = value_of(t, x)->v[i], th = tanh(xv), s = 1 - th * th;
    ok = close_to(at(t, g1, i), th + xv * s, 1e-12) && close_to(at(t, g2, i), 2 * s - 2 * xv * th * s, 1e-12);
  }
  report(t, ok, "d2/dx2 sum(tanh(x)*x) = 2(1-t^2) - 2xt(1-t^2)");
  check(t, "grad of sum(tanh(x)*x) as y", g1, &x, 1, 1);

  reset(t); c = t->c;  // third order: d3/dx3 sum(x^4) = 24x
  x = in(t, -2, 2, 1, 3);
  Node *g3;
  y = ir_reduce(c, OP_SUM, ir_binary(c, OP_POW, x, ir_scalar(c, DT_F64, 4)), 1, 0);
  ok = !pass_grad(c, y, NULL, &x, 1, &g1) && !pass_grad(c, g1, NULL, &x, 1, &g2) && !pass_grad(c, g2, NULL, &x, 1, &g3);
  for (int64_t i = 0; ok && i < 3; i++) ok = close_to(at(t, g3, i), 24 * value_of(t, x)->v[i], 1e-12);
  report(t, ok, "d3/dx3 sum(x^4) = 24x");
}

static void t_conventions(Tst *t) {
  static const double xv[4] = {1, 3, 3, 2};
  reset(t);
  IrCtx *c = t->c;
  Node *g, *x, *xi = in(t, 0, 1, 1, 4);
  memcpy(value_of(t, xi)->v, xv, sizeof xv);  // rebind to the tied values
  int ok = !pass_grad(c, ir_reduce(c, OP_RMAX, xi, 1, 0), NULL, &xi, 1, &g);
  ok = ok && at(t, g, 0) == 0 && at(t, g, 1) == 0.5 && at(t, g, 2) == 0.5 && at(t, g, 3) == 0;
  report(t, ok, "max([1,3,3,2]) ties share: [0, .5, .5, 0]");

  reset(t); c = t->c;
  Node *a = in(t, 1, 1, 1, 3), *b = in(t, 1, 1, 1, 3), *w[2] = {a, b}, *gg[2];
  ok = !pass_grad(c, ir_binary(c, OP_MAXIMUM, a, b), NULL, w, 2, gg);
  ok = ok && at(t, gg[0], 1) == 1 && at(t, gg[1], 1) == 0;
  report(t, ok, "maximum(a, b) at a == b: all to a");
  ok = !pass_grad(c, ir_binary(c, OP_MINIMUM, a, b), NULL, w, 2, gg);
  ok = ok && at(t, gg[0], 1) == 1 && at(t, gg[1], 1) == 0;
  report(t, ok, "minimum(a, b) at a == b: all to a");

  reset(t); c = t->c;
  x = in(t, 0, 0, 1, 2);
  ok = !pass_grad(c, ir_unary(c, OP_RELU, x), NULL, &x, 1, &g) && at(t, g, 0) == 0;
  ok = ok && !pass_grad(c, ir_unary(c, OP_ABS, x), NULL, &x, 1, &g) && at(t, g, 0) == 0;
  report(t, ok, "relu'(0) = abs'(0) = 0");

  reset(t); c = t->c;  // pow(a, b) with a <= 0: d/db is 0, not NaN
  a = in(t, -1, 0, 1, 3); b = in(t, 2, 2, 1, 3);
  w[0] = a; w[1] = b;
  ok = !pass_grad(c, ir_binary(c, OP_POW, a, b), NULL, w, 2, gg);
  for (int64_t i = 0; ok && i < 3; i++) ok = at(t, gg[1], i) == 0 && isfinite(at(t, gg[0], i));
  report(t, ok, "pow(a<=0, b): d/db = 0");
}

static void t_structure(Tst *t) {
  reset(t);
  IrCtx *c = t->c;
  Node *x = in(t, -1, 1, 2, 3, 4), *z = in(t, -1, 1, 1, 2), *g[2];
  Node *e = ir_unary(c, OP_EXP, x), *w[2] = {x, z};
  int ok = !pass_grad(c, ir_reduce(c, OP_SUM, e, 3, 0), NULL, w, 2, g);
  report(t, ok && g[0] == e, "d/dx sum(exp(x)) is exp(x) itself (no ones chains)");
  double v;
  ok = ok && ir_is_scalar_const(g[1], &v) && v == 0 && ir_shape_eq(g[1], z) && g[1]->dtype == DT_F64;
  report(t, ok, "unrelated wrt: zeros of its shape");

  reset(t); c = t->c;
  Node *xi = in_int(t, DT_I32, 4, 1, 3), *xf = in(t, -1, 1, 1, 3);
  Node *y = ir_binary(c, OP_MUL, xf, xi);
  Node *wi[2] = {xf, xi};
  ok = pass_grad(c, y, NULL, wi, 2, g) == -1 && strstr(c->err, "cannot differentiate with respect to an integer tensor");
  report(t, ok, "grad w.r.t. an i32 input is an error: \"%s\"", c->err);

  reset(t); c = t->c;  // f32 graphs keep f32 gradients
  Dim s3[1] = {dim_c(3)};
  Node *x32 = ir_input(c, "x", ROLE_INPUT, DT_F32, 1, s3);
  y = ir_reduce(c, OP_SUM, ir_unary(c, OP_TANH, ir_binary(c, OP_MUL, x32, x32)), 1, 0);
  ok = !pass_grad(c, y, NULL, &x32, 1, g) && g[0]->dtype == DT_F32;
  Node *h;
  ok = ok && !pass_grad(c, ir_reduce(c, OP_SUM, g[0], 1, 0), NULL, &x32, 1, &h) && h->dtype == DT_F32;
  report(t, ok, "f32 graph: f32 gradients, first and second order");

  reset(t); c = t->c;  // symbolic batch: shapes only
  int B = ir_sym(c, "B");
  Dim sx[2] = {{1, B}, dim_c(3)}, sb[1] = {dim_c(3)};
  Node *xs = ir_input(c, "x", ROLE_INPUT, DT_F64, 2, sx), *bs = ir_input(c, "b", ROLE_INPUT, DT_F64, 1, sb);
  Node *ws[2] = {xs, bs};
  y = ir_reduce(c, OP_SUM, ir_row(c, OP_SOFTMAX, ir_binary(c, OP_ADD, xs, bs), 1), 3, 0);
  ok = !pass_grad(c, y, NULL, ws, 2, g) && ir_shape_eq(g[0], xs) && ir_shape_eq(g[1], bs);
  report(t, ok, "symbolic batch [B,3] + [3]: gradient shapes [B,3] and [3]%s%s", ok ? "" : ": ", ok ? "" : c->err);

  reset(t); c = t->c;  // a non-scalar y with the default seed of ones
  x = in(t, -1, 1, 1, 3);
  ok = !pass_grad(c, ir_binary(c, OP_MUL, x, ir_scalar(c, DT_F64, 2)), NULL, &x, 1, g);
  ok = ok && at(t, g[0], 0) == 2 && at(t, g[0], 2) == 2;
  report(t, ok, "seed NULL on a [3] output means ones");

  reset(t); c = t->c;  // y is wrt itself: the seed comes back
  x = in(t, -1, 1, 1, 3);
  Node *sd = rand_const(t, x);
  ok = !pass_grad(c, x, sd, &x, 1, g) && g[0] == sd;
  report(t, ok, "d(sum(seed*x))/dx = seed");

  reset(t); c = t->c;  // wrt an intermediate node: d sum(h*h)/dh = 2h, nothing past h
  x = in(t, -1, 1, 1, 4);
  Node *hm = ir_unary(c, OP_SIN, x), *wx[2] = {hm, x};
  y = ir_reduce(c, OP_SUM, ir_binary(c, OP_MUL, hm, hm), 1, 0);
  ok = !pass_grad(c, y, NULL, wx, 2, g);
  for (int64_t i = 0; ok && i < 4; i++) {
    double xv = value_of(t, x)->v[i];
    ok = close_to(at(t, g[0], i), 2 * sin(xv), 1e-12) && close_to(at(t, g[1], i), 2 * sin(xv) * cos(xv), 1e-12);
  }
  report(t, ok, "wrt an intermediate h = sin(x) and x: 2h and 2h cos(x)");

  reset(t); c = t->c;  // a deep chain: nothing in pass_grad may recurse per node
  x = in(t, -1, 1, 1, 2);
  y = x;
  for (int k = 0; k < 20000; k++)
    y = ir_binary(c, OP_ADD, y, ir_binary(c, OP_MUL, ir_scalar(c, DT_F64, 1e-4), ir_unary(c, OP_SIN, y)));
  check(t, "a chain of 20000 y += 1e-4*sin(y)", y, &x, 1, 0);
}

int main(void) {
  Tst t = {0};
  t.c = ir_ctx_new();
  t.rng = 12345;
  t_unary(&t);
  t_cast(&t);
  t_binary(&t);
  t_where(&t);
  t_reduce(&t);
  t_move(&t);
  t_matmul(&t);
  t_row(&t);
  t_mlp(&t);
  t_higher(&t);
  t_conventions(&t);
  t_structure(&t);
  reset(&t);
  ir_ctx_free(t.c);
  printf("%d passed, %d failed\n", t.pass, t.fail);
  return t.fail != 0;
}
