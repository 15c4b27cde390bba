// Neural-network builtins: convolution (lowered per layer in conv.c),
// pooling (built from the IM2COL window view; gradients come from the ops'
// rules), take/scatter_add, dropout, batch normalization, accuracy, and the
// training-mode flag.
#include "builtins_int.h"
#include <stdlib.h>
#include <string.h>

static Node *chk(Ev *ev, Node *n, Args *a) { return ev_check(ev, n, a->span); }

// One or two constant integers (k or [kh, kw]) for a 2-D window setting.
static void pair_arg(Ev *ev, Args *a, int pos, const char *kw, int64_t def, int64_t *out) {
  Span sp;
  Value *v = bi_arg(a, pos, kw, &sp);
  out[0] = out[1] = def;
  if (!v) return;
  int64_t t[2];
  int n = bi_ints(ev, *v, sp, kw, t, 2);
  if (n == 1) t[1] = t[0];
  else if (n != 2) ev_fail(ev, sp, "%s must be one integer or two ([height, width])", kw);
  out[0] = t[0]; out[1] = t[1];
}

// pad= "valid" (none), "same" (the output keeps ceil(size / stride); the odd
// pixel goes at the end, as PyTorch and TensorFlow do), an integer or [ph, pw].
static void pad_arg(Ev *ev, Args *a, int pos, Node *x, int64_t *win, int64_t *pad_end) {
  Span sp;
  Value *v = bi_arg(a, pos, "pad", &sp);
  win[4] = win[5] = pad_end[0] = pad_end[1] = 0;
  if (!v) return;
  if (v->kind == V_STR) {
    if (!strcmp(v->s, "valid")) return;
    if (strcmp(v->s, "same")) ev_fail(ev, sp, "pad must be \"same\", \"valid\", an integer or [height, width], not \"%s\"", v->s);
    for (int d = 0; d < 2; d++) {
      int64_t n = x->shape[2 + d].k, s = win[2 + d], span = win[6 + d] * (win[d] - 1) + 1;
      int64_t out = (n + s - 1) / s, total = (out - 1) * s + span - n;
      if (total < 0) total = 0;
      win[4 + d] = total / 2;
      pad_end[d] = total - total / 2;
    }
    return;
  }
  int64_t p[2];
  pair_arg(ev, a, pos, "pad", 0, p);
  for (int d = 0; d < 2; d++) {
    if (p[d] < 0) ev_fail(ev, sp, "padding cannot be negative");
    win[4 + d] = pad_end[d] = p[d];
  }
}

static Node *nchw_arg(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw) {
  Node *x = bi_tensor(ev, b, a, pos, kw);
  if (x->ndim != 4) {
    char buf[128];
    Span sp;
    bi_arg(a, pos, kw, &sp);
    ev_fail(ev, sp, "%s needs a [N, C, H, W] tensor, got shape %s", b->name, ir_shape_str(ev->c, x->ndim, x->shape, buf, sizeof buf));
  }
  if (!ir_is_float(x->dtype)) x = ir_cast(ev->c, x, DT_F32);
  return x;
}

// Whether x depends on a parameter (or on autodiff's placeholders): only then
// does a training step compute x's gradient, and only then does the choice of
// a layer's lowering count that gradient's cost. A network's first layer reads
// the data and has none (a `grad` with respect to an input still works, with
// whatever lowering was chosen).
static int reaches_param(IrCtx *c, Node *x) {
  int count, found = 0;
  Node **order = ir_topo(c, &x, 1, &count);
  for (int i = 0; i < count && !found; i++)
    found = order[i]->op == OP_INPUT && (order[i]->a.i[0] == ROLE_PARAM || order[i]->a.i[0] == ROLE_VAR);
  free(order);
  return found;
}

// conv2d(x, w, stride=1, pad=0, dilation=1, lowering="auto"): x [N, C, H, W],
// w [O, C, KH, KW] -> [N, O, OH, OW]. Lowered per layer (conv.c): im2col (one
// GEMM over the whole batch), kernel (lower the kernel, then aggregate) or
// direct; "auto" lets the cost model or a --tune measurement choose.
static Value b_conv2d(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "w", "stride", "pad", "dilation", "lowering", NULL};
  bi_check(ev, b, a, 6, kws);
  IrCtx *c = ev->c;
  Node *x = nchw_arg(ev, b, a, 0, "x"), *w = bi_tensor(ev, b, a, 1, "w");
  char b1[128], b2[128];
  if (w->ndim != 4 || !dim_eq(w->shape[1], x->shape[1]))
    ev_fail(ev, a->span, "conv2d: the kernel must be [out, in, kh, kw] with in = %s's channels; got x %s and w %s", "x",
            ir_shape_str(c, x->ndim, x->shape, b1, sizeof b1), ir_shape_str(c, w->ndim, w->shape, b2, sizeof b2));
  for (int d = 0; d < 4; d++)
    if (w->shape[d].sym && w->shape[d].k) ev_fail(ev, a->span, "conv2d: the kernel's shape must be concrete");
  int forced = -1;
  Span sp;
  Value *lv = bi_arg(a, 5, "lowering", &sp);
  if (lv && (lv->kind != V_STR || (strcmp(lv->s, "auto") && (forced = conv_lowering_by_name(lv->s)) < 0)))
    ev_fail(ev, sp, "conv2d: lowering must be \"auto\", \"im2col\", \"kernel\" or \"direct\"");
  DType t = ir_promote(x->dtype, ir_is_float(w->dtype) ? w->dtype : DT_F32);
  x = ir_cast(c, x, t); w = ir_cast(c, w, t);
  int64_t win[9] = {w->shape[2].k, w->shape[3].k}, pad_end[2];
  pair_arg(ev, a, 2, "stride", 1, win + 2);
  pair_arg(ev, a, 4, "dilation", 1, win + 6);
  pad_arg(ev, a, 3, x, win, pad_end);
  Node *cols = chk(ev, ir_im2col(c, x, win, pad_end), a);   // checks the window and gives OH, OW
  ConvShape s = {t, x->shape[0].k, x->shape[1].k, x->shape[2].k, x->shape[3].k, w->shape[0].k, win[0], win[1], win[2], win[3],
                 win[4], win[5], pad_end[0], pad_end[1], win[6], win[7], cols->shape[1].k, cols->shape[2].k, 0};
  if (x->shape[0].sym && x->shape[0].k) {
    s.n = 32;
    s.batch_assumed = 1;
  }
  s.input_grad = reaches_param(c, x);
  int l = conv_choose(ev, &s, forced);
  return ev_tval(chk(ev, conv_build(c, l, &s, x, w, win, pad_end), a));
}

// maxpool2d(x, k, stride=k, pad=0) and avgpool2d: the window's max or mean.
// Max pooling pads with -inf; average pooling with zeros that count (PyTorch's
// count_include_pad).
static Value b_pool2d(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "k", "stride", "pad", NULL};
  bi_check(ev, b, a, 4, kws);
  IrCtx *c = ev->c;
  int avg = b->name[0] == 'a';
  Node *x = nchw_arg(ev, b, a, 0, "x");
  int64_t win[9] = {0}, pad_end[2];
  Span sp;
  bi_need(ev, b, a, 1, "k", &sp);
  pair_arg(ev, a, 1, "k", 0, win);
  pair_arg(ev, a, 2, "stride", 0, win + 2);
  if (!bi_arg(a, 2, "stride", NULL)) { win[2] = win[0]; win[3] = win[1]; }
  win[6] = win[7] = 1;
  win[8] = !avg;
  pad_arg(ev, a, 3, x, win, pad_end);
  Node *cols = chk(ev, ir_im2col(c, x, win, pad_end), a);
  int perm[6] = {0, 3, 1, 2, 4, 5};
  Node *r = ir_reduce(c, avg ? OP_SUM : OP_RMAX, ir_transpose(c, cols, perm), 3u << 4, 0);
  if (avg) r = ir_binary(c, OP_DIV, r, ir_scalar(c, x->dtype, (double)(win[0] * win[1])));
  return ev_tval(chk(ev, r, a));
}

// take(table, indices): rows of table (an embedding lookup); scatter_add is its adjoint.
static Value b_take(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"table", "indices", NULL};
  bi_check(ev, b, a, 2, kws);
  Span sp;
  Node *t = bi_tensor(ev, b, a, 0, "table");
  Node *i = ev_raw(ev, bi_need(ev, b, a, 1, "indices", &sp), sp, "indices");
  return ev_tval(ev_check(ev, ir_gather(ev->c, t, i), a->span));
}

static Value b_scatter_add(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"values", "indices", "rows", NULL};
  bi_check(ev, b, a, 3, kws);
  Span sp, rsp;
  Node *v = bi_tensor(ev, b, a, 0, "values");
  Node *i = ev_raw(ev, bi_need(ev, b, a, 1, "indices", &sp), sp, "indices");
  int64_t rows = ev_const_int(ev, bi_need(ev, b, a, 2, "rows", &rsp), rsp, "rows");
  if (rows < 0) ev_fail(ev, rsp, "rows cannot be negative");
  return ev_tval(ev_check(ev, ir_scatter_add(ev->c, v, i, dim_c(rows)), a->span));
}

static Value b_training(Ev *ev, const Builtin *b, Args *a) {
  bi_check(ev, b, a, 0, NULL);
  return ev_tval(ev_training(ev));
}

// dropout(x, p): in a training step, zero each element with probability p and
// scale the rest by 1/(1-p); elsewhere x. The mask is new at every step.
static Value b_dropout(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "p", NULL};
  bi_check(ev, b, a, 2, kws);
  IrCtx *c = ev->c;
  Node *x = bi_float_tensor(ev, b, a, 0, "x");
  Span sp;
  bi_need(ev, b, a, 1, "p", &sp);
  double p = bi_num(ev, a, 1, "p", 0);
  if (!(p >= 0 && p < 1)) ev_fail(ev, sp, "dropout's p must be in [0, 1), not %g", p);
  if (p == 0) return ev_tval(x);
  Node *u = chk(ev, ir_rng_salted(c, x->dtype, x->ndim, x->shape, ev_next_seed(ev), 0, ev_step(ev)), a);
  Node *keep = ir_binary(c, OP_GE, u, ir_scalar(c, x->dtype, p));
  Node *dropped = ir_where(c, keep, ir_binary(c, OP_MUL, x, ir_scalar(c, x->dtype, 1 / (1 - p))), ir_scalar(c, x->dtype, 0));
  return ev_tval(chk(ev, ir_where(c, ev_training(ev), dropped, x), a));
}

static Node *state_arg(Ev *ev, const Builtin *b, Args *a, int pos, const char *kw, Node *like) {
  Span sp;
  Node *s = ev_raw(ev, bi_need(ev, b, a, pos, kw, &sp), sp, kw);
  Param *p = ev_param(ev, s);
  if (!p || !p->state) ev_fail(ev, sp, "%s: %s must be a state variable (declared with `state`), so training can update it", b->name, kw);
  if (s->ndim != 1 || !dim_eq(s->shape[0], like->shape[1]) || s->dtype != like->dtype)
    ev_fail(ev, sp, "%s: %s must be %s[C] with C = %lld channels", b->name, kw, ir_dtype_name(like->dtype), (long long)like->shape[1].k);
  return s;
}

// A [C] vector shaped to broadcast along axis 1 of x: [1, C, 1, ...].
static Node *per_channel(Ev *ev, Node *v, Node *x) {
  Dim s[IR_MAXDIM];
  for (int d = 0; d < x->ndim; d++) s[d] = d == 1 ? x->shape[1] : dim_c(1);
  return ir_reshape(ev->c, v, x->ndim, s);
}

static void record_update(Ev *ev, Node *state, Node *value) {
  ev->updates = realloc(ev->updates, sizeof *ev->updates * (ev->nupdates + 1));
  if (!ev->updates) abort();
  ev->updates[ev->nupdates].state = state;
  ev->updates[ev->nupdates++].value = value;
}

// batch_norm(x, mean, var, gamma, beta, momentum=0.1, eps=1e-5): x [N, C, ...]
// normalized per channel. A training step uses the batch's statistics and
// moves the running ones (state) toward them, var unbiased, as PyTorch does;
// elsewhere the running statistics are used.
static Value b_batch_norm(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"x", "mean", "var", "gamma", "beta", "momentum", "eps", NULL};
  bi_check(ev, b, a, 7, kws);
  IrCtx *c = ev->c;
  Node *x = bi_tensor(ev, b, a, 0, "x");
  if (x->ndim < 2 || !ir_is_float(x->dtype) || (x->shape[1].sym && x->shape[1].k))
    ev_fail(ev, a->span, "batch_norm needs a float [N, C, ...] tensor with a known C");
  Node *rm = state_arg(ev, b, a, 1, "mean", x), *rv = state_arg(ev, b, a, 2, "var", x);
  Node *gamma = bi_tensor(ev, b, a, 3, "gamma"), *beta = bi_tensor(ev, b, a, 4, "beta");
  double mom = bi_num(ev, a, 5, "momentum", 0.1), eps = bi_num(ev, a, 6, "eps", 1e-5);
  DType t = x->dtype;
  uint32_t axes = ((1u << x->ndim) - 1) & ~2u;
  Node *n = bi_count(ev, x, axes, t);
  Node *bm = ir_binary(c, OP_DIV, ir_reduce(c, OP_SUM, x, axes, 1), n);
  Node *xc = ir_binary(c, OP_SUB, x, bm);
  Node *bv = ir_binary(c, OP_DIV, ir_reduce(c, OP_SUM, ir_binary(c, OP_MUL, xc, xc), axes, 1), n);
  Dim cs[1] = {x->shape[1]};
  Node *unbiased = ir_binary(c, OP_DIV, ir_binary(c, OP_MUL, ir_reshape(c, bv, 1, cs), n),
                             ir_binary(c, OP_MAXIMUM, ir_binary(c, OP_SUB, n, ir_scalar(c, t, 1)), ir_scalar(c, t, 1)));
  Node *k = ir_scalar(c, t, mom), *k1 = ir_scalar(c, t, 1 - mom);
  record_update(ev, rm, chk(ev, ir_binary(c, OP_ADD, ir_binary(c, OP_MUL, k1, rm), ir_binary(c, OP_MUL, k, ir_reshape(c, bm, 1, cs))), a));
  record_update(ev, rv, chk(ev, ir_binary(c, OP_ADD, ir_binary(c, OP_MUL, k1, rv), ir_binary(c, OP_MUL, k, unbiased)), a));
  Node *tr = ev_training(ev);
  Node *m = ir_where(c, tr, bm, per_channel(ev, rm, x));
  Node *v = ir_where(c, tr, bv, per_channel(ev, rv, x));
  Node *y = ir_binary(c, OP_MUL, ir_binary(c, OP_SUB, x, m), ir_unary(c, OP_RSQRT, ir_binary(c, OP_ADD, v, ir_scalar(c, t, eps))));
  y = ir_binary(c, OP_ADD, ir_binary(c, OP_MUL, y, per_channel(ev, ir_cast(c, gamma, t), x)), per_channel(ev, ir_cast(c, beta, t), x));
  return ev_tval(chk(ev, y, a));
}

// accuracy(logits, labels): the fraction of rows whose largest logit is the label.
// one_hot(labels, n): [..., n] with 1 at each label's class and 0 elsewhere; a
// label outside [0, n) gives a row of zeros (PyTorch refuses it; a graph cannot).
static Value b_one_hot(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"labels", "n", "dtype", NULL};
  bi_check(ev, b, a, 2, kws);
  IrCtx *c = ev->c;
  Span sp;
  Node *y = ev_raw(ev, bi_need(ev, b, a, 0, "labels", &sp), sp, "labels");
  if (ir_is_float(y->dtype) || y->dtype == DT_BOOL)
    ev_fail(ev, sp, "one_hot needs integer labels (i32 or i64), not %s", ir_dtype_name(y->dtype));
  Span nsp;
  int64_t n = ev_const_int(ev, bi_need(ev, b, a, 1, "n", &nsp), nsp, "n");
  if (n < 1) ev_fail(ev, nsp, "one_hot needs n >= 1 classes");
  if (y->ndim + 1 > IR_MAXDIM) ev_fail(ev, sp, "too many dimensions (at most %d)", IR_MAXDIM);
  Dim shape[IR_MAXDIM], col[IR_MAXDIM];
  for (int d = 0; d < y->ndim; d++) shape[d] = y->shape[d], col[d] = y->shape[d];
  shape[y->ndim] = dim_c(n);
  col[y->ndim] = dim_c(1);
  Node *cls = ir_iota(c, DT_I64, y->ndim + 1, shape, y->ndim);
  Node *eq = ir_binary(c, OP_EQ, ir_reshape(c, ir_cast(c, y, DT_I64), y->ndim + 1, col), cls);
  return ev_tval(chk(ev, ir_cast(c, eq, bi_dtype(ev, a, -1, DT_F32)), a));
}

// sigmoid_cross_entropy(logits, targets): per element -t log(sigmoid(z)) -
// (1 - t) log(1 - sigmoid(z)), written softplus(z) - z t so that it is finite
// for any logit (PyTorch's BCEWithLogitsLoss before the mean); targets in [0, 1].
static Value b_sigmoid_ce(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"logits", "targets", NULL};
  bi_check(ev, b, a, 2, kws);
  IrCtx *c = ev->c;
  Node *z = bi_float_tensor(ev, b, a, 0, "logits");
  Node *zt = chk(ev, ir_binary(c, OP_MUL, z, ir_cast(c, bi_tensor(ev, b, a, 1, "targets"), z->dtype)), a);
  return ev_tval(chk(ev, ir_binary(c, OP_SUB, ir_unary(c, OP_SOFTPLUS, z), zt), a));
}

// Top-k (k > 1): the label's logit is beaten by fewer than k others, a tie going
// to the earlier class as argmax's does (so k = 1 would agree with it); a label
// outside [0, C) never hits.
static Node *topk_hit(Ev *ev, Args *a, Node *z, Node *y, int64_t k) {
  IrCtx *c = ev->c;
  int ax = z->ndim - 1;
  Dim col[IR_MAXDIM];
  for (int d = 0; d < z->ndim; d++) col[d] = d == ax ? dim_c(1) : z->shape[d];
  Node *yl = chk(ev, ir_reshape(c, ir_cast(c, y, DT_I64), z->ndim, col), a);
  Node *cls = ir_iota(c, DT_I64, z->ndim, z->shape, ax);
  Node *at = ir_binary(c, OP_EQ, cls, yl);
  Node *zy = ir_reduce(c, OP_SUM, ir_where(c, at, z, ir_scalar(c, z->dtype, 0)), 1u << ax, 1);
  Node *ahead = ir_binary(c, OP_OR, ir_binary(c, OP_GT, z, zy),
                          ir_binary(c, OP_AND, ir_binary(c, OP_EQ, z, zy), ir_binary(c, OP_LT, cls, yl)));
  Node *rank = ir_reduce(c, OP_SUM, ir_cast(c, ahead, DT_I64), 1u << ax, 0);
  Node *valid = ir_reduce(c, OP_RMAX, ir_cast(c, at, DT_I32), 1u << ax, 0);   // the label is a class
  return chk(ev, ir_binary(c, OP_AND, ir_binary(c, OP_LT, rank, ir_scalar(c, DT_I64, (double)k)), valid), a);
}

static Value b_accuracy(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"logits", "labels", "k", NULL};
  bi_check(ev, b, a, 3, kws);
  IrCtx *c = ev->c;
  Span sp, ksp;
  Node *z = bi_tensor(ev, b, a, 0, "logits");
  Node *y = ev_raw(ev, bi_need(ev, b, a, 1, "labels", &sp), sp, "labels");
  if (z->ndim < 1) ev_fail(ev, a->span, "accuracy needs logits of rank 1 or more");
  Value *kv = bi_arg(a, 2, "k", &ksp);
  int64_t k = kv ? ev_const_int(ev, *kv, ksp, "k") : 1;
  if (k < 1) ev_fail(ev, ksp, "accuracy's k must be at least 1 (top-k: the label among the k largest logits)");
  Node *hit = k > 1 ? topk_hit(ev, a, z, y, k)
                    : chk(ev, ir_binary(c, OP_EQ, ir_reduce(c, OP_ARGMAX, z, 1u << (z->ndim - 1), 0), ir_cast(c, y, DT_I64)), a);
  Node *f = ir_cast(c, hit, DT_F32);
  uint32_t all = f->ndim ? (1u << f->ndim) - 1 : 0;
  return ev_tval(chk(ev, ir_binary(c, OP_DIV, ir_reduce(c, OP_SUM, f, all, 0), bi_count(ev, f, all, DT_F32)), a));
}

// parameter("dense.1.W"): a parameter or state tensor by its full name (layer
// parameters have no variable of their own outside the layer).
static Value b_parameter(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"name", NULL};
  bi_check(ev, b, a, 1, kws);
  Span sp;
  Value v = bi_need(ev, b, a, 0, "name", &sp);
  if (v.kind != V_STR) ev_fail(ev, sp, "parameter needs a name in quotes, like \"dense.1.W\"");
  for (int i = ev->nparams - 1; i >= 0; i--)
    if (!strcmp(ev->params[i].node->a.name, v.s)) return ev_tval(ev->params[i].node);
  ev_fail(ev, sp, "no parameter is named '%s'", v.s);
}

static const Builtin nn_table[] = {
  {"parameter", b_parameter, 0, "parameter(name)"},
  {"conv2d", b_conv2d, 0, "conv2d(x, w, stride=1, pad=0, dilation=1, lowering=\"auto\")  (pad: \"same\", \"valid\", k or [kh, kw]; lowering: \"im2col\", \"kernel\", \"direct\")"},
  {"maxpool2d", b_pool2d, 0, "maxpool2d(x, k, stride=k, pad=0)"},
  {"avgpool2d", b_pool2d, 0, "avgpool2d(x, k, stride=k, pad=0)"},
  {"take", b_take, 0, "take(table, indices)"},
  {"scatter_add", b_scatter_add, 0, "scatter_add(values, indices, rows)"},
  {"training", b_training, 0, "training()"},
  {"dropout", b_dropout, 0, "dropout(x, p)"},
  {"batch_norm", b_batch_norm, 0, "batch_norm(x, mean, var, gamma, beta, momentum=0.1, eps=1e-5)"},
  {"accuracy", b_accuracy, 0, "accuracy(logits, labels, k=1)  (k > 1: top-k accuracy)"},
  {"one_hot", b_one_hot, 0, "one_hot(labels, n, dtype=f32)"},
  {"sigmoid_cross_entropy", b_sigmoid_ce, 0, "sigmoid_cross_entropy(logits, targets)"},
};

const Builtin *nn_builtins(int *n) {
  *n = (int)(sizeof nn_table / sizeof *nn_table);
  return nn_table;
}

const Builtin *nn_builtin_find(const char *name) {
  for (size_t i = 0; i < sizeof nn_table / sizeof *nn_table; i++)
    if (!strcmp(nn_table[i].name, name)) return &nn_table[i];
  return NULL;
}
