// Memory plan: assigns each temporary buffer a workspace slot, reusing slots
// whose values are dead (liveness over the kernel order) and computing in place
// when an elementwise kernel reads a dying buffer of its own shape at the
// element it writes. Needs: a fused schedule. Makes: Buffer.slot/first/last,
// Kernel.inplace, Schedule.nslots. Slot sizes are the largest member's size,
// evaluated at run time (shapes can be symbolic).
#include "passes.h"
#include <stdlib.h>

// True if every path from the kernel's root to buffer node b goes through
// elementwise ops only, so element i of b is read exactly when writing element i.
static int reads_aligned(const Schedule *s, Node *n, Node *b, int top) {
  if (!top && n == b) return 1;
  if (!top && sched_buf(s, n) >= 0) return 1;    // another buffer: no constraint
  int k = ir_ops[n->op].kind;
  if (!top && k != K_EW && k != K_LEAF) {
    // A view or anything else that might read b at another index.
    int c;
    Node **order = ir_topo(s->ctx, &n, 1, &c);
    int touches = 0;
    for (int i = 0; i < c && !touches; i++) touches = order[i] == b;
    free(order);
    return !touches;
  }
  if (top && k != K_EW) return 0;
  for (int i = 0; i < n->nsrc; i++) {
    if (n->src[i] == b) {
      if (!ir_shape_eq(n->src[i], n) && !top) return 0;
      continue;
    }
    if (!reads_aligned(s, n->src[i], b, 0)) return 0;
  }
  return 1;
}

static void liveness(Schedule *s) {
  for (int b = 0; b < s->nbufs; b++) s->bufs[b].first = s->bufs[b].last = -1;
  for (int k = 0; k < s->nk; k++) {
    Buffer *o = &s->bufs[s->ks[k].out];
    if (o->first < 0) o->first = k;
    if (o->last < k) o->last = k;
    for (int r = 0; r < s->ks[k].nreads; r++) s->bufs[s->ks[k].reads[r]].last = k;
  }
}

void pass_plan(Schedule *s) {
  liveness(s);
  int *slot_free_at = calloc(s->nbufs + 1, sizeof(int));   // slot -> kernel after which it is free
  int *slot_size = calloc(s->nbufs + 1, sizeof(int));      // slot -> element size of its members
  if (!slot_free_at || !slot_size) abort();
  int nslots = 0;
  for (int k = 0; k < s->nk; k++) {
    Kernel *K = &s->ks[k];
    Buffer *o = &s->bufs[K->out];
    if (o->kind != BUF_TEMP || o->slot >= 0) continue;
    size_t esz = ir_dtype_size(o->node->dtype);
    // In place: a temp read here for the last time, same shape and element size.
    if (K->kind == KS_EW && !K->copy)
      for (int r = 0; r < K->nreads && o->slot < 0; r++) {
        Buffer *in = &s->bufs[K->reads[r]];
        if (in->kind == BUF_TEMP && in->last == k && ir_shape_eq(in->node, o->node) &&
            ir_dtype_size(in->node->dtype) == esz && reads_aligned(s, K->node, in->node, 1)) {
          o->slot = in->slot;
          K->inplace = r + 1;
          slot_free_at[o->slot] = o->last;
        }
      }
    // Otherwise the first slot that is dead before this kernel, preferring one
    // whose members have the same element size.
    for (int pass = 0; pass < 2 && o->slot < 0; pass++)
      for (int sl = 0; sl < nslots; sl++)
        if (slot_free_at[sl] < k && (pass || (size_t)slot_size[sl] == esz)) {
          o->slot = sl;
          slot_free_at[sl] = o->last;
          break;
        }
    if (o->slot < 0) {
      o->slot = nslots++;
      slot_free_at[o->slot] = o->last;
      slot_size[o->slot] = (int)esz;
    }
  }
  s->nslots = nslots;
  free(slot_free_at);
  free(slot_size);
}
