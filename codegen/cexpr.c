// The expression printer: the value of a node at an index, as C statements
// over temporaries. Elementwise ops print the op table's templates; data
// movement becomes index arithmetic; buffers become loads.
#include "cgen_int.h"
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void str_put(Str *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (b->s && b->n + n < b->cap) { b->n += n; return; }
    b->cap = (b->cap + n + 1) * 2;
    b->s = realloc(b->s, b->cap);
    if (!b->s) abort();
  }
}

static const char *ctypes[DT_COUNT] = {"uint8_t", "int32_t", "int64_t", "float", "double"};
const char *cg_ctype(DType t) { return ctypes[t]; }

void cg_dim(char *buf, size_t len, Dim d) {
  if (!d.sym || !d.k) snprintf(buf, len, "%" PRId64, d.k);
  else if (d.k == 1) snprintf(buf, len, "D[%d]", d.sym);
  else snprintf(buf, len, "(%" PRId64 "*D[%d])", d.k, d.sym);
}

void cg_prod(char *buf, size_t len, const Dim *shape, int from, int to) {
  int64_t k = 1;
  size_t n = 0;
  buf[0] = 0;
  for (int d = from; d < to; d++) {
    k *= shape[d].k;
    if (shape[d].sym && shape[d].k) n += snprintf(buf + n, len - n, "%sD[%d]", n ? "*" : "", shape[d].sym);
  }
  if (!n || k == 0) snprintf(buf, len, "%" PRId64, k);
  else if (k != 1) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "(%" PRId64 "*%s)", k, buf);
    snprintf(buf, len, "%s", tmp);
  } else if (strchr(buf, '*')) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "(%s)", buf);
    snprintf(buf, len, "%s", tmp);
  }
}

void cg_line(Gen *g, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  str_put(g->out, "%*s%s\n", 2 * g->ind, "", line);
}

char *cg_tmp(Gen *g, char *buf) {
  snprintf(buf, 16, "t%d", g->tmp++);
  return buf;
}

void cg_literal(char *buf, size_t len, DType t, double v) {
  if (t == DT_BOOL) { snprintf(buf, len, "%d", v != 0); return; }
  if (!ir_is_float(t)) { snprintf(buf, len, "INT64_C(%" PRId64 ")", (int64_t)v); return; }
  if (isnan(v)) { snprintf(buf, len, "NAN"); return; }
  if (isinf(v)) { snprintf(buf, len, v < 0 ? "(-INFINITY)" : "INFINITY"); return; }
  char num[40];
  snprintf(num, sizeof num, t == DT_F32 ? "%.9g" : "%.17g", v);
  if (!strpbrk(num, ".e")) strcat(num, ".0");
  snprintf(buf, len, v < 0 ? "(%s%s)" : "%s%s", num, t == DT_F32 ? "f" : "");
}

// ---- indices ------------------------------------------------------------------
Index *cg_index(Gen *g, int nd, const Dim *shape) {
  Index *ix = calloc(1, sizeof *ix);
  if (!ix) abort();
  ix->id = g->next_index++;
  ix->nd = nd;
  if (nd) memcpy(ix->shape, shape, sizeof(Dim) * nd);
  // Indices live as long as the kernel that made them (cg_kernel_end frees them).
  if (g->nidx == g->capidx) {
    g->capidx = g->capidx ? 2 * g->capidx : 64;
    g->indices = realloc(g->indices, sizeof(Index *) * g->capidx);
    if (!g->indices) abort();
  }
  g->indices[g->nidx++] = ix;
  return ix;
}

const char *cg_lin(Gen *g, Index *ix) {
  if (ix->lin[0]) return ix->lin;
  if (ix->nd == 0) { strcpy(ix->lin, "0"); return ix->lin; }
  char t[16], d[64];
  Str e = {0};
  for (int i = 1; i < ix->nd; i++) str_put(&e, "(");
  str_put(&e, "%s", ix->idx[0]);
  for (int i = 1; i < ix->nd; i++) {
    cg_dim(d, sizeof d, ix->shape[i]);
    str_put(&e, "*%s + %s)", d, ix->idx[i]);
  }
  cg_line(g, "int64_t %s = %s;", cg_tmp(g, t), e.s);
  free(e.s);
  snprintf(ix->lin, sizeof ix->lin, "%s", t);
  return ix->lin;
}

void cg_need_idx(Gen *g, Index *ix) {
  if (ix->has_idx) return;
  char q[16], d[64];
  if (ix->nd == 1) snprintf(ix->idx[0], sizeof ix->idx[0], "%s", ix->lin);
  if (ix->nd > 1) {
    cg_line(g, "int64_t %s = %s;", cg_tmp(g, q), ix->lin);
    for (int i = ix->nd - 1; i > 0; i--) {
      cg_dim(d, sizeof d, ix->shape[i]);
      cg_line(g, "int64_t %s = %s %% %s;", cg_tmp(g, ix->idx[i]), q, d);
      cg_line(g, "%s /= %s;", q, d);
    }
    snprintf(ix->idx[0], sizeof ix->idx[0], "%s", q);
  }
  ix->has_idx = 1;
}

// ---- memo: one temporary per (node, index) in the current block ----------------
static const char *memo_find(Gen *g, Node *n, Index *ix) {
  for (int i = g->nmemo - 1; i >= 0; i--)
    if (g->memo[i].node == n->id && g->memo[i].index == ix->id) return g->memo[i].name;
  return NULL;
}

static const char *memo_add(Gen *g, Node *n, Index *ix, const char *name) {
  if (g->nmemo == g->capmemo) {
    g->capmemo = g->capmemo ? 2 * g->capmemo : 64;
    g->memo = realloc(g->memo, sizeof(Memo) * g->capmemo);
    if (!g->memo) abort();
  }
  Memo *m = &g->memo[g->nmemo++];
  m->node = n->id; m->index = ix->id;
  snprintf(m->name, sizeof m->name, "%s", name);
  return m->name;
}

// ---- values -----------------------------------------------------------------------
static const char *load(Gen *g, Node *n, int b, Index *ix) {
  char t[16];
  const char *lin = cg_lin(g, ix);
  cg_line(g, "%s %s = b%d[%s];", cg_ctype(n->dtype), cg_tmp(g, t), b, lin);
  return memo_add(g, n, ix, t);
}

const char *cg_value(Gen *g, Node *n, Index *ix) {
  const char *m = memo_find(g, n, ix);
  if (m) return m;
  int b = sched_buf(g->s, n);
  if (b >= 0) return load(g, n, b, ix);
  return cg_compute(g, n, ix);
}

// An op's C template with $0 $1 $2 replaced by args and $t by the operands'
// dtype name (a helper per dtype: kiln_mod_i64, ir/opmath.h): the one text both emitters
// print (CUDA C takes the same expressions: its prelude supplies what <math.h>
// and <stdint.h> would, and the rt_rand_* functions as device code).
void cg_template(char *expr, size_t len, const char *tpl, const char *const *args, DType t) {
  size_t k = 0;
  for (const char *p = tpl; *p && k < len - 32; p++) {
    if (*p == '$' && p[1] >= '0' && p[1] <= '2') {
      k += snprintf(expr + k, len - k, "%s", args[p[1] - '0']);
      p++;
    } else if (*p == '$' && p[1] == 't') {
      k += snprintf(expr + k, len - k, "%s", ir_dtype_name(t));
      p++;
    } else {
      expr[k++] = *p;
    }
  }
  expr[k] = 0;
}

// The text for n's operands: c_f32 for f32 operands, else c_f64.
const char *cg_op_text(Op op, DType operands) {
  return operands == DT_F32 ? ir_ops[op].c_f32 : ir_ops[op].c_f64;
}

static void emit_template(Gen *g, Node *n, const char **args, char *t) {
  DType sel = n->nsrc ? n->src[n->nsrc - 1]->dtype : n->dtype;   // operands' dtype picks the text
  char expr[1024];
  cg_template(expr, sizeof expr, cg_op_text(n->op, sel), args, sel);
  cg_line(g, "%s %s = %s;", cg_ctype(n->dtype), cg_tmp(g, t), expr);
}

static const char *leaf(Gen *g, Node *n, Index *ix, char *t) {
  char lit[64];
  switch (n->op) {
  case OP_CONST: {
    int64_t m;
    if (ir_numel_const(n, &m) && m == 0) return memo_add(g, n, ix, "0");   // empty: never read
    if (ir_is_float(n->dtype)) cg_literal(lit, sizeof lit, n->dtype, ir_const_at(n, 0));
    else if (n->dtype == DT_BOOL) snprintf(lit, sizeof lit, "%d", (int)ir_const_int_at(n, 0));
    else snprintf(lit, sizeof lit, "INT64_C(%" PRId64 ")", ir_const_int_at(n, 0));
    return memo_add(g, n, ix, lit);
  }
  case OP_IOTA:
    cg_need_idx(g, ix);
    cg_line(g, "%s %s = (%s)%s;", cg_ctype(n->dtype), cg_tmp(g, t), cg_ctype(n->dtype), ix->idx[n->a.i[0]]);
    return memo_add(g, n, ix, t);
  case OP_RNG: {
    // A salted stream: the salt (read at run time) moves the seed by a large odd step.
    char seed[96], salt[48];
    snprintf(seed, sizeof seed, "UINT64_C(%" PRIu64 ")", n->a.u);
    if (n->nsrc) {
      snprintf(salt, sizeof salt, "%s", cg_value(g, n->src[0], cg_index(g, 0, NULL)));
      snprintf(seed, sizeof seed, "(UINT64_C(%" PRIu64 ") + (uint64_t)%s * UINT64_C(0x9E3779B97F4A7C15))", n->a.u, salt);
    }
    cg_line(g, "%s %s = rt_rand_%s_%s(%s, (uint64_t)%s);", cg_ctype(n->dtype), cg_tmp(g, t),
            n->a.i[0] ? "normal" : "uniform", ir_dtype_name(n->dtype), seed, cg_lin(g, ix));
    return memo_add(g, n, ix, t);
  }
  case OP_DIMV:
    snprintf(lit, sizeof lit, "D[%d]", (int)n->a.i[0]);
    return memo_add(g, n, ix, lit);
  default:
    abort();  // INPUT always has a buffer
  }
}

static const char *elementwise(Gen *g, Node *n, Index *ix, char *t) {
  const char *args[3] = {"", "", ""};
  char keep[3][48];   // copies: the memo array may move
  for (int i = 0; i < n->nsrc; i++) {
    snprintf(keep[i], sizeof keep[i], "%s", cg_value(g, n->src[i], ix));
    args[i] = keep[i];
  }
  if (n->op == OP_CAST) {
    if (n->dtype == DT_BOOL) cg_line(g, "uint8_t %s = (%s != 0);", cg_tmp(g, t), args[0]);
    else cg_line(g, "%s %s = (%s)%s;", cg_ctype(n->dtype), cg_tmp(g, t), cg_ctype(n->dtype), args[0]);
  } else {
    emit_template(g, n, args, t);
  }
  return memo_add(g, n, ix, t);
}

// A reshape that only merges runs of axes (and adds or drops axes of length
// 1): each operand axis is a run of this node's axes, so a per-axis index
// maps over with multiplies and adds where the linear one would need
// divisions. emit 0 only checks; 1 fills v's indices.
static int reshape_merges(Gen *g, Node *n, Index *ix, Index *v, int emit) {
  Node *s = n->src[0];
  int i = 0;
  for (int j = 0; j < s->ndim; j++) {
    if (dim_is(s->shape[j], 1)) { if (emit) strcpy(v->idx[j], "0"); continue; }
    while (i < n->ndim && dim_is(n->shape[i], 1)) i++;
    if (i == n->ndim) return 0;
    if (dim_eq(n->shape[i], s->shape[j])) { if (emit) strcpy(v->idx[j], ix->idx[i]); i++; continue; }
    if (s->shape[j].sym || n->shape[i].sym) return 0;
    int from = i;
    int64_t prod = 1;
    while (i < n->ndim && !n->shape[i].sym && prod < s->shape[j].k) prod *= n->shape[i++].k;
    if (prod != s->shape[j].k) return 0;
    if (emit) {
      char e[512];
      size_t k = snprintf(e, sizeof e, "%s", ix->idx[from]);
      for (int d = from + 1; d < i && k < sizeof e - 64; d++) {
        char t[560];
        snprintf(t, sizeof t, "(%s*%" PRId64 " + %s)", e, n->shape[d].k, ix->idx[d]);
        k = snprintf(e, sizeof e, "%s", t);
      }
      cg_line(g, "int64_t %s = %s;", cg_tmp(g, v->idx[j]), e);
    }
  }
  while (i < n->ndim && dim_is(n->shape[i], 1)) i++;
  return i == n->ndim;
}

// Views: the operand's index expressed through this node's index.
static Index *view_index(Gen *g, Node *n, Index *ix) {
  Node *s = n->src[0];
  Index *v = cg_index(g, s->ndim, s->shape);
  switch (n->op) {
  case OP_RESHAPE:
    // Both forms where they come free: the linear index if known, per-axis
    // indices if known and the reshape merges axes; else the linear one.
    if (ix->lin[0]) snprintf(v->lin, sizeof v->lin, "%s", ix->lin);
    if (ix->has_idx && reshape_merges(g, n, ix, v, 0)) {
      reshape_merges(g, n, ix, v, 1);
      v->has_idx = 1;
    } else if (!v->lin[0]) {
      snprintf(v->lin, sizeof v->lin, "%s", cg_lin(g, ix));
    }
    return v;
  case OP_BROADCAST: {
    int64_t m;
    if (ir_numel_const(s, &m) && m == 1) {
      strcpy(v->lin, "0");
      for (int i = 0; i < v->nd; i++) strcpy(v->idx[i], "0");
      v->has_idx = 1;
      return v;
    }
    cg_need_idx(g, ix);
    for (int i = 0; i < v->nd; i++)
      snprintf(v->idx[i], sizeof v->idx[i], "%s", dim_is(s->shape[i], 1) ? "0" : ix->idx[i]);
    v->has_idx = 1;
    return v;
  }
  case OP_TRANSPOSE:
    cg_need_idx(g, ix);
    for (int i = 0; i < n->ndim; i++) snprintf(v->idx[n->a.i[i]], sizeof v->idx[0], "%s", ix->idx[i]);
    v->has_idx = 1;
    return v;
  case OP_SLICE:
    cg_need_idx(g, ix);
    for (int i = 0; i < n->ndim; i++) {
      int64_t st = n->a.i[i], sp = n->a.i[IR_MAXDIM + i];
      if (st == 0 && sp == 1) { snprintf(v->idx[i], sizeof v->idx[i], "%s", ix->idx[i]); continue; }
      cg_line(g, "int64_t %s = %" PRId64 " + %s*%" PRId64 ";", cg_tmp(g, v->idx[i]), st, ix->idx[i], sp);
    }
    v->has_idx = 1;
    return v;
  default:
    abort();
  }
}

// The value of src at v where cond holds, else fill. src is read inside the
// branch, where its index is in range.
static const char *guarded(Gen *g, Node *n, Index *ix, char *t, const char *cond, const char *fill, Node *src, Index *v) {
  cg_line(g, "%s %s = %s;", cg_ctype(n->dtype), cg_tmp(g, t), fill);
  cg_line(g, "if (%s) {", cond);
  g->ind++;
  int mark = g->nmemo;
  const char *val = cg_value(g, src, v);
  cg_line(g, "%s = %s;", t, val);
  g->nmemo = mark;
  g->ind--;
  cg_line(g, "}");
  return memo_add(g, n, ix, t);
}

// PAD: the operand's element if this index falls on one, else zero. The
// operand is read inside the branch, where its index is in range.
static const char *pad(Gen *g, Node *n, Index *ix, char *t) {
  Node *s = n->src[0];
  char cond[1024] = "1", lit[64];
  size_t k = 1;
  cg_need_idx(g, ix);
  Index *v = cg_index(g, s->ndim, s->shape);
  for (int i = 0; i < n->ndim; i++) {
    int64_t st = n->a.i[i], sp = n->a.i[IR_MAXDIM + i];
    char q[16], cnt[64];
    cg_dim(cnt, sizeof cnt, s->shape[i]);
    if (st == 0 && sp == 1 && dim_eq(s->shape[i], n->shape[i])) {   // not padded: always in range
      snprintf(v->idx[i], sizeof v->idx[i], "%s", ix->idx[i]);
      continue;
    }
    cg_line(g, "int64_t %s = %s - %" PRId64 ";", cg_tmp(g, q), ix->idx[i], st);
    if (sp == 1) {
      k += snprintf(cond + k, sizeof cond - k, " && %s >= 0 && %s < %s", q, q, cnt);
      snprintf(v->idx[i], sizeof v->idx[i], "%s", q);
    } else {
      // Any nonzero step: element k sits at start + k*step.
      cg_line(g, "int64_t %s = %s / %" PRId64 ";", cg_tmp(g, v->idx[i]), q, sp);
      k += snprintf(cond + k, sizeof cond - k, " && %s %% %" PRId64 " == 0 && %s >= 0 && %s < %s",
                    q, sp, v->idx[i], v->idx[i], cnt);
    }
  }
  v->has_idx = 1;
  cg_literal(lit, sizeof lit, n->dtype, 0);
  return guarded(g, n, ix, t, cond, lit, s, v);
}

static const char *concat(Gen *g, Node *n, Index *ix, char *t) {
  int ax = (int)n->a.i[0];
  char (*bound)[16] = calloc(n->nsrc + 1, 16), d[64];   // bound[i]: where operand i starts
  if (!bound) abort();
  cg_need_idx(g, ix);
  strcpy(bound[0], "0");
  for (int i = 0; i < n->nsrc; i++) {
    cg_dim(d, sizeof d, n->src[i]->shape[ax]);
    cg_line(g, "const int64_t %s = %s + %s;", cg_tmp(g, bound[i + 1]), bound[i], d);
  }
  cg_line(g, "%s %s;", cg_ctype(n->dtype), cg_tmp(g, t));
  for (int i = 0; i < n->nsrc; i++) {
    Node *s = n->src[i];
    if (i < n->nsrc - 1) cg_line(g, "%sif (%s < %s) {", i ? "} else " : "", ix->idx[ax], bound[i + 1]);
    else cg_line(g, "%s{", i ? "} else " : "");
    g->ind++;
    int mark = g->nmemo;
    Index *v = cg_index(g, s->ndim, s->shape);
    for (int j = 0; j < s->ndim; j++) snprintf(v->idx[j], sizeof v->idx[j], "%s", ix->idx[j]);
    if (i) cg_line(g, "int64_t %s = %s - %s;", cg_tmp(g, v->idx[ax]), ix->idx[ax], bound[i]);
    v->has_idx = 1;
    const char *val = cg_value(g, s, v);
    cg_line(g, "%s = %s;", t, val);
    g->nmemo = mark;
    g->ind--;
  }
  cg_line(g, "}");
  free(bound);
  return memo_add(g, n, ix, t);
}

// IM2COL: out[n, oh, ow, c, kh, kw] = x[n, c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw],
// or the fill value where that falls in the padding.
static const char *im2col(Gen *g, Node *n, Index *ix, char *t) {
  Node *x = n->src[0];
  const int64_t *w = n->a.i;
  char hh[16], ww[16], lit[64];
  cg_need_idx(g, ix);
  cg_line(g, "int64_t %s = %s*%" PRId64 " - %" PRId64 " + %s*%" PRId64 ";", cg_tmp(g, hh), ix->idx[1], w[2], w[4], ix->idx[4], w[6]);
  cg_line(g, "int64_t %s = %s*%" PRId64 " - %" PRId64 " + %s*%" PRId64 ";", cg_tmp(g, ww), ix->idx[2], w[3], w[5], ix->idx[5], w[7]);
  Index *v = cg_index(g, 4, x->shape);
  snprintf(v->idx[0], sizeof v->idx[0], "%s", ix->idx[0]);
  snprintf(v->idx[1], sizeof v->idx[1], "%s", ix->idx[3]);
  snprintf(v->idx[2], sizeof v->idx[2], "%s", hh);
  snprintf(v->idx[3], sizeof v->idx[3], "%s", ww);
  v->has_idx = 1;
  if (w[8]) snprintf(lit, sizeof lit, "(-INFINITY)");
  else cg_literal(lit, sizeof lit, n->dtype, 0);
  // Only the bounds a window can cross: none for pooling without padding.
  char cond[256] = "";
  size_t k = 0;
  const char *at[2] = {hh, ww};
  for (int a = 0; a < 2; a++) {
    Dim out = n->shape[1 + a];
    int64_t in = x->shape[2 + a].k, last = (out.k - 1) * w[2 + a] - w[4 + a] + (w[a] - 1) * w[6 + a];
    if (w[4 + a] > 0 || out.sym)
      k += snprintf(cond + k, sizeof cond - k, "%s%s >= 0", k ? " && " : "", at[a]);
    if (last >= in || out.sym)
      k += snprintf(cond + k, sizeof cond - k, "%s%s < %" PRId64, k ? " && " : "", at[a], in);
  }
  if (!k) {
    char val[48];   // a copy: the memo array may move
    snprintf(val, sizeof val, "%s", cg_value(g, x, v));
    return memo_add(g, n, ix, val);
  }
  return guarded(g, n, ix, t, cond, lit, x, v);
}

// COL2IM over disjoint windows (ir_windows_disjoint): row h + pt is position
// (oh, kh) = ((h + pt) / sh, (h + pt) % sh) of at most one window, so a pixel
// is one guarded read, with no loop and no divisibility test. The guard keeps
// only the bounds this shape can cross: kh past the kernel when the stride
// skips rows, oh past the last window for rows no window reaches.
static const char *col2im_disjoint(Gen *g, Node *n, Index *ix, char *t) {
  Node *cols = n->src[0];
  const int64_t *w = n->a.i;
  char at[2][2][16], cond[256] = "", lit[64];
  size_t k = 0;
  for (int a = 0; a < 2; a++) {
    char *o = at[a][0], *kk = at[a][1];
    int64_t s = w[2 + a], in = n->shape[2 + a].k, out = cols->shape[1 + a].k;
    cg_line(g, "int64_t %s = (%s + %" PRId64 ") / %" PRId64 ";", cg_tmp(g, o), ix->idx[2 + a], w[4 + a], s);
    cg_line(g, "int64_t %s = %s + %" PRId64 " - %s*%" PRId64 ";", cg_tmp(g, kk), ix->idx[2 + a], w[4 + a], o, s);
    if (w[a] < s) k += snprintf(cond + k, sizeof cond - k, "%s%s < %" PRId64, k ? " && " : "", kk, w[a]);
    if ((in - 1 + w[4 + a]) / s >= out) k += snprintf(cond + k, sizeof cond - k, "%s%s < %" PRId64, k ? " && " : "", o, out);
  }
  Index *v = cg_index(g, 6, cols->shape);
  const char *idx[6] = {ix->idx[0], at[0][0], at[1][0], ix->idx[1], at[0][1], at[1][1]};
  for (int d = 0; d < 6; d++) snprintf(v->idx[d], sizeof v->idx[d], "%s", idx[d]);
  v->has_idx = 1;
  if (!k) {
    char val[48];   // a copy: the memo array may move
    snprintf(val, sizeof val, "%s", cg_value(g, cols, v));
    return memo_add(g, n, ix, val);
  }
  cg_literal(lit, sizeof lit, n->dtype, 0);
  return guarded(g, n, ix, t, cond, lit, cols, v);
}

// COL2IM: each pixel sums the window positions that read it; a position
// (oh, kh) reads row oh*sh - pt + kh*dh, so for row h it is oh = (h + pt - kh*dh) / sh
// when that divides and is in range. With stride 1 every position divides:
// the window loops then have constant trip counts and one range test in the
// innermost body, which Clang unrolls into straight-line code (faster than
// loops over the range of positions that land inside, measured).
static void col2im_loop(Gen *g, const char *k, const char *pos, const char *o, int64_t kn, int64_t pad, int64_t stride,
                        int64_t dil, int64_t out, char *cond, size_t len) {
  cg_line(g, "for (int64_t %s = 0; %s < %" PRId64 "; %s++) {", k, k, kn, k);
  g->ind++;
  if (stride == 1) {
    cg_line(g, "int64_t %s = %s + %" PRId64 " - %s*%" PRId64 ";", o, pos, pad, k, dil);
    size_t n = strlen(cond);
    snprintf(cond + n, len - n, "%s%s >= 0 && %s < %" PRId64, n ? " && " : "", o, o, out);
    return;
  }
  char th[16];
  cg_tmp(g, th);
  cg_line(g, "int64_t %s = %s + %" PRId64 " - %s*%" PRId64 ";", th, pos, pad, k, dil);
  cg_line(g, "if (%s < 0 || %s %% %" PRId64 ") continue;", th, th, stride);
  cg_line(g, "int64_t %s = %s / %" PRId64 ";", o, th, stride);
  cg_line(g, "if (%s >= %" PRId64 ") continue;", o, out);
}

static const char *col2im(Gen *g, Node *n, Index *ix, char *t) {
  Node *cols = n->src[0];
  const int64_t *w = n->a.i;
  char kh[16], kw[16], oh[16], ow[16], lit[64];
  cg_need_idx(g, ix);
  if (ir_windows_disjoint(w)) return col2im_disjoint(g, n, ix, t);
  cg_literal(lit, sizeof lit, n->dtype, 0);
  cg_line(g, "%s %s = %s;", cg_ctype(n->dtype), cg_tmp(g, t), lit);
  cg_tmp(g, kh); cg_tmp(g, kw); cg_tmp(g, oh); cg_tmp(g, ow);
  int mark_ind = g->ind;
  char cond[256] = "";
  col2im_loop(g, kh, ix->idx[2], oh, w[0], w[4], w[2], w[6], cols->shape[1].k, cond, sizeof cond);
  col2im_loop(g, kw, ix->idx[3], ow, w[1], w[5], w[3], w[7], cols->shape[2].k, cond, sizeof cond);
  Index *v = cg_index(g, 6, cols->shape);
  const char *at[6] = {ix->idx[0], oh, ow, ix->idx[1], kh, kw};
  for (int d = 0; d < 6; d++) snprintf(v->idx[d], sizeof v->idx[d], "%s", at[d]);
  v->has_idx = 1;
  int mark = g->nmemo;
  if (cond[0]) {
    cg_line(g, "if (%s) {", cond);
    g->ind++;
  }
  const char *val = cg_value(g, cols, v);
  cg_line(g, "%s += %s;", t, val);
  g->nmemo = mark;
  while (g->ind > mark_ind) {
    g->ind--;
    cg_line(g, "}");
  }
  return memo_add(g, n, ix, t);
}

// GATHER: out[i..., r...] = table[idx[i...], r...]; an index outside the table
// gives NaN (0 for integer tables), as a bad label does in cross-entropy.
static const char *gather(Gen *g, Node *n, Index *ix, char *t) {
  Node *table = n->src[0], *idx = n->src[1];
  char k[16], lit[64];
  cg_need_idx(g, ix);
  Index *iv = cg_index(g, idx->ndim, idx->shape);
  for (int d = 0; d < idx->ndim; d++) snprintf(iv->idx[d], sizeof iv->idx[d], "%s", ix->idx[d]);
  iv->has_idx = 1;
  cg_line(g, "int64_t %s = (int64_t)%s;", cg_tmp(g, k), cg_value(g, idx, iv));
  Index *v = cg_index(g, table->ndim, table->shape);
  snprintf(v->idx[0], sizeof v->idx[0], "%s", k);
  for (int d = 1; d < table->ndim; d++) snprintf(v->idx[d], sizeof v->idx[d], "%s", ix->idx[idx->ndim + d - 1]);
  v->has_idx = 1;
  if (ir_is_float(n->dtype)) snprintf(lit, sizeof lit, "NAN");
  else cg_literal(lit, sizeof lit, n->dtype, 0);
  char cond[128];
  snprintf(cond, sizeof cond, "%s >= 0 && %s < %" PRId64, k, k, table->shape[0].k);
  return guarded(g, n, ix, t, cond, lit, table, v);
}

// ---- reductions ------------------------------------------------------------------
// A reduction's accumulator starts at the op's identity (integer min/max at the
// type's extreme).
void cg_acc_init(char *buf, size_t len, Node *n, DType acc) {
  const char *init = ir_ops[n->op].init;
  if (ir_is_float(acc) || (strcmp(init, "INFINITY") && strcmp(init, "-INFINITY"))) {
    snprintf(buf, len, "%s", init);
    return;
  }
  static const char *lo[] = {"0", "INT32_MIN", "INT64_MIN"}, *hi[] = {"1", "INT32_MAX", "INT64_MAX"};
  snprintf(buf, len, "%s", init[0] == '-' ? lo[acc] : hi[acc]);
}

// A sum of booleans cast to float (max pooling's tie count) over at most 2^24
// terms: every partial sum is an integer f32 holds exactly, so the float
// accumulator gives the double one's result without the conversions.
static int count_exact(const Node *n) {
  const Node *s = n->src[0];
  if (n->op != OP_SUM || s->op != OP_CAST || s->src[0]->dtype != DT_BOOL) return 0;
  int64_t terms = ir_reduce_terms(n);
  return terms && terms <= 1 << 24;
}

DType cg_reduce_acc(const Node *n) {   // f32 sums in double
  DType vt = n->src[0]->dtype;
  return (vt == DT_F32 && (n->op == OP_SUM || n->op == OP_PROD) && !count_exact(n)) ? DT_F64 : vt;
}

// One element into the accumulator `a` (of type acc): argmax/argmin keep the
// position, the others apply the op's C template ($0 the accumulator, $1 the value).
void cg_reduce_step(Gen *g, Node *n, DType acc, const char *a, const char *v) {
  DType vt = n->src[0]->dtype;
  if (n->op == OP_ARGMAX || n->op == OP_ARGMIN) {
    const char *cmp = n->op == OP_ARGMAX ? ">" : "<";
    // The first NaN wins, as in NumPy (and as max propagates NaN).
    if (ir_is_float(vt)) cg_line(g, "if (%s %s acc || (%s != %s && acc == acc)) { acc = %s; best = pos; }", v, cmp, v, v, v);
    else cg_line(g, "if (%s %s acc) { acc = %s; best = pos; }", v, cmp, v);
    cg_line(g, "pos++;");
    return;
  }
  const char *tpl = vt == DT_F32 ? ir_ops[n->op].c_f32 : ir_ops[n->op].c_f64;
  char expr[256]; size_t e = 0;
  for (const char *p = tpl; *p && e < sizeof expr - 40; p++) {
    if (*p == '$' && p[1] == '0') { e += snprintf(expr + e, sizeof expr - e, "%s", a); p++; }
    else if (*p == '$' && p[1] == '1') { e += snprintf(expr + e, sizeof expr - e, "(%s)%s", cg_ctype(acc), v); p++; }
    else expr[e++] = *p;
  }
  expr[e] = 0;
  cg_line(g, "%s = %s;", a, expr);
}

// A reduction over a small window computed where it is read (fuse.c leaves it
// without a buffer: max pooling's tie count, read by its gradient's mask): the
// window's terms in the order, and into the accumulator, of the reduction
// kernel it replaces, so the value is the same bit for bit.
static const char *reduce_inline(Gen *g, Node *n, Index *ix, char *t) {
  Node *s = n->src[0];
  uint32_t axes = (uint32_t)n->a.i[0];
  int keep = (int)n->a.i[1], mark_ind = g->ind;
  DType acc = cg_reduce_acc(n);
  char a[16], init[64];
  cg_need_idx(g, ix);
  cg_acc_init(init, sizeof init, n, acc);
  cg_line(g, "%s %s = %s;", cg_ctype(acc), cg_tmp(g, a), init);
  Index *v = cg_index(g, s->ndim, s->shape);
  for (int i = 0, o = 0; i < s->ndim; i++) {
    if (!(axes & (1u << i))) {
      snprintf(v->idx[i], sizeof v->idx[i], "%s", ix->idx[o++]);
      continue;
    }
    char r[16];
    cg_tmp(g, r);
    cg_line(g, "for (int64_t %s = 0; %s < %" PRId64 "; %s++) {", r, r, s->shape[i].k, r);
    g->ind++;
    snprintf(v->idx[i], sizeof v->idx[i], "%s", r);
    o += keep;   // a kept size-1 axis: index 0, not needed
  }
  v->has_idx = 1;
  int mark = g->nmemo;
  cg_reduce_step(g, n, acc, a, cg_value(g, s, v));
  g->nmemo = mark;
  while (g->ind > mark_ind) {
    g->ind--;
    cg_line(g, "}");
  }
  cg_line(g, "%s %s = (%s)%s;", cg_ctype(n->dtype), cg_tmp(g, t), cg_ctype(n->dtype), a);
  return memo_add(g, n, ix, t);
}

const char *cg_compute(Gen *g, Node *n, Index *ix) {
  char t[16];
  switch (ir_ops[n->op].kind) {
  case K_LEAF: return leaf(g, n, ix, t);
  case K_EW: return elementwise(g, n, ix, t);
  case K_MOVE:
    if (n->op == OP_PAD) return pad(g, n, ix, t);
    if (n->op == OP_CONCAT) return concat(g, n, ix, t);
    if (n->op == OP_IM2COL) return im2col(g, n, ix, t);
    if (n->op == OP_COL2IM) return col2im(g, n, ix, t);
    if (n->op == OP_GATHER) return gather(g, n, ix, t);
    {
      char v[48];
      snprintf(v, sizeof v, "%s", cg_value(g, n->src[0], view_index(g, n, ix)));
      return memo_add(g, n, ix, v);
    }
  case K_REDUCE: return reduce_inline(g, n, ix, t);   // fuse.c: small windows only
  default:
    abort();  // matmuls and row ops always have buffers (fuse.c)
  }
}

char *cg_stamp(char *text, size_t n, char pfx[32]) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
  snprintf(pfx, 32, "kiln_%016" PRIx64, h);
  Str fin = {0};
  for (const char *p = text; *p;) {
    const char *q = strstr(p, "KILN_PFX");
    if (!q) { str_put(&fin, "%s", p); break; }
    str_put(&fin, "%.*s%s", (int)(q - p), p, pfx);
    p = q + 8;
  }
  free(text);
  return fin.s;
}

void cg_row_offsets(Gen *g, Node *x, int ax, int labels) {
  int nd = x->ndim;
  char d[64], ostr[96];
  cg_line(g, "int64_t q = row, xo = xoff, oo = 0, lo_ = 0; (void)oo; (void)lo_;");
  for (int i = nd - 1; i >= 0; i--) {
    if (i == ax) continue;
    cg_dim(d, sizeof d, x->shape[i]);
    cg_prod(ostr, sizeof ostr, x->shape, i + 1, nd);
    cg_line(g, "{ int64_t r = q %% %s; q /= %s; xo += r*xs%d; oo += r*%s; }", d, d, i, ostr);
  }
  if (!labels) return;
  cg_line(g, "{ int64_t q2 = row;");
  for (int i = nd - 2; i >= 0; i--) {
    cg_dim(d, sizeof d, x->shape[i]);
    cg_line(g, "  { int64_t r = q2 %% %s; q2 /= %s; lo_ += r*ls%d; }", d, d, i);
  }
  cg_line(g, "}");
}
