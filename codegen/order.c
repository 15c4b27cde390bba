// The loop order of an elementwise kernel: which of its inner axes runs
// innermost. A kernel that writes NCHW from a channels-last value (average
// pooling fused with the transpose that feeds flatten, batch norm recomputed
// inside it) reads every operand a pixel (64 floats) apart at each step of
// its last axis: scalar, and 1.8 ms of a conv + batch norm model's step. With
// the channels innermost the reads are contiguous and vectorize; the values
// go to a block on the stack, then out along the output's stride (cgen.c's
// ew_block_loops).
#include "cgen_int.h"

enum { ORDER_VISITS = 4096, ORDER_BLOCK_MIN = 8, ORDER_BLOCK_MAX = 1024 };

typedef struct { const Schedule *s; double votes[IR_MAXDIM]; int visits; } Votes;

// n's last axis longer than 1 (-1: none).
static int last_long_axis(const Node *n) {
  for (int d = n->ndim - 1; d >= 0; d--)
    if (!dim_is(n->shape[d], 1)) return d;
  return -1;
}

// A reshape's operand axes in terms of the kernel's (m from map): shapes
// matched in groups of equal products, the last long axis of each operand
// group steps with the last long axis of the node's group (the group's linear
// index is the same on both sides). 0 where the shapes do not group.
static int reshape_map(const Node *n, const int *map, int *m) {
  const Node *s = n->src[0];
  int i = 0, j = 0;
  while (i < n->ndim || j < s->ndim) {
    if (i < n->ndim && dim_is(n->shape[i], 1)) { i++; continue; }
    if (j < s->ndim && dim_is(s->shape[j], 1)) { j++; continue; }
    if (i == n->ndim || j == s->ndim) return 0;
    if (n->shape[i].sym || s->shape[j].sym) {
      if (!dim_eq(n->shape[i], s->shape[j])) return 0;
      m[j++] = map[i++];
      continue;
    }
    int li = i, lj = j;
    int64_t pn = n->shape[i++].k, ps = s->shape[j++].k;
    while (pn != ps) {
      if (pn < ps) {
        if (i == n->ndim || n->shape[i].sym) return 0;
        if (!dim_is(n->shape[i], 1)) li = i;
        pn *= n->shape[i++].k;
      } else {
        if (j == s->ndim || s->shape[j].sym) return 0;
        if (!dim_is(s->shape[j], 1)) lj = j;
        ps *= s->shape[j++].k;
      }
    }
    m[lj] = map[li];
  }
  return 1;
}

// Each buffer read under n adds w (times the terms of the windows around it)
// to the vote of the kernel axis its storage runs along with unit step;
// map[i]: the kernel axis n's axis i steps with (-1: none, or not by one).
// Views the C emitter reads through are followed; the rest vote for nothing.
static void vote_reads(Votes *v, Node *n, int top, const int *map, double w) {
  if (++v->visits > ORDER_VISITS) return;
  if (!top && sched_buf(v->s, n) >= 0) {
    int d = last_long_axis(n);
    if (d >= 0 && map[d] >= 0) v->votes[map[d]] += w;
    return;
  }
  int m[IR_MAXDIM];
  for (int i = 0; i < IR_MAXDIM; i++) m[i] = -1;
  Node *x = n->nsrc ? n->src[0] : NULL;
  switch (ir_ops[n->op].kind) {
  case K_EW:
    for (int i = 0; i < n->nsrc; i++)
      if (n->src[i]->ndim == n->ndim) vote_reads(v, n->src[i], 0, map, w);
    return;
  case K_REDUCE: {   // a small window, computed inline (reduce_inline)
    uint32_t axes = (uint32_t)n->a.i[0];
    int keep = (int)n->a.i[1];
    for (int i = 0, o = 0; i < x->ndim; i++) {
      if (!(axes & (1u << i))) { m[i] = map[o++]; continue; }
      if (!x->shape[i].sym) w *= (double)x->shape[i].k;
      o += keep;
    }
    vote_reads(v, x, 0, m, w);
    return;
  }
  case K_MOVE: break;
  default: return;
  }
  switch (n->op) {
  case OP_BROADCAST:
    if (x->ndim != n->ndim) return;
    for (int i = 0; i < n->ndim; i++) m[i] = dim_is(x->shape[i], 1) ? -1 : map[i];
    break;
  case OP_TRANSPOSE:
    for (int i = 0; i < n->ndim; i++) m[n->a.i[i]] = map[i];
    break;
  case OP_SLICE:
    for (int i = 0; i < n->ndim; i++) m[i] = n->a.i[IR_MAXDIM + i] == 1 ? map[i] : -1;
    break;
  case OP_RESHAPE:
    if (!reshape_map(n, map, m)) return;
    break;
  case OP_IM2COL:   // x[n, c, oh*sh + kh*dh, ow*sw + kw*dw] (im2col in cexpr.c)
    m[0] = map[0], m[1] = map[3];
    m[3] = n->a.i[3] == 1 ? map[2] : -1;
    break;
  default: return;
  }
  vote_reads(v, x, 0, m, w);
}

// The axis of [split, nd) that an elementwise kernel runs innermost: its last
// one (its output's rows, written in order), unless more of its reads run along
// another one of constant length in [ORDER_BLOCK_MIN, ORDER_BLOCK_MAX]. The
// output's write counts as one read along the last axis.
int cg_loop_order(const Schedule *s, const Kernel *K, int split) {
  Node *n = K->node;
  Votes v = {.s = s};
  int map[IR_MAXDIM], last = last_long_axis(n);
  for (int i = 0; i < IR_MAXDIM; i++) map[i] = i < n->ndim ? i : -1;
  if (last < split) return n->ndim - 1;
  vote_reads(&v, n, 1, map, 1.0);
  if (v.visits > ORDER_VISITS) return n->ndim - 1;
  v.votes[last] += 1;
  int best = last;
  for (int d = split; d < n->ndim; d++) {
    Dim e = n->shape[d];
    if (!e.sym && e.k >= ORDER_BLOCK_MIN && e.k <= ORDER_BLOCK_MAX && v.votes[d] > v.votes[best]) best = d;
  }
  return best == last ? n->ndim - 1 : best;
}


// Whether a reduction's reads run along its last reduced axis (with unit
// step) more than along any kept axis: then per output, a loop along that axis
// reads its row in order, where the output-stationary taps kernel (cgen.c)
// would step a whole row between reads.
int cg_reduce_contiguous(const Schedule *s, const Kernel *K) {
  Node *n = K->node, *x = n->src[0];
  uint32_t axes = (uint32_t)n->a.i[0];
  Votes v = {.s = s};
  int map[IR_MAXDIM], last = -1;
  for (int i = 0; i < IR_MAXDIM; i++) map[i] = i < x->ndim ? i : -1;
  vote_reads(&v, x, 0, map, 1.0);
  if (v.visits > ORDER_VISITS) return 0;
  double kept = 0;
  for (int i = 0; i < x->ndim; i++) {
    if (axes & (1u << i)) last = i;
    else if (v.votes[i] > kept) kept = v.votes[i];
  }
  return last >= 0 && v.votes[last] > 0 && v.votes[last] >= kept;
}
