// Schedule queries and printing (the text `kiln ir --after=fuse|lower|plan` shows).
#include "sched.h"
#include <stdlib.h>

int sched_unit_reshape(const Node *n) {
  const Node *s = n->src[0];
  int i = 0, j = 0;
  for (;;) {
    while (i < n->ndim && dim_is(n->shape[i], 1)) i++;
    while (j < s->ndim && dim_is(s->shape[j], 1)) j++;
    if (i == n->ndim || j == s->ndim) return i == n->ndim && j == s->ndim;
    if (!dim_eq(n->shape[i++], s->shape[j++])) return 0;
  }
}

int sched_dense(const Schedule *s, const Node *n) {
  return sched_buf(s, n) >= 0 || (n->op == OP_RESHAPE && sched_buf(s, n->src[0]) >= 0);
}

int sched_reshape_runs(const Node *n, int *last) {
  const Node *s = n->src[0];
  int j = 0;
  for (int i = 0; i < n->ndim; i++) {
    Dim o = n->shape[i];
    last[i] = -1;
    if (dim_is(o, 1)) continue;
    if (o.k <= 0) return 0;
    int64_t k = 1;
    int32_t sym = 0;
    while (!(k == o.k && sym == o.sym)) {   // the run: operand axes until their product is o
      while (j < s->ndim && dim_is(s->shape[j], 1)) j++;
      if (j == s->ndim) return 0;
      Dim d = s->shape[j];
      if (d.k <= 0 || (d.sym && sym) || (d.sym && d.sym != o.sym)) return 0;
      k *= d.k;
      sym |= d.sym;
      last[i] = j++;
      if (k > o.k) return 0;
    }
  }
  while (j < s->ndim && dim_is(s->shape[j], 1)) j++;
  return j == s->ndim;
}

int sched_merge_view(const Schedule *s, const Node *n) {
  int last[IR_MAXDIM];
  const Node *t = n->src[0];
  if (n->op != OP_RESHAPE || t->op != OP_TRANSPOSE || !sched_reshape_runs(n, last)) return 0;
  const Node *x = t->src[0];
  if (!sched_dense(s, x)) return 0;
  // Each run's axes of t, mapped through the permutation, must be consecutive
  // axes of x (its axes of length 1 aside) in increasing order.
  for (int i = 0, j = 0; i < n->ndim; i++) {
    if (last[i] < 0) continue;
    int prev = -1;
    for (; j <= last[i]; j++) {
      if (dim_is(t->shape[j], 1)) continue;
      int p = (int)t->a.i[j];
      if (prev >= 0) {
        int q = prev + 1;
        while (q < x->ndim && dim_is(x->shape[q], 1)) q++;
        if (p != q) return 0;
      }
      prev = p;
    }
  }
  return 1;
}

int sched_view_base(const Schedule *s, Node *n, Node **base) {
  for (;;) {
    if (sched_buf(s, n) >= 0) { *base = n; return 1; }
    switch (n->op) {
    case OP_TRANSPOSE: case OP_BROADCAST: case OP_SLICE: n = n->src[0]; break;
    case OP_RESHAPE:
      if (sched_buf(s, n->src[0]) >= 0) { *base = n->src[0]; return 1; }
      if (!sched_unit_reshape(n) && !sched_merge_view(s, n)) return 0;
      n = n->src[0];
      break;
    default: return 0;
    }
  }
}

int sched_mm_shared_rhs(const Node *mm) {
  Node *b = mm->src[1];
  int batched = 0;
  if (b->op != OP_BROADCAST) return 0;
  for (int d = 0; d < mm->ndim - 2; d++) {
    if (!dim_is(b->src[0]->shape[d], 1)) return 0;
    batched |= !dim_is(mm->shape[d], 1);
  }
  return batched;
}

int sched_mm_work(const Node *mm, Dim *factors) {
  int nd = mm->ndim, n = 0;
  if (sched_mm_shared_rhs(mm))
    for (int d = 0; d < nd - 2; d++) factors[n++] = mm->shape[d];
  factors[n++] = mm->shape[nd - 2];
  factors[n++] = mm->shape[nd - 1];
  factors[n++] = mm->src[0]->shape[nd - 1];
  return n;
}

int sched_col2im_rows(const Schedule *s, const Node *n) {
  if (n->op != OP_COL2IM || ir_windows_disjoint(n->a.i)) return 0;
  const Node *src = n->src[0];
  return sched_dense(s, src);
}

static int buffered(const Schedule *s, const Node *n) { return s && sched_buf(s, n) >= 0; }

Node *sched_mm_windows(const Schedule *s, const Node *mm, int *taps_rows) {
  if (mm->op != OP_MATMUL || mm->ndim != 2 || (mm->dtype != DT_F32 && mm->dtype != DT_F64)) return NULL;
  Node *a = mm->src[0];
  *taps_rows = SCHED_WIN_PIXELS;
  if (a->op == OP_TRANSPOSE) {
    if (buffered(s, a) || a->a.i[0] != 1) return NULL;
    *taps_rows = SCHED_WIN_TAPS;
    a = a->src[0];
    double one;
    if (a->op == OP_CONCAT && a->nsrc == 2 && a->a.i[0] == 1 && !buffered(s, a) && dim_is(a->src[1]->shape[1], 1) &&
        ir_is_scalar_const(a->src[1], &one) && one == 1) {
      *taps_rows = SCHED_WIN_TAPS_ONES;
      a = a->src[0];
    }
  }
  if (a->op != OP_RESHAPE || a->ndim != 2 || buffered(s, a)) return NULL;
  Node *w = a->src[0];
  if (w->op != OP_IM2COL || buffered(s, w) || w->a.i[8]) return NULL;
  return dim_is(a->shape[1], w->shape[3].k * w->shape[4].k * w->shape[5].k) ? w : NULL;
}

// Whether computing n inline reads b: the walk stops at other buffers, whose
// values are read, not recomputed. seen: one flag per node id.
static int reads_buf(const Schedule *s, Node *n, Node *b, uint8_t *seen) {
  if (n == b) return 1;
  if (seen[n->id] || sched_buf(s, n) >= 0) return 0;
  seen[n->id] = 1;
  for (int i = 0; i < n->nsrc; i++)
    if (reads_buf(s, n->src[i], b, seen)) return 1;
  return 0;
}

static int aligned(const Schedule *s, Node *n, Node *b, int top) {
  if (!top && n == b) return 1;
  if (!top && sched_buf(s, n) >= 0) return 1;    // another buffer: no constraint
  // b reshaped to the written value's shape (every node between has it): the
  // same linear index, so the same element of b's dense buffer.
  if (!top && n->op == OP_RESHAPE && n->src[0] == b) return 1;
  int k = ir_ops[n->op].kind;
  if (!top && k != K_EW && k != K_LEAF) {
    // A view or anything else that might read b at another index: aligned only
    // if what it computes inline does not read b at all.
    uint8_t *seen = calloc((size_t)s->ctx->nnodes + 1, 1);
    if (!seen) abort();
    int touches = reads_buf(s, n, b, seen);
    free(seen);
    return !touches;
  }
  if (top && k != K_EW) return 0;
  for (int i = 0; i < n->nsrc; i++) {
    if (n->src[i] == b) {
      if (!ir_shape_eq(n->src[i], n) && !top) return 0;
      continue;
    }
    if (!aligned(s, n->src[i], b, 0)) return 0;
  }
  return 1;
}

int sched_reads_aligned(const Schedule *s, Node *root, Node *b) { return aligned(s, root, b, 1); }

static const char *kind_name[] = {"elementwise", "reduce", "matmul", "row", "scatter"};
static const char *buf_kind[] = {"in", "const", "out", "tmp"};

void sched_print(FILE *f, const Schedule *s) {
  IrCtx *c = s->ctx;
  for (int b = 0; b < s->nbufs; b++) {
    Buffer *B = &s->bufs[b];
    fprintf(f, "buf%d %s", b, buf_kind[B->kind]);
    if (B->kind == BUF_TEMP) fprintf(f, " slot%d", B->slot);
    else fprintf(f, "%d", B->arg);
    if (B->shares >= 0) fprintf(f, " over in%d", B->shares);
    fputc(' ', f);
    ir_print_shape(f, c, B->node);
    fputc('\n', f);
  }
  for (int k = 0; k < s->nk; k++) {
    Kernel *K = &s->ks[k];
    fprintf(f, "k%d %s -> buf%d reads", k, kind_name[K->kind], K->out);
    for (int r = 0; r < K->nreads; r++) fprintf(f, " buf%d", K->reads[r]);
    if (K->inplace) fprintf(f, " (in place)");
    if (K->why[0]) fprintf(f, " [%s]", K->why);
    if (K->epi_of) fprintf(f, " [epilogue of k%d]", K->epi_of - 1);
    fputs("\n    ", f);
    ir_print_node(f, c, K->node);
  }
}
