// Reverse-mode autodiff producing IR: one rule per op (grad_<NAME>, tied to
// ops.def by an X-macro), applied to the nodes between y and wrt in reverse
// topological order. Needs: a graph built with the ir_* builders (elementwise
// operands already broadcast). Keeps: y's graph; adds the gradient nodes.
//
// Conventions at the non-smooth points:
//   abs, relu         0 at x == 0 (sign(0) == 0; relu passes where x > 0)
//   sign, floor, ceil, round, floordiv   no gradient (zero almost everywhere)
//   mod               a - floordiv(a, b) * b: d/da = 1, d/db = -floordiv(a, b) (PyTorch's)
//   maximum/minimum   ties go to the first operand (a >= b, resp. a <= b)
//   max/min reduce    ties share equally: adj / (number of maxima)
//   prod reduce       the product of the others, exact also at zeros (no division by zero)
//   pow               d/db is 0 where a <= 0 (log guarded, as PyTorch does)
//   cast              flows back to float sources only; ints get none
#include "passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { IrCtx *c; } GradCtx;

// ---- NULL-propagating builder shorthands -----------------------------------------
// A builder failure (NULL, c->err set) flows through the rule; the driver sees it.

static Node *cst(GradCtx *g, Node *like, double v) { return like ? ir_scalar(g->c, like->dtype, v) : NULL; }

static int is_const(Node *n, double v) {
  double x;
  return n && ir_is_scalar_const(n, &x) && x == v;
}

// Broadcasting `a` against `b` leaves b's shape unchanged.
static int fits_in(Node *a, Node *b) {
  if (a->dtype != b->dtype || a->ndim > b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++) {
    Dim x = a->shape[d], y = b->shape[d + b->ndim - a->ndim];
    if (!dim_is(x, 1) && !dim_eq(x, y)) return 0;
  }
  return 1;
}

static Node *bin(GradCtx *g, Op op, Node *a, Node *b) {
  if (!a || !b) return NULL;
  // ones * b is b: seeds of ones would otherwise leave mul-by-one chains
  if (op == OP_MUL && is_const(a, 1) && fits_in(a, b)) return b;
  if (op == OP_MUL && is_const(b, 1) && fits_in(b, a)) return a;
  return ir_binary(g->c, op, a, b);
}

static Node *add(GradCtx *g, Node *a, Node *b) { return bin(g, OP_ADD, a, b); }
static Node *sub(GradCtx *g, Node *a, Node *b) { return bin(g, OP_SUB, a, b); }
static Node *mul(GradCtx *g, Node *a, Node *b) { return bin(g, OP_MUL, a, b); }
static Node *dvd(GradCtx *g, Node *a, Node *b) { return bin(g, OP_DIV, a, b); }
static Node *un(GradCtx *g, Op op, Node *a) { return a ? ir_unary(g->c, op, a) : NULL; }

static Node *where(GradCtx *g, Node *cond, Node *a, Node *b) {
  return cond && a && b ? ir_where(g->c, cond, a, b) : NULL;
}

// where(cond, adj, 0) and where(cond, 0, adj): route adj by a mask.
static Node *keep_if(GradCtx *g, Node *cond, Node *adj) { return where(g, cond, adj, cst(g, adj, 0)); }
static Node *keep_unless(GradCtx *g, Node *cond, Node *adj) { return where(g, cond, cst(g, adj, 0), adj); }

static Node *sum_axes(GradCtx *g, Node *a, uint32_t axes) {
  return a ? ir_reduce(g->c, OP_SUM, a, axes, 1) : NULL;
}

// Reshape a reduction's result (or its adjoint) to the keepdims form over src.
static Node *keepdims(GradCtx *g, Node *a, Node *src, uint32_t axes) {
  Dim s[IR_MAXDIM];
  for (int d = 0; d < src->ndim; d++) s[d] = (axes >> d & 1) ? dim_c(1) : src->shape[d];
  return a ? ir_reshape(g->c, a, src->ndim, s) : NULL;
}

static Node *bcast_to(GradCtx *g, Node *a, Node *like) {
  return a ? ir_broadcast(g->c, a, like->ndim, like->shape) : NULL;
}

// ---- ops without a gradient: leaves, comparisons, logic, argmax ---------------------
#define NO_GRAD(name) \
  static Node *grad_##name(GradCtx *g, Node *n, Node *adj, int i) { return NULL; }
NO_GRAD(CONST) NO_GRAD(INPUT) NO_GRAD(IOTA) NO_GRAD(RNG) NO_GRAD(DIMV)
NO_GRAD(ISNAN) NO_GRAD(ISINF) NO_GRAD(ISFINITE) NO_GRAD(NOT) NO_GRAD(LT) NO_GRAD(LE) NO_GRAD(GT) NO_GRAD(GE) NO_GRAD(EQ) NO_GRAD(NE)
NO_GRAD(AND) NO_GRAD(OR) NO_GRAD(ARGMAX) NO_GRAD(ARGMIN)
// Piecewise constant: zero almost everywhere.
NO_GRAD(SIGN) NO_GRAD(FLOOR) NO_GRAD(CEIL) NO_GRAD(ROUND) NO_GRAD(FLOORDIV)
#undef NO_GRAD

// ---- unary elementwise: y is n, x is n->src[0] --------------------------------------
static Node *grad_NEG(GradCtx *g, Node *n, Node *adj, int i) { return un(g, OP_NEG, adj); }
static Node *grad_EXP(GradCtx *g, Node *n, Node *adj, int i) { return mul(g, adj, n); }
static Node *grad_LOG(GradCtx *g, Node *n, Node *adj, int i) { return dvd(g, adj, n->src[0]); }
static Node *grad_LOG1P(GradCtx *g, Node *n, Node *adj, int i) {
  return dvd(g, adj, add(g, n->src[0], cst(g, n, 1)));
}
static Node *grad_EXPM1(GradCtx *g, Node *n, Node *adj, int i) { return mul(g, adj, add(g, n, cst(g, n, 1))); }
static Node *grad_SQRT(GradCtx *g, Node *n, Node *adj, int i) { return dvd(g, adj, mul(g, cst(g, n, 2), n)); }
// d x^-1/2 = -1/2 x^-3/2 = -0.5 * y / x
static Node *grad_RSQRT(GradCtx *g, Node *n, Node *adj, int i) {
  return mul(g, adj, mul(g, cst(g, n, -0.5), dvd(g, n, n->src[0])));
}
static Node *grad_ABS(GradCtx *g, Node *n, Node *adj, int i) {
  return mul(g, adj, un(g, OP_SIGN, n->src[0]));  // sign(0) = 0
}
static Node *grad_TANH(GradCtx *g, Node *n, Node *adj, int i) {
  return mul(g, adj, sub(g, cst(g, n, 1), mul(g, n, n)));
}
static Node *grad_SIGMOID(GradCtx *g, Node *n, Node *adj, int i) {
  return mul(g, adj, mul(g, n, sub(g, cst(g, n, 1), n)));
}
static Node *grad_RELU(GradCtx *g, Node *n, Node *adj, int i) {
  return keep_if(g, bin(g, OP_GT, n->src[0], cst(g, n->src[0], 0)), adj);
}
static Node *grad_SOFTPLUS(GradCtx *g, Node *n, Node *adj, int i) {
  return mul(g, adj, un(g, OP_SIGMOID, n->src[0]));
}
static Node *grad_ERF(GradCtx *g, Node *n, Node *adj, int i) {   // 2/sqrt(pi) exp(-x^2)
  Node *x = n->src[0];
  return mul(g, adj, mul(g, cst(g, x, 1.1283791670955126), un(g, OP_EXP, un(g, OP_NEG, mul(g, x, x)))));
}
static Node *grad_SIN(GradCtx *g, Node *n, Node *adj, int i) { return mul(g, adj, un(g, OP_COS, n->src[0])); }
static Node *grad_COS(GradCtx *g, Node *n, Node *adj, int i) {
  return un(g, OP_NEG, mul(g, adj, un(g, OP_SIN, n->src[0])));
}
// The driver only asks for float sources, so this is a float-to-float cast.
static Node *grad_CAST(GradCtx *g, Node *n, Node *adj, int i) { return ir_cast(g->c, adj, n->src[0]->dtype); }

// ---- binary elementwise: operands have n's shape (the builders broadcast) -----------
static Node *grad_ADD(GradCtx *g, Node *n, Node *adj, int i) { return adj; }
static Node *grad_SUB(GradCtx *g, Node *n, Node *adj, int i) { return i == 0 ? adj : un(g, OP_NEG, adj); }
static Node *grad_MUL(GradCtx *g, Node *n, Node *adj, int i) { return mul(g, adj, n->src[1 - i]); }
// d(a/b)/db = -a/b^2 = -y/b
static Node *grad_DIV(GradCtx *g, Node *n, Node *adj, int i) {
  return i == 0 ? dvd(g, adj, n->src[1]) : un(g, OP_NEG, dvd(g, mul(g, adj, n), n->src[1]));
}

static Node *grad_MOD(GradCtx *g, Node *n, Node *adj, int i) {
  return i == 0 ? adj : un(g, OP_NEG, mul(g, adj, bin(g, OP_FLOORDIV, n->src[0], n->src[1])));
}

// d/da = b * a^(b-1), folded when b is a constant; d/db = y * log(a) where a > 0,
// else 0. log sees where(a > 0, a, 1) so its own gradient never meets a <= 0.
static Node *grad_POW(GradCtx *g, Node *n, Node *adj, int i) {
  Node *a = n->src[0], *b = n->src[1];
  if (i == 1) {
    Node *pos = bin(g, OP_GT, a, cst(g, a, 0));
    Node *lg = un(g, OP_LOG, where(g, pos, a, cst(g, a, 1)));
    return mul(g, adj, keep_if(g, pos, mul(g, n, lg)));
  }
  double k;
  if (!ir_is_scalar_const(b, &k)) return mul(g, adj, mul(g, b, bin(g, OP_POW, a, sub(g, b, cst(g, b, 1)))));
  if (k == 0) return NULL;
  Node *p = k == 1 ? NULL : k == 2 ? a : bin(g, OP_POW, a, cst(g, a, k - 1));
  return mul(g, adj, p ? mul(g, cst(g, n, k), p) : cst(g, n, k));
}

static Node *grad_MAXIMUM(GradCtx *g, Node *n, Node *adj, int i) {
  Node *m = bin(g, OP_GE, n->src[0], n->src[1]);  // ties: the first operand
  return i == 0 ? keep_if(g, m, adj) : keep_unless(g, m, adj);
}
static Node *grad_MINIMUM(GradCtx *g, Node *n, Node *adj, int i) {
  Node *m = bin(g, OP_LE, n->src[0], n->src[1]);
  return i == 0 ? keep_if(g, m, adj) : keep_unless(g, m, adj);
}

static Node *grad_WHERE(GradCtx *g, Node *n, Node *adj, int i) {
  if (i == 0) return NULL;
  return i == 1 ? keep_if(g, n->src[0], adj) : keep_unless(g, n->src[0], adj);
}

// ---- reductions: n->a.i[0] the axis mask, a.i[1] keepdims ------------------------------
static Node *grad_SUM(GradCtx *g, Node *n, Node *adj, int i) {
  Node *x = n->src[0];
  return bcast_to(g, keepdims(g, adj, x, (uint32_t)n->a.i[0]), x);
}
// d prod / d x_i is the product of the others, exact also where x has zeros:
// with no zero it is p/x_i; with one zero, p' (the product of the nonzeros)
// at that zero and 0 elsewhere; with more, 0. The division reads a safe x
// (1 at zeros) so no inf ever meets a masked zero, at any order.
static Node *grad_PROD(GradCtx *g, Node *n, Node *adj, int i) {
  Node *x = n->src[0];
  uint32_t ax = (uint32_t)n->a.i[0];
  IrCtx *c = g->c;
  Node *zero = ir_binary(c, OP_EQ, x, cst(g, x, 0));
  Node *safe = where(g, zero, cst(g, x, 1), x);
  Node *nzeros = sum_axes(g, ir_cast(c, zero, x->dtype), ax);
  Node *pnz = ir_reduce(c, OP_PROD, safe, ax, 1);
  Node *none = ir_binary(c, OP_EQ, nzeros, cst(g, nzeros, 0));
  Node *one = ir_binary(c, OP_AND, ir_binary(c, OP_EQ, nzeros, cst(g, nzeros, 1)), zero);
  Node *others = where(g, none, dvd(g, pnz, safe), where(g, one, bcast_to(g, pnz, x), cst(g, x, 0)));
  return mul(g, keepdims(g, adj, x, ax), others);
}
// The adjoint goes to the extreme positions, shared equally among ties. The
// routing mask is x >= max (x <= min), which is x == max for every x the
// reduction saw (both false at NaN), but a node of its own: with one shared
// mask, fusion would store it as bytes in a kernel of its own; two masks are
// recomputed where they are read (a pooling gradient is then a count, a
// division and one kernel that routes and, through col2im, scatters back).
static Node *grad_extreme(GradCtx *g, Node *n, Node *adj) {
  Node *x = n->src[0];
  uint32_t ax = (uint32_t)n->a.i[0];
  Node *e = keepdims(g, n, x, ax);
  Node *tie = bin(g, OP_EQ, x, e);
  Node *cnt = sum_axes(g, tie ? ir_cast(g->c, tie, x->dtype) : NULL, ax);
  Node *m = bin(g, n->op == OP_RMAX ? OP_GE : OP_LE, x, e);
  return keep_if(g, m, dvd(g, keepdims(g, adj, x, ax), cnt));
}
static Node *grad_RMAX(GradCtx *g, Node *n, Node *adj, int i) { return grad_extreme(g, n, adj); }
static Node *grad_RMIN(GradCtx *g, Node *n, Node *adj, int i) { return grad_extreme(g, n, adj); }

// ---- movement ---------------------------------------------------------------------------
static Node *grad_RESHAPE(GradCtx *g, Node *n, Node *adj, int i) {
  return ir_reshape(g->c, adj, n->src[0]->ndim, n->src[0]->shape);
}

static Node *grad_TRANSPOSE(GradCtx *g, Node *n, Node *adj, int i) {
  int inv[IR_MAXDIM];
  for (int d = 0; d < n->ndim; d++) inv[n->a.i[d]] = d;
  return ir_transpose(g->c, adj, inv);
}

// BROADCAST keeps the rank: sum the axes that were stretched from 1.
static Node *grad_BROADCAST(GradCtx *g, Node *n, Node *adj, int i) {
  Node *x = n->src[0];
  uint32_t ax = 0;
  for (int d = 0; d < n->ndim; d++)
    if (!dim_eq(x->shape[d], n->shape[d])) ax |= 1u << d;
  Node *s = ir_reduce(g->c, OP_SUM, adj, ax, 1);
  return s ? ir_reshape(g->c, s, x->ndim, x->shape) : NULL;
}

// SLICE and PAD are each other's adjoints, with the same starts and steps.
static Node *grad_SLICE(GradCtx *g, Node *n, Node *adj, int i) {
  return ir_pad(g->c, adj, n->src[0]->shape, n->a.i, n->a.i + IR_MAXDIM);
}
static Node *grad_PAD(GradCtx *g, Node *n, Node *adj, int i) {
  Node *x = n->src[0];
  int64_t count[IR_MAXDIM];
  for (int d = 0; d < n->ndim; d++) {
    int whole = n->a.i[d] == 0 && n->a.i[IR_MAXDIM + d] == 1 && dim_eq(x->shape[d], n->shape[d]);
    count[d] = whole ? -1 : x->shape[d].k;  // -1 also covers symbolic axes left alone
  }
  return ir_slice(g->c, adj, n->a.i, count, n->a.i + IR_MAXDIM);
}

static Node *grad_CONCAT(GradCtx *g, Node *n, Node *adj, int i) {
  int axis = (int)n->a.i[0];
  int64_t start[IR_MAXDIM] = {0}, count[IR_MAXDIM], step[IR_MAXDIM];
  for (int d = 0; d < n->ndim; d++) { count[d] = -1; step[d] = 1; }
  for (int j = 0; j < i; j++) start[axis] += n->src[j]->shape[axis].k;
  count[axis] = n->src[i]->shape[axis].k;
  return ir_slice(g->c, adj, start, count, step);
}

// IM2COL and COL2IM are each other's adjoints: a window position's gradient
// is summed back into the pixel it read (positions in the padding read none).
static Node *grad_IM2COL(GradCtx *g, Node *n, Node *adj, int i) {
  Node *x = n->src[0];
  return ir_col2im(g->c, adj, n->a.i, x->shape[2].k, x->shape[3].k);
}
static Node *grad_COL2IM(GradCtx *g, Node *n, Node *adj, int i) {
  Node *cols = n->src[0];
  int64_t win[9], pad_end[2];
  memcpy(win, n->a.i, sizeof win);
  win[8] = 0;
  for (int d = 0; d < 2; d++) {
    // The end padding that gives the columns' output size back.
    int64_t span = win[6 + d] * (win[d] - 1) + 1;
    int64_t e = (cols->shape[1 + d].k - 1) * win[2 + d] + span - n->shape[2 + d].k - win[4 + d];
    pad_end[d] = e > 0 ? e : 0;
  }
  return ir_im2col(g->c, adj, win, pad_end);
}

// GATHER and SCATTER_ADD: rows picked out, rows summed back (repeated indices add).
static Node *grad_GATHER(GradCtx *g, Node *n, Node *adj, int i) {
  return i == 0 ? ir_scatter_add(g->c, adj, n->src[1], n->src[0]->shape[0]) : NULL;
}
static Node *grad_SCATTER_ADD(GradCtx *g, Node *n, Node *adj, int i) {
  return i == 0 ? ir_gather(g->c, adj, n->src[1]) : NULL;
}

// ---- matmul: batch axes already broadcast to n's (BROADCAST's rule sums them back) ---
static Node *swap_last(GradCtx *g, Node *a) {
  int p[IR_MAXDIM];
  for (int d = 0; d < a->ndim; d++) p[d] = d;
  p[a->ndim - 1] = a->ndim - 2;
  p[a->ndim - 2] = a->ndim - 1;
  return ir_transpose(g->c, a, p);
}
static Node *grad_MATMUL(GradCtx *g, Node *n, Node *adj, int i) {
  Node *r = i == 0 ? swap_last(g, n->src[1]) : swap_last(g, n->src[0]);
  if (!r) return NULL;
  return i == 0 ? ir_matmul(g->c, adj, r) : ir_matmul(g->c, r, adj);
}

// ---- row ops: n->a.i[0] the axis ------------------------------------------------------------
static Node *grad_SOFTMAX(GradCtx *g, Node *n, Node *adj, int i) {
  uint32_t ax = 1u << n->a.i[0];
  return mul(g, n, sub(g, adj, sum_axes(g, mul(g, adj, n), ax)));
}
static Node *grad_LOG_SOFTMAX(GradCtx *g, Node *n, Node *adj, int i) {
  uint32_t ax = 1u << n->a.i[0];
  return sub(g, adj, mul(g, un(g, OP_EXP, n), sum_axes(g, adj, ax)));
}
static Node *grad_LOGSUMEXP(GradCtx *g, Node *n, Node *adj, int i) {
  Node *x = n->src[0];
  int axis = (int)n->a.i[0];
  return mul(g, keepdims(g, adj, x, 1u << axis), ir_row(g->c, OP_SOFTMAX, x, axis));
}
// The sums from each position to the row's end: adj's running sum read backwards
// (reversed, summed, reversed); along a symbolic axis, which cannot be reversed
// by a slice, the row's total less the running sum before each position.
static Node *grad_CUMSUM(GradCtx *g, Node *n, Node *adj, int i) {
  int axis = (int)n->a.i[0];
  Dim len = adj->shape[axis];
  if (len.sym) return add(g, sub(g, sum_axes(g, adj, 1u << axis), ir_row(g->c, OP_CUMSUM, adj, axis)), adj);
  int64_t start[IR_MAXDIM] = {0}, count[IR_MAXDIM], step[IR_MAXDIM];
  for (int d = 0; d < adj->ndim; d++) count[d] = -1, step[d] = 1;   // other axes whole
  count[axis] = len.k;
  start[axis] = len.k - 1;
  step[axis] = -1;
  if (len.k == 0) return adj;
  Node *rev = ir_slice(g->c, adj, start, count, step), *run = rev ? ir_row(g->c, OP_CUMSUM, rev, axis) : NULL;
  return run ? ir_slice(g->c, run, start, count, step) : NULL;
}

// loss = logsumexp(logits) - logits[label]: adj[..., None] * (softmax - onehot(label)).
static Node *grad_SCE(GradCtx *g, Node *n, Node *adj, int i) {
  if (i == 1) return NULL;  // labels are class indices
  Node *x = n->src[0], *lab = n->src[1];
  uint32_t last = 1u << (x->ndim - 1);
  Node *iota = ir_iota(g->c, lab->dtype, x->ndim, x->shape, x->ndim - 1);
  Node *hot = bin(g, OP_EQ, keepdims(g, lab, x, last), iota);
  Node *p = ir_row(g->c, OP_SOFTMAX, x, x->ndim - 1);
  Node *d = mul(g, keepdims(g, adj, x, last), sub(g, p, hot ? ir_cast(g->c, hot, x->dtype) : NULL));
  // A label outside [0, classes) gives a NaN loss; its row's gradient is NaN too.
  Dim cls = x->shape[x->ndim - 1];
  if (!d || (cls.sym && cls.k)) return d;
  Node *ok = ir_binary(g->c, OP_AND, bin(g, OP_GE, lab, ir_scalar(g->c, lab->dtype, 0)),
                       bin(g, OP_LT, lab, ir_scalar(g->c, lab->dtype, (double)cls.k)));
  return where(g, keepdims(g, ok, x, last), d, cst(g, d, NAN));
}

// One rule per op: a new op in ops.def fails to compile until it has grad_<NAME>.
static Node *(*const grad_rule[OP_COUNT])(GradCtx *g, Node *n, Node *adj, int i) = {
#define OP(name, ...) [OP_##name] = grad_##name,
#include "ir/ops.def"
#undef OP
};

// ---- the driver ---------------------------------------------------------------------------
static int fail(IrCtx *c, const char *msg) {
  snprintf(c->err, sizeof c->err, "%s", msg);
  return -1;
}

static Node *zeros(IrCtx *c, Node *like) {
  return ir_broadcast(c, ir_scalar(c, like->dtype, 0), like->ndim, like->shape);
}

// Float nodes that depend on a wrt node: the only ones an adjoint flows through
// (integer and bool nodes stop it: comparisons, argmax, casts to int).
static uint8_t *mark_active(IrCtx *c, Node **order, int count, Node **wrt, int nwrt) {
  uint8_t *act = calloc(c->nnodes + 1, 1), *is_wrt = calloc(c->nnodes + 1, 1);
  if (!act || !is_wrt) abort();
  for (int i = 0; i < nwrt; i++) is_wrt[wrt[i]->id] = 1;
  for (int k = 0; k < count; k++) {
    Node *n = order[k];
    if (!ir_is_float(n->dtype)) continue;
    act[n->id] = is_wrt[n->id];
    for (int s = 0; s < n->nsrc && !act[n->id]; s++) act[n->id] = act[n->src[s]->id];
  }
  free(is_wrt);
  return act;
}

// Push n's adjoint into its active operands.
static int backprop_node(GradCtx *g, Node *n, Node **adj, const uint8_t *act) {
  Node *a = adj[n->id];
  for (int s = 0; s < n->nsrc; s++) {
    Node *src = n->src[s];
    if (!act[src->id]) continue;
    Node *d = grad_rule[n->op](g, n, a, s);
    if (!d) {
      if (g->c->err[0]) return -1;
      continue;  // no gradient flows into this operand
    }
    if (!ir_shape_eq(d, src) || d->dtype != src->dtype) {
      snprintf(g->c->err, sizeof g->c->err, "internal error: the gradient of %s has the wrong shape or dtype", ir_ops[n->op].name);
      return -1;
    }
    adj[src->id] = adj[src->id] ? ir_binary(g->c, OP_ADD, adj[src->id], d) : d;
    if (!adj[src->id]) return -1;
  }
  return 0;
}

// y in its numerically stable forms first (stability.c: log(softmax(x)) becomes
// log_softmax(x), log(1 - sigmoid(x)) -softplus(x), ...): their gradients stay
// finite where the written forms' divide 0 by 0 (d log(u) = du / u, and u =
// softmax(x) rounds to 0 for a logit 100 below the largest). Fold and simplify
// first, as the pipeline does, so the rules see constants and canonical forms.
// Only when every wrt is an input, which no rewrite removes or replaces.
static Node *stable_forward(IrCtx *c, Node *y, Node **wrt, int nwrt) {
  for (int i = 0; i < nwrt; i++)
    if (wrt[i]->op != OP_INPUT) return y;
  IrGraph *g = ir_graph_new(c, &y, 1, NULL, 0);
  if (g) g = pass_fold(c, g);
  if (g) g = pass_simplify(c, g);
  if (g) g = pass_stability(c, g);
  return g ? g->outs[0] : y;
}

int pass_grad(IrCtx *c, Node *y, Node *seed, Node **wrt, int nwrt, Node **out) {
  y = stable_forward(c, y, wrt, nwrt);
  c->err[0] = 0;   // a rewrite that failed left y as it was, and its message here
  for (int i = 0; i < nwrt; i++)
    if (!ir_is_float(wrt[i]->dtype)) return fail(c, "cannot differentiate with respect to an integer tensor");
  if (seed) seed = ir_broadcast(c, ir_cast(c, seed, y->dtype), y->ndim, y->shape);
  else seed = ir_broadcast(c, ir_scalar(c, y->dtype, 1), y->ndim, y->shape);
  if (!seed) return -1;

  int count, rc = 0;
  Node **order = ir_topo(c, &y, 1, &count);
  uint8_t *act = mark_active(c, order, count, wrt, nwrt);
  Node **adj = calloc(c->nnodes + 1, sizeof *adj);  // by id; new nodes never need one
  if (!adj) abort();
  GradCtx g = {c};
  if (act[y->id]) adj[y->id] = seed;
  for (int k = count - 1; k >= 0 && !rc; k--) {
    Node *n = order[k];
    if (act[n->id] && adj[n->id] && !is_const(adj[n->id], 0)) rc = backprop_node(&g, n, adj, act);
  }
  for (int i = 0; i < nwrt && !rc; i++) {
    Node *w = wrt[i];
    out[i] = adj[w->id] ? adj[w->id] : zeros(c, w);
    if (!out[i]) rc = -1;
  }
  free(order); free(act); free(adj);
  return rc;
}
