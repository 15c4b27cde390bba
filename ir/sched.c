// Schedule queries and printing (the text `kiln ir --after=fuse|lower|plan` shows).
#include "sched.h"
#include <stdlib.h>

int sched_view_base(const Schedule *s, Node *n, Node **base) {
  for (;;) {
    if (sched_buf(s, n) >= 0) { *base = n; return 1; }
    switch (n->op) {
    case OP_TRANSPOSE: case OP_BROADCAST: case OP_SLICE: n = n->src[0]; break;
    case OP_RESHAPE:
      if (sched_buf(s, n->src[0]) < 0) return 0;
      *base = n->src[0];
      return 1;
    default: return 0;
    }
  }
}

static const char *kind_name[] = {"elementwise", "reduce", "matmul", "row", "scatter"};
static const char *buf_kind[] = {"in", "const", "out", "tmp"};

void sched_print(FILE *f, const Schedule *s) {
  IrCtx *c = s->ctx;
  for (int b = 0; b < s->nbufs; b++) {
    Buffer *B = &s->bufs[b];
    fprintf(f, "buf%d %s", b, buf_kind[B->kind]);
    if (B->kind == BUF_TEMP) fprintf(f, " slot%d", B->slot);
    else fprintf(f, "%d", B->arg);
    fputc(' ', f);
    ir_print_shape(f, c, B->node);
    fputc('\n', f);
  }
  for (int k = 0; k < s->nk; k++) {
    Kernel *K = &s->ks[k];
    fprintf(f, "k%d %s -> buf%d reads", k, kind_name[K->kind], K->out);
    for (int r = 0; r < K->nreads; r++) fprintf(f, " buf%d", K->reads[r]);
    if (K->inplace) fprintf(f, " (in place)");
    if (K->why) fprintf(f, " [%s]", K->why);
    fputs("\n    ", f);
    ir_print_node(f, c, K->node);
  }
}
