// Node storage, hash-consing, the op table and dtypes.
#include "ir.h"
#include <stdlib.h>
#include <string.h>

const OpInfo ir_ops[OP_COUNT] = {
#define OP(name, str, n, kind, flags, f32, f64, init) [OP_##name] = {str, n, kind, flags, f32, f64, init},
#include "ops.def"
#undef OP
};

Op ir_op_by_name(const char *s) {
  for (int i = 0; i < OP_COUNT; i++)
    if (!strcmp(ir_ops[i].name, s)) return (Op)i;
  return OP_COUNT;
}

static const char *dtype_names[DT_COUNT] = {"bool", "i32", "i64", "f32", "f64"};
static const size_t dtype_sizes[DT_COUNT] = {1, 4, 8, 4, 8};
const char *ir_dtype_name(DType t) { return t < DT_COUNT ? dtype_names[t] : "?"; }
size_t ir_dtype_size(DType t) { return dtype_sizes[t]; }
int ir_dtype_by_name(const char *s) {
  for (int i = 0; i < DT_COUNT; i++)
    if (!strcmp(dtype_names[i], s)) return i;
  return -1;
}
DType ir_promote(DType a, DType b) { return a > b ? a : b; }

IrCtx *ir_ctx_new(void) {
  IrCtx *c = calloc(1, sizeof *c);
  if (!c) abort();
  c->arena = arena_new();
  c->nbuckets = 4096;
  c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
  c->next_id = 1;
  if (!c->buckets) abort();
  return c;
}

void ir_ctx_free(IrCtx *c) {
  if (!c) return;
  arena_free(c->arena);
  free(c->buckets);
  free(c->nodes);
  free(c);
}

int ir_sym(IrCtx *c, const char *name) {
  for (int i = 0; i < c->nsyms; i++)
    if (!strcmp(c->symnames[i], name)) return i + 1;
  if (c->nsyms == 64) return 0;
  c->symnames[c->nsyms++] = arena_strdup(c->arena, name);
  return c->nsyms;
}

IrGraph *ir_graph_new(IrCtx *c, Node **outs, int nout, Node **ins, int nin) {
  IrGraph *g = arena_alloc(c->arena, sizeof *g);
  g->outs = arena_alloc(c->arena, sizeof(Node *) * (nout + 1));
  g->ins = arena_alloc(c->arena, sizeof(Node *) * (nin + 1));
  memcpy(g->outs, outs, sizeof(Node *) * nout);
  if (nin) memcpy(g->ins, ins, sizeof(Node *) * nin);
  g->nout = nout; g->nin = nin;
  g->donate = NULL;
  return g;
}

// ---- hash-consing -------------------------------------------------------------
static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t bytes_hash(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static uint64_t node_hash(const Node *n) {
  uint64_t h = mix(n->op, n->dtype);
  h = mix(h, n->ndim);
  for (int i = 0; i < n->ndim; i++) h = mix(mix(h, (uint64_t)n->shape[i].k), n->shape[i].sym);
  for (int i = 0; i < n->nsrc; i++) h = mix(h, n->src[i]->id);
  for (int i = 0; i < 3 * IR_MAXDIM; i++) h = mix(h, (uint64_t)n->a.i[i]);
  h = mix(h, n->a.u);
  if (n->a.data) h = mix(h, bytes_hash(n->a.data, n->a.nbytes));
  return h;
}

static int node_same(const Node *a, const Node *b) {
  if (a->op != b->op || a->dtype != b->dtype || a->ndim != b->ndim || a->nsrc != b->nsrc) return 0;
  for (int i = 0; i < a->ndim; i++)  // field by field: Dim has padding bytes
    if (a->shape[i].k != b->shape[i].k || a->shape[i].sym != b->shape[i].sym) return 0;
  for (int i = 0; i < a->nsrc; i++) if (a->src[i] != b->src[i]) return 0;
  if (memcmp(a->a.i, b->a.i, sizeof a->a.i) || a->a.u != b->a.u || a->a.nbytes != b->a.nbytes) return 0;
  if (a->a.nbytes && memcmp(a->a.data, b->a.data, a->a.nbytes)) return 0;
  return 1;
}

static void grow_buckets(IrCtx *c) {
  size_t nb = c->nbuckets * 2;
  Node **b = calloc(nb, sizeof *b);
  if (!b) abort();
  for (size_t i = 0; i < c->nbuckets; i++)
    for (Node *n = c->buckets[i], *next; n; n = next) {
      next = n->hnext;
      n->hnext = b[n->hash & (nb - 1)];
      b[n->hash & (nb - 1)] = n;
    }
  free(c->buckets);
  c->buckets = b; c->nbuckets = nb;
}

// Intern a node described by `t` (its src array may live on the stack).
Node *ir_intern(IrCtx *c, const Node *t) {
  Node tmp = *t;
  for (int i = tmp.ndim; i < IR_MAXDIM; i++) tmp.shape[i] = (Dim){0, 0};
  tmp.hash = node_hash(&tmp);
  for (Node *n = c->buckets[tmp.hash & (c->nbuckets - 1)]; n; n = n->hnext)
    if (n->hash == tmp.hash && node_same(n, &tmp)) return n;
  Node *n = arena_alloc(c->arena, sizeof *n);
  *n = tmp;
  n->src = arena_alloc(c->arena, sizeof(Node *) * (tmp.nsrc + 1));
  if (tmp.nsrc) memcpy(n->src, t->src, sizeof(Node *) * tmp.nsrc);
  if (tmp.a.nbytes) {
    void *d = arena_alloc(c->arena, tmp.a.nbytes);
    memcpy(d, tmp.a.data, tmp.a.nbytes);
    n->a.data = d;
  }
  if (tmp.a.name) n->a.name = arena_strdup(c->arena, tmp.a.name);
  if (c->nnodes == c->capnodes) {
    c->capnodes = c->capnodes ? c->capnodes * 2 : 1024;
    c->nodes = realloc(c->nodes, sizeof(Node *) * c->capnodes);
    if (!c->nodes) abort();
  }
  n->id = c->nnodes;
  c->nodes[c->nnodes++] = n;
  size_t b = n->hash & (c->nbuckets - 1);
  n->hnext = c->buckets[b];
  c->buckets[b] = n;
  if ((size_t)c->nnodes > c->nbuckets) grow_buckets(c);
  return n;
}

Node *ir_remake(IrCtx *c, const Node *proto, Node **src) {
  Node t = *proto;
  t.src = src;
  return ir_intern(c, &t);
}

// ---- queries ---------------------------------------------------------------------
int ir_shape_eq(const Node *a, const Node *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++) if (!dim_eq(a->shape[i], b->shape[i])) return 0;
  return 1;
}

int ir_dims_product(const Node *n, int from, int to, Dim *p) {
  *p = dim_c(1);
  for (int d = from; d < to; d++) {
    Dim x = n->shape[d];
    if (x.sym && p->sym && x.k && p->k) return 0;
    if (x.sym) p->sym = x.sym;
    if (__builtin_mul_overflow(p->k, x.k, &p->k)) return 0;
  }
  return 1;
}

int ir_numel_eq(const Node *a, const Node *b) {
  Dim x, y;
  return ir_shape_eq(a, b) || (ir_dims_product(a, 0, a->ndim, &x) && ir_dims_product(b, 0, b->ndim, &y) && dim_eq(x, y));
}

int64_t ir_reduce_terms(const Node *n) {
  const Node *s = n->src[0];
  int64_t terms = 1;
  for (int i = 0; i < s->ndim; i++) {
    if (!(n->a.i[0] & (1u << i))) continue;
    if (s->shape[i].sym) return 0;
    terms *= s->shape[i].k;
  }
  return terms;
}

int ir_numel_const(const Node *n, int64_t *out) {
  int64_t m = 1;
  for (int i = 0; i < n->ndim; i++) {
    if (n->shape[i].sym && n->shape[i].k) return 0;
    m *= n->shape[i].k;
  }
  *out = m;
  return 1;
}

double ir_const_at(const Node *n, int64_t i) {
  const void *d = n->a.data;
  switch (n->dtype) {
  case DT_BOOL: return ((const uint8_t *)d)[i];
  case DT_I32: return ((const int32_t *)d)[i];
  case DT_I64: return (double)((const int64_t *)d)[i];
  case DT_F32: return ((const float *)d)[i];
  default: return ((const double *)d)[i];
  }
}

int64_t ir_const_int_at(const Node *n, int64_t i) {
  const void *d = n->a.data;
  switch (n->dtype) {
  case DT_BOOL: return ((const uint8_t *)d)[i];
  case DT_I32: return ((const int32_t *)d)[i];
  case DT_I64: return ((const int64_t *)d)[i];
  case DT_F32: return (int64_t)((const float *)d)[i];
  default: return (int64_t)((const double *)d)[i];
  }
}

int ir_is_scalar_const(const Node *n, double *v) {
  while (n->op == OP_BROADCAST || n->op == OP_RESHAPE) n = n->src[0];
  int64_t m;
  if (n->op != OP_CONST || !ir_numel_const(n, &m) || m != 1) return 0;
  if (v) *v = ir_const_at(n, 0);
  return 1;
}

Node **ir_topo(IrCtx *c, Node **roots, int n, int *count) {
  // Iterative DFS with an explicit stack: graphs from long training loops are deep.
  uint8_t *seen = calloc(c->nnodes + 1, 1);
  Node **order = malloc(sizeof(Node *) * (c->nnodes + 1));
  Node **stack = malloc(sizeof(Node *) * (c->nnodes + 1));
  int *next = malloc(sizeof(int) * (c->nnodes + 1));
  if (!seen || !order || !stack || !next) abort();
  int no = 0;
  for (int r = 0; r < n; r++) {
    if (seen[roots[r]->id]) continue;
    int sp = 0;
    stack[sp++] = roots[r]; next[roots[r]->id] = 0; seen[roots[r]->id] = 1;
    while (sp) {
      Node *t = stack[sp - 1];
      if (next[t->id] < t->nsrc) {
        Node *s = t->src[next[t->id]++];
        if (!seen[s->id]) { seen[s->id] = 1; next[s->id] = 0; stack[sp++] = s; }
      } else {
        order[no++] = t;
        sp--;
      }
    }
  }
  free(seen); free(stack); free(next);
  *count = no;
  return order;
}
