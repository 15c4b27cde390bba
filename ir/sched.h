// The schedule: a graph lowered to a sequence of kernels over buffers. It is
// plain data (made by passes/fuse.c, lower.c and plan.c; read by the
// emitters), so the emitters depend on the IR alone.
#ifndef KILN_SCHED_H
#define KILN_SCHED_H
#include "ir.h"

typedef enum { KS_EW, KS_REDUCE, KS_MATMUL, KS_ROW, KS_SCATTER } KernelKind;
typedef enum { BUF_INPUT, BUF_CONST, BUF_OUTPUT, BUF_TEMP } BufKind;
// How lower.c lowers a matrix product: generated loops; a call to the runtime's
// rt_gemm_* (BLIS); or, for a symbolic size, both, chosen per run by the size.
typedef enum { MM_LOOPS, MM_GEMM, MM_BY_SIZE } MatmulStrategy;

typedef struct {
  BufKind kind;
  Node *node;        // the value it holds
  int arg;           // INPUT/CONST/OUTPUT: position among the graph's arguments of that kind
  int slot;          // TEMP: workspace slot (plan.c)
  int first, last;   // kernels that write it first and read it last (plan.c)
  int shares;        // OUTPUT: the input (argument position) it is computed over in place when the
                     // caller passes that input's storage for it (IrGraph.donate, plan.c); -1: none
} Buffer;

typedef struct {
  KernelKind kind;
  Node *node;        // the value this kernel computes (operands fused in where not materialized)
  int out;           // destination buffer
  int strategy;      // lower.c's choice for KS_MATMUL
  char why[160];     // and the reason, for `kiln ir --after=lower` ("" if none)
  int64_t gemm_from; // MM_BY_SIZE: rt_gemm once sched_mm_work's product reaches this
  int winograd;      // MM_GEMM over a conv's windows by Winograd's F(m, r) (rt_gemm_f32_wino)
  int *reads; int nreads;   // buffers read
  int inplace;       // writes over the buffer of reads[inplace-1] (plan.c), 0 if not
  int copy;          // copies node's own buffer into an output buffer
  int nepi;          // KS_MATMUL: the next nepi kernels run as its GEMM's epilogue (epilogue.c)
  int epi_of;        // 1 + the index of the matmul whose epilogue runs this kernel, 0 if none
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
// Returns 1 if n is a chain of TRANSPOSE/BROADCAST/SLICE, unit reshapes and
// merge views (and any RESHAPE right above the buffer) over a node that has a buffer; base is
// that node. So `[N, M, K] @ transpose(W)`, whose broadcast puts a reshape to
// [1, K, P] over the transpose, still reads W in place.
int sched_view_base(const Schedule *s, Node *n, Node **base);
// n is in a buffer in its own layout, contiguous: n's buffer, or a reshape of one.
int sched_dense(const Schedule *s, const Node *n);
// A RESHAPE that only adds or drops axes of length 1: every other axis keeps
// its stride, so it is a view of whatever its operand is a view of.
int sched_unit_reshape(const Node *n);
// A RESHAPE that only merges runs of axes (and adds or drops axes of length
// 1): last[i] is the last axis of n's operand (not of length 1) in output axis
// i's run, -1 for an output axis of length 1. 0 if n does more (splits axes).
int sched_reshape_runs(const Node *n, int *last);
// A RESHAPE that merges axes of TRANSPOSE(x), x contiguous (a buffer, or a
// reshape of one), where each merged run is consecutive axes of x in order:
// still a strided view (a merged run's stride is its last axis's). The weight
// gradient of a dense layer over [B, T, n] tokens reads its activations so,
// as the matrix [n, B*T], transposed.
int sched_merge_view(const Schedule *s, const Node *n);
// A batched matmul whose right operand is one matrix broadcast over every batch
// axis (a weight shared by a mini-batch): rt_gemm runs the batch as one product.
int sched_mm_shared_rhs(const Node *mm);
// The multiply-adds of one rt_gemm product of matmul mm, as dimensions to multiply:
// [batch axes...,] m, n, k, with the batch axes when sched_mm_shared_rhs. Returns the count.
int sched_mm_work(const Node *mm, Dim *factors);
// A COL2IM over overlapping windows whose window matrix is a buffer in its own
// layout (rows of windows: im2col's gradient): computed by its own kernel that
// adds each window's row into the image (cgen.c), not gathered where it is read.
int sched_col2im_rows(const Schedule *s, const Node *n);
// Implicit im2col: the IM2COL node whose window matrix is matmul mm's left
// operand, for rt_gemm_*_win to pack from the image. mm must be one float
// product (2-D) of reshape(IM2COL) as [N*OH*OW, C*KH*KW] (*taps_rows =
// SCHED_WIN_PIXELS), or of its transpose (SCHED_WIN_TAPS: a weight gradient),
// or the transpose of that matrix with a column of ones after it
// (SCHED_WIN_TAPS_ONES: a weight gradient with its bias's gradient as the last
// row, passes/biasgrad.c), with a zero fill, and neither the reshape, the
// concatenation nor the windows may have a buffer (s NULL: before scheduling,
// when nothing has one). NULL if not. *taps_rows is rt_gemm_*_win's argument
// (rt.h: 0, 1, RT_WIN_TAPS_ONES).
enum { SCHED_WIN_PIXELS, SCHED_WIN_TAPS, SCHED_WIN_TAPS_ONES };
Node *sched_mm_windows(const Schedule *s, const Node *mm, int *taps_rows);
// True if every path from root (a kernel's expression) to buffer node b goes
// through elementwise ops of b's shape only: the kernel reads element i of b
// exactly when it writes its own element i (b may be absent: then true).
int sched_reads_aligned(const Schedule *s, Node *root, Node *b);
static inline int sched_buf(const Schedule *s, const Node *n) { return n->id < s->nid ? s->buf_of[n->id] : -1; }
void sched_print(FILE *f, const Schedule *s);
void sched_free(Schedule *s);

#endif
