// The schedule: a graph lowered to a sequence of kernels over buffers. It is
// plain data (made by passes/fuse.c, lower.c and plan.c; read by the
// emitters), so the emitters depend on the IR alone.
#ifndef KILN_SCHED_H
#define KILN_SCHED_H
#include "ir.h"

typedef enum { KS_EW, KS_REDUCE, KS_MATMUL, KS_ROW, KS_SCATTER } KernelKind;
typedef enum { BUF_INPUT, BUF_CONST, BUF_OUTPUT, BUF_TEMP } BufKind;
typedef enum { MM_LOOPS } MatmulStrategy;   // more lowerings join here (BLIS, ...)

typedef struct {
  BufKind kind;
  Node *node;        // the value it holds
  int arg;           // INPUT/CONST/OUTPUT: position among the graph's arguments of that kind
  int slot;          // TEMP: workspace slot (plan.c)
  int first, last;   // kernels that write it first and read it last (plan.c)
} Buffer;

typedef struct {
  KernelKind kind;
  Node *node;        // the value this kernel computes (operands fused in where not materialized)
  int out;           // destination buffer
  int strategy;      // lower.c's choice for KS_MATMUL
  const char *why;   // and the reason, for `kiln ir --after=lower`
  int *reads; int nreads;   // buffers read
  int inplace;       // writes over the buffer of reads[inplace-1] (plan.c), 0 if not
  int copy;          // copies node's own buffer into an output buffer
} Kernel;

typedef struct {
  IrCtx *ctx;
  IrGraph *g;
  int nid;           // node ids below this have a buf_of entry
  int *buf_of;       // node id -> buffer holding its value, -1 if computed inline
  Buffer *bufs; int nbufs;
  Kernel *ks; int nk;
  Node **consts; int nconst;   // CONST nodes passed as arguments, in argument order
  int nslots;
} Schedule;

// A strided view: n read as base[offset + sum(idx[d] * stride[d])].
// Returns 1 if n is a chain of TRANSPOSE/BROADCAST/SLICE (and a RESHAPE right
// above the buffer) over a node that has a buffer; base is that node.
int sched_view_base(const Schedule *s, Node *n, Node **base);
static inline int sched_buf(const Schedule *s, const Node *n) { return n->id < s->nid ? s->buf_of[n->id] : -1; }
void sched_print(FILE *f, const Schedule *s);
void sched_free(Schedule *s);

#endif
