// Internals shared by the C emitter's files.
#ifndef KILN_CGEN_INT_H
#define KILN_CGEN_INT_H
#include "codegen.h"
#include "ir/opmath.h"

typedef struct { char *s; size_t n, cap; } Str;
void str_put(Str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// How a loop names the element it is at: a linear index into the value's
// row-major layout, one index per axis, or both. Missing forms are derived on
// demand (and the derivation emitted once).
typedef struct {
  int id;
  int nd;
  Dim shape[IR_MAXDIM];
  char lin[24];               // "" until known
  char idx[IR_MAXDIM][24];    // idx[0][0] == 0 until known
  int has_idx;
} Index;

typedef struct { int node, index; char name[48]; } Memo;   // name: a temporary or a literal

typedef struct {
  const Schedule *s;
  IrCtx *c;
  Str *out;                   // the body being written
  int ind;                    // indentation depth
  int tmp, next_index;
  Memo *memo; int nmemo, capmemo;
  Index **indices; int nidx, capidx;
} Gen;

const char *cg_ctype(DType t);
void cg_dim(char *buf, size_t len, Dim d);                          // C expression of one dimension
void cg_prod(char *buf, size_t len, const Dim *shape, int from, int to);  // product of dims [from, to)
void cg_line(Gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *cg_tmp(Gen *g, char *buf);                                     // fresh name
Index *cg_index(Gen *g, int nd, const Dim *shape);
const char *cg_lin(Gen *g, Index *ix);
void cg_need_idx(Gen *g, Index *ix);
const char *cg_value(Gen *g, Node *n, Index *ix);    // the value of n at ix (loads buffers)
const char *cg_compute(Gen *g, Node *n, Index *ix);  // n's own op at ix, even if n has a buffer
void cg_literal(char *buf, size_t len, DType t, double v);
void cg_template(char *buf, size_t len, const char *tpl, const char *const *args, DType t);  // $0 $1 $2 -> args, $t -> t's name
const char *cg_op_text(Op op, DType operands);      // the op's c_f32 or c_f64 text
extern const char cg_philox_text[];                  // philox_text.c: the random numbers, for both preludes

// From cgen.c, for the CUDA emitter (cuda.c): a kernel's views, its shape of loop;
// from cexpr.c, a reduction's starting value, accumulator type and step.
int cg_view_of(const Schedule *s, Node *n, char *off, char (*st)[96]);   // offset and strides over a buffer
int cg_declare_view(Gen *g, Node *n, const char *p);                     // `P off`, `P s0`..; the buffer
int cg_flat_kernel(const Schedule *s, const Kernel *K);                  // reads all at the element it writes
// From order.c: the axis of [split, nd) an elementwise kernel runs innermost (nd - 1: its last).
int cg_loop_order(const Schedule *s, const Kernel *K, int split);
int cg_reduce_contiguous(const Schedule *s, const Kernel *K);
void cg_acc_init(char *buf, size_t len, Node *n, DType acc);
DType cg_reduce_acc(const Node *n);                                      // f32 sums in double (counts exact in f32)
void cg_reduce_step(Gen *g, Node *n, DType acc, const char *a, const char *v);   // a = op(a, v)
// A row op's row `row` of x (every axis but ax) as offsets: xo into x (from
// xoff and its strides xs<i>), oo into the contiguous output and, with
// labels, lo_ into them (strides ls<i>; x's shape without its last axis).
void cg_row_offsets(Gen *g, Node *x, int ax, int labels);
// layout(D, at): the workspace slots' offsets (at[nslots]: the scratch, with
// scratch = 1) and the total bytes, as a static C function (cgen.c).
void cg_emit_layout(const Schedule *s, Str *h, int scratch);
// The host function's buffer addresses: each buffer b as `B[b]` (B: "A.b", "b"), a
// temporary at `ws + at[slot]`, an argument from in/cst/out; then, for each
// output computed over a donated input, copy(h, output, input, bytes) writes the
// statement that starts it as a copy of that input when their storage differs.
void cg_emit_buffers(const Schedule *s, Str *h, const char *B, void (*copy)(Str *h, int dst, int src, const char *bytes));
// text (n bytes, freed) with each KILN_PFX replaced by kiln_<64-bit FNV-1a hash
// of the text as it is>, also written to pfx: entry points are named after
// what they compute, so equal programs share compiled code and names.
char *cg_stamp(char *text, size_t n, char pfx[32]);

#endif
