// Argument helpers shared by the builtin tables (builtins.c, nn.c, data.c).
// Each fails at the argument's span with a message naming the builtin.
#ifndef KILN_BUILTINS_INT_H
#define KILN_BUILTINS_INT_H
#include "eval.h"
#include "runtime/data.h"
#include "runtime/model.h"

// The argument at position pos or keyword kw; NULL if absent.
Value *bi_arg(Args *a, int pos, const char *kw, Span *sp);
// Rejects unknown keywords (kws: NULL-terminated) and more than maxpos positional arguments.
void bi_check(Ev *ev, const Builtin *b, Args *a, int maxpos, const char *const *kws);
Value bi_need(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw, Span *sp);
Node *bi_tensor(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw);
Node *bi_float_tensor(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw);   // ints, bools as f32
int bi_bool(Ev *ev, Args *a, int pos, const char *kw, int def);
double bi_num(Ev *ev, Args *a, int pos, const char *kw, double def);
DType bi_dtype(Ev *ev, Args *a, int pos, DType def);
// A list of constant integers: a list literal, a 1-D constant tensor or one number.
int bi_ints(Ev *ev, Value v, Span sp, const char *what, int64_t *out, int max);
int bi_axis(Ev *ev, int64_t ax, int nd, Span sp);              // normalized axis
uint32_t bi_axes(Ev *ev, Args *a, int pos, Node *x);           // axis= as a bitmask; absent: all
Node *bi_count(Ev *ev, Node *x, uint32_t axes, DType t);       // elements over axes (symbolic sizes too)
const char *bi_dim_str(Ev *ev, Dim d, char *buf, size_t len);  // one size as text: 3, B, 2*B

// conv.c: conv2d's lowerings (see there) and the choice between them.
enum { CONV_IM2COL, CONV_KERNEL, CONV_DIRECT, CONV_NLOWER };
typedef struct {
  DType dtype;
  int64_t n, c, h, w, o, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, oh, ow;
  int batch_assumed;   // n is symbolic; the model and --tune take n = 32
  int input_grad;      // x reaches a parameter, so a training step computes x's gradient
} ConvShape;
const char *conv_lowering_name(int l);
int conv_lowering_by_name(const char *s);     // -1 if none
// The lowering for a layer: forced (>= 0), a tuned decision cached on disk,
// measured now under --tune, else the cost model's; `kiln ir` shows it and why.
int conv_choose(Ev *ev, const ConvShape *s, int forced);
Node *conv_build(IrCtx *c, int lowering, const ConvShape *s, Node *x, Node *w, const int64_t *win, const int64_t *pad_end);

Value b_einsum(Ev *ev, const Builtin *b, Args *a);   // einsum.c

const Builtin *nn_builtin_find(const char *name);     // nn.c: conv2d, pooling, dropout, ...
const Builtin *data_builtin_find(const char *name);   // data.c: idx, cifar10, csv, npy
const Builtin *nn_builtins(int *n);     // the whole tables
const Builtin *data_builtins(int *n);
// data.c: reads one split of a source with the runtime's loaders. 0, or -1 with a message.
int data_load(const DataSrc *d, int split, RtDataset *out, char *err, size_t len);
void data_spec(const DataSrc *d, int split, RtDataSpec *out);   // the runtime's description of a split

#endif
