// Fusion: decides which values live in buffers and groups the rest into the
// loop nests of the kernels that read them (elementwise chains, reduction
// inputs, data movement as index arithmetic). Needs: an optimized graph whose
// inputs are all in g->ins. Makes: a Schedule with kernels in execution order.
#include "passes.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
  Schedule *s;
  int *users;        // by node id: number of consuming edges
  int windows;       // products may read a conv's windows from its image
} Fuse;

static int add_buf(Schedule *s, BufKind kind, Node *n, int arg) {
  s->bufs = realloc(s->bufs, sizeof(Buffer) * (s->nbufs + 1));
  if (!s->bufs) abort();
  s->bufs[s->nbufs] = (Buffer){kind, n, arg, -1, -1, -1, -1};
  return s->nbufs++;
}

static int is_arg_leaf(Node *n) {
  int64_t m;
  return n->op == OP_INPUT || (n->op == OP_CONST && !(ir_numel_const(n, &m) && m <= 1));
}

// Give n a temp buffer (a kernel will compute it), if it has none yet.
static void materialize(Schedule *s, Node *n) {
  if (s->buf_of[n->id] < 0) s->buf_of[n->id] = add_buf(s, BUF_TEMP, n, -1);
}

// Matmul and row kernels read their operands several times, so an operand must
// be a strided view of a buffer; otherwise the node under the views gets one.
static void need_view(Schedule *s, Node *n) {
  Node *base;
  if (sched_view_base(s, n, &base)) return;
  Node *m = n;
  while ((m->op == OP_TRANSPOSE || m->op == OP_BROADCAST || m->op == OP_SLICE ||
          (m->op == OP_RESHAPE && sched_unit_reshape(m))) && sched_buf(s, m->src[0]) < 0)
    m = m->src[0];
  // A reshape's source in its own layout is the same memory, and its richer
  // shape gives the kernel that fills it loops without divisions (im2col's
  // [N, OH, OW, C, KH, KW] windows rather than their [N*OH*OW, C*KH*KW] matrix).
  if (m->op == OP_RESHAPE && sched_buf(s, m->src[0]) < 0) m = m->src[0];
  materialize(s, m);
}

// A contiguous buffer in n's own layout: n's buffer, or a reshape of one.
static void need_dense(Schedule *s, Node *n) {
  if (sched_dense(s, n)) return;
  materialize(s, n);
}

static int expands(Node *bc) {
  Node *src = bc->src[0];
  for (int d = 0; d < bc->ndim; d++)
    if (dim_is(src->shape[d], 1) && !dim_is(bc->shape[d], 1)) return 1;
  return 0;
}

// A fused expression deeper than this is cut with a buffer: the emitter
// walks expressions recursively, and a 10,000-op chain must not overflow it.
enum { MAX_FUSED_DEPTH = 256 };

// A reduction over a window of at most this many terms, read by one kernel,
// is computed where it is read instead of in a kernel of its own: max
// pooling's tie count, read by its gradient's mask, which reads the same
// window's values anyway (so they are in cache). A pass over the pooled
// layer's input and a buffer written and read back go away (the CNN's two
// counts: 1.5 ms of its 70 ms step at one thread).
enum { INLINE_REDUCE_TERMS = 9 };

static int small_reduction(const Fuse *f, Node *n) {
  if ((n->op != OP_SUM && n->op != OP_PROD && n->op != OP_RMAX && n->op != OP_RMIN) || f->users[n->id] != 1) return 0;
  int64_t terms = ir_reduce_terms(n);
  return terms && terms <= INLINE_REDUCE_TERMS;
}

// An inline reduction is recomputed for every element of the kernel that reads
// it, so it gets its buffer back where that costs: when the kernel has more
// than INLINE_REDUCE_TERMS elements per value of the reduction (a sum over 8
// rows read broadcast over 1000 columns would be computed 1000 times), or
// when its count is unknown; when it is read under another inline reduction;
// and when the kernel only moves data (a transpose of max pooling's output),
// whose strided walk makes each of its reads a window of strided reads (the
// CNN's pooled [N, 7, 7, 64] to NCHW: 0.9 -> 1.3 ms). Pooling's tie count is
// read by a mask over the window's pixels: 4 elements per value of a 2x2 window.
static int expands_much(const Node *root, const Node *r) {
  Dim a, b;
  if (!ir_dims_product(root, 0, root->ndim, &a) || !ir_dims_product(r, 0, r->ndim, &b)) return 1;
  if (a.sym != b.sym || !b.k || a.k % b.k) return 1;
  return a.k / b.k > INLINE_REDUCE_TERMS;
}

static void keep_costly(Schedule *s, Node *root, Node *n, int under, int *seen, int stamp) {
  if (n != root && (seen[n->id] == stamp || sched_buf(s, n) >= 0)) return;
  seen[n->id] = stamp;
  if (n != root && ir_ops[n->op].kind == K_REDUCE) {
    if (under || ir_ops[root->op].kind == K_MOVE || expands_much(root, n)) {
      materialize(s, n);
      keep_costly(s, n, n, 0, seen, -n->id - 1);   // a kernel now: what it reads inline is checked against it
      return;
    }
    under = 1;
  }
  for (int i = 0; i < n->nsrc; i++) keep_costly(s, root, n->src[i], under, seen, stamp);
}

static void keep_costly_reductions(Schedule *s, Node **order, int count) {
  int *seen = calloc(s->nid + 1, sizeof(int));   // per kernel: a view read by two is walked in each
  if (!seen) abort();
  for (int i = 0; i < count; i++)
    if (sched_buf(s, order[i]) >= 0 && ir_ops[order[i]->op].kind != K_LEAF) keep_costly(s, order[i], order[i], 0, seen, i + 1);
  free(seen);
}

// A value several kernels read is computed again in each of them when that
// moves less memory than writing it once and reading it back: a few cheap
// ops over buffers that are at most as many (rematerialization). Batch
// normalization's centred, normalized and shifted values each had a pass of
// their own (written, then read by the statistics, the next step and the
// gradient); now those read the convolution's output. With R readers and F
// full-size buffers under the expression, that is R * F reads against F
// reads, a write and R reads. Not a value computed from a product's result:
// the product's epilogue writes it from the hot tile at the cost of the
// write alone, and its readers may be windows that would redo it per tap
// (redoing the CNN's conv + bias under pooling's windows and its gradient's
// masks made its step 1.5-2% slower).
enum { REMAT_OPS = 4, REMAT_FULL = 4 };

static int cheap_op(Op op) {
  switch (op) {
  case OP_NEG: case OP_ABS: case OP_RELU: case OP_NOT: case OP_CAST: case OP_ADD: case OP_SUB: case OP_MUL:
  case OP_MAXIMUM: case OP_MINIMUM: case OP_LT: case OP_LE: case OP_GT: case OP_GE: case OP_EQ: case OP_NE:
  case OP_AND: case OP_OR: case OP_WHERE:
    return 1;
  default:
    return 0;
  }
}

typedef struct { Dim size; int ops, nfull; Node *full[REMAT_FULL]; } Remat;

// Walks n's inline expression: 0 if all of it is cheap to do again.
static int remat_walk(const Schedule *s, Node *root, Node *n, Remat *r) {
  if (n != root && sched_buf(s, n) >= 0) {
    Dim d;
    Node *b = n;
    while (b->op == OP_RESHAPE && sched_buf(s, b->src[0]) >= 0) b = b->src[0];
    if (b->op == OP_MATMUL) return -1;   // the product's epilogue writes it while the tile is hot
    if (!ir_dims_product(n, 0, n->ndim, &d) || !dim_eq(d, r->size)) return 0;   // a smaller value, read broadcast
    for (int i = 0; i < r->nfull; i++)
      if (r->full[i] == n) return 0;
    if (r->nfull == REMAT_FULL) return -1;
    r->full[r->nfull++] = n;
    return 0;
  }
  switch (ir_ops[n->op].kind) {
  case K_LEAF:
    return n->op == OP_RNG ? -1 : 0;
  case K_MOVE:
    if (n->op != OP_RESHAPE && n->op != OP_BROADCAST) return -1;
    return remat_walk(s, root, n->src[0], r);
  case K_EW:
    if (!cheap_op(n->op) || ++r->ops > REMAT_OPS) return -1;
    for (int i = 0; i < n->nsrc; i++)
      if (remat_walk(s, root, n->src[i], r) < 0) return -1;
    return 0;
  default:
    return -1;
  }
}

static int recompute(const Fuse *f, Node *n) {
  Remat r = {.ops = 0, .nfull = 0};
  int readers = f->users[n->id];
  if (!ir_dims_product(n, 0, n->ndim, &r.size) || remat_walk(f->s, n, n, &r) < 0) return 0;
  return readers * r.nfull <= r.nfull + 1 + readers;
}

static void decide(Fuse *f, Node **order, int count) {
  Schedule *s = f->s;
  int *depth = calloc(s->nid + 1, sizeof(int));   // inline expression depth, by node id
  if (!depth) abort();
  for (int i = 0; i < count; i++) {
    Node *n = order[i];
    OpKind k = ir_ops[n->op].kind;
    int dd = 0;
    for (int j = 0; j < n->nsrc; j++)
      if (sched_buf(s, n->src[j]) < 0 && depth[n->src[j]->id] > dd) dd = depth[n->src[j]->id];
    depth[n->id] = dd + 1;
    if (depth[n->id] > MAX_FUSED_DEPTH && k != K_LEAF) { materialize(s, n); depth[n->id] = 0; }
    if ((k == K_REDUCE && !small_reduction(f, n)) || k == K_MATMUL || k == K_ROW || k == K_SCATTER) materialize(s, n);
    // Recomputing a shared value in every reader costs more than a buffer.
    if (k == K_EW && f->users[n->id] > 1 && !recompute(f, n)) materialize(s, n);
    if (n->op == OP_RNG && f->users[n->id] > 1) materialize(s, n);
    // A value read broadcast is computed once per copy unless it has a buffer:
    // an elementwise chain under reshapes, random numbers under transposes too
    // (a draw is ten rounds of Philox, a Box-Muller one two polynomials more;
    // the direct lowering's kernel gradient reads dY transposed, once per tap:
    // 23 -> 2.9 ms for a 3x3 layer's against normal() at batch 32, when
    // each draw was a call into the runtime). Cheap arithmetic read through a
    // transpose stays inline: max pooling's gradient over its tie count,
    // broadcast over the 2x2 window, would otherwise be a buffer of its own.
    if (n->op == OP_BROADCAST && expands(n)) {
      Node *m = n->src[0];
      int moved = 0;
      while (m->op == OP_RESHAPE || m->op == OP_TRANSPOSE) moved |= m->op == OP_TRANSPOSE, m = m->src[0];
      if ((ir_ops[m->op].kind == K_EW && !moved) || m->op == OP_RNG) materialize(s, m);
    }
    if (k == K_MATMUL) {
      // Implicit im2col: the GEMM packs the windows from the image, which
      // must then be a view (80 MB of windows not written and read back for
      // the CNN's second layer, whose image is 3.2 MB).
      int taps_rows;
      Node *w = f->windows ? sched_mm_windows(s, n, &taps_rows) : NULL;
      need_view(s, w ? w->src[0] : n->src[0]);
      need_view(s, n->src[1]);
    }
    if (k == K_ROW) for (int j = 0; j < n->nsrc; j++) need_view(s, n->src[j]);
    if (k == K_SCATTER) for (int j = 0; j < n->nsrc; j++) need_dense(s, n->src[j]);
    // Operands read many times per result: a buffer, not a recomputed expression.
    if (n->op == OP_GATHER) need_view(s, n->src[0]);
    // Over disjoint windows a pixel reads one position, each position read
    // once: the operand fuses in (pooling's routed gradient) at no extra cost.
    if (n->op == OP_COL2IM && !ir_windows_disjoint(n->a.i)) {
      need_view(s, n->src[0]);
      // Rows of windows in their own layout (im2col's gradient): a pixel's terms
      // are scattered a row apart, so the kernel adds each row into the image
      // instead (cgen.c's col2im_kernel). A transposed view (the kernel
      // lowering's channel-tap-major Z) is read along OW by the fused gather.
      if (sched_col2im_rows(s, n)) materialize(s, n);
    }
    if (n->op == OP_IM2COL && (n->a.i[0] > n->a.i[2] || n->a.i[1] > n->a.i[3])) need_view(s, n->src[0]);
    if (sched_buf(s, n) >= 0) depth[n->id] = 0;
  }
  free(depth);
}

static void add_kernel(Schedule *s, Node *n, int out) {
  KernelKind kind = KS_EW;
  switch (ir_ops[n->op].kind) {
  case K_REDUCE: kind = KS_REDUCE; break;
  case K_MATMUL: kind = KS_MATMUL; break;
  case K_ROW: kind = KS_ROW; break;
  case K_SCATTER: kind = KS_SCATTER; break;
  default: break;
  }
  s->ks = realloc(s->ks, sizeof(Kernel) * (s->nk + 1));
  if (!s->ks) abort();
  s->ks[s->nk++] = (Kernel){.kind = kind, .node = n, .out = out};
}

// The buffers a kernel reads: every buffer its fused expression tree reaches.
static void collect_reads(Schedule *s, Kernel *K, uint8_t *seen, Node **stack) {
  int sp = 0;
  for (int i = 0; i < K->node->nsrc; i++) stack[sp++] = K->node->src[i];
  while (sp) {
    Node *n = stack[--sp];
    if (seen[n->id]) continue;
    seen[n->id] = 1;
    int b = sched_buf(s, n);
    if (b >= 0) {
      K->reads = realloc(K->reads, sizeof(int) * (K->nreads + 1));
      if (!K->reads) abort();
      K->reads[K->nreads++] = b;
      continue;
    }
    for (int i = 0; i < n->nsrc; i++) stack[sp++] = n->src[i];  // each node pushed once per edge
  }
}

Schedule *pass_fuse(IrCtx *c, IrGraph *g, const LowerOpts *o) {
  Schedule *s = calloc(1, sizeof *s);
  if (!s) abort();
  s->ctx = c; s->g = g;
  int count;
  Node **order = ir_topo(c, g->outs, g->nout, &count);
  s->nid = c->nnodes;
  s->buf_of = malloc(sizeof(int) * (s->nid + 1));
  Fuse f = {s, calloc(s->nid + 1, sizeof(int)), o && o->gemm && o->windows};
  if (!s->buf_of || !f.users) abort();
  for (int i = 0; i < s->nid; i++) s->buf_of[i] = -1;
  for (int i = 0; i < count; i++)
    for (int j = 0; j < order[i]->nsrc; j++) f.users[order[i]->src[j]->id]++;
  // Arguments first: inputs in call order, then big constants.
  for (int i = 0; i < g->nin; i++) s->buf_of[g->ins[i]->id] = add_buf(s, BUF_INPUT, g->ins[i], i);
  for (int i = 0; i < count; i++) {
    Node *n = order[i];
    if (n->op == OP_CONST && is_arg_leaf(n)) {
      s->consts = realloc(s->consts, sizeof(Node *) * (s->nconst + 1));
      if (!s->consts) abort();
      s->consts[s->nconst] = n;
      s->buf_of[n->id] = add_buf(s, BUF_CONST, n, s->nconst++);
    }
  }
  // Outputs computed by a kernel are written straight into the caller's buffer.
  int *out_buf = malloc(sizeof(int) * (g->nout + 1));
  if (!out_buf) abort();
  for (int i = 0; i < g->nout; i++) {
    Node *o = g->outs[i];
    out_buf[i] = -1;
    if (sched_buf(s, o) < 0) {
      out_buf[i] = add_buf(s, BUF_OUTPUT, o, i);
      s->buf_of[o->id] = out_buf[i];
    }
  }
  decide(&f, order, count);
  keep_costly_reductions(s, order, count);
  for (int i = 0; i < count; i++) {
    int b = s->buf_of[order[i]->id];
    if (b >= 0 && (s->bufs[b].kind == BUF_TEMP || s->bufs[b].kind == BUF_OUTPUT)) add_kernel(s, order[i], b);
  }
  // Outputs that are arguments or repeat an earlier output are copied.
  for (int i = 0; i < g->nout; i++) {
    if (out_buf[i] >= 0) continue;
    int b = add_buf(s, BUF_OUTPUT, g->outs[i], i);
    Node *o = g->outs[i];
    add_kernel(s, o, b);
    s->ks[s->nk - 1].kind = KS_EW;  // a copy: the value already has a buffer
    s->ks[s->nk - 1].copy = 1;
  }
  uint8_t *seen = calloc(s->nid + 1, 1);
  // Each edge is pushed at most once (a node expands once), so this bounds the stack.
  int edges = 1;
  for (int i = 0; i < count; i++) edges += order[i]->nsrc;
  Node **stack = malloc(sizeof(Node *) * edges);
  if (!seen || !stack) abort();
  for (int k = 0; k < s->nk; k++) {
    Kernel *K = &s->ks[k];
    memset(seen, 0, s->nid + 1);
    if (K->copy) {
      K->reads = malloc(sizeof(int));
      K->reads[0] = sched_buf(s, K->node);
      K->nreads = 1;
    } else {
      collect_reads(s, K, seen, stack);
    }
  }
  free(stack); free(seen); free(out_buf); free(order); free(f.users);
  return s;
}

void sched_free(Schedule *s) {
  if (!s) return;
  for (int k = 0; k < s->nk; k++) free(s->ks[k].reads);
  free(s->ks); free(s->bufs); free(s->buf_of); free(s->consts);
  free(s);
}
