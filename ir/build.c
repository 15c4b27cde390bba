// Builders: dtype promotion, NumPy broadcasting and shape inference. Errors
// are plain text in c->err (the front end adds file:line:col and a caret).
#include "ir.h"
#include <stdarg.h>
#include <string.h>

static Node *fail(IrCtx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return NULL;
}

static Node proto(Op op, DType t, int ndim, const Dim *shape) {
  Node n;
  memset(&n, 0, sizeof n);
  n.op = op; n.dtype = t; n.ndim = ndim;
  if (ndim) memcpy(n.shape, shape, sizeof(Dim) * ndim);
  return n;
}

// Every shape the builders make stays below IR_MAXNUMEL elements (per unit of
// its symbol), so no element count or byte size downstream can overflow.
static Node *mk(IrCtx *c, Node *t, Node **src, int nsrc) {
  t->src = src; t->nsrc = nsrc;
  int64_t m = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d].k < 0 || __builtin_mul_overflow(m, t->shape[d].k, &m) || m > IR_MAXNUMEL) {
      char b[256];
      return fail(c, "shape %s has too many elements (at most 2^48)", ir_shape_str(c, t->ndim, t->shape, b, sizeof b));
    }
  }
  return ir_intern(c, t);
}

static const char *shp(const IrCtx *c, const Node *n, char *buf) {
  return ir_shape_str(c, n->ndim, n->shape, buf, 128);
}

// ---- leaves -------------------------------------------------------------------
Node *ir_const(IrCtx *c, DType t, int ndim, const Dim *shape, const void *data) {
  Node n = proto(OP_CONST, t, ndim, shape);
  int64_t m;
  if (!ir_numel_const(&n, &m)) return fail(c, "a constant needs a concrete shape");
  n.a.data = data;
  n.a.nbytes = (size_t)m * ir_dtype_size(t);
  if (!n.a.nbytes) n.a.data = NULL;
  return mk(c, &n, NULL, 0);
}

Node *ir_scalar(IrCtx *c, DType t, double v) {
  union { uint8_t b; int32_t i; int64_t l; float f; double d; } u;
  switch (t) {
  case DT_BOOL: u.b = v != 0; break;
  case DT_I32: u.i = (int32_t)v; break;
  case DT_I64: u.l = (int64_t)v; break;
  case DT_F32: u.f = (float)v; break;
  default: u.d = v; break;
  }
  return ir_const(c, t, 0, NULL, &u);
}

Node *ir_input(IrCtx *c, const char *name, int role, DType t, int ndim, const Dim *shape) {
  Node n = proto(OP_INPUT, t, ndim, shape);
  n.a.u = c->next_id++;
  n.a.i[0] = role;
  n.a.name = name;
  return mk(c, &n, NULL, 0);
}

Node *ir_iota(IrCtx *c, DType t, int ndim, const Dim *shape, int axis) {
  Node n = proto(OP_IOTA, t, ndim, shape);
  n.a.i[0] = axis;
  return mk(c, &n, NULL, 0);
}

Node *ir_rng(IrCtx *c, DType t, int ndim, const Dim *shape, uint64_t seed, int normal) {
  if (!ir_is_float(t)) return fail(c, "random tensors must have a float dtype");
  Node n = proto(OP_RNG, t, ndim, shape);
  n.a.u = seed;
  n.a.i[0] = normal;
  return mk(c, &n, NULL, 0);
}

Node *ir_dimv(IrCtx *c, int sym) {
  Node n = proto(OP_DIMV, DT_I64, 0, NULL);
  n.a.i[0] = sym;
  return mk(c, &n, NULL, 0);
}

// ---- elementwise ------------------------------------------------------------------
Node *ir_cast(IrCtx *c, Node *a, DType t) {
  if (a->dtype == t) return a;
  Node n = proto(OP_CAST, t, a->ndim, a->shape);
  return mk(c, &n, &a, 1);
}

static Node *floatify(IrCtx *c, Node *a) { return ir_is_float(a->dtype) ? a : ir_cast(c, a, DT_F32); }

Node *ir_unary(IrCtx *c, Op op, Node *a) {
  int fl = ir_ops[op].flags;
  if (fl & F_FLOAT) a = floatify(c, a);
  if ((fl & F_LOGIC) && a->dtype != DT_BOOL) a = ir_cast(c, a, DT_BOOL);
  if (op == OP_NEG && a->dtype == DT_BOOL) a = ir_cast(c, a, DT_I32);
  Node n = proto(op, (fl & F_BOOL) ? DT_BOOL : a->dtype, a->ndim, a->shape);
  return mk(c, &n, &a, 1);
}

// Broadcast both shapes to one (NumPy: align right, 1 stretches).
static int broadcast_shape(IrCtx *c, Node **v, int nv, int *ndim, Dim *out) {
  int nd = 0;
  for (int i = 0; i < nv; i++) if (v[i]->ndim > nd) nd = v[i]->ndim;
  for (int d = 0; d < nd; d++) {
    Dim r = dim_c(1);
    for (int i = 0; i < nv; i++) {
      int k = d - (nd - v[i]->ndim);
      if (k < 0) continue;
      Dim x = v[i]->shape[k];
      if (dim_is(x, 1)) continue;
      if (dim_is(r, 1)) { r = x; continue; }
      if (!dim_eq(r, x)) {
        char b1[128], b2[128];
        fail(c, "cannot broadcast shapes %s and %s", shp(c, v[0], b1), shp(c, v[i == 0 ? 1 : i], b2));
        return 0;
      }
    }
    out[d] = r;
  }
  *ndim = nd;
  return 1;
}

Node *ir_binary(IrCtx *c, Op op, Node *a, Node *b) {
  int fl = ir_ops[op].flags;
  Node *v[2] = {a, b};
  int nd; Dim shape[IR_MAXDIM];
  if (!broadcast_shape(c, v, 2, &nd, shape)) return NULL;
  DType t = ir_promote(a->dtype, b->dtype);
  if ((fl & F_FLOAT) && !ir_is_float(t)) t = DT_F32;
  if (fl & F_LOGIC) t = DT_BOOL;
  if (t == DT_BOOL && !(fl & (F_LOGIC | F_BOOL))) t = DT_I32;  // arithmetic on bools counts
  a = ir_cast(c, a, t);
  b = ir_cast(c, b, t);
  if (!(a = ir_broadcast(c, a, nd, shape)) || !(b = ir_broadcast(c, b, nd, shape))) return NULL;
  Node n = proto(op, (fl & F_BOOL) ? DT_BOOL : t, nd, shape);
  Node *src[2] = {a, b};
  return mk(c, &n, src, 2);
}

Node *ir_where(IrCtx *c, Node *cond, Node *a, Node *b) {
  Node *v[3] = {cond, a, b};
  int nd; Dim shape[IR_MAXDIM];
  if (!broadcast_shape(c, v, 3, &nd, shape)) return NULL;
  DType t = ir_promote(a->dtype, b->dtype);
  cond = ir_cast(c, cond, DT_BOOL);
  a = ir_cast(c, a, t);
  b = ir_cast(c, b, t);
  if (!(cond = ir_broadcast(c, cond, nd, shape)) || !(a = ir_broadcast(c, a, nd, shape)) ||
      !(b = ir_broadcast(c, b, nd, shape)))
    return NULL;
  Node n = proto(OP_WHERE, t, nd, shape);
  Node *src[3] = {cond, a, b};
  return mk(c, &n, src, 3);
}

// ---- reductions --------------------------------------------------------------------
Node *ir_reduce(IrCtx *c, Op op, Node *a, uint32_t axes, int keepdims) {
  Dim shape[IR_MAXDIM];
  int nd = 0;
  if (a->ndim < 32 && (axes >> a->ndim)) return fail(c, "reduction axis out of range for a %d-d tensor", a->ndim);
  if (op == OP_PROD || op == OP_SUM) {
    if (a->dtype == DT_BOOL) a = ir_cast(c, a, DT_I64);
    if (a->dtype == DT_I32) a = ir_cast(c, a, DT_I64);  // NumPy accumulates integers in 64 bits
  }
  for (int d = 0; d < a->ndim; d++) {
    if (axes & (1u << d)) {
      if ((op == OP_RMAX || op == OP_RMIN || op == OP_ARGMAX || op == OP_ARGMIN) && dim_is(a->shape[d], 0))
        return fail(c, "%s of an empty axis has no identity", ir_ops[op].name);
      if (keepdims) shape[nd++] = dim_c(1);
    } else {
      shape[nd++] = a->shape[d];
    }
  }
  if (!axes && (op == OP_ARGMAX || op == OP_ARGMIN)) return ir_broadcast(c, ir_scalar(c, DT_I64, 0), a->ndim, a->shape);
  if (!axes) return a;
  DType t = (op == OP_ARGMAX || op == OP_ARGMIN) ? DT_I64 : a->dtype;
  Node n = proto(op, t, nd, shape);
  n.a.i[0] = axes;
  n.a.i[1] = keepdims;
  return mk(c, &n, &a, 1);
}

// ---- movement ----------------------------------------------------------------------
// The product of dims as one Dim, if it stays of the form k*sym.
static int dims_product(const Dim *d, int n, Dim *out) {
  Dim p = dim_c(1);
  for (int i = 0; i < n; i++) {
    if (d[i].sym && p.sym && d[i].k && p.k) return 0;
    if (__builtin_mul_overflow(p.k, d[i].k, &p.k)) return 0;
    if (d[i].sym && d[i].k) p.sym = d[i].sym;
    if (!p.k) p.sym = 0;
  }
  *out = p;
  return 1;
}

Node *ir_reshape(IrCtx *c, Node *a, int ndim, const Dim *shape) {
  Dim want[IR_MAXDIM], total, known;
  char b1[128], b2[128];
  if (ndim > IR_MAXDIM) return fail(c, "at most %d dimensions", IR_MAXDIM);
  memcpy(want, shape, sizeof(Dim) * ndim);
  if (!dims_product(a->shape, a->ndim, &total)) return fail(c, "reshape of %s: the element count is not of the form k*SYMBOL", shp(c, a, b1));
  int hole = -1;
  for (int i = 0; i < ndim; i++) {
    if (want[i].k == -1 && !want[i].sym) {
      if (hole >= 0) return fail(c, "reshape: only one dimension may be -1");
      hole = i;
    } else if (want[i].k < 0) {
      return fail(c, "reshape: negative dimension %lld", (long long)want[i].k);
    }
  }
  if (hole >= 0) {
    Dim rest[IR_MAXDIM]; int nr = 0;
    for (int i = 0; i < ndim; i++) if (i != hole) rest[nr++] = want[i];
    if (!dims_product(rest, nr, &known) || !known.k) return fail(c, "reshape: cannot infer the -1 dimension");
    if (total.k % known.k || (known.sym && known.sym != total.sym))
      return fail(c, "cannot reshape %s into %s: the other dimensions do not divide its element count", shp(c, a, b1),
                  ir_shape_str(c, ndim, want, b2, 128));
    want[hole] = (Dim){total.k / known.k, known.sym ? 0 : total.sym};
  }
  if (!dims_product(want, ndim, &known) || !dim_eq(known, total) )
    return fail(c, "cannot reshape %s into %s: the element counts differ", shp(c, a, b1), ir_shape_str(c, ndim, want, b2, 128));
  Node n = proto(OP_RESHAPE, a->dtype, ndim, want);
  if (ir_shape_eq(&n, a)) return a;
  // A constant reshaped is the same bytes with another shape: one canonical form.
  if (a->op == OP_CONST && dims_product(want, ndim, &known) && !known.sym) return ir_const(c, a->dtype, ndim, want, a->a.data);
  if (a->op == OP_RESHAPE) a = a->src[0];  // reshape of a reshape is one reshape
  if (ir_shape_eq(&n, a)) return a;
  return mk(c, &n, &a, 1);
}

Node *ir_transpose(IrCtx *c, Node *a, const int *perm) {
  int p[IR_MAXDIM], seen = 0, ident = 1;
  Dim shape[IR_MAXDIM];
  for (int i = 0; i < a->ndim; i++) {
    p[i] = perm ? perm[i] : a->ndim - 1 - i;
    if (p[i] < 0) p[i] += a->ndim;
    if (p[i] < 0 || p[i] >= a->ndim || (seen & (1 << p[i])))
      return fail(c, "transpose: the axes are not a permutation of 0..%d", a->ndim - 1);
    seen |= 1 << p[i];
    shape[i] = a->shape[p[i]];
    if (p[i] != i) ident = 0;
  }
  if (ident) return a;
  Node n = proto(OP_TRANSPOSE, a->dtype, a->ndim, shape);
  for (int i = 0; i < a->ndim; i++) n.a.i[i] = p[i];
  return mk(c, &n, &a, 1);
}

Node *ir_broadcast(IrCtx *c, Node *a, int ndim, const Dim *shape) {
  char b1[128], b2[128];
  if (ndim < a->ndim) return fail(c, "cannot broadcast %s to %s", shp(c, a, b1), ir_shape_str(c, ndim, shape, b2, 128));
  if (ndim > a->ndim) {  // add leading axes of size 1 first: BROADCAST keeps the rank
    Dim s[IR_MAXDIM];
    int lead = ndim - a->ndim;
    for (int i = 0; i < ndim; i++) s[i] = i < lead ? dim_c(1) : a->shape[i - lead];
    if (!(a = ir_reshape(c, a, ndim, s))) return NULL;
  }
  int same = 1;
  for (int i = 0; i < ndim; i++) {
    if (dim_eq(a->shape[i], shape[i])) continue;
    if (!dim_is(a->shape[i], 1))
      return fail(c, "cannot broadcast %s to %s", shp(c, a, b1), ir_shape_str(c, ndim, shape, b2, 128));
    same = 0;
  }
  if (same) return a;
  if (a->op == OP_BROADCAST) a = a->src[0];
  Node n = proto(OP_BROADCAST, a->dtype, ndim, shape);
  return mk(c, &n, &a, 1);
}

Node *ir_slice(IrCtx *c, Node *a, const int64_t *start, const int64_t *count, const int64_t *step) {
  Node n = proto(OP_SLICE, a->dtype, a->ndim, a->shape);
  int ident = 1;
  for (int d = 0; d < a->ndim; d++) {
    if (count[d] < 0) {  // the whole axis
      n.a.i[d] = 0; n.a.i[IR_MAXDIM + d] = 1;
      continue;
    }
    Dim s = a->shape[d];
    if (s.sym && s.k) return fail(c, "cannot slice the symbolic dimension %s with constant bounds", c->symnames[s.sym - 1]);
    if (step[d] == 0) return fail(c, "slice step cannot be zero");
    if (count[d] > 0) {
      int64_t last = start[d] + (count[d] - 1) * step[d];
      if (start[d] < 0 || start[d] >= s.k || last < 0 || last >= s.k)
        return fail(c, "index out of range for axis %d of size %lld", d, (long long)s.k);
    }
    n.a.i[d] = start[d];
    n.a.i[IR_MAXDIM + d] = step[d];
    n.shape[d] = dim_c(count[d]);
    if (count[d] != s.k || step[d] != 1 || start[d] != 0) ident = 0;
  }
  if (ident) return a;
  return mk(c, &n, &a, 1);
}

Node *ir_pad(IrCtx *c, Node *a, const Dim *shape, const int64_t *start, const int64_t *step) {
  Node n = proto(OP_PAD, a->dtype, a->ndim, shape);
  int ident = 1;
  for (int d = 0; d < a->ndim; d++) {
    Dim s = a->shape[d];
    if (start[d] == 0 && step[d] == 1 && dim_eq(s, shape[d])) continue;
    ident = 0;
    if (step[d] == 0) return fail(c, "pad: step cannot be zero");
    if ((s.sym && s.k) || (shape[d].sym && shape[d].k)) return fail(c, "pad: a symbolic dimension can only be kept whole");
    int64_t last = start[d] + (s.k - 1) * step[d];
    if (s.k && (start[d] < 0 || start[d] >= shape[d].k || last < 0 || last >= shape[d].k))
      return fail(c, "pad: the placed elements fall outside the result");
  }
  if (ident) return a;
  for (int d = 0; d < a->ndim; d++) {
    n.a.i[d] = start[d];
    n.a.i[IR_MAXDIM + d] = step[d];
  }
  return mk(c, &n, &a, 1);
}

Node *ir_concat(IrCtx *c, Node **srcs, int n, int axis) {
  char b1[128], b2[128];
  if (n < 1) return fail(c, "concat needs at least one tensor");
  int nd = srcs[0]->ndim;
  if (axis < 0) axis += nd;
  if (axis < 0 || axis >= nd) return fail(c, "concat: axis out of range for %d-d tensors", nd);
  DType t = srcs[0]->dtype;
  for (int i = 1; i < n; i++) t = ir_promote(t, srcs[i]->dtype);
  Node **v = arena_alloc(c->arena, sizeof(Node *) * n);
  Dim shape[IR_MAXDIM];
  memcpy(shape, srcs[0]->shape, sizeof(Dim) * nd);
  shape[axis] = dim_c(0);
  for (int i = 0; i < n; i++) {
    Node *s = srcs[i];
    if (s->ndim != nd) return fail(c, "concat: tensors of shapes %s and %s differ in rank", shp(c, srcs[0], b1), shp(c, s, b2));
    for (int d = 0; d < nd; d++)
      if (d != axis && !dim_eq(s->shape[d], srcs[0]->shape[d]))
        return fail(c, "concat: shapes %s and %s differ outside axis %d", shp(c, srcs[0], b1), shp(c, s, b2), axis);
    Dim x = s->shape[axis];
    if (x.sym && x.k) return fail(c, "concat along a symbolic dimension is not supported");
    shape[axis].k += x.k;
    v[i] = ir_cast(c, s, t);
  }
  if (n == 1) return v[0];
  Node nn = proto(OP_CONCAT, t, nd, shape);
  nn.a.i[0] = axis;
  return mk(c, &nn, v, n);
}

// ---- matmul and row ops --------------------------------------------------------------
Node *ir_matmul(IrCtx *c, Node *a, Node *b) {
  char b1[128], b2[128];
  if (a->ndim == 0 || b->ndim == 0) return fail(c, "matmul needs tensors of rank 1 or more, not a scalar");
  Node *a0 = a, *b0 = b;
  int va = a->ndim == 1, vb = b->ndim == 1;
  if (va) { Dim s[2] = {dim_c(1), a->shape[0]}; a = ir_reshape(c, a, 2, s); }
  if (vb) { Dim s[2] = {b->shape[0], dim_c(1)}; b = ir_reshape(c, b, 2, s); }
  if (!a || !b) return NULL;
  if (!dim_eq(a->shape[a->ndim - 1], b->shape[b->ndim - 2]))
    return fail(c, "matmul: inner dimensions differ: %s @ %s", shp(c, a0, b1), shp(c, b0, b2));
  DType t = ir_promote(a->dtype, b->dtype);
  if (!ir_is_float(t)) t = DT_F32;
  a = ir_cast(c, a, t);
  b = ir_cast(c, b, t);
  // Broadcast the batch axes; the broadcast is a view, never copied.
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  Dim sa[IR_MAXDIM], sb[IR_MAXDIM], out[IR_MAXDIM];
  int la = nd - a->ndim, lb = nd - b->ndim;
  for (int d = 0; d < nd - 2; d++) {
    Dim x = d < la ? dim_c(1) : a->shape[d - la];
    Dim y = d < lb ? dim_c(1) : b->shape[d - lb];
    if (!dim_eq(x, y) && !dim_is(x, 1) && !dim_is(y, 1))
      return fail(c, "matmul: batch dimensions of %s and %s do not broadcast", shp(c, a0, b1), shp(c, b0, b2));
    out[d] = dim_is(x, 1) ? y : x;
    sa[d] = sb[d] = out[d];
  }
  sa[nd - 2] = a->shape[a->ndim - 2]; sa[nd - 1] = a->shape[a->ndim - 1];
  sb[nd - 2] = b->shape[b->ndim - 2]; sb[nd - 1] = b->shape[b->ndim - 1];
  if (!(a = ir_broadcast(c, a, nd, sa)) || !(b = ir_broadcast(c, b, nd, sb))) return NULL;
  out[nd - 2] = sa[nd - 2]; out[nd - 1] = sb[nd - 1];
  Node n = proto(OP_MATMUL, t, nd, out);
  Node *src[2] = {a, b};
  Node *r = mk(c, &n, src, 2);
  // Drop the axes that 1-D operands added (NumPy semantics).
  if (va || vb) {
    Dim s[IR_MAXDIM]; int k = 0;
    for (int d = 0; d < nd; d++) {
      if (va && d == nd - 2) continue;
      if (vb && d == nd - 1) continue;
      s[k++] = out[d];
    }
    r = ir_reshape(c, r, k, s);
  }
  return r;
}

Node *ir_row(IrCtx *c, Op op, Node *a, int axis) {
  if (!a) return NULL;   // an operand's builder failed (c->err says why)
  if (a->ndim == 0) return fail(c, "%s needs a tensor of rank 1 or more", ir_ops[op].name);
  if (axis < 0) axis += a->ndim;
  if (axis < 0 || axis >= a->ndim) return fail(c, "%s: axis out of range for a %d-d tensor", ir_ops[op].name, a->ndim);
  // cumsum keeps integers, summed as sum does (bool and i32 in i64); the others are float math
  if (op != OP_CUMSUM) a = floatify(c, a);
  else if (a->dtype == DT_BOOL || a->dtype == DT_I32) a = ir_cast(c, a, DT_I64);
  Node n = proto(op, a->dtype, a->ndim, a->shape);
  if (op == OP_LOGSUMEXP) {
    n.ndim = 0;
    for (int d = 0; d < a->ndim; d++) if (d != axis) n.shape[n.ndim++] = a->shape[d];
  }
  n.a.i[0] = axis;
  return mk(c, &n, &a, 1);
}

Node *ir_sce(IrCtx *c, Node *logits, Node *labels) {
  char b1[128], b2[128];
  if (logits->ndim < 1) return fail(c, "softmax_cross_entropy: logits need a class axis");
  if (ir_is_float(labels->dtype) || labels->dtype == DT_BOOL)
    return fail(c, "softmax_cross_entropy: labels must be integer class indices (i32 or i64), not %s", ir_dtype_name(labels->dtype));
  if (labels->ndim != logits->ndim - 1)
    return fail(c, "softmax_cross_entropy: labels %s must have the shape of logits %s without its last axis", shp(c, labels, b1), shp(c, logits, b2));
  for (int d = 0; d < labels->ndim; d++)
    if (!dim_eq(labels->shape[d], logits->shape[d]))
      return fail(c, "softmax_cross_entropy: labels %s must have the shape of logits %s without its last axis", shp(c, labels, b1), shp(c, logits, b2));
  logits = floatify(c, logits);
  Node n = proto(OP_SCE, logits->dtype, labels->ndim, labels->shape);
  n.a.i[0] = logits->ndim - 1;
  Node *src[2] = {logits, labels};
  return mk(c, &n, src, 2);
}

// ---- salted random numbers, windows, gathers ----------------------------------------
Node *ir_rng_salted(IrCtx *c, DType t, int ndim, const Dim *shape, uint64_t seed, int normal, Node *salt) {
  if (!ir_is_float(t)) return fail(c, "random tensors must have a float dtype");
  if (salt->ndim || ir_is_float(salt->dtype) || salt->dtype == DT_BOOL) return fail(c, "a random stream's salt must be an integer scalar");
  Node n = proto(OP_RNG, t, ndim, shape);
  n.a.u = seed;
  n.a.i[0] = normal;
  return mk(c, &n, &salt, 1);
}

static int concrete_dim(Dim d) { return !d.sym || !d.k; }

// Output size of a window over n elements: floor((n + pads - span) / stride) + 1.
static int64_t window_out(int64_t n, int64_t k, int64_t s, int64_t p0, int64_t p1, int64_t d) {
  int64_t span = d * (k - 1) + 1, room = n + p0 + p1 - span;
  return room < 0 ? -1 : room / s + 1;
}

static const char *check_window(const int64_t *w) {
  for (int i = 0; i < 2; i++) {
    if (w[i] < 1) return "the kernel size must be at least 1";
    if (w[2 + i] < 1) return "the stride must be at least 1";
    if (w[4 + i] < 0) return "padding cannot be negative";
    if (w[6 + i] < 1) return "the dilation must be at least 1";
  }
  return NULL;
}

Node *ir_im2col(IrCtx *c, Node *x, const int64_t *win, const int64_t *pad_end) {
  char b[128];
  if (x->ndim != 4) return fail(c, "expected a [N, C, H, W] tensor, got %s", shp(c, x, b));
  for (int d = 1; d < 4; d++)
    if (!concrete_dim(x->shape[d])) return fail(c, "channels, height and width must be known sizes, got %s", shp(c, x, b));
  const char *why = check_window(win);
  if (why) return fail(c, "%s", why);
  if (pad_end[0] < 0 || pad_end[1] < 0) return fail(c, "padding cannot be negative");
  int64_t oh = window_out(x->shape[2].k, win[0], win[2], win[4], pad_end[0], win[6]);
  int64_t ow = window_out(x->shape[3].k, win[1], win[3], win[5], pad_end[1], win[7]);
  if (oh < 1 || ow < 1)
    return fail(c, "a %lldx%lld window does not fit in %s with this padding and dilation", (long long)win[0], (long long)win[1], shp(c, x, b));
  Dim s[6] = {x->shape[0], dim_c(oh), dim_c(ow), x->shape[1], dim_c(win[0]), dim_c(win[1])};
  Node n = proto(OP_IM2COL, x->dtype, 6, s);
  memcpy(n.a.i, win, 9 * sizeof(int64_t));
  return mk(c, &n, &x, 1);
}

Node *ir_col2im(IrCtx *c, Node *cols, const int64_t *win, int64_t h, int64_t w) {
  char b[128];
  if (cols->ndim != 6 || !dim_is(cols->shape[4], win[0]) || !dim_is(cols->shape[5], win[1]))
    return fail(c, "col2im: expected [N, OH, OW, C, %lld, %lld] columns, got %s", (long long)win[0], (long long)win[1], shp(c, cols, b));
  const char *why = check_window(win);
  if (why) return fail(c, "%s", why);
  Dim s[4] = {cols->shape[0], cols->shape[3], dim_c(h), dim_c(w)};
  Node n = proto(OP_COL2IM, cols->dtype, 4, s);
  memcpy(n.a.i, win, 9 * sizeof(int64_t));
  return mk(c, &n, &cols, 1);
}

Node *ir_gather(IrCtx *c, Node *table, Node *idx) {
  char b[128];
  if (table->ndim < 1) return fail(c, "gather: the table must have rank 1 or more");
  if (ir_is_float(idx->dtype) || idx->dtype == DT_BOOL) return fail(c, "gather: indices must be integers (i32 or i64), got %s", ir_dtype_name(idx->dtype));
  if (idx->ndim + table->ndim - 1 > IR_MAXDIM) return fail(c, "gather: the result would have more than %d axes", IR_MAXDIM);
  if (!concrete_dim(table->shape[0])) return fail(c, "gather: the table's first axis must be a known size, got %s", shp(c, table, b));
  Dim s[IR_MAXDIM];
  memcpy(s, idx->shape, sizeof(Dim) * idx->ndim);
  memcpy(s + idx->ndim, table->shape + 1, sizeof(Dim) * (table->ndim - 1));
  Node n = proto(OP_GATHER, table->dtype, idx->ndim + table->ndim - 1, s);
  Node *src[2] = {table, idx};
  return mk(c, &n, src, 2);
}

Node *ir_scatter_add(IrCtx *c, Node *src_, Node *idx, Dim rows) {
  char b[128], b2[128];
  if (ir_is_float(idx->dtype) || idx->dtype == DT_BOOL) return fail(c, "scatter_add: indices must be integers (i32 or i64), got %s", ir_dtype_name(idx->dtype));
  if (!concrete_dim(rows) || rows.k < 0) return fail(c, "scatter_add: the number of rows must be a known size");
  if (src_->ndim < idx->ndim) return fail(c, "scatter_add: values %s do not start with the indices' shape %s", shp(c, src_, b), shp(c, idx, b2));
  for (int d = 0; d < idx->ndim; d++)
    if (!dim_eq(src_->shape[d], idx->shape[d])) return fail(c, "scatter_add: values %s do not start with the indices' shape %s", shp(c, src_, b), shp(c, idx, b2));
  int nd = 1 + src_->ndim - idx->ndim;
  Dim s[IR_MAXDIM];
  s[0] = rows;
  for (int d = idx->ndim; d < src_->ndim; d++) {
    if (!concrete_dim(src_->shape[d])) return fail(c, "scatter_add: the row shape must be known sizes, got %s", shp(c, src_, b));
    s[1 + d - idx->ndim] = src_->shape[d];
  }
  Node n = proto(OP_SCATTER_ADD, src_->dtype, nd, s);
  Node *src[2] = {src_, idx};
  return mk(c, &n, src, 2);
}
