// Algebraic identities. Needs: a well-formed graph. Keeps: shapes and dtypes
// (every replacement is checked against the node it replaces); values, but
// like Theano's canonicalizer it assumes x finite where a rule drops x (x*0,
// x-x), ignores the sign of zero (x+0, 0-x) and rounds
// differently where it trades a rounding for an exact op (x^2 -> x*x,
// sum(broadcast(y)) -> y*count) or moves a product out of a sum
// (sum(x*k) -> sum(x)*k; Theano does it for a scalar k).
#include "passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- helpers ----------------------------------------------------------------------
static int is_k(const Node *n, double v) {
  double x;
  return ir_is_scalar_const(n, &x) && x == v;
}

static int same_type(const Node *a, const Node *b) {
  return a->dtype == b->dtype && a->ndim == b->ndim && ir_shape_eq(a, b);
}

// x itself where it has n's type, else nothing.
static Node *as(const Node *n, Node *x) { return same_type(n, x) ? x : NULL; }

// The scalar constant v of n's dtype broadcast to n's shape, in the form fold
// gives scalar constants: a one-element CONST of n's rank, broadcast.
static Node *fill(IrCtx *c, const Node *n, double v) {
  Dim ones[IR_MAXDIM];
  for (int d = 0; d < n->ndim; d++) ones[d] = dim_c(1);
  Node *k = ir_scalar(c, n->dtype, v);
  if (k && n->ndim) k = ir_const(c, n->dtype, n->ndim, ones, k->a.data);
  return k ? ir_broadcast(c, k, n->ndim, n->shape) : NULL;
}

// For a commutative op, try a rule on (a, b) and then on (b, a).
typedef Node *(*Pair)(IrCtx *c, Node *n, Node *a, Node *b);
static Node *both_ways(IrCtx *c, Node *n, Pair f) {
  Node *r = f(c, n, n->src[0], n->src[1]);
  if (!r && (ir_ops[n->op].flags & F_COMM)) r = f(c, n, n->src[1], n->src[0]);
  return r;
}

// ---- arithmetic -------------------------------------------------------------------
// x+0 -> x; x+(-y) -> x-y
static Node *add_pair(IrCtx *c, Node *n, Node *x, Node *y) {
  if (is_k(y, 0)) return as(n, x);
  if (y->op == OP_NEG) return ir_binary(c, OP_SUB, x, y->src[0]);
  return NULL;
}

// x-0 -> x; 0-x -> -x; x-x -> 0; x-(-y) -> x+y
static Node *rule_sub(IrCtx *c, Node *n) {
  Node *x = n->src[0], *y = n->src[1];
  if (is_k(y, 0)) return as(n, x);
  if (is_k(x, 0)) return ir_unary(c, OP_NEG, y);
  if (x == y) return fill(c, n, 0);
  if (y->op == OP_NEG) return ir_binary(c, OP_ADD, x, y->src[0]);
  return NULL;
}

// x*1 -> x; x*0 -> 0; x*(-1) -> -x
static Node *mul_pair(IrCtx *c, Node *n, Node *x, Node *y) {
  if (is_k(y, 1)) return as(n, x);
  if (is_k(y, 0)) return fill(c, n, 0);
  if (is_k(y, -1)) return ir_unary(c, OP_NEG, x);
  return NULL;
}

// 1/c for a float c that is a power of two whose reciprocal the dtype holds
// exactly: then x/c and x*(1/c) round the same exact value.
static int exact_reciprocal(DType t, double cv, double *r) {
  int e;
  if (!ir_is_float(t) || cv == 0 || !isfinite(cv) || frexp(cv, &e) != 0.5) return 0;
  if (t == DT_F32) {
    float f = 1.0f / (float)cv;
    if (f == 0 || !isfinite(f) || frexpf(f, &e) != 0.5f) return 0;
    *r = f;
  } else {
    double d = 1.0 / cv;
    if (d == 0 || !isfinite(d) || frexp(d, &e) != 0.5) return 0;
    *r = d;
  }
  return 1;
}

// x/1 -> x; x/c -> x*(1/c) for c a power of two
static Node *rule_div(IrCtx *c, Node *n) {
  Node *x = n->src[0], *y = n->src[1];
  double cv, r;
  if (is_k(y, 1)) return as(n, x);
  if (ir_is_scalar_const(y, &cv) && exact_reciprocal(n->dtype, cv, &r)) return ir_binary(c, OP_MUL, x, fill(c, n, r));
  return NULL;
}

// x^0 -> 1; x^1 -> x; x^2 -> x*x (not x^0.5 -> sqrt: they differ at -inf)
static Node *rule_pow(IrCtx *c, Node *n) {
  Node *x = n->src[0], *y = n->src[1];
  if (is_k(y, 0)) return fill(c, n, 1);
  if (is_k(y, 1)) return as(n, x);
  if (is_k(y, 2)) return ir_binary(c, OP_MUL, x, x);
  return NULL;
}

// -(-x) -> x; -sum(-x) -> sum(x) (exact: rounding is symmetric)
static Node *rule_neg(IrCtx *c, Node *n) {
  Node *a = n->src[0];
  if (a->op == OP_NEG) return as(n, a->src[0]);
  if (a->op == OP_SUM && a->src[0]->op == OP_NEG)
    return ir_reduce(c, OP_SUM, a->src[0]->src[0], (uint32_t)a->a.i[0], (int)a->a.i[1]);
  return NULL;
}

// log(exp(x)) -> x (exp(log(x)) stays: log's domain)
static Node *rule_log(IrCtx *c, Node *n) {
  return n->src[0]->op == OP_EXP ? as(n, n->src[0]->src[0]) : NULL;
}

// where(c, x, x) -> x; where(true, x, y) -> x; where(false, x, y) -> y
static Node *rule_where(IrCtx *c, Node *n) {
  double v;
  if (n->src[1] == n->src[2]) return as(n, n->src[1]);
  if (ir_is_scalar_const(n->src[0], &v)) return as(n, n->src[v != 0 ? 1 : 2]);
  return NULL;
}

// x or true -> true; x or false -> x (an attention's mask `tril(...) > 0 or
// not causal` when not causal, which where() then drops)
static Node *or_pair(IrCtx *c, Node *n, Node *x, Node *y) {
  double v;
  if (!ir_is_scalar_const(y, &v)) return NULL;
  return v != 0 ? fill(c, n, 1) : as(n, x);
}

// x and false -> false; x and true -> x
static Node *and_pair(IrCtx *c, Node *n, Node *x, Node *y) {
  double v;
  if (!ir_is_scalar_const(y, &v)) return NULL;
  return v == 0 ? fill(c, n, 0) : as(n, x);
}

// cast to the same dtype -> x
static Node *rule_cast(IrCtx *c, Node *n) { return as(n, n->src[0]); }

// ---- movement -----------------------------------------------------------------------
// transpose(transpose(x, p), q) -> transpose(x, p∘q); the identity -> x
static Node *rule_transpose(IrCtx *c, Node *n) {
  Node *in = n->src[0];
  if (in->op != OP_TRANSPOSE) return NULL;
  int perm[IR_MAXDIM];
  for (int i = 0; i < n->ndim; i++) perm[i] = (int)in->a.i[n->a.i[i]];
  return ir_transpose(c, in->src[0], perm);
}

static int product_layout(const Node *x);

// Windows of a channels-last value (pooling over a product's layout): im2col of
// its NCHW view, whose [N, OH, OW, C, KH, KW] order reads it along the channels.
static int nhwc_windows(const Node *x) {
  if (x->op != OP_IM2COL || x->src[0]->op != OP_TRANSPOSE || !product_layout(x->src[0]->src[0])) return 0;
  const int64_t *p = x->src[0]->a.i;
  return p[0] == 0 && p[1] == 3 && p[2] == 1 && p[3] == 2;
}

// A value a product computes, in the product's own layout: the product (or a
// reshape of it), an elementwise op on such values, or their windows (above).
static int product_layout(const Node *x) {
  while (x->op == OP_RESHAPE) x = x->src[0];
  return x->op == OP_MATMUL || ir_ops[x->op].kind == K_EW || nhwc_windows(x);
}

// x's axes permuted by p (out axis d is x's axis p[d]): a reshape when only
// axes of size 1 move (a bias's [1, C, 1, 1] as [1, 1, 1, C]), else a transpose.
static Node *permuted(IrCtx *c, Node *x, const int *p) {
  Dim shape[IR_MAXDIM];
  int last = -1, moves = 0;
  for (int d = 0; d < x->ndim; d++) {
    shape[d] = x->shape[p[d]];
    if (dim_is(shape[d], 1)) continue;
    moves |= p[d] < last;
    last = p[d];
  }
  return moves ? ir_transpose(c, x, p) : ir_reshape(c, x, x->ndim, shape);
}

// transpose(reshape(y), p) -> reshape(y's axes in the result's order), when the
// reshape only adds or drops axes of size 1: the transpose then moves y's own
// axes, and often undoes one of y's (pooling's gradient reads its NCHW max
// as [N, C, OH, OW, 1, 1] transposed back to the channels-last windows; as
// reshape(max) it reads the channels-last max in place, not a strided gather).
// Not for y in a product's layout: transpose sinking looks for the first form.
static Node *rule_transpose_reshaped(IrCtx *c, Node *n) {
  Node *r = n->src[0], *y = r->src[0];
  if (r->op != OP_RESHAPE || product_layout(y)) return NULL;
  int ya[IR_MAXDIM], ra[IR_MAXDIM], ny = 0, nr = 0;
  for (int d = 0; d < y->ndim; d++)
    if (!dim_is(y->shape[d], 1)) ya[ny++] = d;
  for (int d = 0; d < r->ndim; d++)
    if (!dim_is(r->shape[d], 1)) ra[nr++] = d;
  if (ny != nr) return NULL;
  for (int i = 0; i < ny; i++)
    if (!dim_eq(y->shape[ya[i]], r->shape[ra[i]])) return NULL;
  int perm[IR_MAXDIM], k = 0;
  for (int d = 0; d < n->ndim; d++)   // the result's axes of size > 1, as y's axes
    for (int i = 0; i < nr; i++)
      if (ra[i] == n->a.i[d]) perm[k++] = ya[i];
  for (int d = 0; d < y->ndim; d++)
    if (dim_is(y->shape[d], 1)) perm[k++] = d;
  Node *t = permuted(c, y, perm);
  return t ? ir_reshape(c, t, n->ndim, n->shape) : NULL;
}

// Transpose sinking: f(transpose(x, p), broadcast(b), g) -> transpose(f(x, b', g'), p)
// with b' = b's broadcast permuted by p^-1 and g' = transpose(g, p^-1), when x is
// a value in a product's layout and so is every operand of f transposed by the
// same p, while the rest (g) are not (an input, a gather such as pooling's
// routed gradient) and are no more of them. A convolution's bias and activation
// are then computed in its GEMM's [pixels, channels] layout, as the GEMM's
// epilogue; its gradient's masks too, so the weights' gradient product reads
// that gradient without a transposing copy. Readers of the NCHW result index
// a view (pooling, the next im2col). The result's operands in the product's
// layout are not transposed, so the rule does not fire on it again.
static Node *rule_sink_transpose(IrCtx *c, Node *n) {
  if (ir_ops[n->op].kind != K_EW || n->nsrc == 0 || n->nsrc > 8 || n->ndim < 2) return NULL;
  const int64_t *p = NULL;
  int aligned = 0, others = 0;
  for (int i = 0; i < n->nsrc; i++) {
    Node *a = n->src[i];
    if (a->op == OP_BROADCAST && a->src[0]->ndim == a->ndim) continue;
    if (a->op == OP_TRANSPOSE && product_layout(a->src[0])) {
      if (p && memcmp(p, a->a.i, sizeof(int64_t) * n->ndim)) return NULL;
      p = a->a.i;
      aligned++;
    } else if (product_layout(a)) {
      return NULL;
    } else {
      others++;
    }
  }
  if (!p || others > aligned) return NULL;
  int perm[IR_MAXDIM], inv[IR_MAXDIM];
  for (int d = 0; d < n->ndim; d++) perm[d] = (int)p[d], inv[p[d]] = d;
  Node *src[8], t = *n;
  for (int d = 0; d < n->ndim; d++) t.shape[d] = n->shape[inv[d]];
  for (int i = 0; i < n->nsrc; i++) {
    Node *a = n->src[i];
    if (a->op == OP_BROADCAST && a->src[0]->ndim == a->ndim)
      src[i] = ir_broadcast(c, permuted(c, a->src[0], inv), t.ndim, t.shape);
    else
      src[i] = a->op == OP_TRANSPOSE && product_layout(a->src[0]) ? a->src[0] : ir_transpose(c, a, inv);
    if (!src[i]) return NULL;
  }
  t.src = src;
  Node *f = ir_intern(c, &t);
  return f ? ir_transpose(c, f, perm) : NULL;
}

// reshape to the same shape -> x; reshape(reshape(x)) -> one reshape
static Node *rule_reshape(IrCtx *c, Node *n) {
  Node *x = n->src[0];
  if (same_type(n, x)) return x;
  if (x->op == OP_RESHAPE) return ir_reshape(c, x->src[0], n->ndim, n->shape);
  return NULL;
}

// broadcast to the same shape -> x; broadcast(broadcast(x)) -> one broadcast
static Node *rule_broadcast(IrCtx *c, Node *n) {
  Node *x = n->src[0];
  if (same_type(n, x)) return x;
  if (x->op == OP_BROADCAST) return ir_broadcast(c, x->src[0], n->ndim, n->shape);
  return NULL;
}

// ---- reductions ----------------------------------------------------------------------
// b's operand, b a broadcast of size 1 on n's summed axes, reshaped to the
// rank of n's result (the summed axes dropped, or kept as 1): broadcast to
// n's shape, it is b's value along them.
static Node *reduced(IrCtx *c, const Node *n, const Node *b) {
  uint32_t axes = (uint32_t)n->a.i[0];
  Node *y = b->src[0];
  int lead = b->ndim - y->ndim, nd = 0;
  Dim shape[IR_MAXDIM];
  for (int d = 0; d < b->ndim; d++) {
    Dim size = d < lead ? dim_c(1) : y->shape[d - lead];
    if (!(axes & (1u << d))) shape[nd++] = size;
    else if (n->a.i[1]) shape[nd++] = dim_c(1);
  }
  return ir_reshape(c, y, nd, shape);
}

// sum(broadcast(y)) over axes where y has size 1 -> y*count, with y reshaped
// to the result's shape (count: the reduced axes' concrete sizes' product).
static Node *rule_sum(IrCtx *c, Node *n) {
  Node *b = n->src[0];
  if (b->op != OP_BROADCAST || b->src[0]->ndim != b->ndim) return NULL;
  Node *y = b->src[0];
  uint32_t axes = (uint32_t)n->a.i[0];
  int64_t count = 1;
  for (int d = 0; d < b->ndim; d++) {
    if (!(axes & (1u << d))) continue;
    if (!dim_is(y->shape[d], 1) || (b->shape[d].sym && b->shape[d].k)) return NULL;
    count *= b->shape[d].k;
  }
  double v;
  if (ir_is_scalar_const(y, &v)) {
    if (!ir_is_float(n->dtype) && fabs(v * (double)count) >= 9007199254740992.0) return NULL;
    return fill(c, n, v * (double)count);   // one rounding, in double then to the dtype
  }
  Node *r = reduced(c, n, b);
  if (r && count != 1) r = ir_binary(c, OP_MUL, r, fill(c, r, (double)count));
  return r ? ir_broadcast(c, r, n->ndim, n->shape) : NULL;
}

// sum(x*k) -> sum(x)*k for factors k constant along the summed axes (a
// broadcast with size 1 there), likewise -x, x+x and x/k; the factors that
// vary, in id order, make the one product summed. Batch norm's backward sums
// dy*gamma*(x-mean) and dy*(x-mean)*rstd, dy*gamma*rstd and dy: as
// sum(dy*(x-mean)) and sum(dy) times per-channel values, two sums over the
// batch instead of four (hash-consing makes the equal sums one node).
#define SUM_FACTORS 8
typedef struct { Node *vary[SUM_FACTORS], *mul[SUM_FACTORS], *div[SUM_FACTORS]; int nvary, nmul, ndiv; double k; } Factors;

// x a broadcast whose operand has size 1 (or no axis: NumPy's leading axes) on the axes.
static int constant_along(const Node *x, uint32_t axes) {
  if (x->op != OP_BROADCAST) return 0;
  const Node *y = x->src[0];
  int lead = x->ndim - y->ndim;
  for (int d = lead; d < x->ndim; d++)
    if ((axes & (1u << d)) && !dim_is(y->shape[d - lead], 1)) return 0;
  return 1;
}

static int split_factors(const Node *n, Node *x, Factors *f, int depth) {
  uint32_t axes = (uint32_t)n->a.i[0];
  if (depth > 16) return 0;
  if (x->dtype != n->dtype) return 0;
  if (constant_along(x, axes)) {
    if (f->nmul == SUM_FACTORS) return 0;
    f->mul[f->nmul++] = x;
    return 1;
  }
  if (same_type(x, n->src[0])) {
    if (x->op == OP_MUL) return split_factors(n, x->src[0], f, depth + 1) && split_factors(n, x->src[1], f, depth + 1);
    if (x->op == OP_NEG) { f->k = -f->k; return split_factors(n, x->src[0], f, depth + 1); }
    if (x->op == OP_ADD && x->src[0] == x->src[1]) { f->k *= 2; return split_factors(n, x->src[0], f, depth + 1); }
    if (x->op == OP_DIV && x->src[1]->dtype == n->dtype && constant_along(x->src[1], axes)) {
      if (f->ndiv == SUM_FACTORS) return 0;
      f->div[f->ndiv++] = x->src[1];
      return split_factors(n, x->src[0], f, depth + 1);
    }
  }
  if (f->nvary == SUM_FACTORS) return 0;
  f->vary[f->nvary++] = x;
  return 1;
}

static int by_id(const void *a, const void *b) {
  int x = (*(Node *const *)a)->id, y = (*(Node *const *)b)->id;
  return (x > y) - (x < y);
}

static Node *rule_sum_factors(IrCtx *c, Node *n) {
  Factors f = {.k = 1};
  if (!ir_is_float(n->dtype) || !split_factors(n, n->src[0], &f, 0) || !f.nvary) return NULL;
  if (!f.nmul && !f.ndiv && f.k == 1) return NULL;
  qsort(f.vary, f.nvary, sizeof *f.vary, by_id);
  Node *v = f.vary[0];
  for (int i = 1; i < f.nvary && v; i++) v = ir_binary(c, OP_MUL, v, f.vary[i]);
  Node *r = v ? ir_reduce(c, OP_SUM, v, (uint32_t)n->a.i[0], (int)n->a.i[1]) : NULL;
  for (int i = 0; i < f.nmul + f.ndiv && r; i++) {
    Node *k = reduced(c, n, i < f.nmul ? f.mul[i] : f.div[i - f.nmul]);
    if (k) k = ir_broadcast(c, k, n->ndim, n->shape);
    r = k ? ir_binary(c, i < f.nmul ? OP_MUL : OP_DIV, r, k) : NULL;
  }
  if (r && f.k != 1) r = ir_binary(c, OP_MUL, r, fill(c, r, f.k));
  return r;
}

// sum over batch axes of a batched product -> one product with those axes folded
// into the inner dimension: sum_b P[b] @ Q[b] = P' @ Q', P' = [.., m, b*k],
// Q' = [.., b*k, n]. A weight's gradient through `x[N, T, F] @ W` is then one GEMM
// over the whole batch instead of N products and a sum (the reshapes are views:
// the batch and inner axes sit together in memory for contiguous operands).
static Node *rule_sum_matmul(IrCtx *c, Node *n) {
  Node *m = n->src[0];
  int nd = m->ndim;
  uint32_t axes = (uint32_t)n->a.i[0];
  if (m->op != OP_MATMUL || nd < 3 || (axes >> (nd - 2)) || m->src[0]->ndim != nd || m->src[1]->ndim != nd)
    return NULL;
  Node *p = m->src[0], *q = m->src[1];
  for (int d = 0; d < nd - 2; d++)   // an operand shared along a summed axis: sum it first instead
    if ((axes & (1u << d)) && ((p->op == OP_BROADCAST && dim_is(p->src[0]->shape[d], 1)) ||
                               (q->op == OP_BROADCAST && dim_is(q->src[0]->shape[d], 1))))
      return NULL;
  int pp[IR_MAXDIM], pq[IR_MAXDIM], np = 0, nq = 0, nb = 0, ns = 0;
  Dim summed[IR_MAXDIM], sp[IR_MAXDIM], sq[IR_MAXDIM];
  for (int d = 0; d < nd - 2; d++)
    if (!(axes & (1u << d))) { pp[np++] = pq[nq++] = d; sp[nb] = sq[nb] = m->shape[d]; nb++; }
  pp[np++] = nd - 2;                                     // P: kept batch axes, m, summed axes, k
  for (int d = 0; d < nd - 2; d++)
    if (axes & (1u << d)) { pp[np++] = pq[nq++] = d; summed[ns++] = m->shape[d]; }
  pp[np++] = nd - 1;
  pq[nq++] = nd - 2;                                     // Q: kept batch axes, summed axes, k, n
  pq[nq++] = nd - 1;
  summed[ns++] = p->shape[nd - 1];
  Dim inner = dim_c(1);
  for (int i = 0; i < ns; i++) {   // b*k must stay of the form k*SYMBOL
    if (summed[i].sym && inner.sym) return NULL;
    if (summed[i].sym) inner.sym = summed[i].sym;
    if (__builtin_mul_overflow(inner.k, summed[i].k, &inner.k)) return NULL;
  }
  sp[nb] = p->shape[nd - 2]; sp[nb + 1] = inner;
  sq[nb] = inner; sq[nb + 1] = q->shape[nd - 1];
  Node *p2 = ir_reshape(c, ir_transpose(c, p, pp), nb + 2, sp);
  Node *q2 = ir_reshape(c, ir_transpose(c, q, pq), nb + 2, sq);
  Node *r = p2 && q2 ? ir_matmul(c, p2, q2) : NULL;
  return r ? ir_reshape(c, r, n->ndim, n->shape) : NULL;
}

// r(transpose(x, p)) over axes A -> r(x) over p(A), its result transposed back,
// for x in a product's layout (transpose sinking's results): the reduction
// reads x in its own order (a convolution's bias gradient, summed over the
// [pixels, channels] gradient rather than over its NCHW view).
static Node *rule_reduce_transposed(IrCtx *c, Node *n) {
  Node *t = n->src[0];
  if (t->op != OP_TRANSPOSE || !product_layout(t->src[0]) || n->op == OP_ARGMAX || n->op == OP_ARGMIN) return NULL;
  Node *x = t->src[0];
  uint32_t axes = (uint32_t)n->a.i[0], xaxes = 0;
  int keep = (int)n->a.i[1], nd = t->ndim;
  for (int d = 0; d < nd; d++)
    if (axes & (1u << d)) xaxes |= 1u << t->a.i[d];
  Node *r = ir_reduce(c, n->op, x, xaxes, keep);
  if (!r) return NULL;
  int perm[IR_MAXDIM], k = 0;
  if (keep) {
    for (int d = 0; d < nd; d++) perm[d] = (int)t->a.i[d];
  } else {
    // Output axis k is t's k-th kept axis, x's axis t->a.i[d]: its rank among x's kept axes.
    for (int d = 0; d < nd; d++) {
      if (axes & (1u << d)) continue;
      int rank = 0;
      for (int e = 0; e < (int)t->a.i[d]; e++) rank += !(xaxes & (1u << e));
      perm[k++] = rank;
    }
  }
  return ir_transpose(c, r, perm);
}

static Node *simplify_rule(IrCtx *c, Node *n, void *ud) {
  Node *r = NULL;
  switch (n->op) {
  case OP_ADD: r = both_ways(c, n, add_pair); break;
  case OP_SUB: r = rule_sub(c, n); break;
  case OP_MUL: r = both_ways(c, n, mul_pair); break;
  case OP_DIV: r = rule_div(c, n); break;
  case OP_POW: r = rule_pow(c, n); break;
  case OP_NEG: r = rule_neg(c, n); break;
  case OP_LOG: r = rule_log(c, n); break;
  case OP_WHERE: r = rule_where(c, n); break;
  case OP_OR: r = both_ways(c, n, or_pair); break;
  case OP_AND: r = both_ways(c, n, and_pair); break;
  case OP_CAST: r = rule_cast(c, n); break;
  case OP_TRANSPOSE: r = rule_transpose(c, n); if (!r) r = rule_transpose_reshaped(c, n); break;
  case OP_RESHAPE: r = rule_reshape(c, n); break;
  case OP_BROADCAST: r = rule_broadcast(c, n); break;
  case OP_SUM:
    r = rule_sum(c, n);
    if (!r) r = rule_sum_matmul(c, n);
    if (!r) r = rule_sum_factors(c, n);
    break;
  default: break;
  }
  if (!r && ir_ops[n->op].kind == K_REDUCE) r = rule_reduce_transposed(c, n);
  if (!r) r = rule_sink_transpose(c, n);
  // A rule that would change n's type does not apply (the builders can add casts).
  return r && same_type(r, n) ? r : NULL;
}

IrGraph *pass_simplify(IrCtx *c, IrGraph *g) { return pass_rewrite(c, g, simplify_rule, NULL); }
