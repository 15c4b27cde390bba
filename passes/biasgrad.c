// A convolution's bias gradient as one more row of its weights' gradient.
// Needs: a well-formed graph. Keeps: shapes, dtypes and values (the bias's
// sum taken in the product's order).
//
// A conv layer's training step sums dY over its pixels for the bias (sum over
// N, OH, OW) and multiplies it by the transposed windows for the weights
// (windows^T @ dY, the GEMM packing the windows from the image). The sum is a
// row of ones times dY: appended to windows^T, it is the product's last row,
// where the micro-kernel's rows are mostly padding anyway (800 taps are 58
// panels of 14 rows, 812), instead of a pass that reads dY again (the CNN's
// two layers: 12.8 and 6.4 MB, 1.5 and 0.7 ms of its step at one thread). The
// pipeline runs this wherever products go to rt_gemm: with the windows
// materialized (KILN_IMPLICIT_IM2COL=0, a knob for checking) the concatenation
// copies them once more, and the sums are the same either way, bit for bit.
#include "passes.h"
#include <stdlib.h>

// mm = windows^T @ R, as the implicit im2col takes it (before scheduling).
static int windows_product(const Node *mm) {
  int taps_rows;
  return sched_mm_windows(NULL, mm, &taps_rows) && taps_rows == SCHED_WIN_TAPS;
}

// sum adds up the rows of rhs, an [P, O] matrix: sum(rhs, axis 0), or the sum
// of Y over all but its last axis where rhs is Y reshaped to [P, O], or over
// all but the axis that a transpose of Y, so reshaped, has last (a layer whose
// output stays NCHW: dY [N, O, OH, OW] summed over N, OH, OW).
static int sums_rows(const Node *sum, const Node *rhs) {
  if (sum->op != OP_SUM || sum->dtype != rhs->dtype) return 0;
  const Node *y = sum->src[0];
  uint32_t axes = (uint32_t)sum->a.i[0], rows = 0;
  if (y == rhs) return axes == 1;
  if (rhs->op != OP_RESHAPE) return 0;
  const Node *t = rhs->src[0];
  int nd = t->ndim;
  if (nd < 2 || !dim_eq(t->shape[nd - 1], rhs->shape[1])) return 0;
  if (t == y) return axes == (1u << (nd - 1)) - 1;
  if (t->op != OP_TRANSPOSE || t->src[0] != y) return 0;
  for (int d = 0; d < nd - 1; d++) rows |= 1u << t->a.i[d];
  return axes == rows;
}

// The product with a row of ones under windows^T, as the transpose of the
// windows with a column of ones (the layout rt_gemm_*_win's materialized
// matrix has, so the product is the same, bit for bit, with the windows
// materialized); mm becomes its first rows, sum its last row in sum's shape.
static int extend(IrCtx *c, Node *mm, Node *sum, Node **mm_to, Node **sum_to) {
  Node *w = mm->src[0]->src[0];
  Dim col[2] = {w->shape[0], dim_c(1)};
  Node *ones = ir_broadcast(c, ir_scalar(c, w->dtype, 1), 2, col);
  Node *cat[2] = {w, ones};
  Node *both = ones ? ir_concat(c, cat, 2, 1) : NULL;
  Node *prod = both ? ir_matmul(c, ir_transpose(c, both, NULL), mm->src[1]) : NULL;
  if (!prod) return -1;
  int64_t taps = w->shape[1].k, first[2] = {0, 0}, last[2] = {taps, 0}, rows[2] = {taps, -1}, one[2] = {1, -1},
          step[2] = {1, 1};
  *mm_to = ir_slice(c, prod, first, rows, step);
  Node *r = ir_slice(c, prod, last, one, step);
  *sum_to = r ? ir_reshape(c, r, sum->ndim, sum->shape) : NULL;
  return *mm_to && *sum_to ? 0 : -1;
}

IrGraph *pass_biasgrad(IrCtx *c, IrGraph *g) {
  int count;
  Node **order = ir_topo(c, g->outs, g->nout, &count);
  Node **from = malloc(sizeof(Node *) * 2 * (count + 1)), **to = malloc(sizeof(Node *) * 2 * (count + 1));
  uint8_t *taken = calloc((size_t)c->nnodes + 1, 1);
  if (!from || !to || !taken) abort();
  int n = 0, bad = 0;
  for (int i = 0; i < count && !bad; i++) {
    Node *mm = order[i];
    if (!windows_product(mm)) continue;
    for (int j = 0; j < count; j++) {
      Node *s = order[j];
      if (taken[s->id] || !sums_rows(s, mm->src[1])) continue;
      taken[s->id] = 1;
      from[n] = mm, from[n + 1] = s;
      bad = extend(c, mm, s, &to[n], &to[n + 1]);
      n += 2;
      break;
    }
  }
  IrGraph *r = bad ? NULL : n ? pass_substitute(c, g, from, to, n) : g;
  free(order), free(from), free(to), free(taken);
  return r;
}
