// The optimizing passes. Each is a function from graph to graph (nodes are
// immutable and hash-consed, so a pass rebuilds what it changes and shares the
// rest), each in its own file with a one-line contract at its top.
#ifndef KILN_PASSES_H
#define KILN_PASSES_H
#include "ir/ir.h"

// ---- rewrite.c: the engine the rewriting passes share --------------------------
// Rebuilds g bottom-up: each node gets its rewritten operands, then `rule` may
// replace it (return NULL to keep it); a replacement is rewritten again until
// no rule fires. Returns NULL with c->err set if a rule failed.
typedef Node *(*RewriteRule)(IrCtx *c, Node *n, void *ud);
IrGraph *pass_rewrite(IrCtx *c, IrGraph *g, RewriteRule rule, void *ud);
// Replace nodes: every occurrence of from[i] becomes to[i] (same shape/dtype).
IrGraph *pass_substitute(IrCtx *c, IrGraph *g, Node **from, Node **to, int n);
Node *ir_substitute(IrCtx *c, Node *root, Node **from, Node **to, int n);

// ---- autodiff.c: reverse-mode differentiation producing IR ---------------------
// d(sum(seed * y))/d wrt[i] for each i, as IR (zeros where y does not depend on
// wrt[i]). seed NULL means ones (y scalar: the plain gradient). The result is
// ordinary IR: it can be optimized, compiled and differentiated again.
// Returns 0, or -1 with c->err set (e.g. y not differentiable w.r.t. an int input).
int pass_grad(IrCtx *c, Node *y, Node *seed, Node **wrt, int nwrt, Node **out);

// ---- the optimizing pipeline, in order (pipeline.c runs them) --------------------
IrGraph *pass_fold(IrCtx *c, IrGraph *g);       // constant folding of small constant subgraphs
typedef struct { int64_t max_compute, max_reduce_in, max_move; } FoldLimits;  // elements
IrGraph *pass_fold_limits(IrCtx *c, IrGraph *g, const FoldLimits *lim);
IrGraph *pass_convgrad(IrCtx *c, IrGraph *g);   // an im2col conv's input gradient as a transposed conv
// Fewer input channels than this leave convgrad's product too narrow (its
// columns are the channels) to beat the col2im it saves: left alone.
#define CONVGRAD_MIN_CHANNELS 16
// For a window win ({kh, kw, sh, sw, pt, pl, dh, dw, fill}) of an h x w image
// giving oh x ow: convgrad's products as a share of h*w*kh*kw taps per image (1
// with stride 1, about 1/(sh*sw) with a stride); -1 where it leaves col2im
// (no window reads a pixel of the image).
double convgrad_share(const int64_t *win, int64_t h, int64_t w, int64_t oh, int64_t ow);
IrGraph *pass_simplify(IrCtx *c, IrGraph *g);   // algebraic identities
IrGraph *pass_stability(IrCtx *c, IrGraph *g);  // numerically stable forms
IrGraph *pass_dce(IrCtx *c, IrGraph *g);        // dead code: what the outputs do not reach
// A conv's bias gradient as a row of ones under its weights' gradient's windows^T
// (the pipeline runs it where products go to rt_gemm: LowerOpts.gemm).
IrGraph *pass_biasgrad(IrCtx *c, IrGraph *g);

// ---- scheduling: graph -> kernels -> buffers (ir/sched.h) -----------------------
#include "ir/sched.h"
// What the lowering may use, from the runtime it will run on (the pipeline
// asks; passes do not include runtime headers).
typedef struct {
  int gemm;          // large products go to rt_gemm_* (0: every product is generated loops)
  int epilogue;      // pass_epilogue runs (the pipeline's choice; KILN_FUSE_EPILOGUE=0 turns it off)
  int windows;       // a conv's window matrix is packed from the image by rt_gemm_*_win, not
                     // materialized (implicit im2col; KILN_IMPLICIT_IM2COL=0 turns it off)
  int winograd;      // such a product with a 2..5-tap kernel at stride 1 may run as Winograd's
                     // F(m, r) in 6x6 tiles (rt_gemm_f32_wino; KILN_WINOGRAD=0 turns it off)
} LowerOpts;
// Fusion into kernels; o (may be NULL: none of its options) says whether a
// product may read its windows from the image (o->gemm && o->windows).
Schedule *pass_fuse(IrCtx *c, IrGraph *g, const LowerOpts *o);
void pass_lower(Schedule *s, const LowerOpts *o); // lowering strategy per kernel
// How many times fewer multiplies Winograd's F(m, r) takes than a conv's window
// products (f32, forward or the weights' gradient, C input and O output
// channels), where pass_lower gives it them (KH x KW kernel, strides,
// dilations, OH x OW outputs); 0 where it does not (conv.c's cost model asks too).
double winograd_gain(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t oh, int64_t ow,
                     int64_t c, int64_t o);
void pass_epilogue(Schedule *s);                  // elementwise consumers of a GEMM run as its epilogue
void pass_plan(Schedule *s);                      // liveness-based buffer reuse, in place where safe

#endif
