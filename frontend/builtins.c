// Builtin functions. Ops in the op table are callable by their surface names
// (exp, maximum, sum, softmax, ...) through three generic handlers; the rest
// (shape functions, constructors, grad) have a handler each.
#include "builtins_int.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- arguments --------------------------------------------------------------------
// The argument at position pos or keyword kw; NULL if absent.
Value *bi_arg(Args *a, int pos, const char *kw, Span *sp) {
  if (pos >= 0 && pos < a->npos) { if (sp) *sp = a->pos_span[pos]; return &a->pos[pos]; }
  for (int i = 0; kw && i < a->nkw; i++)
    if (!strcmp(a->kw[i], kw)) { if (sp) *sp = a->kw_span[i]; return &a->kwv[i]; }
  return NULL;
}

// Rejects unknown keywords and too many positional arguments.
void bi_check(Ev *ev, const Builtin *b, Args *a, int maxpos, const char *const *kws) {
  if (a->npos > maxpos)
    ev_fail(ev, a->pos_span[maxpos], "%s takes at most %d positional argument%s: %s", b->name, maxpos, maxpos == 1 ? "" : "s", b->usage);
  for (int i = 0; i < a->nkw; i++) {
    int ok = 0;
    for (int k = 0; kws && kws[k]; k++) ok |= !strcmp(kws[k], a->kw[i]);
    int nk = 0;
    while (kws && kws[nk]) nk++;
    char hint[300];
    if (!ok)
      ev_fail(ev, a->kw_span[i], "%s has no keyword argument '%s'%s: %s", b->name, a->kw[i],
              ev_did_you_mean(hint, sizeof hint, ev_nearest(a->kw[i], kws, nk)), b->usage);
  }
}

Value bi_need(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw, Span *sp) {
  Value *v = bi_arg(a, pos, kw, sp);
  if (!v) ev_fail(ev, a->span, "%s is missing its argument '%s': %s", b->name, kw, b->usage);
  return *v;
}

Node *bi_tensor(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw) {
  Span sp;
  Value v = bi_need(ev, b, a, pos, kw, &sp);
  return ev_tensor(ev, v, sp, kw);
}

// A tensor argument for float math: integers and bools become f32.
Node *bi_float_tensor(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw) {
  Node *x = bi_tensor(ev, b, a, pos, kw);
  return ir_is_float(x->dtype) ? x : ir_cast(ev->c, x, DT_F32);
}

int bi_bool(Ev *ev, Args *a, int pos, const char *kw, int def) {
  Span sp;
  Value *v = bi_arg(a, pos, kw, &sp);
  if (!v) return def;
  double x;
  Node *t = ev_raw(ev, *v, sp, kw);
  if (!ir_is_scalar_const(t, &x) && !ev_scalar_const(ev, &t, &x))   // any one-element constant, as before
    ev_fail(ev, sp, "%s must be a constant (true or false)", kw);
  return x != 0;
}

double bi_num(Ev *ev, Args *a, int pos, const char *kw, double def) {
  Span sp;
  Value *v = bi_arg(a, pos, kw, &sp);
  if (!v) return def;
  double x;
  Node *t = ev_raw(ev, *v, sp, kw);
  if (!ev_scalar_const(ev, &t, &x)) ev_fail(ev, sp, "%s must be a constant number", kw);
  return x;
}

DType bi_dtype(Ev *ev, Args *a, int pos, DType def) {
  Span sp;
  Value *v = bi_arg(a, pos, "dtype", &sp);
  if (!v) return def;
  if (v->kind != V_DTYPE) ev_fail(ev, sp, "dtype must be one of f32, f64, i32, i64, bool");
  return v->dt;
}

// A list of constant integers: a list literal, a 1-D constant tensor or one number.
// A tensor known at trace time, folded to constants: its element count, or -1.
static int64_t const_tensor(Ev *ev, Node **t) {
  int64_t n;
  return ir_numel_const(*t, &n) && ev_fold_const(ev, t) ? n : -1;
}

// Element i of a folded tensor (one folded to a broadcast holds one value).
static double const_at(const Node *t, int64_t i) {
  double same;
  return t->op != OP_CONST && ir_is_scalar_const(t, &same) ? same : ir_const_at(t, i);
}

int bi_ints(Ev *ev, Value v, Span sp, const char *what, int64_t *out, int max) {
  if (v.kind == V_LIST) {
    if (v.n > max) ev_fail(ev, sp, "%s has too many entries (at most %d)", what, max);
    for (int i = 0; i < v.n; i++) out[i] = ev_const_int(ev, v.items[i], sp, what);
    return v.n;
  }
  Node *t = ev_raw(ev, v, sp, what);
  if (t->ndim == 0) { out[0] = ev_const_int(ev, v, sp, what); return 1; }
  int64_t n = t->ndim == 1 ? const_tensor(ev, &t) : -1;
  if (n < 0) ev_fail(ev, sp, "%s must be a list of constant integers", what);
  if (n > max) ev_fail(ev, sp, "%s has too many entries (at most %d)", what, max);
  for (int64_t i = 0; i < n; i++) {
    double x = const_at(t, i);
    if (x != floor(x)) ev_fail(ev, sp, "%s must hold integers, not %g", what, x);
    out[i] = (int64_t)x;
  }
  return (int)n;
}

static Node *uncast(Node *n) { return n->op == OP_CAST ? n->src[0] : n; }

// A size that dim() gave for a symbolic axis, k * B: dim(x, 0) or dim(x, 0) * 2.
static int symbolic_size(Ev *ev, Node *n, Dim *d) {
  double k = 1;
  n = uncast(n);
  if (n->ndim) return 0;
  if (n->op == OP_MUL) {
    Node *a = uncast(n->src[0]), *b = uncast(n->src[1]);
    if (a->op == OP_DIMV && ev_scalar_const(ev, &b, &k)) n = a;
    else if (b->op == OP_DIMV && ev_scalar_const(ev, &a, &k)) n = b;
  }
  if (n->op != OP_DIMV || k != floor(k) || k < 0 || k > 1e15) return 0;
  *d = (Dim){(int64_t)k, n->a.i[0]};
  return 1;
}

static int shape_arg(Ev *ev, const Builtin *b, Args *a, int pos, Dim *shape) {
  Span sp;
  Value v = bi_need(ev, b, a, pos, "shape", &sp);
  // A list literal with a symbolic size, reshape(x, [dim(x, 0), -1]), is a concat
  // of one-element reshapes of its entries.
  Node *t = v.kind == V_TENSOR ? v.t : NULL, *folded = t;
  if (t && t->ndim == 1 && (t->op == OP_CONCAT || t->op == OP_RESHAPE) && !ev_fold_const(ev, &folded) &&
      (t->op == OP_CONCAT ? t->nsrc : 1) <= IR_MAXDIM) {
    Node **part = t->op == OP_CONCAT ? t->src : &t;   // one entry: just its reshape
    int n = t->op == OP_CONCAT ? t->nsrc : 1;
    for (int i = 0; i < n; i++) {
      if (part[i]->ndim != 1 || part[i]->shape[0].sym || part[i]->shape[0].k != 1)   // concat([shape(x), [3, 3]])
        ev_fail(ev, sp, "a shape must be a list of constant integers and sizes from dim()");
      Node *e = uncast(part[i]->op == OP_RESHAPE ? part[i]->src[0] : part[i]);   // cast: to the list's i64
      if (symbolic_size(ev, e, &shape[i])) continue;
      double x;
      if (!ir_is_scalar_const(e, &x) && !ev_scalar_const(ev, &e, &x))   // a folded entry may be a [1] CONST
        ev_fail(ev, sp, "a shape entry must be a constant integer or a size from dim() (times a constant: 2 * dim(x, 0))");
      if (x != floor(x) || x < -1 || x > 9e15) ev_fail(ev, sp, "a shape cannot have the dimension %g", x);
      shape[i] = dim_c((int64_t)x);
    }
    return n;
  }
  int64_t s[IR_MAXDIM];
  int n = bi_ints(ev, v, sp, "a shape", s, IR_MAXDIM);
  for (int i = 0; i < n; i++) {
    if (s[i] < -1) ev_fail(ev, sp, "a shape cannot have the dimension %lld", (long long)s[i]);
    shape[i] = dim_c(s[i]);
  }
  return n;
}

int bi_axis(Ev *ev, int64_t ax, int nd, Span sp) {
  if (ax < -nd || ax >= (nd ? nd : 1)) ev_fail(ev, sp, "axis %lld is out of range for a tensor of rank %d", (long long)ax, nd);
  return (int)(ax < 0 ? ax + nd : ax);
}

// axis= as a bitmask; absent means all axes.
uint32_t bi_axes(Ev *ev, Args *a, int pos, Node *x) {
  Span sp;
  Value *v = bi_arg(a, pos, "axis", &sp);
  if (!v) return x->ndim ? (1u << x->ndim) - 1 : 0;
  int64_t ax[IR_MAXDIM];
  int n = bi_ints(ev, *v, sp, "axis", ax, IR_MAXDIM);
  uint32_t m = 0;
  for (int i = 0; i < n; i++) {
    int d = bi_axis(ev, ax[i], x->ndim, sp);
    if (m & (1u << d)) ev_fail(ev, sp, "axis %d is repeated", d);
    m |= 1u << d;
  }
  return m;
}

const char *bi_dim_str(Ev *ev, Dim d, char *buf, size_t len) {
  char s[64];
  ir_shape_str(ev->c, 1, &d, s, sizeof s);
  snprintf(buf, len, "%.*s", (int)strlen(s) - 2, s + 1);   // without the brackets
  return buf;
}

// ---- generic handlers for op-table ops ----------------------------------------------
static Value op_elementwise(Ev *ev, const Builtin *b, Args *a) {
  int n = ir_ops[b->op].nsrc;
  bi_check(ev, b, a, n, NULL);
  if (a->npos < n) ev_fail(ev, a->span, "%s takes %d argument%s: %s", b->name, n, n == 1 ? "" : "s", b->usage);
  Value v[3] = {{0}};
  for (int i = 0; i < n; i++) {
    v[i] = a->pos[i];
    v[i].t = ev_raw(ev, v[i], a->pos_span[i], "an argument");
    v[i].kind = V_TENSOR;
  }
  int first = b->op == OP_WHERE ? 1 : 0;
  int all_weak = 1;
  for (int i = first; i < n; i++) all_weak &= v[i].weak;
  for (int i = first + 1; i < n; i++) ev_unify_weak(ev, &v[first], &v[i], a->pos_span[first], a->pos_span[i], 0);
  IrCtx *c = ev->c;
  Node *r = n == 1 ? ir_unary(c, b->op, v[0].t) : n == 2 ? ir_binary(c, b->op, v[0].t, v[1].t) : ir_where(c, v[0].t, v[1].t, v[2].t);
  Value out = ev_tval(ev_check(ev, r, a->span));
  out.weak = all_weak && !(ir_ops[b->op].flags & F_BOOL);
  return out;
}

static Value op_reduce(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"axis", "keepdims", NULL};
  bi_check(ev, b, a, 3, kws);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  uint32_t axes = bi_axes(ev, a, 1, x);
  int keep = bi_bool(ev, a, 2, "keepdims", 0);
  if ((b->op == OP_ARGMAX || b->op == OP_ARGMIN) && !bi_arg(a, 1, "axis", NULL) && x->ndim > 1) {
    Dim flat = dim_c(-1), ones[IR_MAXDIM];   // NumPy: argmax without an axis indexes the flattened tensor
    Node *f = ev_check(ev, ir_reshape(ev->c, x, 1, &flat), a->span);
    Node *r = ev_check(ev, ir_reduce(ev->c, b->op, f, 1, 0), a->span);
    for (int d = 0; d < x->ndim; d++) ones[d] = dim_c(1);
    return ev_tval(keep ? ev_check(ev, ir_reshape(ev->c, r, x->ndim, ones), a->span) : r);
  }
  return ev_tval(ev_check(ev, ir_reduce(ev->c, b->op, x, axes, keep), a->span));
}

static Value op_row(Ev *ev, const Builtin *b, Args *a) {
  if (b->op == OP_SCE) {
    bi_check(ev, b, a, 2, NULL);
    Node *logits = bi_tensor(ev, b, a, 0, "logits"), *labels = bi_tensor(ev, b, a, 1, "labels");
    return ev_tval(ev_check(ev, ir_sce(ev->c, logits, labels), a->span));
  }
  static const char *const lse_kws[] = {"axis", "keepdims", NULL}, *const kws[] = {"axis", NULL};
  int lse = b->op == OP_LOGSUMEXP;
  bi_check(ev, b, a, lse ? 3 : 2, lse ? lse_kws : kws);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  Span sp = a->span;
  Value *av = bi_arg(a, 1, "axis", &sp);
  // NumPy's cumsum without an axis runs over the flattened tensor, PyTorch's
  // needs one: rather than guess, Kiln asks for it above rank 1.
  if (b->op == OP_CUMSUM && !av && x->ndim > 1)
    ev_fail(ev, a->span, "cumsum needs axis= for a tensor of rank %d (NumPy's flattens it first: cumsum(reshape(x, [-1])) does that)", x->ndim);
  int axis = av ? bi_axis(ev, ev_const_int(ev, *av, sp, "axis"), x->ndim, sp) : x->ndim - 1;
  Node *r = ev_check(ev, ir_row(ev->c, b->op, x, axis), a->span);
  if (b->op == OP_LOGSUMEXP && bi_bool(ev, a, 2, "keepdims", 0)) {
    Dim s[IR_MAXDIM];
    for (int d = 0; d < x->ndim; d++) s[d] = d == axis ? dim_c(1) : x->shape[d];
    r = ev_check(ev, ir_reshape(ev->c, r, x->ndim, s), a->span);
  }
  return ev_tval(r);
}

// ---- shape functions ------------------------------------------------------------
// The number of elements over the axes in mask, as an f-typed node.
Node *bi_count(Ev *ev, Node *x, uint32_t axes, DType t) {
  int64_t k = 1;
  Node *r = NULL;
  for (int d = 0; d < x->ndim; d++) {
    if (!(axes & (1u << d))) continue;
    Dim s = x->shape[d];
    k *= s.k;
    if (s.sym && s.k) {
      Node *v = ir_cast(ev->c, ir_dimv(ev->c, s.sym), t);
      r = r ? ir_binary(ev->c, OP_MUL, r, v) : v;
    }
  }
  Node *kc = ir_scalar(ev->c, t, (double)k);
  return r ? ir_binary(ev->c, OP_MUL, r, kc) : kc;
}

static Value b_mean(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"axis", "keepdims", NULL};
  bi_check(ev, b, a, 3, kws);
  Node *x = bi_float_tensor(ev, b, a, 0, "x");
  uint32_t axes = bi_axes(ev, a, 1, x);
  Node *s = ev_check(ev, ir_reduce(ev->c, OP_SUM, x, axes, bi_bool(ev, a, 2, "keepdims", 0)), a->span);
  return ev_tval(ev_check(ev, ir_binary(ev->c, OP_DIV, s, bi_count(ev, x, axes, x->dtype)), a->span));
}

// var and std as NumPy's (ddof=0: the mean square deviation); the deviations
// from the kept-dims mean, so the gradient flows through both.
static Value b_var(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"axis", "keepdims", NULL};
  bi_check(ev, b, a, 3, kws);
  IrCtx *c = ev->c;
  Node *x = bi_float_tensor(ev, b, a, 0, "x");
  uint32_t axes = bi_axes(ev, a, 1, x);
  Node *n = bi_count(ev, x, axes, x->dtype);
  Node *m = ir_binary(c, OP_DIV, ev_check(ev, ir_reduce(c, OP_SUM, x, axes, 1), a->span), n);
  Node *d = ir_binary(c, OP_SUB, x, m);
  Node *ss = ev_check(ev, ir_reduce(c, OP_SUM, ir_binary(c, OP_MUL, d, d), axes, bi_bool(ev, a, 2, "keepdims", 0)), a->span);
  Node *v = ir_binary(c, OP_DIV, ss, n);
  return ev_tval(ev_check(ev, strcmp(b->name, "std") ? v : ir_unary(c, OP_SQRT, v), a->span));
}

static Value b_cast(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"dtype", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp;
  Node *x = ev_raw(ev, bi_need(ev, b, a, 0, "x", &sp), sp, "x");   // a bare number converts exactly
  Value t = bi_need(ev, b, a, 1, "dtype", &sp);
  if (t.kind != V_DTYPE) ev_fail(ev, sp, "cast needs a dtype: f32, f64, i32, i64 or bool");
  return ev_tval(ir_cast(ev->c, x, t.dt));
}

static Value b_reshape(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"shape", NULL};
  bi_check(ev, b, a, 2, kws);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  Dim s[IR_MAXDIM];
  int n = shape_arg(ev, b, a, 1, s);
  return ev_tval(ev_check(ev, ir_reshape(ev->c, x, n, s), a->span));
}

static Value b_flatten(Ev *ev, const Builtin *b, Args *a) {
  bi_check(ev, b, a, 1, NULL);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  if (x->ndim < 2) return ev_tval(x);
  Dim s[2] = {x->shape[0], dim_c(1)};   // the rest's product (no -1: it works for N = 0 too)
  for (int d = 1; d < x->ndim; d++) {
    if (x->shape[d].sym && x->shape[d].k) ev_fail(ev, a->span, "flatten: the axes after the first must be concrete");
    s[1].k *= x->shape[d].k;
  }
  return ev_tval(ev_check(ev, ir_reshape(ev->c, x, 2, s), a->span));
}

static Value b_transpose(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"axes", NULL};
  bi_check(ev, b, a, 2, kws);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  Span sp;
  Value *pv = bi_arg(a, 1, "axes", &sp);
  if (!pv) return ev_tval(ev_check(ev, ir_transpose(ev->c, x, NULL), a->span));
  int64_t p[IR_MAXDIM];
  int n = bi_ints(ev, *pv, sp, "axes", p, IR_MAXDIM);
  if (n != x->ndim) ev_fail(ev, sp, "transpose needs %d axes for a tensor of rank %d, got %d", x->ndim, x->ndim, n);
  int perm[IR_MAXDIM];
  for (int i = 0; i < n; i++) perm[i] = (int)p[i];
  return ev_tval(ev_check(ev, ir_transpose(ev->c, x, perm), sp));
}

static Node **tensor_list(Ev *ev, const Builtin *b, Args *a, int *n) {
  Span sp;
  Value v = bi_need(ev, b, a, 0, "tensors", &sp);
  Node **t = arena_alloc(ev->arena, sizeof(Node *) * (v.n + 2));
  if (v.kind == V_LIST) {
    for (int i = 0; i < v.n; i++) t[i] = ev_tensor(ev, v.items[i], sp, "a list element");
    *n = v.n;
  } else {  // a tensor: its slices along axis 0
    Node *x = ev_tensor(ev, v, sp, "tensors");
    if (x->ndim == 0 || (x->shape[0].sym && x->shape[0].k)) ev_fail(ev, sp, "%s needs a list of tensors", b->name);
    *n = (int)x->shape[0].k;
    t = arena_alloc(ev->arena, sizeof(Node *) * (*n + 1));
    for (int i = 0; i < *n; i++) {
      int64_t st[IR_MAXDIM] = {0}, cnt[IR_MAXDIM], step[IR_MAXDIM];
      for (int d = 0; d < x->ndim; d++) { cnt[d] = -1; step[d] = 1; }
      st[0] = i; cnt[0] = 1;
      t[i] = ir_reshape(ev->c, ir_slice(ev->c, x, st, cnt, step), x->ndim - 1, x->shape + 1);
    }
  }
  if (!*n) ev_fail(ev, sp, "%s needs at least one tensor", b->name);
  return t;
}

static Value b_concat(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"axis", NULL};
  bi_check(ev, b, a, 2, kws);
  int n;
  Node **t = tensor_list(ev, b, a, &n);
  Span sp = a->span;
  Value *av = bi_arg(a, 1, "axis", &sp);
  int64_t ax = av ? ev_const_int(ev, *av, sp, "axis") : 0;
  int stack = !strcmp(b->name, "stack");
  int nd = t[0]->ndim + stack;
  int axis = bi_axis(ev, ax, nd, sp);
  if (stack) {
    for (int i = 1; i < n; i++)
      if (!ir_shape_eq(t[i], t[0])) ev_fail(ev, a->span, "stack needs tensors of one shape; tensor %d differs from tensor 0", i);
    for (int i = 0; i < n; i++) {
      Dim s[IR_MAXDIM];
      for (int d = 0, k = 0; d < nd; d++) s[d] = d == axis ? dim_c(1) : t[i]->shape[k++];
      t[i] = ev_check(ev, ir_reshape(ev->c, t[i], nd, s), a->span);
    }
  }
  return ev_tval(ev_check(ev, ir_concat(ev->c, t, n, axis), a->span));
}

static Value b_broadcast_to(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"shape", NULL};
  bi_check(ev, b, a, 2, kws);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  Dim s[IR_MAXDIM];
  int n = shape_arg(ev, b, a, 1, s);
  return ev_tval(ev_check(ev, ir_broadcast(ev->c, x, n, s), a->span));
}

static Node *dim_node(Ev *ev, Dim d) {
  Node *k = ir_scalar(ev->c, DT_I64, (double)d.k);
  if (!d.sym || !d.k) return k;
  Node *v = ir_dimv(ev->c, d.sym);
  return d.k == 1 ? v : ir_binary(ev->c, OP_MUL, v, k);
}

static Value b_shape(Ev *ev, const Builtin *b, Args *a) {
  bi_check(ev, b, a, 1, NULL);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  if (!x->ndim) { Dim z = dim_c(0); return ev_tval(ir_const(ev->c, DT_I64, 1, &z, NULL)); }
  Node *parts[IR_MAXDIM];
  Dim one = dim_c(1);
  for (int d = 0; d < x->ndim; d++) parts[d] = ir_reshape(ev->c, dim_node(ev, x->shape[d]), 1, &one);
  return ev_tval(ev_check(ev, ir_concat(ev->c, parts, x->ndim, 0), a->span));
}

static Value b_dim(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"axis", NULL};
  bi_check(ev, b, a, 2, kws);
  Node *x = bi_tensor(ev, b, a, 0, "x");
  Span sp;
  Value av = bi_need(ev, b, a, 1, "axis", &sp);
  int axis = bi_axis(ev, ev_const_int(ev, av, sp, "axis"), x->ndim, sp);
  Value v = ev_tval(dim_node(ev, x->shape[axis]));
  return v;
}

static Value b_matmul(Ev *ev, const Builtin *b, Args *a) {
  bi_check(ev, b, a, 2, NULL);
  Node *x = bi_tensor(ev, b, a, 0, "a"), *y = bi_tensor(ev, b, a, 1, "b");
  return ev_tval(ev_check(ev, ir_matmul(ev->c, x, y), a->span));
}

// ---- constructors ----------------------------------------------------------------
// NumPy's clip: minimum(maximum(x, low), high), so high wins where low > high;
// either bound may be left out. At a bound the gradient goes to x (maximum and
// minimum give ties to their first operand), as PyTorch's clamp.
static Value b_clip(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"low", "high", NULL};
  bi_check(ev, b, a, 3, kws);
  Span sp[3];
  Value r = bi_need(ev, b, a, 0, "x", &sp[0]);
  r.t = ev_raw(ev, r, sp[0], "x");
  r.kind = V_TENSOR;
  Value *bound[2] = {bi_arg(a, 1, "low", &sp[1]), bi_arg(a, 2, "high", &sp[2])};
  if (!bound[0] && !bound[1]) ev_fail(ev, a->span, "clip needs low, high or both: %s", b->usage);
  for (int i = 0; i < 2; i++) {
    if (!bound[i]) continue;
    Value v = *bound[i];
    v.t = ev_raw(ev, v, sp[1 + i], i ? "high" : "low");
    v.kind = V_TENSOR;
    ev_unify_weak(ev, &r, &v, sp[0], sp[1 + i], 0);
    int weak = r.weak && v.weak;
    r = ev_tval(ev_check(ev, ir_binary(ev->c, i ? OP_MINIMUM : OP_MAXIMUM, r.t, v.t), span_join(sp[0], sp[1 + i])));
    r.weak = weak;
  }
  return r;
}

// Activations composed of ops (their gradients follow), as PyTorch defines them:
// gelu(x) = x/2 (1 + erf(x/sqrt 2)), or with approximate="tanh" x/2 (1 + tanh(
// sqrt(2/pi) (x + 0.044715 x^3))); silu(x) = x sigmoid(x); leaky_relu(x, slope)
// = x for x > 0, else slope x; elu(x, alpha) = x for x > 0, else alpha (e^x - 1),
// computed on min(x, 0) so that the unused branch cannot overflow into NaN.
static Value b_activation(Ev *ev, const Builtin *b, Args *a) {
  static const char *const gelu_kws[] = {"approximate", NULL}, *const leaky_kws[] = {"slope", NULL},
                           *const elu_kws[] = {"alpha", NULL};
  const char *name = b->name;
  int gelu = !strcmp(name, "gelu"), leaky = !strcmp(name, "leaky_relu"), elu = !strcmp(name, "elu");
  bi_check(ev, b, a, leaky || elu ? 2 : 1, gelu ? gelu_kws : leaky ? leaky_kws : elu ? elu_kws : NULL);
  Node *x = bi_float_tensor(ev, b, a, 0, "x");
  IrCtx *c = ev->c;
  DType t = x->dtype;
  Node *zero = ir_scalar(c, t, 0), *r;
  if (!strcmp(name, "silu")) r = ir_binary(c, OP_MUL, x, ir_unary(c, OP_SIGMOID, x));
  else if (gelu) {
    Span sp;
    Value *ap = bi_arg(a, -1, "approximate", &sp);
    int tanh_form = 0;
    if (ap && (ap->kind != V_STR || (strcmp(ap->s, "none") && !(tanh_form = !strcmp(ap->s, "tanh")))))
      ev_fail(ev, sp, "gelu's approximate is \"none\" or \"tanh\"");
    Node *inner = tanh_form
      ? ir_unary(c, OP_TANH, ir_binary(c, OP_MUL, ir_scalar(c, t, 0.7978845608028654),   // sqrt(2/pi)
                                       ir_binary(c, OP_ADD, x, ir_binary(c, OP_MUL, ir_scalar(c, t, 0.044715),
                                                                         ir_binary(c, OP_MUL, x, ir_binary(c, OP_MUL, x, x))))))
      : ir_unary(c, OP_ERF, ir_binary(c, OP_MUL, x, ir_scalar(c, t, 0.7071067811865476)));   // 1/sqrt(2)
    r = ir_binary(c, OP_MUL, ir_binary(c, OP_MUL, x, ir_scalar(c, t, 0.5)), ir_binary(c, OP_ADD, ir_scalar(c, t, 1), inner));
  } else {
    double k = bi_num(ev, a, 1, leaky ? "slope" : "alpha", leaky ? 0.01 : 1.0);
    if (!isfinite(k)) ev_fail(ev, a->span, "%s's %s must be a finite number", name, leaky ? "slope" : "alpha");
    Node *neg = leaky ? x : ir_unary(c, OP_EXPM1, ir_binary(c, OP_MINIMUM, x, zero));
    r = ir_where(c, ir_binary(c, OP_GT, x, zero), x, ir_binary(c, OP_MUL, neg, ir_scalar(c, t, k)));
  }
  return ev_tval(ev_check(ev, r, a->span));
}

static Value b_fill(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"shape", "value", "dtype", NULL};
  int full = !strcmp(b->name, "full");
  bi_check(ev, b, a, full ? 3 : 2, kws);
  Dim s[IR_MAXDIM];
  int n = shape_arg(ev, b, a, 0, s);
  for (int i = 0; i < n; i++) if (s[i].k < 0) ev_fail(ev, a->span, "%s: dimensions cannot be negative", b->name);
  double v = full ? bi_num(ev, a, 1, "value", NAN) : !strcmp(b->name, "ones");
  if (full && !bi_arg(a, 1, "value", NULL)) ev_fail(ev, a->span, "full is missing its value: %s", b->usage);
  DType t = bi_dtype(ev, a, full ? 2 : 1, DT_F32);
  return ev_tval(ev_check(ev, ir_broadcast(ev->c, ir_scalar(ev->c, t, v), n, s), a->span));
}

// start + i*step for i < count, computed in f64 and cast (NumPy's arange).
static Node *ramp(Ev *ev, int64_t count, double start, double step, DType t) {
  Dim s = dim_c(count);
  Node *i = ir_iota(ev->c, DT_F64, 1, &s, 0);
  Node *r = ir_binary(ev->c, OP_ADD, ir_binary(ev->c, OP_MUL, i, ir_scalar(ev->c, DT_F64, step)), ir_scalar(ev->c, DT_F64, start));
  return ir_cast(ev->c, r, t);
}

static Value b_arange(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"start", "stop", "step", "dtype", NULL};
  bi_check(ev, b, a, 3, kws);
  double start = 0, stop, step = bi_num(ev, a, 2, "step", 1);
  if (a->npos >= 2 || bi_arg(a, -1, "stop", NULL)) { start = bi_num(ev, a, 0, "start", 0); stop = bi_num(ev, a, 1, "stop", NAN); }
  else stop = bi_num(ev, a, 0, "stop", NAN);
  if (isnan(stop)) ev_fail(ev, a->span, "arange needs a stop: %s", b->usage);
  if (step == 0) ev_fail(ev, a->span, "arange: step cannot be zero");
  double cnt = ceil((stop - start) / step);
  if (cnt < 0) cnt = 0;
  if (cnt > 1e9) ev_fail(ev, a->span, "arange: %g elements is too many", cnt);
  return ev_tval(ramp(ev, (int64_t)cnt, start, step, bi_dtype(ev, a, 3, DT_F32)));
}

static Value b_linspace(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"start", "stop", "num", "dtype", NULL};
  bi_check(ev, b, a, 3, kws);
  double start = bi_num(ev, a, 0, "start", NAN), stop = bi_num(ev, a, 1, "stop", NAN), num = bi_num(ev, a, 2, "num", 50);
  if (isnan(start) || isnan(stop)) ev_fail(ev, a->span, "linspace needs a start and a stop: %s", b->usage);
  if (num < 0 || num != floor(num) || num > 1e9) ev_fail(ev, a->span, "linspace: num must be a non-negative integer");
  int64_t n = (int64_t)num;
  double step = n > 1 ? (stop - start) / (double)(n - 1) : 0;
  DType t = bi_dtype(ev, a, 3, DT_F32);
  Node *r = ramp(ev, n, start, step, DT_F64);
  if (n > 1) {  // the last point is exactly stop, as in NumPy
    Dim s = dim_c(n);
    Node *last = ir_binary(ev->c, OP_EQ, ir_iota(ev->c, DT_I64, 1, &s, 0), ir_scalar(ev->c, DT_I64, (double)(n - 1)));
    r = ir_where(ev->c, last, ir_scalar(ev->c, DT_F64, stop), r);
  }
  return ev_tval(ir_cast(ev->c, r, t));
}

static Value b_eye(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"n", "m", "dtype", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp = a->span;
  int64_t n = ev_const_int(ev, bi_need(ev, b, a, 0, "n", &sp), sp, "n");
  Value *mv = bi_arg(a, 1, "m", &sp);
  int64_t m = mv ? ev_const_int(ev, *mv, sp, "m") : n;
  if (n < 0 || m < 0) ev_fail(ev, a->span, "eye: sizes cannot be negative");
  Dim s[2] = {dim_c(n), dim_c(m)};
  Node *eq = ir_binary(ev->c, OP_EQ, ir_iota(ev->c, DT_I64, 2, s, 0), ir_iota(ev->c, DT_I64, 2, s, 1));
  return ev_tval(ir_cast(ev->c, eq, bi_dtype(ev, a, 2, DT_F32)));
}

// any(x, axis=all, keepdims=false), all(...): whether some, or every, element
// is nonzero (NaN counts as nonzero), as NumPy's: counts of the elements that
// decide, so an empty axis gives false and true.
static Value b_any_all(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "axis", "keepdims", NULL};
  bi_check(ev, b, a, 3, kws);
  IrCtx *c = ev->c;
  Node *x = bi_tensor(ev, b, a, 0, "x");
  uint32_t axes = bi_axes(ev, a, 1, x);
  int keep = bi_bool(ev, a, 2, "keepdims", 0), any = b->name[1] == 'n';
  Node *decide = ir_binary(c, any ? OP_NE : OP_EQ, x, ir_scalar(c, x->dtype, 0));
  Node *n = ir_reduce(c, OP_SUM, ir_cast(c, decide, DT_I64), axes, keep);
  return ev_tval(ev_check(ev, ir_binary(c, any ? OP_GT : OP_EQ, n, ir_scalar(c, DT_I64, 0)), a->span));
}

// squeeze(x, axis=all): without axis every axis of size 1 is dropped (a
// symbolic one is kept: its size is not known to be 1); a named axis must be
// of size 1. expand_dims(x, axis): new axes of size 1 at the result's positions
// axis (one or a list), as NumPy's.
static Value b_squeeze(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "axis", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp = a->span;
  Node *x = bi_tensor(ev, b, a, 0, "x");
  int given = bi_arg(a, 1, "axis", &sp) != NULL;
  uint32_t axes = bi_axes(ev, a, 1, x);
  Dim s[IR_MAXDIM];
  int n = 0;
  for (int d = 0; d < x->ndim; d++) {
    int one = dim_is(x->shape[d], 1);
    if (given && (axes >> d & 1) && !one) {
      char buf[64];
      ev_fail(ev, sp, "squeeze: axis %d has size %s, not 1", d, bi_dim_str(ev, x->shape[d], buf, sizeof buf));
    }
    if (!((axes >> d & 1) && one)) s[n++] = x->shape[d];
  }
  return ev_tval(ev_check(ev, ir_reshape(ev->c, x, n, s), a->span));
}

static Value b_expand_dims(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "axis", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp = a->span;
  Node *x = bi_tensor(ev, b, a, 0, "x");
  int64_t ax[IR_MAXDIM];
  int k = bi_ints(ev, bi_need(ev, b, a, 1, "axis", &sp), sp, "axis", ax, IR_MAXDIM), nd = x->ndim + k;
  if (nd > IR_MAXDIM) ev_fail(ev, sp, "too many dimensions (at most %d)", IR_MAXDIM);
  uint32_t added = 0;
  for (int i = 0; i < k; i++) {
    int d = bi_axis(ev, ax[i], nd, sp);
    if (added >> d & 1) ev_fail(ev, sp, "axis %d is repeated", d);
    added |= 1u << d;
  }
  Dim s[IR_MAXDIM];
  for (int d = 0, j = 0; d < nd; d++) s[d] = (added >> d & 1) ? dim_c(1) : x->shape[j++];
  return ev_tval(ev_check(ev, ir_reshape(ev->c, x, nd, s), a->span));
}

// repeat(x, n, axis=None): each element n times along axis (NumPy's repeat;
// without axis, of the flattened x). tile(x, reps): x n times along each axis,
// reps one count or a list (shorter lists apply to the last axes; longer
// ones add leading axes), as NumPy's tile. Both are broadcasts and reshapes.
static Node *repeat_axis(Ev *ev, Node *x, int d, int64_t n, int before, Span sp) {
  IrCtx *c = ev->c;
  Dim s[IR_MAXDIM + 1], full[IR_MAXDIM + 1], out[IR_MAXDIM];
  if (x->ndim + 1 > IR_MAXDIM) ev_fail(ev, sp, "too many dimensions (at most %d)", IR_MAXDIM);
  int at = before ? d : d + 1;   // the copies' axis: before d (tile) or after it (repeat)
  for (int i = 0, j = 0; i <= x->ndim; i++) s[i] = i == at ? dim_c(1) : x->shape[j++];
  memcpy(full, s, sizeof(Dim) * (size_t)(x->ndim + 1));
  full[at] = dim_c(n);
  for (int i = 0; i < x->ndim; i++) out[i] = x->shape[i];
  out[d].k *= n;
  Node *r = ir_broadcast(c, ir_reshape(c, x, x->ndim + 1, s), x->ndim + 1, full);
  return ev_check(ev, ir_reshape(c, r, x->ndim, out), sp);
}

static Value b_repeat(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "n", "axis", NULL};
  bi_check(ev, b, a, 3, kws);
  Span nsp = a->span, asp = a->span;
  Node *x = bi_tensor(ev, b, a, 0, "x");
  int64_t n = ev_const_int(ev, bi_need(ev, b, a, 1, "n", &nsp), nsp, "n");
  if (n < 0) ev_fail(ev, nsp, "repeat's n cannot be negative");
  Value *av = bi_arg(a, 2, "axis", &asp);
  if (!av) {
    Dim flat = dim_c(-1);
    x = ev_check(ev, ir_reshape(ev->c, x, 1, &flat), a->span);
  }
  int d = av ? bi_axis(ev, ev_const_int(ev, *av, asp, "axis"), x->ndim, asp) : 0;
  if (x->ndim == 0) ev_fail(ev, a->span, "repeat along an axis needs rank 1 or more");
  return ev_tval(repeat_axis(ev, x, d, n, 0, a->span));
}

static Value b_tile(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "reps", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp = a->span;
  Node *x = bi_tensor(ev, b, a, 0, "x");
  int64_t reps[IR_MAXDIM];
  int k = bi_ints(ev, bi_need(ev, b, a, 1, "reps", &sp), sp, "reps", reps, IR_MAXDIM);
  if (k > x->ndim) {   // leading axes of size 1 first
    Dim s[IR_MAXDIM];
    for (int i = 0; i < k; i++) s[i] = i < k - x->ndim ? dim_c(1) : x->shape[i - (k - x->ndim)];
    x = ev_check(ev, ir_reshape(ev->c, x, k, s), a->span);
  }
  for (int i = 0; i < k; i++) {
    int d = x->ndim - k + i;
    if (reps[i] < 0) ev_fail(ev, sp, "tile's counts cannot be negative");
    if (reps[i] != 1) x = repeat_axis(ev, x, d, reps[i], 1, a->span);
  }
  return ev_tval(x);
}

// assert(cond, message): stops the program with message, at the call (and the
// calls around it), when cond is false. cond must be known when the program is
// traced: a shape, a constant or arithmetic on them; a library function checks
// its arguments with it. Its value is none.
static Value b_assert(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"cond", "message", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp = a->span, msp = a->span;
  Node *t = ev_raw(ev, bi_need(ev, b, a, 0, "cond", &sp), sp, "cond");
  double x;
  if (t->ndim != 0 && !ir_is_scalar_const(t, NULL))
    ev_fail(ev, sp, "assert needs one condition, not a tensor (reduce it first: min(cast(c, i32)) == 1)");
  if (!ev_scalar_const(ev, &t, &x))
    ev_fail(ev, sp, "assert's condition must be known when the program is traced (shapes, constants), not depend on data");
  Value *m = bi_arg(a, 1, "message", &msp);
  if (m && m->kind != V_STR) ev_fail(ev, msp, "assert's message must be a string in quotes");
  if (x == 0) ev_fail(ev, a->span, "%s", m ? m->s : "assertion failed");
  return (Value){.kind = V_NONE};
}

// pad(x, widths, value=0): NumPy's pad in its constant mode. widths is n (every
// side of every axis), [before, after] (every axis) or one such pair per axis.
// Placed by the PAD op (zeros around x); another value fills through a padded
// mask, so x's elements are never changed by arithmetic.
static Value b_pad(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "widths", "value", NULL};
  bi_check(ev, b, a, 3, kws);
  IrCtx *c = ev->c;
  Span sp = a->span, wsp = a->span, vsp = a->span;
  Node *x = ev_tensor(ev, bi_need(ev, b, a, 0, "x", &sp), sp, "x");
  Value wv = bi_need(ev, b, a, 1, "widths", &wsp);
  Node *w = ev_raw(ev, wv, wsp, "widths");
  int64_t n = -1, at[2 * IR_MAXDIM], before[IR_MAXDIM], after[IR_MAXDIM];
  int per_axis = w->ndim == 2;
  if (w->ndim > 2 || (w->ndim >= 1 && w->shape[w->ndim - 1].k != 2) || (per_axis && w->shape[0].k != x->ndim) ||
      (n = const_tensor(ev, &w)) < 0)
    ev_fail(ev, wsp, "pad's widths are n, [before, after] or one [before, after] per axis (%d here), constant integers", x->ndim);
  for (int64_t i = 0; i < n; i++) {
    double v = const_at(w, i);
    if (v != floor(v) || v < 0 || v > 1e12) ev_fail(ev, wsp, "pad's widths must be integers from 0 up, not %g", v);
    at[i] = (int64_t)v;
  }
  Dim shape[IR_MAXDIM];
  int64_t step[IR_MAXDIM];
  for (int d = 0; d < x->ndim; d++) {
    before[d] = per_axis ? at[2 * d] : at[0];
    after[d] = per_axis ? at[2 * d + 1] : n == 1 ? at[0] : at[1];
    step[d] = 1;
    shape[d] = x->shape[d];
    if (!before[d] && !after[d]) continue;
    if (x->shape[d].sym) {
      char buf[64];
      ev_fail(ev, wsp, "pad: axis %d has the symbolic size %s, which cannot grow", d, bi_dim_str(ev, x->shape[d], buf, sizeof buf));
    }
    shape[d].k += before[d] + after[d];
  }
  Node *r = ev_check(ev, ir_pad(c, x, shape, before, step), a->span);
  Value *fill = bi_arg(a, 2, "value", &vsp);
  if (fill && bi_num(ev, a, 2, "value", 0) != 0) {
    Node *mask = ev_check(ev, ir_pad(c, ir_broadcast(c, ir_scalar(c, DT_BOOL, 1), x->ndim, x->shape), shape, before, step), a->span);
    Node *v = ev_check(ev, ir_cast(c, ev_raw(ev, *fill, vsp, "value"), x->dtype), vsp);
    r = ev_check(ev, ir_where(c, mask, r, v), a->span);
  }
  return ev_tval(r);
}

// tril(x, k=0), triu(x, k=0): x with zeros above (tril) or below (triu) the
// k-th diagonal of its last two axes, as in NumPy and PyTorch (k > 0: above the
// main one). The mask is iota arithmetic: symbolic sizes work, the gradient is
// where's, and a causal attention mask is where(tril(ones([T, T])) > 0, s, -1/0).
static Value b_tri(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "k", NULL};
  bi_check(ev, b, a, 2, kws);
  IrCtx *c = ev->c;
  Span sp = a->span, ksp = a->span;
  Node *x = ev_tensor(ev, bi_need(ev, b, a, 0, "x", &sp), sp, "x");
  if (x->ndim < 2) {
    char buf[128];
    ev_fail(ev, sp, "%s needs a tensor of rank 2 or more (a matrix, or a batch of them), got shape %s", b->name,
            ir_shape_str(c, x->ndim, x->shape, buf, sizeof buf));
  }
  Value *kv = bi_arg(a, 1, "k", &ksp);
  int64_t k = kv ? ev_const_int(ev, *kv, ksp, "k") : 0;
  Dim s[2] = {x->shape[x->ndim - 2], x->shape[x->ndim - 1]};
  Node *off = ir_binary(c, OP_SUB, ir_iota(c, DT_I64, 2, s, 1), ir_iota(c, DT_I64, 2, s, 0));   // column - row
  Node *keep = ir_binary(c, b->name[3] == 'l' ? OP_LE : OP_GE, off, ir_scalar(c, DT_I64, (double)k));
  return ev_tval(ev_check(ev, ir_where(c, keep, x, ir_scalar(c, x->dtype, 0)), a->span));
}

// NumPy and PyTorch refuse these too: a negative std, an empty or reversed range.
void ev_check_random(Ev *ev, int normal, double p0, double p1, Span sp0, Span sp1) {
  const char *fn = normal ? "normal" : "uniform";
  if (!isfinite(p0)) ev_fail(ev, sp0, "%s's %s must be a finite number, not %g", fn, normal ? "mean" : "low", p0);
  if (!isfinite(p1)) ev_fail(ev, sp1, "%s's %s must be a finite number, not %g", fn, normal ? "std" : "high", p1);
  if (normal && p1 < 0) ev_fail(ev, sp1, "normal's std cannot be negative (%g)", p1);
  if (!normal && p0 > p1) ev_fail(ev, span_join(sp0, sp1), "uniform's low (%g) is above its high (%g)", p0, p1);
}

static Value b_random(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"shape", "mean", "std", "low", "high", "seed", "dtype", NULL};
  int normal = !strcmp(b->name, "normal");
  bi_check(ev, b, a, 3, kws);
  Dim s[IR_MAXDIM];
  int n = shape_arg(ev, b, a, 0, s);
  for (int i = 0; i < n; i++) if (s[i].k < 0) ev_fail(ev, a->span, "%s: dimensions cannot be negative", b->name);
  double p0 = bi_num(ev, a, 1, normal ? "mean" : "low", 0), p1 = bi_num(ev, a, 2, normal ? "std" : "high", 1);
  Span sp, sp0 = a->span, sp1 = a->span;
  bi_arg(a, 1, normal ? "mean" : "low", &sp0);
  bi_arg(a, 2, normal ? "std" : "high", &sp1);
  ev_check_random(ev, normal, p0, p1, sp0, sp1);
  Value *sv = bi_arg(a, -1, "seed", &sp);
  // Without a seed each call draws its own stream, the same on every run.
  uint64_t seed = sv ? (uint64_t)ev_const_int(ev, *sv, sp, "seed") : ev_next_seed(ev);
  DType t = bi_dtype(ev, a, -1, DT_F32);
  if (!ir_is_float(t)) ev_fail(ev, a->span, "%s makes float tensors only", b->name);
  IrCtx *c = ev->c;
  Node *r = ev_check(ev, ir_rng(c, t, n, s, seed, normal), a->span);
  // normal: mean + std*z; uniform: low + (high-low)*u
  Node *scale = ir_scalar(c, t, normal ? p1 : p1 - p0);
  return ev_tval(ir_binary(c, OP_ADD, ir_binary(c, OP_MUL, r, scale), ir_scalar(c, t, p0)));
}

// ---- grad --------------------------------------------------------------------------
static Value b_grad(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"argnum", "wrt", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp;
  Value f = bi_need(ev, b, a, 0, "f", &sp);
  if (f.kind == V_FUNC) {
    Span asp;
    Value *an = bi_arg(a, 1, "argnum", &asp);
    int64_t k = an ? ev_const_int(ev, *an, asp, "argnum") : 0;
    if (k < 0 || k > 255) ev_fail(ev, asp, "argnum %lld is out of range", (long long)k);
    Value g = {0};
    g.kind = V_FUNC;
    g.fn = arena_alloc(ev->arena, sizeof *g.fn);
    g.fn->kind = FN_GRAD; g.fn->inner = f.fn; g.fn->argnum = (int)k;
    g.fn->name = "grad";
    return g;
  }
  // grad(expr, wrt): the gradient of a scalar expression w.r.t. a tensor in it.
  Node *y = ev_tensor(ev, f, sp, "grad's first argument (a function or a scalar expression)");
  Span wsp;
  Node *w = ev_tensor(ev, bi_need(ev, b, a, 1, "wrt", &wsp), wsp, "wrt");
  // Equal constants are one node, so a constant cannot name one use of itself:
  // wrt must depend on a parameter or an input (a computed value like W - lr*g is fine).
  int count, live = 0;
  Node **order = ir_topo(ev->c, &w, 1, &count);
  for (int i = 0; i < count && !live; i++) live = order[i]->op == OP_INPUT;
  free(order);
  if (!live)
    ev_fail(ev, wsp, "grad(expr, wrt) needs a wrt that depends on a parameter or an input, not a constant; for the "
            "gradient at a value, write a function: f(v) = ...; grad(f)(value)");
  return ev_tval(ev_grad(ev, y, w, sp, wsp, "a scalar expression; this has"));
}


// ---- the tables ---------------------------------------------------------------------
static const Builtin named[] = {
  {"mean", b_mean, 0, "mean(x, axis=None, keepdims=false)"},
  {"var", b_var, 0, "var(x, axis=None, keepdims=false)"},
  {"std", b_var, 0, "std(x, axis=None, keepdims=false)"},
  {"cast", b_cast, 0, "cast(x, dtype)"},
  {"reshape", b_reshape, 0, "reshape(x, shape)  (one dimension may be -1)"},
  {"flatten", b_flatten, 0, "flatten(x): [N, ...] -> [N, -1]"},
  {"transpose", b_transpose, 0, "transpose(x) or transpose(x, axes)"},
  {"concat", b_concat, 0, "concat([a, b, ...], axis=0)"},
  {"stack", b_concat, 0, "stack([a, b, ...], axis=0)"},
  {"broadcast_to", b_broadcast_to, 0, "broadcast_to(x, shape)"},
  {"shape", b_shape, 0, "shape(x)"},
  {"dim", b_dim, 0, "dim(x, axis)"},
  {"matmul", b_matmul, 0, "matmul(a, b)"},
  {"gelu", b_activation, 0, "gelu(x, approximate=\"none\")  (or \"tanh\")"},
  {"silu", b_activation, 0, "silu(x)"},
  {"leaky_relu", b_activation, 0, "leaky_relu(x, slope=0.01)"},
  {"elu", b_activation, 0, "elu(x, alpha=1)"},
  {"clip", b_clip, 0, "clip(x, low, high)  (either bound may be left out: clip(x, high=1))"},
  {"zeros", b_fill, 0, "zeros(shape, dtype=f32)"},
  {"ones", b_fill, 0, "ones(shape, dtype=f32)"},
  {"full", b_fill, 0, "full(shape, value, dtype=f32)"},
  {"arange", b_arange, 0, "arange(stop) or arange(start, stop, step=1, dtype=f32)"},
  {"linspace", b_linspace, 0, "linspace(start, stop, num=50, dtype=f32)"},
  {"eye", b_eye, 0, "eye(n, m=n, dtype=f32)"},
  {"einsum", b_einsum, 0, "einsum(spec, a, ...)  (NumPy's subscripts: einsum(\"bij,bjk->bik\", a, b))"},
  {"any", b_any_all, 0, "any(x, axis=None, keepdims=false)"},
  {"all", b_any_all, 0, "all(x, axis=None, keepdims=false)"},
  {"squeeze", b_squeeze, 0, "squeeze(x, axis=None)"},
  {"expand_dims", b_expand_dims, 0, "expand_dims(x, axis)"},
  {"repeat", b_repeat, 0, "repeat(x, n, axis=None)"},
  {"tile", b_tile, 0, "tile(x, reps)"},
  {"assert", b_assert, 0, "assert(cond, message)  (cond known when the program is traced)"},
  {"pad", b_pad, 0, "pad(x, widths, value=0)  (widths: n, [before, after], or [[before, after], ...] per axis)"},
  {"tril", b_tri, 0, "tril(x, k=0)  (zeros above the k-th diagonal of the last two axes)"},
  {"triu", b_tri, 0, "triu(x, k=0)  (zeros below the k-th diagonal of the last two axes)"},
  {"normal", b_random, 0, "normal(shape, mean=0, std=1, seed=, dtype=f32)"},
  {"uniform", b_random, 0, "uniform(shape, low=0, high=1, seed=, dtype=f32)"},
  {"grad", b_grad, 0, "grad(f, argnum=0) or grad(expr, wrt)"},
};

// One entry per op-table row; leaves, movement and matmul have named builtins.
static const Builtin from_ops[OP_COUNT] = {
#define OP(name, str, n, kind, flags, f32, f64, init) \
  [OP_##name] = {str, kind == K_EW && !((flags) & F_SPECIAL) ? op_elementwise : kind == K_REDUCE ? op_reduce \
                   : kind == K_ROW ? op_row : NULL, OP_##name,                                              \
                 kind == K_REDUCE ? str "(x, axis=None, keepdims=false)" : OP_##name == OP_SCE ? str "(logits, labels)" \
                 : OP_##name == OP_LOGSUMEXP ? str "(x, axis=-1, keepdims=false)" : OP_##name == OP_CUMSUM ? str "(x, axis)  (axis may be left out for rank 1)" : kind == K_ROW ? str "(x, axis=-1)" \
                 : n == 1 ? str "(x)" : n == 2 ? str "(a, b)" : str "(cond, a, b)"},
#include "ir/ops.def"
#undef OP
};

// Every builtin's name, for "did you mean" (at most max; the count).
int builtin_names(const char **out, int max) {
  int n = 0;
  for (size_t i = 0; i < sizeof named / sizeof *named && n < max; i++) out[n++] = named[i].name;
  for (int i = 0; i < OP_COUNT && n < max; i++)
    if (from_ops[i].fn) out[n++] = from_ops[i].name;
  int k;
  const Builtin *t = nn_builtins(&k);
  for (int i = 0; i < k && n < max; i++) out[n++] = t[i].name;
  t = data_builtins(&k);
  for (int i = 0; i < k && n < max; i++) out[n++] = t[i].name;
  return n;
}

const Builtin *builtin_find(const char *name) {
  for (size_t i = 0; i < sizeof named / sizeof *named; i++)
    if (!strcmp(named[i].name, name)) return &named[i];
  const Builtin *nb = nn_builtin_find(name);
  if (nb || (nb = data_builtin_find(name))) return nb;
  Op op = ir_op_by_name(name);
  if (op != OP_COUNT && from_ops[op].fn) return &from_ops[op];
  return NULL;
}

