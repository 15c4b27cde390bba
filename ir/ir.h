// Kiln IR: a graph of plain, immutable, hash-consed nodes (tinygrad's UOp,
// ggml's tensor), built from one op table (ops.def). Equal subgraphs are one
// node, so common-subexpression elimination is free. The IR knows no syntax,
// pass or target: builders infer dtypes and shapes and report shape errors as
// text in ctx->err; the caller adds the source location.
#ifndef KILN_IR_H
#define KILN_IR_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAXDIM 8
#define IR_MAXNUMEL (1LL << 48)   // elements in one tensor, at most

// ---- arena.c: bump allocation, freed in one call --------------------------
typedef struct Arena Arena;
Arena *arena_new(void);
void *arena_alloc(Arena *a, size_t n);      // zeroed, 16-byte aligned
char *arena_strdup(Arena *a, const char *s);
void arena_free(Arena *a);

// ---- ops --------------------------------------------------------------------
typedef enum {
#define OP(name, str, n, kind, flags, f32, f64, init) OP_##name,
#include "ops.def"
#undef OP
  OP_COUNT
} Op;

typedef enum { K_LEAF, K_EW, K_REDUCE, K_MOVE, K_MATMUL, K_ROW, K_SCATTER } OpKind;
enum { F_COMM = 1, F_ASSOC = 2, F_DIFF = 4, F_BOOL = 8, F_FLOAT = 16, F_LOGIC = 32, F_SPECIAL = 64 };

typedef struct {
  const char *name;   // surface name
  int nsrc;           // -1: variadic
  OpKind kind;
  int flags;
  const char *c_f32, *c_f64, *init;
} OpInfo;
extern const OpInfo ir_ops[OP_COUNT];
Op ir_op_by_name(const char *surface);     // OP_COUNT if none

// ---- dtypes (same order as the runtime's RtDType) -----------------------------
typedef enum { DT_BOOL, DT_I32, DT_I64, DT_F32, DT_F64, DT_COUNT } DType;
const char *ir_dtype_name(DType t);
int ir_dtype_by_name(const char *s);       // -1 if none
size_t ir_dtype_size(DType t);
static inline int ir_is_float(DType t) { return t == DT_F32 || t == DT_F64; }
DType ir_promote(DType a, DType b);        // bool < i32 < i64 < f32 < f64

// ---- shapes -----------------------------------------------------------------
// A dimension is k * symbol (sym 0: the constant k). One symbol per dimension
// covers batch sizes and their flattenings (B, 256*B) and keeps shape algebra
// exact; anything else is a compile-time error.
typedef struct { int64_t k; int32_t sym; } Dim;
static inline Dim dim_c(int64_t k) { Dim d = {k, 0}; return d; }
static inline int dim_eq(Dim a, Dim b) { return a.k == b.k && (a.sym == b.sym || a.k == 0); }
static inline int dim_is(Dim a, int64_t k) { return a.sym == 0 && a.k == k; }

// ---- nodes ------------------------------------------------------------------
enum { ROLE_INPUT, ROLE_PARAM, ROLE_VAR, ROLE_MODE };   // INPUT roles (VAR: autodiff's placeholders;
                                                       // MODE: the training flag and step number)

typedef struct {
  int64_t i[3 * IR_MAXDIM];  // per-op integers, see ops.def
  uint64_t u;                // INPUT id, RNG seed
  const void *data;          // CONST payload, row-major, arena-owned
  size_t nbytes;
  const char *name;          // INPUT name
} IrAttr;

typedef struct Node Node;
struct Node {
  Op op;
  DType dtype;
  int ndim;
  int nsrc;
  int id;                    // dense, in creation order: index for side tables
  Dim shape[IR_MAXDIM];
  Node **src;
  IrAttr a;
  uint64_t hash;
  Node *hnext;               // hash-cons chain
};

typedef struct {
  Arena *arena;
  Node **buckets; size_t nbuckets;
  Node **nodes; int nnodes, capnodes;    // by id
  char *symnames[64]; int nsyms;         // symbol 1..nsyms
  uint64_t next_id;
  char err[512];                         // the last builder error
} IrCtx;

IrCtx *ir_ctx_new(void);
void ir_ctx_free(IrCtx *c);
int ir_sym(IrCtx *c, const char *name);  // intern a symbolic dimension; 0 on overflow

// A graph: its outputs and its declared inputs (INPUT nodes, in call order).
// donate, if not NULL: per output, an input whose storage the caller may pass
// as that output's, having no use for the input's value after the call (a
// training step's new weights over the current ones), or -1. The memory plan
// says which of these it computes in place (Buffer.shares): only those may be
// given the same storage.
typedef struct { Node **outs; int nout; Node **ins; int nin; int *donate; } IrGraph;
IrGraph *ir_graph_new(IrCtx *c, Node **outs, int nout, Node **ins, int nin);

// ---- builders: infer dtype and shape; NULL with c->err set on error ---------
Node *ir_const(IrCtx *c, DType t, int ndim, const Dim *shape, const void *data);
Node *ir_scalar(IrCtx *c, DType t, double v);
Node *ir_input(IrCtx *c, const char *name, int role, DType t, int ndim, const Dim *shape);
Node *ir_iota(IrCtx *c, DType t, int ndim, const Dim *shape, int axis);
Node *ir_rng(IrCtx *c, DType t, int ndim, const Dim *shape, uint64_t seed, int normal);
Node *ir_dimv(IrCtx *c, int sym);
Node *ir_unary(IrCtx *c, Op op, Node *a);
Node *ir_binary(IrCtx *c, Op op, Node *a, Node *b);     // NumPy broadcasting, dtype promotion
Node *ir_where(IrCtx *c, Node *cond, Node *a, Node *b);
Node *ir_cast(IrCtx *c, Node *a, DType t);
Node *ir_reduce(IrCtx *c, Op op, Node *a, uint32_t axes, int keepdims);
Node *ir_reshape(IrCtx *c, Node *a, int ndim, const Dim *shape);  // one dim may be k=-1
Node *ir_transpose(IrCtx *c, Node *a, const int *perm);            // NULL: reverse the axes
Node *ir_broadcast(IrCtx *c, Node *a, int ndim, const Dim *shape);  // NumPy rules, leading axes added
Node *ir_slice(IrCtx *c, Node *a, const int64_t *start, const int64_t *count, const int64_t *step);
Node *ir_pad(IrCtx *c, Node *a, const Dim *shape, const int64_t *start, const int64_t *step);
Node *ir_concat(IrCtx *c, Node **srcs, int n, int axis);
Node *ir_matmul(IrCtx *c, Node *a, Node *b);          // NumPy matmul rules (1-D, batch broadcast)
Node *ir_row(IrCtx *c, Op op, Node *a, int axis);     // softmax, log_softmax, logsumexp (axis removed)
Node *ir_sce(IrCtx *c, Node *logits, Node *labels);   // softmax cross-entropy over the last axis
// RNG whose stream also depends on the integer scalar `salt`, read when the graph runs.
Node *ir_rng_salted(IrCtx *c, DType t, int ndim, const Dim *shape, uint64_t seed, int normal, Node *salt);
// Sliding windows of a [N, C, H, W] tensor (see ops.def): win = {kh, kw, sh, sw,
// pad top, pad left, dh, dw, fill}; pad_end = {bottom, right}.
Node *ir_im2col(IrCtx *c, Node *x, const int64_t *win, const int64_t *pad_end);
Node *ir_col2im(IrCtx *c, Node *cols, const int64_t *win, int64_t h, int64_t w);   // the adjoint
// Windows that never share a pixel (dilation 1, kernel <= stride on both axes):
// a pixel is then read by at most one window position, found by one division.
static inline int ir_windows_disjoint(const int64_t *win) {
  return win[6] == 1 && win[7] == 1 && win[0] <= win[2] && win[1] <= win[3];
}
Node *ir_gather(IrCtx *c, Node *table, Node *idx);                  // table[idx]: idx.shape + table.shape[1:]
Node *ir_scatter_add(IrCtx *c, Node *src, Node *idx, Dim rows);     // the adjoint: [rows] + src.shape[idx.ndim:]
// Intern a node described by t (shape, operands, attributes); the one constructor.
Node *ir_intern(IrCtx *c, const Node *t);
// Rebuild `proto` with new operands of the same shapes and dtypes (passes use it).
Node *ir_remake(IrCtx *c, const Node *proto, Node **src);

// ---- queries ---------------------------------------------------------------
int ir_shape_eq(const Node *a, const Node *b);
int ir_numel_const(const Node *n, int64_t *out);     // 1 if the element count is known
// The product of n's axes [from, to) as one Dim; 0 if it would take two symbols (B*T).
int ir_dims_product(const Node *n, int from, int to, Dim *p);
int ir_numel_eq(const Node *a, const Node *b);        // the same element count (1 if provably)
int64_t ir_reduce_terms(const Node *n);              // a reduction's terms per result; 0 if symbolic
int ir_is_scalar_const(const Node *n, double *v);    // CONST with one element, or a broadcast of one
double ir_const_at(const Node *n, int64_t i);        // element i of a CONST as double
int64_t ir_const_int_at(const Node *n, int64_t i);   // ... as an integer (exact for i64)
// Nodes reachable from roots, operands first.
Node **ir_topo(IrCtx *c, Node **roots, int n, int *count);

// ---- print.c ---------------------------------------------------------------
void ir_print_dim(FILE *f, const IrCtx *c, Dim d);
void ir_print_shape(FILE *f, const IrCtx *c, const Node *n);
char *ir_shape_str(const IrCtx *c, int ndim, const Dim *shape, char *buf, size_t len);
void ir_print_node(FILE *f, const IrCtx *c, const Node *n);
void ir_print_graph(FILE *f, const IrCtx *c, const IrGraph *g);

#endif
