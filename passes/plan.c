// Memory plan: assigns each temporary buffer a workspace slot, reusing slots
// whose values are dead (liveness over the kernel order) and computing in place
// when an elementwise kernel reads a dying buffer of its own shape at the
// element it writes (a temp, or an input donated to the output it computes).
// Needs: a lowered schedule (with its epilogue groups). Makes: Buffer.slot/first/last/shares,
// Kernel.inplace, Schedule.nslots. Slot sizes are the largest member's size,
// evaluated at run time (shapes can be symbolic).
#include "passes.h"
#include <stdlib.h>

// A matmul and the kernels of its GEMM's epilogue (epilogue.c) run together,
// the epilogue on each block of the product while other threads still compute
// other blocks: as far as buffers go, the group is one step [start, end].
static void groups(const Schedule *s, int *start, int *end) {
  for (int k = 0; k < s->nk; k++) start[k] = end[k] = k;
  for (int k = 0; k < s->nk; k++)
    for (int j = k + 1; j <= k + s->ks[k].nepi; j++) start[j] = start[k] = k, end[j] = end[k] = k + s->ks[k].nepi;
}

// first, last: the kernels that write a buffer first and read it last; free_after:
// the end of the last group that touches it, after which its slot may be reused.
static void liveness(Schedule *s, const int *end, int *free_after) {
  for (int b = 0; b < s->nbufs; b++) s->bufs[b].first = s->bufs[b].last = free_after[b] = -1;
  for (int k = 0; k < s->nk; k++) {
    int out = s->ks[k].out;
    Buffer *o = &s->bufs[out];
    if (o->first < 0) o->first = k;
    if (o->last < k) o->last = k;
    if (free_after[out] < end[k]) free_after[out] = end[k];
    for (int r = 0; r < s->ks[k].nreads; r++) {
      int b = s->ks[k].reads[r];
      s->bufs[b].last = k;
      if (free_after[b] < end[k]) free_after[b] = end[k];
    }
  }
}

// An output the caller may write over a donated input (IrGraph.donate): k, the
// elementwise kernel that computes it, must read that input for the last time,
// at the element it writes, and nothing else in its epilogue group may read the
// input (other threads run the group on other blocks). Then the output's
// storage may be the input's: Buffer.shares says so, and the kernel is marked
// in place (the emitter reads the input through the output's pointer).
static void over_donated(Schedule *s, int k, const int *start) {
  Kernel *K = &s->ks[k];
  Buffer *o = &s->bufs[K->out];
  const int *donate = s->g->donate;
  if (!donate || o->kind != BUF_OUTPUT || K->kind != KS_EW || K->copy || donate[o->arg] < 0) return;
  for (int r = 0; r < K->nreads; r++) {
    Buffer *in = &s->bufs[K->reads[r]];
    if (in->kind != BUF_INPUT || in->arg != donate[o->arg]) continue;
    if (in->last != k || !ir_numel_eq(in->node, o->node) || in->node->dtype != o->node->dtype ||
        !sched_reads_aligned(s, K->node, in->node))
      return;
    for (int j = start[k]; j < k; j++)
      for (int q = 0; q < s->ks[j].nreads; q++)
        if (s->ks[j].reads[q] == K->reads[r]) return;
    o->shares = in->arg;
    K->inplace = r + 1;
    return;
  }
}

void pass_plan(Schedule *s) {
  int *start = malloc(sizeof(int) * (s->nk + 1)), *end = malloc(sizeof(int) * (s->nk + 1));
  int *free_after = malloc(sizeof(int) * (s->nbufs + 1));
  int *slot_free_at = calloc(s->nbufs + 1, sizeof(int));   // slot -> kernel after which it is free
  int *slot_size = calloc(s->nbufs + 1, sizeof(int));      // slot -> element size of its members
  if (!start || !end || !free_after || !slot_free_at || !slot_size) abort();
  groups(s, start, end);
  liveness(s, end, free_after);
  int nslots = 0;
  for (int k = 0; k < s->nk; k++) {
    Kernel *K = &s->ks[k];
    Buffer *o = &s->bufs[K->out];
    over_donated(s, k, start);
    if (o->kind != BUF_TEMP || o->slot >= 0) continue;
    size_t esz = ir_dtype_size(o->node->dtype);
    // In place: a temp read here for the last time, as many elements of the same
    // size, at the element written (sched_reads_aligned: the same linear index).
    // In an epilogue, only over what the group itself wrote: another thread may
    // still be reading anything else anywhere.
    if (K->kind == KS_EW && !K->copy)
      for (int r = 0; r < K->nreads && o->slot < 0; r++) {
        Buffer *in = &s->bufs[K->reads[r]];
        if (in->kind == BUF_TEMP && in->last == k && (start[k] == k || in->first >= start[k]) &&
            ir_numel_eq(in->node, o->node) && ir_dtype_size(in->node->dtype) == esz &&
            sched_reads_aligned(s, K->node, in->node)) {
          o->slot = in->slot;
          K->inplace = r + 1;
          slot_free_at[o->slot] = free_after[K->out];
        }
      }
    // Otherwise the first slot that is dead before this kernel's group, preferring
    // one whose members have the same element size.
    for (int pass = 0; pass < 2 && o->slot < 0; pass++)
      for (int sl = 0; sl < nslots; sl++)
        if (slot_free_at[sl] < start[k] && (pass || (size_t)slot_size[sl] == esz)) {
          o->slot = sl;
          slot_free_at[sl] = free_after[K->out];
          break;
        }
    if (o->slot < 0) {
      o->slot = nslots++;
      slot_free_at[o->slot] = free_after[K->out];
      slot_size[o->slot] = (int)esz;
    }
  }
  s->nslots = nslots;
  free(start), free(end), free(free_after), free(slot_free_at), free(slot_size);
}
