// Epilogue fusion: the elementwise kernels that consume a GEMM's product (a
// bias, an activation, the chain after it, an optimizer's update of the weight
// a gradient product feeds) run as the GEMM's epilogue, on each block of the
// product as soon as its values are final and while they are in cache, instead
// of as separate sweeps over memory afterwards. Needs: a lowered schedule.
// Makes: Kernel.nepi on the matmul and epi_of on the kernels it takes, which
// are moved to follow it; plan.c keeps the group's buffers apart.
//
// A kernel joins matmul M's epilogue when it is elementwise with M's shape and
// reads M's product, or the output of a kernel already in the epilogue, at the
// element it writes and nowhere else (sched_reads_aligned): then a block of the
// product holds all it needs for that block. Its other operands (a bias, a
// mask, Adam's moments) are read anywhere. Kernels between M and it that it
// does not depend on stay after the group; depending on one only keeps that
// kernel out. The scan stops at the next matrix product.
#include "passes.h"
#include <stdlib.h>
#include <string.h>

static int has(const int *set, int n, int b) {
  for (int i = 0; i < n; i++)
    if (set[i] == b) return 1;
  return 0;
}

// K's rows are the product's rows: the same last axis and as many rows (a
// convolution's [N, OH, OW, C] over its product's [N*OH*OW, C]), so its row-major
// elements line up with the product's.
static int same_rows(const Node *k, const Node *m) {
  Dim a, b;
  if (ir_shape_eq(k, m)) return 1;
  if (m->ndim != 2 || k->ndim < 2 || !dim_eq(k->shape[k->ndim - 1], m->shape[1])) return 0;
  return ir_dims_product(k, 0, k->ndim - 1, &a) && ir_dims_product(m, 0, 1, &b) && dim_eq(a, b);
}

// K may join the epilogue whose written buffers are `group` (M's output first).
static int joins(const Schedule *s, const Kernel *M, const Kernel *K, const int *group, int ng) {
  if (K->kind != KS_EW || K->copy || !same_rows(K->node, M->node) || has(group, ng, K->out)) return 0;
  int reads_group = 0;
  for (int r = 0; r < K->nreads; r++) {
    int b = K->reads[r];
    if (!has(group, ng, b)) continue;
    if (!sched_reads_aligned(s, K->node, s->bufs[b].node)) return 0;
    reads_group = 1;
  }
  return reads_group;
}

// Moves kernel `from` to position `to` (< from), shifting the ones between down.
static void move_kernel(Schedule *s, int from, int to) {
  Kernel K = s->ks[from];
  memmove(&s->ks[to + 1], &s->ks[to], sizeof(Kernel) * (from - to));
  s->ks[to] = K;
}

// A scalar kernel left after the group that depends on nothing since the
// matmul (an optimizer's step counter cast to f32) may move ahead of it when a
// kernel that could join reads it (the updates of Adam's parameters do).
static int hoistable(const Kernel *K, const int *group, int ng, const int *outs, int nout) {
  if (K->node->ndim) return 0;
  for (int r = 0; r < K->nreads; r++)
    if (has(group, ng, K->reads[r]) || has(outs, nout, K->reads[r])) return 0;
  return 1;
}

typedef struct {
  int *group, ng;   // buffers the epilogue writes, the product's first
  int *outs, nout;  // written by the kernels left after it
  int *ins, nin;    // read by them
  int *lift, nlift; // outs of the hoistable ones among them
} Scan;

// K can move ahead of the kernels left behind without changing what anyone
// reads, once the hoistable ones it reads are hoisted.
static int movable(const Scan *sc, const Kernel *K) {
  if (has(sc->outs, sc->nout, K->out) || has(sc->ins, sc->nin, K->out)) return 0;
  for (int r = 0; r < K->nreads; r++)
    if (has(sc->outs, sc->nout, K->reads[r]) && !has(sc->lift, sc->nlift, K->reads[r])) return 0;
  return 1;
}

static void drop(int *set, int *n, int b) {
  for (int i = 0; i < *n; i++)
    if (set[i] == b) { set[i] = set[--*n]; return; }
}

// Builds the epilogue of the matmul at m; returns the matmul's index after any hoisting.
static int fuse_epilogue(Schedule *s, int m) {
  size_t n = sizeof(int) * (s->nbufs + 1);
  Scan sc = {malloc(n), 0, malloc(n), 0, malloc(n), 0, malloc(n), 0};
  if (!sc.group || !sc.outs || !sc.ins || !sc.lift) abort();
  sc.group[sc.ng++] = s->ks[m].out;
  for (int k = m + 1; k < s->nk && s->ks[k].kind != KS_MATMUL; k++) {
    Kernel *K = &s->ks[k];
    if (joins(s, &s->ks[m], K, sc.group, sc.ng) && movable(&sc, K)) {
      // First the scalar kernels it waits on, ahead of the matmul (K's index stays).
      for (int r = 0; r < K->nreads; r++) {
        int b = K->reads[r];
        if (!has(sc.outs, sc.nout, b)) continue;
        int h = m + 1;
        while (s->ks[h].out != b) h++;
        move_kernel(s, h, m++);
        drop(sc.outs, &sc.nout, b);
      }
      sc.group[sc.ng++] = K->out;
      int to = m + 1 + s->ks[m].nepi++;
      if (to < k) move_kernel(s, k, to);
      continue;
    }
    if (hoistable(K, sc.group, sc.ng, sc.outs, sc.nout) && !has(sc.lift, sc.nlift, K->out)) sc.lift[sc.nlift++] = K->out;
    if (!has(sc.outs, sc.nout, K->out)) sc.outs[sc.nout++] = K->out;
    for (int r = 0; r < K->nreads; r++)
      if (!has(sc.ins, sc.nin, K->reads[r])) sc.ins[sc.nin++] = K->reads[r];
  }
  for (int j = m + 1; j <= m + s->ks[m].nepi; j++) s->ks[j].epi_of = m + 1;
  free(sc.group), free(sc.outs), free(sc.ins), free(sc.lift);
  return m;
}

void pass_epilogue(Schedule *s) {
  for (int k = 0; k < s->nk; k++) {
    Kernel *M = &s->ks[k];
    if (M->kind != KS_MATMUL || M->strategy == MM_LOOPS) continue;
    int m = fuse_epilogue(s, k);
    k = m + s->ks[m].nepi;
  }
}
