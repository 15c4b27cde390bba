// The evaluator: statements run in order; tensor expressions become IR.
#include "eval.h"
#include "runtime/ckpt.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#define MAX_CALLS 1000000

// ---- errors: unwind to the statement that is running ----------------------------
void ev_fail(Ev *ev, Span sp, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(ev->diag, sp, "%s", msg);
  ev_unwind(ev);
}

// Notes for the calls an error happened in, innermost first; a recursion's
// repeated call is one note with its count, and past four notes the rest is
// summed up at the outermost call. Then back to the statement that is running.
void ev_unwind(Ev *ev) {
  for (int i = ev->depth - 1, shown = 0; i >= 0; shown++) {
    int same = 1;
    while (i - same >= 0 && ev->frames[i - same].at.src == ev->frames[i].at.src &&
           ev->frames[i - same].at.off == ev->frames[i].at.off)
      same++;
    if (shown == 4) {
      diag_note(ev->diag, ev->frames[0].at, "... in %d more calls, the outermost here", i + 1);
      break;
    }
    char times[32] = "";
    if (same > 1) snprintf(times, sizeof times, " (%d nested calls)", same);
    diag_note(ev->diag, ev->frames[i].at, "in this call%s%s%s", ev->frames[i].fn ? " of " : "",
              ev->frames[i].fn ? ev->frames[i].fn : "", times);
    i -= same;
  }
  longjmp(*ev->on_error, 1);
}

Node *ev_check(Ev *ev, Node *n, Span sp) {
  if (!n) ev_fail(ev, sp, "%s", ev->c->err);
  return n;
}

Value ev_tval(Node *n) {
  Value v = {0};
  v.kind = V_TENSOR;
  v.t = n;
  return v;
}

// A number literal is weak: held exactly (f64) until it meets a tensor, whose
// dtype it takes; on its own it becomes f32 (ev_tensor).
static Value weak_num(Ev *ev, double x) {
  Value v = ev_tval(ir_scalar(ev->c, DT_F64, x));
  v.weak = 1;
  return v;
}

// Integer literals beyond 2^53 are held as i64, so they stay exact too.
static int held_as_double(int64_t k) { return k >= -(1LL << 53) && k <= (1LL << 53); }

static Value weak_int(Ev *ev, int64_t k) {
  if (held_as_double(k)) return weak_num(ev, (double)k);
  Value v = ev_tval(ir_const(ev->c, DT_I64, 0, NULL, &k));
  v.weak = 1;
  return v;
}

// ---- environments -------------------------------------------------------------
static Env *env_new(Ev *ev, Env *parent) {
  Env *e = arena_alloc(ev->arena, sizeof *e);
  e->parent = parent;
  return e;
}

static void env_set(Ev *ev, Env *e, const char *name, Value v, Span sp) {
  for (int i = 0; i < e->n; i++)
    if (!strcmp(e->b[i].name, name)) { e->b[i].v = v; e->b[i].span = sp; return; }
  if (e->n == e->cap) {
    int cap = e->cap ? 2 * e->cap : 16;
    Binding *b = arena_alloc(ev->arena, sizeof *b * cap);
    if (e->n) memcpy(b, e->b, sizeof *b * e->n);
    e->b = b; e->cap = cap;
  }
  e->b[e->n++] = (Binding){arena_strdup(ev->arena, name), v, sp};
}

static Value *env_get(Env *e, const char *name) {
  for (; e; e = e->parent)
    for (int i = e->n - 1; i >= 0; i--)
      if (!strcmp(e->b[i].name, name)) return &e->b[i].v;
  return NULL;
}

Value *ev_lookup(Ev *ev, const char *name) { return env_get(ev->globals, name); }

// Edits (insert, delete, change, swap two neighbours) from a to b, letter case
// aside; stops counting past limit.
static int edits(const char *a, const char *b, int limit) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 64 || lb > 64 || abs(la - lb) > limit) return limit + 1;
  int d[65][65];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
      int v = d[i - 1][j - 1] + !same;
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v) v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

// Edits allowed for a suggestion: letter case only for one or two letters (x for
// y is no help), 1 up to four letters, 2 up to eight, then 3.
static int edit_limit(const char *name) {
  int len = (int)strlen(name);
  return len <= 2 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3;
}

const char *ev_nearest(const char *name, const char *const *cands, int n) {
  const char *best = NULL;
  int best_d = edit_limit(name) + 1;
  for (int i = 0; i < n; i++) {
    int d = cands[i] ? edits(name, cands[i], best_d - 1) : best_d;
    if (d < best_d) best_d = d, best = cands[i];
  }
  return best;
}

const char *ev_did_you_mean(char *buf, size_t size, const char *near) {
  if (!near) return "";
  snprintf(buf, size, " (did you mean '%s'?)", near);
  return buf;
}

// NumPy's and PyTorch's names that Kiln spells otherwise.
static const char *const other_names[][2] = {
  {"len", "dim(x, 0)"}, {"size", "dim(x, axis) or shape(x)"}, {"range", "arange"},
  {"concatenate", "concat"}, {"cat", "concat"}, {"amax", "max"}, {"amin", "min"}, {"clamp", "clip"},
  {"unsqueeze", "expand_dims or x[:, None]"},
  {"remainder", "mod or %"}, {"nan_to_num", "where(isfinite(x), x, 0)"}, {"fmod", "mod or %, whose result takes the divisor's sign, not the dividend's"}, {"floor_divide", "floordiv or //"},
  {"view", "reshape"}, {"square", "x ^ 2"}, {"power", "pow or ^"}, {"dot", "@"}, {"mm", "@"},
  {"cross_entropy", "softmax_cross_entropy"}, {"binary_cross_entropy_with_logits", "sigmoid_cross_entropy"},
  {"HuberLoss", "huber (import \"nn\")"}, {"smooth_l1_loss", "huber(pred, target, beta) / beta (import \"nn\")"}, {"mse_loss", "(a - b) ^ 2"},
  {"Linear", "dense (import \"nn\")"}, {"Conv2d", "conv (import \"nn\")"},
  {"BatchNorm2d", "batchnorm (import \"nn\")"}, {"LayerNorm", "layernorm (import \"nn\")"},
  {"Embedding", "embedding (import \"nn\")"}, {"Dropout", "dropout"}, {"swish", "silu"},
};

// The known name closest to a misspelt one: bindings in scope, builtins, dtypes,
// true and false. NULL when none is close (edit_limit).
static const char *nearest_name(Env *env, const char *name) {
  static const char *const words[] = {"true", "false", "bool", "i32", "i64", "f32", "f64"};
  const char *builtins[512], *best = NULL;
  int n = builtin_names(builtins, 512), best_d = edit_limit(name) + 1;
  for (Env *e = env; e; e = e->parent)
    for (int i = e->n - 1; i >= 0; i--) {
      int d = edits(name, e->b[i].name, best_d - 1);
      if (d < best_d) best_d = d, best = e->b[i].name;
    }
  for (int i = 0; i < n + (int)(sizeof words / sizeof *words); i++) {
    const char *w = i < n ? builtins[i] : words[i - n];
    int d = edits(name, w, best_d - 1);
    if (d < best_d) best_d = d, best = w;
  }
  return best;
}

static char *read_file(const char *path, size_t *len);
static const char *lib_path(Ev *ev, const char *name, char *path, size_t size);

// Whether the standard library (lib/nn.kiln) defines fn name: a layer used
// without import "nn".
static int in_nn_library(Ev *ev, const char *name) {
  char path[4096], def[300];
  size_t len;
  char *text = read_file(lib_path(ev, "nn", path, sizeof path), &len);
  if (!text) return 0;
  snprintf(def, sizeof def, "\nfn %s(", name);
  int found = strstr(text, def) != NULL;
  free(text);
  return found;
}

static Value lookup(Ev *ev, Env *env, const char *name, Span sp) {
  Value *v = env_get(env, name);
  if (v) return *v;
  int dt = ir_dtype_by_name(name);
  if (dt >= 0) { Value d = {0}; d.kind = V_DTYPE; d.dt = (DType)dt; return d; }
  const Builtin *b = builtin_find(name);
  if (b) {
    Value f = {0};
    f.kind = V_FUNC;
    f.fn = arena_alloc(ev->arena, sizeof *f.fn);
    f.fn->kind = FN_BUILTIN; f.fn->b = b; f.fn->name = b->name;
    return f;
  }
  if (in_nn_library(ev, name)) ev_fail(ev, sp, "unknown name '%s' (a layer of the standard library: import \"nn\")", name);
  for (size_t i = 0; i < sizeof other_names / sizeof *other_names; i++)
    if (!strcmp(name, other_names[i][0])) ev_fail(ev, sp, "unknown name '%s' (Kiln writes %s)", name, other_names[i][1]);
  char hint[300];
  ev_fail(ev, sp, "unknown name '%s'%s", name, ev_did_you_mean(hint, sizeof hint, nearest_name(env, name)));
}

// ---- conversions ----------------------------------------------------------------
// A bare integer that takes the dtype i32 (from the tensor it meets) must fit it:
// NumPy raises OverflowError there, and wrapping would be a silent wrong answer.
// w: the weak value, a scalar constant. 1 if it fits (or t is not i32); else 0
// with the number in num.
static int weak_fits(Node *w, DType t, char *num, size_t len) {
  while (w->op == OP_BROADCAST || w->op == OP_RESHAPE) w = w->src[0];
  if (t != DT_I32 || w->op != OP_CONST) return 1;
  int exact = !ir_is_float(w->dtype);
  int64_t k = exact ? ir_const_int_at(w, 0) : 0;
  double x = exact ? (double)k : ir_const_at(w, 0);
  if (exact ? k >= INT32_MIN && k <= INT32_MAX : x >= INT32_MIN && x <= INT32_MAX) return 1;
  if (exact) snprintf(num, len, "%lld", (long long)k);
  else snprintf(num, len, "%.17g", x);
  return 0;
}

static void weak_too_big(Ev *ev, Span sp, const char *num, const char *where) {
  ev_fail(ev, sp, "the number %s%s does not fit i32 (-2147483648 to 2147483647), the dtype it would take; cast to i64 first",
          num, where);
}

static int all_const(Value *items, int n) {
  for (int i = 0; i < n; i++) if (items[i].kind != V_TENSOR || items[i].t->op != OP_CONST) return 0;
  return 1;
}

// A list literal as a tensor: constants are packed into one constant; anything
// else is stacked along a new leading axis.
static Node *list_tensor(Ev *ev, Value v, Span sp) {
  Node **t = arena_alloc(ev->arena, sizeof(Node *) * (v.n + 1));
  for (int i = 0; i < v.n; i++) {
    t[i] = ev_raw(ev, v.items[i], sp, "a list element");
    if (i && !ir_shape_eq(t[i], t[0]))
      ev_fail(ev, sp, "ragged list: element %d has a different shape from element 0", i);
  }
  if (v.n == 0) {
    Dim z = dim_c(0);
    return ir_const(ev->c, DT_F32, 1, &z, NULL);
  }
  // The tensors decide the dtype; bare numbers follow them (all numbers: f32).
  int strong = 0;
  DType dt = DT_BOOL;
  for (int i = 0; i < v.n; i++)
    if (!v.items[i].weak) { dt = strong++ ? ir_promote(dt, t[i]->dtype) : t[i]->dtype; }
  if (!strong) dt = DT_F32;
  else if (!ir_is_float(dt))
    for (int i = 0; i < v.n; i++) {   // an integer tensor meeting 0.5 becomes f32, bools meeting 2 i32
      double x;
      if (!v.items[i].weak) continue;
      if (!ir_is_scalar_const(t[i], &x) || x != floor(x)) dt = DT_F32;
      else if (dt == DT_BOOL) dt = DT_I32;
    }
  char num[32];
  for (int i = 0; i < v.n; i++)
    if (v.items[i].weak && !weak_fits(t[i], dt, num, sizeof num)) weak_too_big(ev, sp, num, " in this list");
  Dim shape[IR_MAXDIM];
  if (t[0]->ndim + 1 > IR_MAXDIM) ev_fail(ev, sp, "too many dimensions (at most %d)", IR_MAXDIM);
  shape[0] = dim_c(v.n);
  memcpy(shape + 1, t[0]->shape, sizeof(Dim) * t[0]->ndim);
  if (all_const(v.items, v.n)) {
    int64_t each;
    ir_numel_const(t[0], &each);
    size_t esz = ir_dtype_size(dt);
    unsigned char *data = arena_alloc(ev->arena, esz * each * v.n + 1);
    for (int i = 0; i < v.n; i++) {
      int from_int = !ir_is_float(t[i]->dtype);   // integers converted from int64_t: exact past 2^53
      for (int64_t j = 0; j < each; j++) {
        int64_t k = from_int ? ir_const_int_at(t[i], j) : 0;
        double x = from_int ? 0 : ir_const_at(t[i], j);
        unsigned char *p = data + esz * (i * each + j);
        switch (dt) {
        case DT_BOOL: *p = from_int ? k != 0 : x != 0; break;
        case DT_I32: *(int32_t *)p = from_int ? (int32_t)k : (int32_t)x; break;   // weak_fits checked the range
        case DT_I64: *(int64_t *)p = from_int ? k : (int64_t)x; break;
        case DT_F32: *(float *)p = from_int ? (float)k : (float)x; break;
        default: *(double *)p = from_int ? (double)k : x; break;
        }
      }
    }
    return ev_check(ev, ir_const(ev->c, dt, t[0]->ndim + 1, shape, data), sp);
  }
  Dim one[IR_MAXDIM + 1];
  int nd = t[0]->ndim + 1;
  one[0] = dim_c(1);
  memcpy(one + 1, t[0]->shape, sizeof(Dim) * t[0]->ndim);
  for (int i = 0; i < v.n; i++) t[i] = ev_check(ev, ir_reshape(ev->c, ir_cast(ev->c, t[i], dt), nd, one), sp);
  return ev_check(ev, ir_concat(ev->c, t, v.n, 0), sp);
}

Node *ev_tensor(Ev *ev, Value v, Span sp, const char *what) {
  if (v.kind == V_TENSOR && v.weak && v.t->dtype != DT_F32) return ir_cast(ev->c, v.t, DT_F32);
  return ev_raw(ev, v, sp, what);
}

Node *ev_raw(Ev *ev, Value v, Span sp, const char *what) {
  switch (v.kind) {
  case V_TENSOR: return v.t;
  case V_LIST: return list_tensor(ev, v, sp);
  case V_FUNC: ev_fail(ev, sp, "%s must be a tensor, not the function '%s'", what, v.fn->name ? v.fn->name : "<grad>");
  case V_DTYPE: ev_fail(ev, sp, "%s must be a tensor, not the dtype %s", what, ir_dtype_name(v.dt));
  case V_STR: ev_fail(ev, sp, "%s must be a tensor, not a string", what);
  default: ev_fail(ev, sp, "%s must be a tensor", what);
  }
}

// A value computed from constants only (2 * dim(h, -1), cast(n, i32), a list of
// them) is a constant too: folded as the pipeline folds it, to the CONST *n
// then is. 0 when it depends on a run-time value or is more than a small expression.
int ev_fold_const(Ev *ev, Node **n) {
  if ((*n)->op == OP_CONST) return 1;
  int count, leaves_const = 1;
  Node **order = ir_topo(ev->c, n, 1, &count);
  for (int i = 0; i < count; i++) leaves_const &= order[i]->nsrc > 0 || order[i]->op == OP_CONST || order[i]->op == OP_IOTA;
  free(order);
  if (!leaves_const || count > 64) return 0;
  static const FoldLimits small = {64, 64, 4096};   // elements: lists of sizes and axes, not tensor math
  IrGraph *g = pass_fold_limits(ev->c, ir_graph_new(ev->c, n, 1, NULL, 0), &small);
  Node *k = g ? g->outs[0] : NULL;
  if (!k || (k->op != OP_CONST && !ir_is_scalar_const(k, NULL))) return 0;   // equal elements: a broadcast CONST
  *n = k;
  return 1;
}

int ev_scalar_const(Ev *ev, Node **n, double *x) {
  if ((*n)->ndim) return 0;
  if (ir_is_scalar_const(*n, x)) return 1;
  return ev_fold_const(ev, n) && ir_is_scalar_const(*n, x);
}

int64_t ev_const_int(Ev *ev, Value v, Span sp, const char *what) {
  Node *n = ev_raw(ev, v, sp, what);
  double x;
  if (!ev_scalar_const(ev, &n, &x))
    ev_fail(ev, sp, "%s must be a constant integer", what);
  if (n->op == OP_CONST && !ir_is_float(n->dtype)) return ir_const_int_at(n, 0);   // exact past 2^53
  // A bare number is typed by its value (2.0 is the integer 2); a float
  // tensor is refused even when whole, as NumPy refuses x[np.float32(2)].
  if (!v.weak && ir_is_float(n->dtype))
    ev_fail(ev, sp, "%s must be an integer, not the %s %g%s", what, ir_dtype_name(n->dtype), x,
            x == floor(x) ? " (cast it, or compute it with integers: `//` divides them)" : "");
  if (x != floor(x) || fabs(x) > 9e15) ev_fail(ev, sp, "%s must be an integer, not %g", what, x);
  return (int64_t)x;
}

// ---- operators ------------------------------------------------------------------
static int integral_const(Node *n) {
  double x;
  return ir_is_scalar_const(n, &x) && x == floor(x);
}

// A bare number takes the dtype of the tensor it meets (NumPy's weak scalars).
// sa, sb: the operands' places, for an integer too large for i32: an error, or,
// for a comparison (widen), both operands compared as i64 (NumPy 2 does that too).
void ev_unify_weak(Ev *ev, Value *a, Value *b, Span sa, Span sb, int widen) {
  if (a->weak == b->weak) return;
  Value *w = a->weak ? a : b, *s = a->weak ? b : a;
  DType t = s->t->dtype;
  if (t == DT_BOOL) t = integral_const(w->t) ? DT_I32 : DT_F32;
  else if (!ir_is_float(t) && !integral_const(w->t)) t = DT_F32;
  char num[32];
  if (!weak_fits(w->t, t, num, sizeof num)) {
    if (!widen) weak_too_big(ev, a->weak ? sa : sb, num, "");
    t = DT_I64;
    s->t = ir_cast(ev->c, s->t, t);
  }
  w->t = ir_cast(ev->c, w->t, t);
  w->weak = 0;   // it has its dtype now
}

static const Op binop_ir[B_COUNT] = {
  [B_ADD] = OP_ADD, [B_SUB] = OP_SUB, [B_MUL] = OP_MUL, [B_DIV] = OP_DIV, [B_FLOORDIV] = OP_FLOORDIV, [B_MOD] = OP_MOD, [B_POW] = OP_POW,
  [B_LT] = OP_LT, [B_LE] = OP_LE, [B_GT] = OP_GT, [B_GE] = OP_GE, [B_EQ] = OP_EQ, [B_NE] = OP_NE,
  [B_AND] = OP_AND, [B_OR] = OP_OR,
};

static Value binary(Ev *ev, int op, Value a, Value b, AstNode *e) {
  a.t = ev_raw(ev, a, e->lhs->span, "the left operand");
  b.t = ev_raw(ev, b, e->rhs->span, "the right operand");
  a.kind = b.kind = V_TENSOR;
  int weak = a.weak && b.weak;
  ev_unify_weak(ev, &a, &b, e->lhs->span, e->rhs->span, op >= B_LT && op <= B_NE);
  Node *r;
  if (op == B_MATMUL) r = ir_matmul(ev->c, a.t, b.t);
  else r = ir_binary(ev->c, binop_ir[op], a.t, b.t);
  Value v = ev_tval(ev_check(ev, r, e->op_span));
  v.weak = weak && !(ir_ops[v.t->op].flags & F_BOOL);
  return v;
}

// ---- expressions ----------------------------------------------------------------
static Value eval(Ev *ev, Env *env, AstNode *e);
static Value call_user(Ev *ev, Func *f, Args *a);

// An index entry that adds an axis of size 1 (NumPy's x[:, None]): None or
// newaxis, unless the program binds that name.
static int is_new_axis(Env *env, AstNode *it) {
  return it->kind == AST_NAME && (!strcmp(it->str, "None") || !strcmp(it->str, "newaxis")) && !env_get(env, it->str);
}

static Value eval_index(Ev *ev, Env *env, AstNode *e) {
  Node *x = ev_tensor(ev, eval(ev, env, e->lhs), e->lhs->span, "the indexed value");
  int nnew = 0;
  for (int i = 0; i < e->nitems; i++) nnew += is_new_axis(env, e->items[i]);
  if (e->nitems - nnew > x->ndim)
    ev_fail(ev, e->span, "too many indices: %d for a tensor of rank %d", e->nitems - nnew, x->ndim);
  if (x->ndim + nnew > IR_MAXDIM) ev_fail(ev, e->span, "too many dimensions (at most %d)", IR_MAXDIM);
  int64_t start[IR_MAXDIM], count[IR_MAXDIM], step[IR_MAXDIM];
  Dim keep[IR_MAXDIM];
  int nkeep = 0, entry = 0;
  for (int d = 0; d < x->ndim; d++) {
    while (entry < e->nitems && is_new_axis(env, e->items[entry])) keep[nkeep++] = dim_c(1), entry++;
    AstNode *it = entry < e->nitems ? e->items[entry++] : NULL;
    Dim sz = x->shape[d];
    int full = !it || (it->kind == AST_SLICE && !it->start && !it->stop && !it->step);
    if (full) { start[d] = 0; count[d] = -1; step[d] = 1; keep[nkeep++] = sz; continue; }
    if (sz.sym && sz.k) ev_fail(ev, it->span, "cannot index the symbolic dimension %s", ev->c->symnames[sz.sym - 1]);
    int64_t n = sz.k;
    if (it->kind != AST_SLICE) {
      int64_t i = ev_const_int(ev, eval(ev, env, it), it->span, "an index");
      if (i < -n || i >= n) ev_fail(ev, it->span, "index %lld is out of range for axis %d of size %lld", (long long)i, d, (long long)n);
      start[d] = i < 0 ? i + n : i; count[d] = 1; step[d] = 1;
      continue;
    }
    int64_t st = it->step ? ev_const_int(ev, eval(ev, env, it->step), it->step->span, "a slice step") : 1;
    if (st == 0) ev_fail(ev, it->step->span, "slice step cannot be zero");
    // Python's slice rules, clamped to the axis.
    int64_t lo = st > 0 ? 0 : n - 1, hi = st > 0 ? n : -1;
    if (it->start) {
      int64_t v = ev_const_int(ev, eval(ev, env, it->start), it->start->span, "a slice start");
      if (v < 0) v += n;
      lo = st > 0 ? (v < 0 ? 0 : v > n ? n : v) : (v < 0 ? -1 : v > n - 1 ? n - 1 : v);
    }
    if (it->stop) {
      int64_t v = ev_const_int(ev, eval(ev, env, it->stop), it->stop->span, "a slice stop");
      if (v < 0) v += n;
      hi = st > 0 ? (v < 0 ? 0 : v > n ? n : v) : (v < -1 ? -1 : v > n - 1 ? n - 1 : v);
    }
    // 128-bit: steps near 2^63 must not overflow the count
    __int128 span = st > 0 ? (__int128)hi - lo : (__int128)lo - hi, stride = st > 0 ? st : -(__int128)st;
    int64_t cnt = span > 0 ? (int64_t)((span + stride - 1) / stride) : 0;
    start[d] = cnt ? lo : 0; count[d] = cnt; step[d] = st;
    keep[nkeep++] = dim_c(cnt);
  }
  for (; entry < e->nitems; entry++) keep[nkeep++] = dim_c(1);   // new axes after the last
  Node *r = ev_check(ev, ir_slice(ev->c, x, start, count, step), e->span);
  return ev_tval(ev_check(ev, ir_reshape(ev->c, r, nkeep, keep), e->span));
}

// value.field: a data set's split (fmnist.train, fmnist.test).
static Value eval_attr(Ev *ev, Env *env, AstNode *e) {
  Value v = eval(ev, env, e->lhs);
  if (v.kind != V_DATA) ev_fail(ev, e->name_span, "only data sets have fields (.train, .test)");
  if (v.data->split != SPLIT_NONE) ev_fail(ev, e->name_span, "%s is already one split of a data set", v.data->name);
  int split = !strcmp(e->str, "train") ? SPLIT_TRAIN : !strcmp(e->str, "test") ? SPLIT_TEST : SPLIT_NONE;
  if (split == SPLIT_NONE) ev_fail(ev, e->name_span, "a data set has the splits .train and .test, not .%s", e->str);
  DataSrc *d = arena_alloc(ev->arena, sizeof *d);
  *d = *v.data;
  d->split = split;
  char name[256];
  snprintf(name, sizeof name, "%s.%s", v.data->name ? v.data->name : "data", e->str);
  d->name = arena_strdup(ev->arena, name);
  v.data = d;
  return v;
}

Value ev_eval_expr(Ev *ev, Env *env, AstNode *e) { return eval(ev, env, e); }

static Value eval_call(Ev *ev, Env *env, AstNode *e) {
  Value callee = eval(ev, env, e->lhs);
  if (callee.kind != V_FUNC) ev_fail(ev, e->lhs->span, "this is not a function, so it cannot be called");
  Args a = {0};
  a.span = e->span;
  a.pos = arena_alloc(ev->arena, sizeof(Value) * (e->nitems + 1));
  a.pos_span = arena_alloc(ev->arena, sizeof(Span) * (e->nitems + 1));
  a.kw = arena_alloc(ev->arena, sizeof(char *) * (e->nitems + 1));
  a.kwv = arena_alloc(ev->arena, sizeof(Value) * (e->nitems + 1));
  a.kw_span = arena_alloc(ev->arena, sizeof(Span) * (e->nitems + 1));
  for (int i = 0; i < e->nitems; i++) {
    AstNode *it = e->items[i];
    if (it->kind == AST_KWARG) {
      a.kw[a.nkw] = it->str; a.kw_span[a.nkw] = it->span;
      a.kwv[a.nkw++] = eval(ev, env, it->lhs);
    } else {
      a.pos_span[a.npos] = it->span;
      a.pos[a.npos++] = eval(ev, env, it);
    }
  }
  Func *f = callee.fn;
  if (f->kind == FN_BUILTIN) return f->b->fn(ev, f->b, &a);
  if (f->kind == FN_USER) return call_user(ev, f, &a);
  if (a.nkw) ev_fail(ev, a.kw_span[0], "keyword arguments are not accepted by a grad function");
  return ev_call(ev, f, a.pos, a.npos, e->span);
}

// A list of bare numbers only (each maybe negated): the f32 tensor that list_tensor
// would make, packed straight from the syntax tree, without a scalar node per
// number (a literal of a million numbers took a gigabyte that way).
static int numbers_only(AstNode *e) {
  for (int i = 0; i < e->nitems; i++) {
    AstNode *it = e->items[i];
    if (it->kind == AST_UNARY && (it->op == U_NEG || it->op == U_PLUS)) it = it->lhs;
    if (it->kind != AST_NUM) return 0;
  }
  return e->nitems > 0;
}

static Node *number_list(Ev *ev, AstNode *e) {
  float *data = arena_alloc(ev->arena, sizeof(float) * e->nitems);
  for (int i = 0; i < e->nitems; i++) {
    AstNode *it = e->items[i], *num = it->kind == AST_UNARY ? it->lhs : it;
    int neg = it->kind == AST_UNARY && it->op == U_NEG;
    int64_t k = num->inum;
    if (num->num_is_int && !held_as_double(k))   // held as i64 (weak_int): exact
      data[i] = (float)(neg ? -k : k);
    else {   // held as a double, negated as one (-0 is -0.0)
      double d = num->num_is_int ? (double)k : num->num;
      data[i] = (float)(neg ? -d : d);
    }
  }
  Dim n = dim_c(e->nitems);
  return ev_check(ev, ir_const(ev->c, DT_F32, 1, &n, data), e->span);
}

static Value eval(Ev *ev, Env *env, AstNode *e) {
  switch (e->kind) {
  case AST_NUM: return e->num_is_int ? weak_int(ev, e->inum) : weak_num(ev, e->num);
  case AST_BOOL: return ev_tval(ir_scalar(ev->c, DT_BOOL, e->inum));
  case AST_STR: { Value v = {0}; v.kind = V_STR; v.s = e->str; return v; }
  case AST_NAME: return lookup(ev, env, e->str, e->span);
  case AST_LIST: {
    if (numbers_only(e)) return ev_tval(number_list(ev, e));
    Value v = {0};
    v.kind = V_LIST; v.n = e->nitems;
    v.items = arena_alloc(ev->arena, sizeof(Value) * (e->nitems + 1));
    int tensors = 1;
    for (int i = 0; i < e->nitems; i++) {
      v.items[i] = eval(ev, env, e->items[i]);
      if (v.items[i].kind == V_LIST) v.items[i] = ev_tval(list_tensor(ev, v.items[i], e->items[i]->span));
      tensors &= v.items[i].kind == V_TENSOR;
      if (tensors && i && !ir_shape_eq(v.items[i].t, v.items[0].t)) tensors = 0;
    }
    if (!tensors || !e->nitems) return v;   // ragged: stays a list (concat takes it)
    return ev_tval(list_tensor(ev, v, e->span));
  }
  case AST_UNARY: {
    Value a = eval(ev, env, e->lhs);
    if (e->op == U_PLUS) return a;
    Node *t = ev_raw(ev, a, e->lhs->span, "the operand");
    if (e->op == U_NEG && a.weak && t->op == OP_CONST)
      return ir_is_float(t->dtype) ? weak_num(ev, -ir_const_at(t, 0)) : weak_int(ev, -ir_const_int_at(t, 0));
    Value r = ev_tval(ev_check(ev, ir_unary(ev->c, e->op == U_NEG ? OP_NEG : OP_NOT, t), e->op_span));
    r.weak = a.weak && e->op == U_NEG;
    return r;
  }
  case AST_BINARY: {
    Value a = eval(ev, env, e->lhs), b = eval(ev, env, e->rhs);
    return binary(ev, e->op, a, b, e);
  }
  case AST_CALL: return eval_call(ev, env, e);
  case AST_INDEX: return eval_index(ev, env, e);
  case AST_ATTR: return eval_attr(ev, env, e);
  default: ev_fail(ev, e->span, "this is not an expression");
  }
}

// ---- calls ---------------------------------------------------------------------
static Value run_block(Ev *ev, Env *env, AstNode *block);

static Value call_grad(Ev *ev, Func *f, Value *args, int nargs, Span sp) {
  if (f->argnum >= nargs)
    ev_fail(ev, sp, "grad with respect to argument %d, but the call passes %d argument%s", f->argnum, nargs, nargs == 1 ? "" : "s");
  Node **vars = arena_alloc(ev->arena, sizeof(Node *) * nargs), **actual = arena_alloc(ev->arena, sizeof(Node *) * nargs);
  Value *vv = arena_alloc(ev->arena, sizeof(Value) * nargs);
  int nv = 0;
  for (int i = 0; i < nargs; i++) {
    vv[i] = args[i];
    if (args[i].kind != V_TENSOR && args[i].kind != V_LIST) continue;
    Node *t = ev_tensor(ev, args[i], sp, "an argument");
    if (i == f->argnum && !ir_is_float(t->dtype)) t = ir_cast(ev->c, t, DT_F32);
    // A fresh variable stands for the argument while differentiating.
    Node *var = ir_input(ev->c, "arg", ROLE_VAR, t->dtype, t->ndim, t->shape);
    vars[nv] = var; actual[nv++] = t;
    vv[i] = ev_tval(var);
    vv[i].weak = args[i].weak;
    if (i == f->argnum) vv[i].weak = 0;
  }
  Node *wrt = vv[f->argnum].t;
  if (vv[f->argnum].kind != V_TENSOR) ev_fail(ev, sp, "grad: argument %d is not a tensor", f->argnum);
  Value y = ev_call(ev, f->inner, vv, nargs, sp);
  Node *yt = ev_tensor(ev, y, sp, "the differentiated function's result");
  Node *g = ev_grad(ev, yt, wrt, sp, sp, "a function with a scalar result; this one returns");
  g = ev_check(ev, ir_substitute(ev->c, g, vars, actual, nv), sp);
  return ev_tval(g);
}

Node *ev_grad(Ev *ev, Node *y, Node *wrt, Span ysp, Span wsp, const char *needs) {
  if (y->ndim) {
    char b[128];
    ev_fail(ev, ysp, "grad needs %s shape %s (reduce it, e.g. with sum or mean)", needs,
            ir_shape_str(ev->c, y->ndim, y->shape, b, sizeof b));
  }
  if (!ir_is_float(y->dtype)) y = ir_cast(ev->c, y, DT_F32);
  Node *g;
  if (pass_grad(ev->c, y, NULL, &wrt, 1, &g)) ev_fail(ev, wsp, "%s", ev->c->err);
  return g;
}

Value ev_call(Ev *ev, Func *f, Value *args, int nargs, Span sp) {
  if (f->kind == FN_GRAD) return call_grad(ev, f, args, nargs, sp);
  if (f->kind == FN_BUILTIN) {
    Args a = {0};
    a.pos = args; a.npos = nargs; a.span = sp;
    a.pos_span = arena_alloc(ev->arena, sizeof(Span) * (nargs + 1));
    for (int i = 0; i < nargs; i++) a.pos_span[i] = sp;
    return f->b->fn(ev, f->b, &a);
  }
  Args a = {0};
  a.pos = args; a.npos = nargs; a.span = sp;
  return call_user(ev, f, &a);
}

// The scope a call's parameters are named in: "dense.2" for the second call
// of dense in the enclosing scope, or the name given with name="...".
static const char *call_scope(Ev *ev, const char *fname, const char *given) {
  char key[512], full[600];
  const char *parent = ev->scope ? ev->scope : "";
  if (given) {
    snprintf(full, sizeof full, "%s%s%s", parent, *parent ? "." : "", given);
    return arena_strdup(ev->arena, full);
  }
  snprintf(key, sizeof key, "%s/%s", parent, fname ? fname : "fn");
  int i = 0;
  while (i < ev->nscopes && strcmp(ev->scopes[i].key, key)) i++;
  if (i == ev->nscopes) {
    ev->scopes = realloc(ev->scopes, sizeof *ev->scopes * (ev->nscopes + 1));
    if (!ev->scopes) abort();
    ev->scopes[ev->nscopes].key = arena_strdup(ev->arena, key);
    ev->scopes[ev->nscopes++].n = 0;
  }
  snprintf(full, sizeof full, "%s%s%s.%d", parent, *parent ? "." : "", fname ? fname : "fn", ++ev->scopes[i].n);
  return arena_strdup(ev->arena, full);
}

// A user function call: positional arguments, then keywords by parameter
// name, then defaults (evaluated at the call, in the function's scope).
// name="..." names the call's parameter scope unless the function has a
// parameter called name.
static Value call_user(Ev *ev, Func *f, Args *a) {
  AstNode *def = f->def;
  Span sp = a->span;
  int np = def->nitems;
  if (a->npos > np)
    ev_fail(ev, sp, "%s takes %d argument%s, but %d %s given", f->name, np, np == 1 ? "" : "s", a->npos,
            a->npos == 1 ? "was" : "were");
  if (ev->depth >= EV_MAX_DEPTH) ev_fail(ev, sp, "calls nested more than %d deep (runaway recursion?)", EV_MAX_DEPTH);
  // Tracing inlines every call: bound the total, or f(v) = g(v) + g(v) chains explode.
  if (++ev->calls > MAX_CALLS) ev_fail(ev, sp, "more than %d function calls while tracing one statement", MAX_CALLS);
  Env *local = env_new(ev, f->closure);
  Value *val = arena_alloc(ev->arena, sizeof(Value) * (np + 1));
  char *have = arena_alloc(ev->arena, np + 1);
  for (int i = 0; i < a->npos; i++) { val[i] = a->pos[i]; have[i] = 1; }
  const char *given = NULL;
  for (int k = 0; k < a->nkw; k++) {
    int i = 0;
    while (i < np && strcmp(def->items[i]->str, a->kw[k])) i++;
    if (i == np && !strcmp(a->kw[k], "name")) {
      if (a->kwv[k].kind != V_STR) ev_fail(ev, a->kw_span[k], "name= must be a string: the scope of this call's parameters");
      given = a->kwv[k].s;
      continue;
    }
    if (i == np) {
      const char *names[64];
      for (int j = 0; j < np && j < 64; j++) names[j] = def->items[j]->str;
      char hint[300];
      ev_fail(ev, a->kw_span[k], "%s has no parameter '%s'%s", f->name ? f->name : "this function", a->kw[k],
              ev_did_you_mean(hint, sizeof hint, ev_nearest(a->kw[k], names, np < 64 ? np : 64)));
    }
    if (have[i]) ev_fail(ev, a->kw_span[k], "%s: argument '%s' is given twice", f->name ? f->name : "this function", a->kw[k]);
    val[i] = a->kwv[k]; have[i] = 1;
  }
  int required = 0;
  while (required < np && def->items[required]->kind != AST_KWARG) required++;
  if (!a->nkw && a->npos < required)
    ev_fail(ev, sp, "%s takes %s%d argument%s, but %d %s given", f->name, required < np ? "at least " : "", required,
            required == 1 ? "" : "s", a->npos, a->npos == 1 ? "was" : "were");
  for (int i = 0; i < np; i++) {
    if (have[i]) continue;
    if (def->items[i]->kind != AST_KWARG)
      ev_fail(ev, sp, "%s is missing its argument '%s'", f->name ? f->name : "this function", def->items[i]->str);
    val[i] = eval(ev, local, def->items[i]->lhs);
  }
  for (int i = 0; i < np; i++) env_set(ev, local, def->items[i]->str, val[i], def->items[i]->span);
  const char *outer = ev->scope;
  ev->scope = call_scope(ev, f->name, given);
  ev->frames[ev->depth].fn = f->name;
  ev->frames[ev->depth].at = sp;
  ev->depth++;
  Value v = run_block(ev, local, def->body);
  ev->depth--;
  ev->scope = outer;
  return v;
}

// ---- computing values: the pipeline, compiled once per graph -------------------
// Fails at `where` if n depends on an input that has no value.
static void check_bound(Ev *ev, Node *n, Span where) {
  int count;
  Node **order = ir_topo(ev->c, &n, 1, &count);
  for (int i = 0; i < count; i++) {
    Node *x = order[i];
    if (x->op == OP_INPUT && x->a.i[0] != ROLE_PARAM && x->a.i[0] != ROLE_MODE) {
      const char *name = x->a.name;
      free(order);
      ev_fail(ev, where, "this depends on the input '%s', which has no value here (inputs are bound by training "
              "statements or the C API)", name);
    }
    if (x->op == OP_DIMV) {   // parameters have concrete shapes: no input here binds a symbol
      const char *name = ev->c->symnames[x->a.i[0] - 1];
      free(order);
      ev_fail(ev, where, "this depends on the size %s, which is not known here (an input binds it when it runs)", name);
    }
  }
  free(order);
}

Node *ev_training(Ev *ev) {
  if (!ev->training) ev->training = ir_input(ev->c, "training", ROLE_MODE, DT_BOOL, 0, NULL);
  return ev->training;
}

Node *ev_step(Ev *ev) {
  if (!ev->step) ev->step = ir_input(ev->c, "step", ROLE_MODE, DT_I64, 0, NULL);
  return ev->step;
}

Node *ev_in_mode(Ev *ev, Node *n, int training) {
  Node *vars[2], *vals[2];
  int k = 0;
  if (ev->training) { vars[k] = ev->training; vals[k++] = ir_scalar(ev->c, DT_BOOL, training); }
  if (ev->step) { vars[k] = ev->step; vals[k++] = ir_scalar(ev->c, DT_I64, 0); }
  return k ? ir_substitute(ev->c, n, vars, vals, k) : n;
}

uint64_t ev_next_seed(Ev *ev) { return ev->seed * 1000003u + ++ev->rng_count; }

static Program *program_for(Ev *ev, Node **key, int nout, Node ***ins_out, int *nin_out, Span where);
Program *ev_program(Ev *ev, Node **outs, int nout, Node ***ins, int *nin, Span where) {
  return program_for(ev, outs, nout, ins, nin, where);
}

static Program *program_for(Ev *ev, Node **key, int nout, Node ***ins_out, int *nin_out, Span where) {
  for (int i = 0; i < ev->nprogs; i++) {
    CachedProgram *cp = &ev->progs[i];
    if (cp->nout == nout && cp->prog->device == ev->pipe.device && !memcmp(cp->outs, key, sizeof(Node *) * nout)) {
      *ins_out = cp->ins; *nin_out = cp->nin;
      return cp->prog;
    }
  }
  // Outside a training step the model runs in evaluation mode.
  Node **outs = arena_alloc(ev->arena, sizeof(Node *) * (nout + 1));
  for (int i = 0; i < nout; i++) outs[i] = ev_check(ev, ev_in_mode(ev, key[i], 0), where);
  int count;
  Node **order = ir_topo(ev->c, outs, nout, &count);
  Node **ins = arena_alloc(ev->arena, sizeof(Node *) * (count + 1));
  int nin = 0;
  for (int i = 0; i < count; i++)
    if (order[i]->op == OP_INPUT) ins[nin++] = order[i];
  free(order);
  if (!ev->binding_data)
    for (int i = 0; i < nout; i++) check_bound(ev, outs[i], where);   // only parameters have values here
  IrGraph *g = ir_graph_new(ev->c, outs, nout, ins, nin);
  char err[8192], label[200];
  if (where.src) snprintf(label, sizeof label, "graph of %s:%d:%d", where.src->name, where.line, where.col);
  ev->pipe.label = where.src ? label : NULL;
  Program *pr = pipe_compile(&ev->pipe, g, err, sizeof err);
  ev->pipe.label = NULL;
  if (!pr) {
    if (!err[0]) return NULL;   // stopped to show a stage
    ev_fail(ev, where, "could not compile this expression: %s", err);
  }
  ev->progs = realloc(ev->progs, sizeof(CachedProgram) * (ev->nprogs + 1));
  if (!ev->progs) abort();
  Node **keep = arena_alloc(ev->arena, sizeof(Node *) * (nout + 1));
  memcpy(keep, key, sizeof(Node *) * nout);
  ev->progs[ev->nprogs++] = (CachedProgram){keep, nout, ins, nin, pr};
  *ins_out = ins; *nin_out = nin;
  return pr;
}

Param *ev_param(Ev *ev, Node *n) {
  for (int i = 0; i < ev->nparams; i++) if (ev->params[i].node == n) return &ev->params[i];
  return NULL;
}

RtTensor *ev_param_value(Ev *ev, Node *n) {
  Param *p = ev_param(ev, n);
  return p ? &p->value : NULL;
}

void ev_run_program(Ev *ev, Program *pr, const RtTensor *in, RtTensor *out, int alloc, Span where) {
  ev_run_program_while(ev, pr, in, out, alloc, where, NULL, NULL);
}

void ev_run_program_while(Ev *ev, Program *pr, const RtTensor *in, RtTensor *out, int alloc, Span where,
                          int (*meanwhile)(void *), void *ctx) {
  int nout = pr->g->nout;
  int64_t D[65] = {0}, shape[IR_MAXDIM];
  char err[512];
  if (prog_bind(pr, in, D, err, sizeof err)) ev_fail(ev, where, "%s", err);
  for (int i = 0; alloc && i < nout; i++) {
    int nd;
    prog_out_shape(pr, i, D, &nd, shape);
    out[i] = rt_tensor_new((RtDType)pr->g->outs[i]->dtype, nd, shape);
    if (!out[i].data) {
      for (int j = 0; j < i; j++) rt_tensor_free(&out[j]);
      Node *o = pr->g->outs[i];
      ev_fail(ev, where, "out of memory for a result of shape %s", ir_shape_str(ev->c, o->ndim, o->shape, err, sizeof err));
    }
  }
  int rc, also = 0;
  if (meanwhile && pr->cuda) {
    if (!(rc = prog_start(&ev->pipe, pr, D, in, out))) also = meanwhile(ctx), rc = prog_wait(&ev->pipe, pr);
    if (!rc && also) rc = PROG_DEVICE_ERROR;   // its reason in cx->err
  } else {
    rc = prog_run(&ev->pipe, pr, D, in, out, ev->via_ffi);
  }
  if (!rc) return;
  for (int j = 0; alloc && j < nout; j++) rt_tensor_free(&out[j]);
  if (rc == PROG_NO_MEMORY) ev_fail(ev, where, "out of memory: this needs %zu bytes of scratch memory", pr->workspace(D));
  if (rc == PROG_DEVICE_ERROR) ev_fail(ev, where, "%s", ev->pipe.cx->err);
  ev_fail(ev, where, "libffi could not call the compiled graph");
}

int ev_compute_many(Ev *ev, Node **n, int count, Span where, RtTensor *out) {
  Node **ins; int nin;
  Program *pr = program_for(ev, n, count, &ins, &nin, where);
  if (!pr) return 1;
  RtTensor *in = arena_alloc(ev->arena, sizeof(RtTensor) * (nin + 1));
  for (int i = 0; i < nin; i++) in[i] = *ev_param_value(ev, ins[i]);
  ev_run_program(ev, pr, in, out, 1, where);
  return 0;
}

int ev_compute(Ev *ev, Node *n, Span where, RtTensor *out) { return ev_compute_many(ev, &n, 1, where, out); }

// ---- statements -----------------------------------------------------------------
// The text of a value other than a tensor.
static char *plain_text(Value v) {
  char buf[256];
  switch (v.kind) {
  case V_STR: return strdup(v.s);
  case V_DTYPE: return strdup(ir_dtype_name(v.dt));
  case V_FUNC: snprintf(buf, sizeof buf, "<function %s>", v.fn->name ? v.fn->name : "grad"); return strdup(buf);
  case V_DATA: snprintf(buf, sizeof buf, "<data %s>", v.data->name ? v.data->name : v.data->kind); return strdup(buf);
  default: return strdup("");
  }
}

// print a, b: the tensors among the values are computed by one compiled graph
// (shared work is done once), and only then is anything printed, so an error
// leaves no half-printed line. Returns 0 if it stopped to show a stage.
static int print_values(Ev *ev, Value *v, Span *sp, int n, Span where) {
  Node **t = arena_alloc(ev->arena, sizeof(Node *) * (n + 1));
  int *slot = arena_alloc(ev->arena, sizeof(int) * (n + 1)), nt = 0;
  for (int i = 0; i < n; i++) {
    slot[i] = -1;
    if (v[i].kind == V_TENSOR || v[i].kind == V_LIST) {
      t[nt] = ev_tensor(ev, v[i], sp[i], "a printed value");
      check_bound(ev, t[nt], sp[i]);
      slot[i] = nt++;
    }
  }
  RtTensor *r = calloc(nt + 1, sizeof *r);
  if (!r) abort();
  if (nt && ev_compute_many(ev, t, nt, where, r)) { free(r); return 0; }
  for (int i = 0; i < n; i++) {
    char *s = slot[i] >= 0 ? rt_tensor_to_string(&r[slot[i]]) : plain_text(v[i]);
    fprintf(ev->out, "%s%s", i ? " " : "", s ? s : "");
    free(s);
  }
  fputc('\n', ev->out);
  fflush(ev->out);
  for (int i = 0; i < nt; i++) rt_tensor_free(&r[i]);
  free(r);
  return 1;
}

static void parse_shape(Ev *ev, Env *env, AstNode *s, int allow_sym, int *nd, Dim *shape) {
  if (s->ndims > IR_MAXDIM) ev_fail(ev, s->dims[IR_MAXDIM]->span, "too many dimensions (at most %d)", IR_MAXDIM);
  *nd = s->ndims;
  for (int i = 0; i < s->ndims; i++) {
    AstNode *d = s->dims[i];
    if (d->kind == AST_NUM) {
      if (d->inum < 0) ev_fail(ev, d->span, "a dimension cannot be negative");
      shape[i] = dim_c(d->inum);
      continue;
    }
    if (d->kind != AST_NAME) {   // an expression: a constant integer
      int64_t k = ev_const_int(ev, eval(ev, env, d), d->span, "a dimension");
      if (k < 0) ev_fail(ev, d->span, "a dimension cannot be negative");
      shape[i] = dim_c(k);
      continue;
    }
    Value *bound = env_get(env, d->str);
    if (bound && bound->kind == V_TENSOR) {  // a name bound to a constant integer
      int64_t k = ev_const_int(ev, *bound, d->span, "a dimension");
      if (k < 0) ev_fail(ev, d->span, "a dimension cannot be negative");
      shape[i] = dim_c(k);
      continue;
    }
    if (!allow_sym) ev_fail(ev, d->span, "parameter shapes must be concrete; '%s' is not a known integer", d->str);
    int sym = ir_sym(ev->c, d->str);
    if (!sym) ev_fail(ev, d->span, "too many symbolic dimensions");
    shape[i] = (Dim){1, sym};
  }
}

static DType parse_dtype(Ev *ev, AstNode *s) {
  int dt = ir_dtype_by_name(s->type_name);
  if (dt < 0) ev_fail(ev, s->type_span, "unknown dtype '%s' (expected f32, f64, i32, i64 or bool)", s->type_name);
  return (DType)dt;
}

// Fan-in and fan-out as PyTorch counts them: [in, out] for dense weights,
// [out, in, kh, kw] for convolutions.
static void fans(int nd, const Dim *shape, double *in, double *out) {
  if (nd == 0) { *in = *out = 1; return; }
  if (nd == 1) { *in = *out = (double)shape[0].k; return; }
  if (nd == 2) { *in = (double)shape[0].k; *out = (double)shape[1].k; return; }
  double rf = 1;
  for (int i = 2; i < nd; i++) rf *= (double)shape[i].k;
  *in = shape[1].k * rf;
  *out = shape[0].k * rf;
}

static uint64_t name_seed(Ev *ev, const char *name) {
  uint64_t h = 1469598103934665603ull ^ ev->seed;
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

// normal(std), normal(std=, mean=), uniform(a) (in [-a, a)), uniform(low=, high=) as
// initializers: no shape (the parameter's), a stream from the parameter's name.
// NULL when r is not that form (then normal(shape, ...) is the ordinary builtin).
static Node *shapeless_random(Ev *ev, Env *env, AstNode *r, const char *scheme, Value *shadow, DType dt, int nd,
                              Dim *shape, uint64_t seed) {
  if (!scheme || shadow || r->kind != AST_CALL || (strcmp(scheme, "normal") && strcmp(scheme, "uniform"))) return NULL;
  int normal = !strcmp(scheme, "normal");
  double p[2] = {normal ? 0 : -1, 1};   // mean, std or low, high
  const char *kw[2] = {normal ? "mean" : "low", normal ? "std" : "high"};
  Span at[2] = {r->span, r->span};
  for (int i = 0; i < r->nitems; i++) {
    AstNode *a = r->items[i];
    Node *v = ev_raw(ev, eval(ev, env, a->kind == AST_KWARG ? a->lhs : a), a->span, "an initializer setting");
    double x;
    if (a->kind != AST_KWARG && (v->ndim || i > 0)) return NULL;   // normal([3, 4], ...): a shape
    if (!ev_scalar_const(ev, &v, &x)) ev_fail(ev, a->span, "%s's settings must be constant numbers", scheme);
    if (a->kind != AST_KWARG) {
      if (!normal && x < 0) ev_fail(ev, a->span, "uniform(a) draws from [-a, a): a cannot be negative (%g)", x);
      if (normal) p[1] = x; else { p[0] = -x; p[1] = x; }
      at[0] = at[1] = a->span;
      continue;
    }
    if (!strcmp(a->str, kw[0])) p[0] = x, at[0] = a->span;
    else if (!strcmp(a->str, kw[1])) p[1] = x, at[1] = a->span;
    else if (!strcmp(a->str, "seed")) seed = (uint64_t)ev_const_int(ev, ev_tval(v), a->span, "seed");
    else ev_fail(ev, a->span, "%s as an initializer takes %s= and %s=", scheme, kw[0], kw[1]);
  }
  ev_check_random(ev, normal, p[0], p[1], at[0], at[1]);
  if (!ir_is_float(dt)) ev_fail(ev, r->span, "%s initializes float parameters only", scheme);
  IrCtx *c = ev->c;
  Node *z = ir_rng(c, dt, nd, shape, seed, normal);
  Node *scale = ir_scalar(c, dt, normal ? p[1] : p[1] - p[0]);
  return ir_binary(c, OP_ADD, ir_binary(c, OP_MUL, z, scale), ir_scalar(c, dt, p[0]));
}

// The initializer's value as IR: named schemes, or any expression broadcast to the shape.
static Node *param_init(Ev *ev, Env *env, AstNode *s, const char *name, DType dt, int nd, Dim *shape) {
  IrCtx *c = ev->c;
  AstNode *r = s->rhs;
  if (!r) return ir_broadcast(c, ir_scalar(c, dt, 0), nd, shape);
  const char *scheme = r->kind == AST_NAME ? r->str : (r->kind == AST_CALL && r->lhs->kind == AST_NAME) ? r->lhs->str : NULL;
  Value *shadow = scheme ? env_get(env, scheme) : NULL;
  double fin, fout;
  fans(nd, shape, &fin, &fout);
  uint64_t seed = name_seed(ev, name);
  Node *rnd = shapeless_random(ev, env, r, scheme, shadow, dt, nd, shape, seed);
  if (rnd) return rnd;
  if (scheme && !shadow && (!strcmp(scheme, "glorot") || !strcmp(scheme, "he") || !strcmp(scheme, "lecun"))) {
    if (r->kind == AST_CALL && r->nitems) ev_fail(ev, r->span, "%s takes no arguments", scheme);
    if (!ir_is_float(dt)) ev_fail(ev, s->type_span, "%s initializes float parameters only", scheme);
    if (!strcmp(scheme, "glorot")) {   // uniform(-l, l), l = sqrt(6 / (fan_in + fan_out))
      double l = sqrt(6.0 / (fin + fout));
      Node *u = ir_rng(c, dt, nd, shape, seed, 0);
      return ir_binary(c, OP_SUB, ir_binary(c, OP_MUL, u, ir_scalar(c, dt, 2 * l)), ir_scalar(c, dt, l));
    }
    double std = sqrt((!strcmp(scheme, "he") ? 2.0 : 1.0) / fin);   // normal(0, sqrt(k / fan_in))
    return ir_binary(c, OP_MUL, ir_rng(c, dt, nd, shape, seed, 1), ir_scalar(c, dt, std));
  }
  Value v = eval(ev, env, r);
  if (v.kind == V_FUNC && v.fn->kind == FN_BUILTIN &&
      (!strcmp(v.fn->name, "zeros") || !strcmp(v.fn->name, "ones")))
    return ir_broadcast(c, ir_scalar(c, dt, !strcmp(v.fn->name, "ones")), nd, shape);
  Node *t = ev_raw(ev, v, r->span, "an initializer");
  Node *b = ir_broadcast(c, ir_cast(c, t, dt), nd, shape);
  if (!b) {
    char b1[128], b2[128];
    ev_fail(ev, r->span, "the initializer's shape %s does not fit the parameter's shape %s",
            ir_shape_str(c, t->ndim, t->shape, b1, sizeof b1), ir_shape_str(c, nd, shape, b2, sizeof b2));
  }
  return b;
}

// Two parameters of one name in one file would train apart but save as one. A
// later REPL chunk (or C API call) may declare it again: that rebinds the name.
static void check_new_param(Ev *ev, const char *name, Span sp) {
  for (int i = 0; i < ev->nparams; i++) {
    Param *p = &ev->params[i];
    if (p->run != ev->run || strcmp(p->node->a.name, name)) continue;
    diag_error(ev->diag, sp, "parameter %s is declared twice", name);
    diag_note(ev->diag, p->where, "first declared here%s", strchr(name, '.') ? " (in the same layer call)" : "");
    ev_unwind(ev);
  }
}

static void exec_param(Ev *ev, Env *env, AstNode *s) {
  DType dt = parse_dtype(ev, s);
  // Inside a layer call the parameter is named after the call: dense.1.W.
  char full[700];
  snprintf(full, sizeof full, "%s%s%s", ev->scope ? ev->scope : "", ev->scope ? "." : "", s->str);
  const char *name = arena_strdup(ev->arena, full);
  check_new_param(ev, name, s->name_span);
  int nd; Dim shape[IR_MAXDIM];
  parse_shape(ev, env, s, 0, &nd, shape);
  Node *init = ev_check(ev, param_init(ev, env, s, name, dt, nd, shape), s->rhs ? s->rhs->span : s->span);
  RtTensor value;
  // Initializers always run, also while `kiln ir` or `emit-c` shows the graphs.
  const char *after = ev->pipe.dump_after;
  int emit = ev->pipe.emit_c;
  ev->pipe.dump_after = NULL;
  ev->pipe.emit_c = 0;
  int rc = ev_compute(ev, init, s->rhs ? s->rhs->span : s->span, &value);
  ev->pipe.dump_after = after;
  ev->pipe.emit_c = emit;
  if (rc) return;
  Node *p = ev_check(ev, ir_input(ev->c, name, ROLE_PARAM, dt, nd, shape), s->span);
  ev->params = realloc(ev->params, sizeof(Param) * (ev->nparams + 1));
  if (!ev->params) abort();
  ev->params[ev->nparams++] = (Param){p, value, s->op, ev->run, s->name_span};
  env_set(ev, env, s->str, ev_tval(p), s->name_span);
}

static char *read_file(const char *path, size_t *len);

void ev_running_file(Ev *ev, const char *path) {
  char real[4096];
  if (!realpath(path, real)) return;
  ev->imports = realloc(ev->imports, sizeof *ev->imports * (ev->nimports + 1));
  if (!ev->imports) abort();
  ev->imports[ev->nimports].path = arena_strdup(ev->arena, real);
  ev->imports[ev->nimports++].running = 1;
}

// A library's file: $KILN_LIB_DIR, else the installed library, else the source
// tree's lib/ (an uninstalled build).
static const char *lib_path(Ev *ev, const char *name, char *path, size_t size) {
  snprintf(path, size, "%s/%s.kiln", ev->lib_dir ? ev->lib_dir : KILN_LIB_DIR, name);
#ifdef KILN_SOURCE_LIB_DIR
  if (!ev->lib_dir && access(path, R_OK)) snprintf(path, size, "%s/%s.kiln", KILN_SOURCE_LIB_DIR, name);
#endif
  return path;
}

// import "nn" reads LIB_DIR/nn.kiln; a path is read as given. Each file runs
// once per session; importing a file that is still being imported is a cycle.
static void exec_import(Ev *ev, AstNode *s) {
  char path[4096], real[4096];
  const char *name = s->str;
  if (strchr(name, '/') || strstr(name, ".kiln")) snprintf(path, sizeof path, "%s", name);
  else lib_path(ev, name, path, sizeof path);
  if (!realpath(path, real)) ev_fail(ev, s->span, "cannot import \"%s\": cannot read %s", name, path);
  for (int i = 0; i < ev->nimports; i++)
    if (!strcmp(ev->imports[i].path, real)) {
      if (ev->imports[i].running) ev_fail(ev, s->span, "import cycle: %s is already being imported", path);
      return;
    }
  struct stat st;
  if (stat(real, &st) || !S_ISREG(st.st_mode)) ev_fail(ev, s->span, "cannot import \"%s\": %s is not a file", name, path);
  size_t len;
  char *text = read_file(real, &len);
  if (!text) ev_fail(ev, s->span, "cannot import \"%s\": cannot read %s", name, path);
  if (strlen(text) != len) { free(text); ev_fail(ev, s->span, "cannot import \"%s\": %s is not a text file", name, path); }
  ev->imports = realloc(ev->imports, sizeof *ev->imports * (ev->nimports + 1));
  if (!ev->imports) abort();
  int me = ev->nimports++;
  ev->imports[me].path = arena_strdup(ev->arena, real);
  ev->imports[me].running = 1;
  jmp_buf *outer = ev->on_error;
  int rc = ev_run(ev, arena_strdup(ev->arena, path), text);
  ev->on_error = outer;
  ev->imports[me].running = 0;
  free(text);
  if (rc) {
    ev->nimports = me;   // forgotten: fixing the file and importing again works
    ev_fail(ev, s->span, "errors in the imported file %s (above)", path);
  }
}

// Data columns bind to inputs in declaration order, so a second `input X` in a
// file would shift every later column. A later REPL chunk may declare X again:
// the new X takes the old one's place in that order.
static void declare_input(Ev *ev, Node *in, Span sp) {
  int slot = ev->ninputs;
  for (int i = 0; i < ev->ninputs; i++) {
    InputDecl *d = &ev->inputs[i];
    if (strcmp(d->node->a.name, in->a.name)) continue;
    if (d->run == ev->run) {
      diag_error(ev->diag, sp, "input %s is declared twice", in->a.name);
      diag_note(ev->diag, d->where, "first declared here");
      ev_unwind(ev);
    }
    slot = i;
  }
  if (slot == ev->ninputs) {
    ev->inputs = realloc(ev->inputs, sizeof *ev->inputs * (ev->ninputs + 1));
    if (!ev->inputs) abort();
    ev->ninputs++;
  }
  ev->inputs[slot] = (InputDecl){in, ev->run, sp};
}

static Value exec_stmt(Ev *ev, Env *env, AstNode *s) {
  Value none = {0};
  switch (s->kind) {
  case AST_PRINT: {
    Value *v = arena_alloc(ev->arena, sizeof(Value) * (s->nitems + 1));
    Span *sp = arena_alloc(ev->arena, sizeof(Span) * (s->nitems + 1));
    for (int i = 0; i < s->nitems; i++) { v[i] = eval(ev, env, s->items[i]); sp[i] = s->items[i]->span; }
    print_values(ev, v, sp, s->nitems, s->span);
    return none;
  }
  case AST_INPUT: {
    DType dt = parse_dtype(ev, s);
    int nd; Dim shape[IR_MAXDIM];
    parse_shape(ev, env, s, 1, &nd, shape);
    Node *in = ev_check(ev, ir_input(ev->c, s->str, ROLE_INPUT, dt, nd, shape), s->span);
    declare_input(ev, in, s->name_span);
    env_set(ev, env, s->str, ev_tval(in), s->name_span);
    return none;
  }
  case AST_PARAM: exec_param(ev, env, s); return none;
  case AST_FNDEF: {
    Value f = {0};
    f.kind = V_FUNC;
    f.fn = arena_alloc(ev->arena, sizeof *f.fn);
    f.fn->kind = FN_USER; f.fn->name = s->str; f.fn->def = s; f.fn->closure = env;
    env_set(ev, env, s->str, f, s->name_span);
    return none;
  }
  case AST_ASSIGN: env_set(ev, env, s->str, eval(ev, env, s->rhs), s->name_span); return none;
  case AST_IMPORT: exec_import(ev, s); return none;
  case AST_EXPR_STMT: return eval(ev, env, s->lhs);
  case AST_DATA: env_set(ev, env, s->str, ev_data_value(ev, env, s), s->name_span); return none;
  case AST_TRAIN: ev_exec_train(ev, s); return none;
  case AST_EVALUATE: ev_exec_evaluate(ev, s); return none;
  case AST_SAVE: ev_exec_save(ev, s); return none;
  case AST_LOAD: ev_exec_load(ev, s); return none;
  default: ev_fail(ev, s->span, "this statement cannot run here");
  }
}

static Value run_block(Ev *ev, Env *env, AstNode *block) {
  Value last = {0};
  for (int i = 0; i < block->nitems; i++) last = exec_stmt(ev, env, block->items[i]);
  return last;
}

// ---- sessions ---------------------------------------------------------------------
// The file's text ("-": standard input), NUL-terminated, or NULL with errno saying
// why (a directory reads as EISDIR, not as an empty program). A UTF-8 byte order
// mark (Windows editors write one) is dropped, so it is neither a token nor counted
// in the first line's columns.
static char *read_file(const char *path, size_t *len) {
  int is_stdin = !strcmp(path, "-");
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (size_t r; buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
    n += r;
    char *grown = n + 1 == cap ? realloc(buf, cap *= 2) : buf;
    if (!grown) free(buf);
    buf = grown;
  }
  int err = ferror(f) ? errno : buf ? 0 : ENOMEM;
  if (!is_stdin) fclose(f);
  if (err) { free(buf); errno = err; return NULL; }
  buf[n] = 0;
  if (n >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) memmove(buf, buf + 3, (n -= 3) + 1);
  *len = n;
  return buf;
}

char *ev_read_file(const char *path, size_t *len) { return read_file(path, len); }

Ev *ev_new(FILE *out, Diag *diag) {
  Ev *ev = calloc(1, sizeof *ev);
  if (!ev) abort();
  ev->c = ir_ctx_new();
  ev->arena = arena_new();
  ev->diag = diag;
  ev->out = out;
  ev->lib_dir = getenv("KILN_LIB_DIR");   // NULL: the installed library directory
  ev->globals = env_new(ev, NULL);
  ev->pipe.c = ev->c;
  ev->pipe.dump = stdout;
  ev->pipe.lower = pipe_lower_opts();
  ev->pipe.device = -1;
  return ev;
}

// The JIT and the thread pool start on first use, so parse-only commands stay fast.
int ev_start(Ev *ev, int threads, char *err, size_t errlen) {
  if (!ev->pipe.jit && !(ev->pipe.jit = pipe_jit_new(err, errlen))) return -1;
  if (!ev->pipe.rt && !(ev->pipe.rt = rt_new(threads))) { snprintf(err, errlen, "cannot start the runtime"); return -1; }
  return 0;
}

void ev_profile_print(Ev *ev, FILE *f) {
  for (int i = 0; i < ev->nprogs; i++) prog_profile_print(f, ev->progs[i].prog);
}

void ev_free(Ev *ev) {
  if (!ev) return;
  for (int i = 0; i < ev->nparams; i++) rt_tensor_free(&ev->params[i].value);
  for (int i = 0; i < ev->nprogs; i++) prog_free(ev->progs[i].prog);
  ev_train_free(ev);
  free(ev->params);
  free(ev->progs);
  free(ev->imports);
  free(ev->inputs);
  free(ev->scopes);
  free(ev->updates);
  free(ev->conv_notes);
  if (ev->pipe.jit) jit_free(ev->pipe.jit);
  pipe_cuda_free(&ev->pipe);
  if (ev->pipe.rt) rt_free_ctx(ev->pipe.rt);
  ir_ctx_free(ev->c);
  arena_free(ev->arena);
  free(ev);
}

static void echo_value(Ev *ev, Value v, Span sp) {
  if (v.kind != V_NONE) print_values(ev, &v, &sp, 1, sp);
}

// A save after a train statement into a directory that is not there would fail
// only once training is over: said before it starts.
static void check_later_saves(Ev *ev, AstNode *prog, int from) {
  if (!ev_trains(ev)) return;
  char err[1024];
  for (int j = from + 1; j < prog->nitems; j++) {
    AstNode *t = prog->items[j];
    if (t->kind == AST_SAVE && t->lhs && t->lhs->kind == AST_STR && rt_check_writable(t->lhs->str, err, sizeof err))
      ev_fail(ev, t->span, "this save would fail after training: %s", err);
    for (int k = 0; t->kind == AST_EVALUATE && k < t->nopts; k++)
      if (!strcmp(t->opts[k]->str, "save") && t->opts[k]->lhs->kind == AST_STR &&
          rt_check_writable(t->opts[k]->lhs->str, err, sizeof err))
        ev_fail(ev, t->opts[k]->span, "this save would fail after training: %s", err);
  }
}

int ev_run(Ev *ev, const char *name, const char *text) {
  Source *src = arena_alloc(ev->arena, sizeof *src);
  *src = source_from_string(arena_strdup(ev->arena, name), arena_strdup(ev->arena, text));
  AstNode *prog = parse_program(ev->arena, src, ev->diag);
  if (!prog || ev->diag->has_error) return -1;
  jmp_buf jb;
  jmp_buf *outer = ev->on_error;
  if (!outer) ev->run++;   // not an import
  ev->on_error = &jb;
  int rc = 0;
  for (int i = 0; i < prog->nitems; i++) {
    AstNode *s = prog->items[i];
    if (setjmp(jb)) { rc = -1; ev->depth = 0; break; }
    ev->calls = 0;
    ev->next_eval = NULL;
    for (int j = i + 1; s->kind == AST_TRAIN && j < prog->nitems && prog->items[j]->kind != AST_TRAIN; j++)
      if (prog->items[j]->kind == AST_EVALUATE && !ev_eval_saves(prog->items[j])) { ev->next_eval = prog->items[j]; break; }
    if (s->kind == AST_TRAIN) check_later_saves(ev, prog, i);
    Value v = exec_stmt(ev, ev->globals, s);
    if (ev->echo && s->kind == AST_EXPR_STMT) echo_value(ev, v, s->span);
  }
  ev->on_error = outer;
  return rc;
}

int ev_eval_tensor(Ev *ev, const char *name, const char *text, RtTensor *out, Node **node) {
  Source *src = arena_alloc(ev->arena, sizeof *src);
  *src = source_from_string(arena_strdup(ev->arena, name), arena_strdup(ev->arena, text));
  AstNode *prog = parse_program(ev->arena, src, ev->diag);
  if (!prog || ev->diag->has_error) return -1;
  if (prog->nitems != 1 || prog->items[0]->kind != AST_EXPR_STMT) {
    diag_error(ev->diag, prog->nitems ? prog->items[0]->span : (Span){src, 1, 1, 0, 0}, "expected one expression");
    return -1;
  }
  jmp_buf jb;
  jmp_buf *outer = ev->on_error;
  ev->on_error = &jb;
  if (setjmp(jb)) { ev->on_error = outer; ev->depth = 0; return -1; }
  AstNode *e = prog->items[0]->lhs;
  Node *t = ev_tensor(ev, eval(ev, ev->globals, e), e->span, "the expression");
  if (node) *node = t;
  int rc = out ? ev_compute(ev, t, e->span, out) : 0;
  ev->on_error = outer;
  return rc;
}
