// Lowering choice: picks how each kernel that has several implementations is
// lowered. Needs: a fused schedule. Keeps: everything else. Today matrix
// products have one lowering (generated loops); the choice is the place where
// BLIS and the convolution lowerings plug in, with the reason recorded.
#include "passes.h"

void pass_lower(Schedule *s) {
  for (int k = 0; k < s->nk; k++) {
    Kernel *K = &s->ks[k];
    if (K->kind != KS_MATMUL) continue;
    K->strategy = MM_LOOPS;
    K->why = "loops: the only lowering built";
  }
}
