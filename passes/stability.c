// Numerically stable forms: expressions that overflow or cancel when written
// out become the fused ops that do not. Needs: a well-formed graph (best after
// simplify: it matches the canonical forms, e.g. -x as neg). Keeps: shapes,
// dtypes and values in exact arithmetic; assumes hand-written one-hot labels
// lie in [0, classes) when it fuses a cross-entropy.
#include "passes.h"

// ---- helpers ----------------------------------------------------------------------
static int is_k(const Node *n, double v) {
  double x;
  return ir_is_scalar_const(n, &x) && x == v;
}

static int same_type(const Node *a, const Node *b) {
  return a->dtype == b->dtype && a->ndim == b->ndim && ir_shape_eq(a, b);
}

// The operand of a commutative binary n that is not the scalar constant v.
static Node *other_than(const Node *n, double v) {
  if (is_k(n->src[1], v)) return n->src[0];
  if (is_k(n->src[0], v)) return n->src[1];
  return NULL;
}

static int is_int(DType t) { return t == DT_I32 || t == DT_I64; }

// Has r x's shape with `axis` set to 1 (a per-row value kept in place)?
static int is_kept(const Node *r, const Node *x, int axis) {
  if (r->ndim != x->ndim) return 0;
  for (int d = 0; d < x->ndim; d++)
    if (d == axis ? !dim_is(r->shape[d], 1) : !dim_eq(r->shape[d], x->shape[d])) return 0;
  return 1;
}

// s is a per-row value of x along one axis, broadcast back over the row:
// broadcast(op(x, axis, keepdims)) or broadcast(reshape(op(x, axis))), where
// op is a one-axis reduction or a row op. Returns the axis, or -1.
static int row_broadcast(const Node *s, Op op, const Node *x) {
  if (s->op == OP_BROADCAST) s = s->src[0];
  const Node *r = s;
  if (s->op == OP_RESHAPE) s = s->src[0];
  if (s->op != op || s->src[0] != x) return -1;
  int axis;
  if (ir_ops[op].kind == K_REDUCE) {
    uint32_t axes = (uint32_t)s->a.i[0];
    if (!axes || (axes & (axes - 1))) return -1;
    axis = __builtin_ctz(axes);
  } else {
    axis = (int)s->a.i[0];
  }
  return is_kept(r, x, axis) ? axis : -1;
}

// ---- log --------------------------------------------------------------------------
// log(sum(exp(x), axes)) -> logsumexp(x); contiguous axes are merged into one
// first, and keepdims is a reshape after.
static Node *log_sum_exp(IrCtx *c, Node *n, Node *s) {
  Node *x = s->src[0]->src[0];
  uint32_t axes = (uint32_t)s->a.i[0];
  int lo = __builtin_ctz(axes), hi = 31 - __builtin_clz(axes), nd = 0;
  if (hi >= x->ndim || axes != ((2u << hi) - (1u << lo))) return NULL;   // not contiguous
  Dim merged = dim_c(1), shape[IR_MAXDIM];
  for (int d = lo; d <= hi; d++) {   // the product must stay k*symbol
    Dim a = x->shape[d];
    if (a.sym && a.k && merged.sym && merged.k) return NULL;
    if (a.sym && a.k) merged.sym = a.sym;
    merged.k *= a.k;
  }
  if (!merged.k) merged.sym = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (d == lo) shape[nd++] = merged;
    else if (d < lo || d > hi) shape[nd++] = x->shape[d];
  }
  Node *r = x;
  if (hi > lo && !(r = ir_reshape(c, x, nd, shape))) return NULL;
  r = ir_row(c, OP_LOGSUMEXP, r, lo);
  return r ? ir_reshape(c, r, n->ndim, n->shape) : NULL;
}

static Node *rule_log(IrCtx *c, Node *n) {
  Node *a = n->src[0], *x;
  switch (a->op) {
  case OP_SOFTMAX:   // log(softmax(x)) -> log_softmax(x)
    return ir_row(c, OP_LOG_SOFTMAX, a->src[0], (int)a->a.i[0]);
  case OP_SIGMOID:   // log(sigmoid(x)) -> -softplus(-x)
    return ir_unary(c, OP_NEG, ir_unary(c, OP_SOFTPLUS, ir_unary(c, OP_NEG, a->src[0])));
  case OP_ADD:       // log(1+x), log(x+1) -> log1p(x)
    return (x = other_than(a, 1)) ? ir_unary(c, OP_LOG1P, x) : NULL;
  case OP_SUB:       // log(1-x) -> log1p(-x)
    return is_k(a->src[0], 1) ? ir_unary(c, OP_LOG1P, ir_unary(c, OP_NEG, a->src[1])) : NULL;
  case OP_SUM:
    return a->src[0]->op == OP_EXP ? log_sum_exp(c, n, a) : NULL;
  default:
    return NULL;
  }
}

// log1p(exp(x)) -> softplus(x); log1p(-sigmoid(x)) (log(1 - sigmoid(x)), a hand-written
// binary cross-entropy's other term) -> -softplus(x), which stays finite where
// 1 - sigmoid(x) rounds to 0.
static Node *rule_log1p(IrCtx *c, Node *n) {
  Node *a = n->src[0];
  if (a->op == OP_EXP) return ir_unary(c, OP_SOFTPLUS, a->src[0]);
  if (a->op == OP_NEG && a->src[0]->op == OP_SIGMOID) return ir_unary(c, OP_NEG, ir_unary(c, OP_SOFTPLUS, a->src[0]->src[0]));
  return NULL;
}

// ---- exp ----------------------------------------------------------------------------
// exp(x)-1, exp(x)+(-1) -> expm1(x)
static Node *rule_sub(IrCtx *c, Node *n) {
  Node *a = n->src[0], *b = n->src[1];
  if (a->op == OP_EXP && is_k(b, 1)) return ir_unary(c, OP_EXPM1, a->src[0]);
  int axis = row_broadcast(b, OP_LOGSUMEXP, a);   // x - logsumexp(x) -> log_softmax(x)
  return axis >= 0 ? ir_row(c, OP_LOG_SOFTMAX, a, axis) : NULL;
}

static Node *rule_add(IrCtx *c, Node *n) {
  Node *x = other_than(n, -1);
  return x && x->op == OP_EXP ? ir_unary(c, OP_EXPM1, x->src[0]) : NULL;
}

// 1/(1+exp(-x)) -> sigmoid(x); exp(x)/sum(exp(x), axis) -> softmax(x, axis)
static Node *rule_div(IrCtx *c, Node *n) {
  Node *a = n->src[0], *b = n->src[1], *e;
  if (is_k(a, 1) && b->op == OP_ADD && (e = other_than(b, 1)) && e->op == OP_EXP && e->src[0]->op == OP_NEG)
    return ir_unary(c, OP_SIGMOID, e->src[0]->src[0]);
  if (a->op == OP_EXP) {
    int axis = row_broadcast(b, OP_SUM, a);
    if (axis >= 0) return ir_row(c, OP_SOFTMAX, a->src[0], axis);
  }
  return NULL;
}

// ---- row ops --------------------------------------------------------------------------
// softmax and log_softmax ignore a per-row shift: f(x - max(x)) -> f(x)
static Node *rule_shift(IrCtx *c, Node *n) {
  Node *a = n->src[0];
  if (a->op != OP_SUB) return NULL;
  int axis = row_broadcast(a->src[1], OP_RMAX, a->src[0]);
  return axis == n->a.i[0] ? ir_row(c, n->op, a->src[0], axis) : NULL;
}

// ---- cross-entropy written by hand ---------------------------------------------------
// j along the last axis of a tensor of n's rank: an integer iota over that
// axis, possibly broadcast, widened, or reshaped from a 1-D iota.
static int is_class_index(const Node *p, const Node *z) {
  int last = z->ndim - 1;
  if (p->op == OP_BROADCAST) p = p->src[0];
  if (p->op == OP_CAST && is_int(p->src[0]->dtype)) p = p->src[0];
  if (p->ndim != z->ndim || !is_int(p->dtype) || !dim_eq(p->shape[last], z->shape[last])) return 0;
  if (p->op == OP_IOTA) return p->a.i[0] == last;
  if (p->op != OP_RESHAPE || p->src[0]->op != OP_IOTA || p->src[0]->ndim != 1) return 0;
  for (int d = 0; d < last; d++) if (!dim_is(p->shape[d], 1)) return 0;
  return 1;
}

// The labels of a one-hot tensor with z's shape, cast(eq(j, labels[..., None])), or NULL.
static Node *one_hot_labels(IrCtx *c, const Node *oh, const Node *z) {
  if (oh->op != OP_CAST || oh->src[0]->op != OP_EQ) return NULL;
  Node *eq = oh->src[0];
  for (int k = 0; k < 2; k++) {
    Node *q = eq->src[1 - k];
    if (!is_class_index(eq->src[k], z)) continue;
    if (q->op == OP_BROADCAST) q = q->src[0];
    if (q->op == OP_CAST && is_int(q->src[0]->dtype) && ir_dtype_size(q->src[0]->dtype) <= ir_dtype_size(q->dtype))
      q = q->src[0];
    if (!is_int(q->dtype) || !is_kept(q, z, z->ndim - 1)) continue;
    return ir_reshape(c, q, z->ndim - 1, z->shape);
  }
  return NULL;
}

// sum(one_hot(labels) * log_softmax(z), last axis) -> -softmax_cross_entropy(z, labels)
static Node *cross_entropy(IrCtx *c, Node *s) {
  Node *m = s->src[0];
  if (m->op != OP_MUL) return NULL;
  for (int k = 0; k < 2; k++) {
    Node *ls = m->src[k], *z, *labels;
    if (ls->op != OP_LOG_SOFTMAX) continue;
    z = ls->src[0];
    if (ls->a.i[0] != z->ndim - 1 || s->a.i[0] != (int64_t)1 << (z->ndim - 1)) continue;
    if (!(labels = one_hot_labels(c, m->src[1 - k], z))) continue;
    Node *r = ir_sce(c, z, labels);
    return r ? ir_reshape(c, ir_unary(c, OP_NEG, r), s->ndim, s->shape) : NULL;
  }
  return NULL;
}

// -(-x) -> x; -sum(-x) -> sum(x) (exact): the negations cross_entropy
// introduces cancel with the ones written around the loss.
static Node *rule_neg(IrCtx *c, Node *n) {
  Node *a = n->src[0];
  if (a->op == OP_NEG) return a->src[0];
  if (a->op == OP_SUM && a->src[0]->op == OP_NEG)
    return ir_reduce(c, OP_SUM, a->src[0]->src[0], (uint32_t)a->a.i[0], (int)a->a.i[1]);
  return NULL;
}

static Node *stability_rule(IrCtx *c, Node *n, void *ud) {
  Node *r = NULL;
  switch (n->op) {
  case OP_LOG: r = rule_log(c, n); break;
  case OP_LOG1P: r = rule_log1p(c, n); break;
  case OP_SUB: r = rule_sub(c, n); break;
  case OP_ADD: r = rule_add(c, n); break;
  case OP_DIV: r = rule_div(c, n); break;
  case OP_SOFTMAX: case OP_LOG_SOFTMAX: r = rule_shift(c, n); break;
  case OP_SUM: r = cross_entropy(c, n); break;
  case OP_NEG: r = rule_neg(c, n); break;
  default: break;
  }
  return r && same_type(r, n) ? r : NULL;   // a rule that would change n's type does not apply
}

IrGraph *pass_stability(IrCtx *c, IrGraph *g) { return pass_rewrite(c, g, stability_rule, NULL); }
