// einsum(spec, a, b, ...): NumPy's Einstein summation, traced into the ops the
// rest of Kiln already optimizes and differentiates. Each operand first loses
// its repeated labels (a diagonal: a mask and a sum) and the labels no other
// operand and not the output has (a sum); then the operands are contracted
// left to right, two at a time: labels both have and a later one needs are
// batch axes, labels both have and none needs are summed. A pair is one
// matrix product (transposes and reshapes around a batched `@`, so BLAS does
// the work) when its float operands' grouped sizes can be merged (each group
// holds at most one symbolic size); otherwise, and for integers, a broadcast
// product and a sum, which fusion turns into one loop nest.
#include "builtins_int.h"
#include <string.h>

enum { MAX_OPERANDS = 32, ELLIPSIS = 128 };   // label codes: letters, or ELLIPSIS + j (j-th from the right)

typedef struct {
  Node *x;
  int lab[IR_MAXDIM];   // one label code per axis of x
  Span sp;
} Term;

typedef struct {
  Ev *ev;
  const char *spec;
  Span spec_sp;
  int out[IR_MAXDIM + 1], nout;
  Dim size[256];      // each label's size (the largest of its operands': a size 1 broadcasts)
  int seen[256];      // 1 + the operand that gave size[]; 0: no operand carries it
} Ein;

// The span of spec[i] when the spec is a plain string literal, else the whole string.
static Span char_span(const Ein *e, int i) {
  Span s = e->spec_sp;
  size_t n = strlen(e->spec);
  if (s.src && s.len == (int)n + 2 && s.src->text[s.off] == '"' && !memchr(e->spec, '\n', n) && !memchr(e->spec, '\\', n)) {
    s.off += 1 + i;
    s.col += 1 + i;
    s.len = 1;
  }
  return s;
}

static int is_label(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Parses one term spec[*i..] (up to ',', '-' or the end) into codes; an
// ellipsis takes the ndim - (number of letters) axes it stands for (-1: no
// operand, as in the output, where it takes all ne ellipsis axes). Returns the
// number of codes.
static int parse_term(Ein *e, int *i, int ndim, int ne, int *lab, Span operand_sp) {
  const char *s = e->spec;
  int letters = 0, ell = -1, start = *i;
  for (int j = *i; s[j] && s[j] != ',' && s[j] != '-'; j++) {
    if (is_label(s[j])) letters++;
    else if (s[j] == '.' && s[j + 1] == '.' && s[j + 2] == '.' && ell < 0) { ell = j; j += 2; }
    else if (s[j] == '.') ev_fail(e->ev, char_span(e, j), "einsum: '...' may appear once per term, and '.' only in it");
    else if (s[j] != ' ') ev_fail(e->ev, char_span(e, j), "einsum: subscripts are letters (a-z, A-Z) and '...', not '%c'", s[j]);
  }
  int nell = ndim < 0 ? ne : ndim - letters, n = 0;
  if (ndim >= 0 && (nell < 0 || (nell > 0 && ell < 0)))
    ev_fail(e->ev, operand_sp, "einsum: the subscripts '%.*s' name %d ax%s, but this operand has %d", (int)strcspn(s + start, ",-"),
            s + start, letters, letters == 1 ? "is" : "es", ndim);
  if (letters + (ell >= 0 ? nell : 0) > IR_MAXDIM) ev_fail(e->ev, char_span(e, start), "einsum: more than %d axes in one term", IR_MAXDIM);
  for (; s[*i] && s[*i] != ',' && s[*i] != '-'; (*i)++) {
    if (s[*i] == ' ') continue;
    if (s[*i] == '.') {
      for (int k = nell - 1; k >= 0; k--) lab[n++] = ELLIPSIS + k;
      *i += 2;
    } else {
      lab[n++] = (unsigned char)s[*i];
    }
  }
  return n;
}

static const char *label_name(int code, char *buf) {
  if (code >= ELLIPSIS) snprintf(buf, 24, "... axis %d", code - ELLIPSIS);
  else snprintf(buf, 24, "'%c'", code);
  return buf;
}

// Records each axis's size under its label; sizes of one label must agree or be 1.
static void note_sizes(Ein *e, const Term *t, int k) {
  for (int d = 0; d < t->x->ndim; d++) {
    int l = t->lab[d];
    Dim s = t->x->shape[d];
    if (e->seen[l] && !dim_eq(e->size[l], s) && !dim_is(s, 1) && !dim_is(e->size[l], 1)) {
      char a[64], b[64], nm[24];
      ev_fail(e->ev, t->sp, "einsum: label %s has size %s in operand %d and %s in operand %d", label_name(l, nm),
              bi_dim_str(e->ev, e->size[l], a, sizeof a), e->seen[l], bi_dim_str(e->ev, s, b, sizeof b), k + 1);
    }
    if (!e->seen[l] || (dim_is(e->size[l], 1) && !dim_is(s, 1))) e->size[l] = s, e->seen[l] = k + 1;
  }
}

static Node *ok(Ein *e, Node *n) { return ev_check(e->ev, n, e->spec_sp); }

static int find(const int *lab, int n, int l) {
  for (int i = 0; i < n; i++) if (lab[i] == l) return i;
  return -1;
}

// Sums out axis d of t.
static void sum_axis(Ein *e, Term *t, int d) {
  t->x = ok(e, ir_reduce(e->ev->c, OP_SUM, t->x, 1u << d, 0));
  memmove(t->lab + d, t->lab + d + 1, sizeof(int) * (size_t)(t->x->ndim - d));
}

// A label twice in one term ('ii'): keep where the two indices agree, sum one axis away.
static void take_diagonals(Ein *e, Term *t) {
  IrCtx *c = e->ev->c;
  for (int i = 0; i < t->x->ndim; i++)
    for (int j = i + 1; j < t->x->ndim; j++) {
      if (t->lab[j] != t->lab[i]) continue;
      if (!dim_eq(t->x->shape[i], t->x->shape[j])) {
        char nm[24];
        ev_fail(e->ev, t->sp, "einsum: the repeated label %s needs equal sizes on its axes", label_name(t->lab[i], nm));
      }
      Node *same = ir_binary(c, OP_EQ, ir_iota(c, DT_I64, t->x->ndim, t->x->shape, i), ir_iota(c, DT_I64, t->x->ndim, t->x->shape, j));
      t->x = ok(e, ir_where(c, same, t->x, ir_scalar(c, t->x->dtype, 0)));
      sum_axis(e, t, j);
      j--;
    }
}

// t's axes in the order of labels `want` (each one t has; a label it lacks is a
// new axis of size 1).
static Node *arrange(Ein *e, const Term *t, const int *want, int n) {
  IrCtx *c = e->ev->c;
  int perm[IR_MAXDIM] = {0}, np = 0;
  for (int i = 0; i < n; i++) {
    int d = find(t->lab, t->x->ndim, want[i]);
    if (d >= 0) perm[np++] = d;
  }
  Node *x = ok(e, ir_transpose(c, t->x, perm));
  Dim s[IR_MAXDIM];
  for (int i = 0, k = 0; i < n; i++) s[i] = find(t->lab, t->x->ndim, want[i]) >= 0 ? x->shape[k++] : dim_c(1);
  return ok(e, ir_reshape(c, x, n, s));
}

// The product of sizes as one Dim; 0 when more than one is symbolic.
static int merged(const Dim *s, int n, Dim *out) {
  Dim r = dim_c(1);
  for (int i = 0; i < n; i++) {
    if (s[i].sym && r.sym) return 0;
    if (s[i].sym) r.sym = s[i].sym;
    r.k *= s[i].k;
  }
  *out = r;
  return 1;
}

// a * b contracted: labels both have and `need` marks stay (batch axes first),
// the other shared ones are summed. The result's labels: batch, a's, b's.
static Term contract(Ein *e, Term a, Term b, const int *need) {
  IrCtx *c = e->ev->c;
  int batch[IR_MAXDIM], nb = 0, sum[IR_MAXDIM], ns = 0, left[IR_MAXDIM], nl = 0, right[IR_MAXDIM], nr = 0;
  for (int i = 0; i < a.x->ndim; i++) {
    int l = a.lab[i];
    if (find(b.lab, b.x->ndim, l) < 0) left[nl++] = l;
    else if (need[l]) batch[nb++] = l;
    else sum[ns++] = l;
  }
  for (int i = 0; i < b.x->ndim; i++)
    if (find(a.lab, a.x->ndim, b.lab[i]) < 0) right[nr++] = b.lab[i];
  Term r = {0};
  r.sp = e->spec_sp;
  memcpy(r.lab, batch, sizeof(int) * (size_t)nb);
  memcpy(r.lab + nb, left, sizeof(int) * (size_t)nl);
  memcpy(r.lab + nb + nl, right, sizeof(int) * (size_t)nr);
  int n = nb + nl + nr;
  if (n + ns > IR_MAXDIM) ev_fail(e->ev, e->spec_sp, "einsum: a pair of operands spans more than %d labels", IR_MAXDIM);
  // a summed label of size 1 on one side broadcasts: widen that side first
  for (int i = 0; i < ns; i++) {
    Term *t = dim_is(e->size[sum[i]], 1) ? NULL : dim_is(a.x->shape[find(a.lab, a.x->ndim, sum[i])], 1) ? &a
            : dim_is(b.x->shape[find(b.lab, b.x->ndim, sum[i])], 1) ? &b : NULL;
    if (!t) continue;
    Dim s[IR_MAXDIM];
    memcpy(s, t->x->shape, sizeof(Dim) * (size_t)t->x->ndim);
    s[find(t->lab, t->x->ndim, sum[i])] = e->size[sum[i]];
    t->x = ok(e, ir_broadcast(c, t->x, t->x->ndim, s));
  }
  Dim ls[IR_MAXDIM], rs[IR_MAXDIM], ks[IR_MAXDIM], L, R, K;
  for (int i = 0; i < nl; i++) ls[i] = a.x->shape[find(a.lab, a.x->ndim, left[i])];
  for (int i = 0; i < nr; i++) rs[i] = b.x->shape[find(b.lab, b.x->ndim, right[i])];
  for (int i = 0; i < ns; i++) ks[i] = e->size[sum[i]];
  int floats = ir_is_float(a.x->dtype) && ir_is_float(b.x->dtype);
  if (ns && floats && nb + 2 <= IR_MAXDIM && merged(ls, nl, &L) && merged(rs, nr, &R) && merged(ks, ns, &K)) {
    // [batch, left, sum] @ [batch, sum, right], each group merged into one axis
    int la[IR_MAXDIM], lb[IR_MAXDIM];
    memcpy(la, batch, sizeof(int) * (size_t)nb);
    memcpy(la + nb, left, sizeof(int) * (size_t)nl);
    memcpy(la + nb + nl, sum, sizeof(int) * (size_t)ns);
    memcpy(lb, batch, sizeof(int) * (size_t)nb);
    memcpy(lb + nb, sum, sizeof(int) * (size_t)ns);
    memcpy(lb + nb + ns, right, sizeof(int) * (size_t)nr);
    Node *x = arrange(e, &a, la, nb + nl + ns), *y = arrange(e, &b, lb, nb + ns + nr);
    Dim sa[IR_MAXDIM], sb[IR_MAXDIM];
    memcpy(sa, x->shape, sizeof(Dim) * (size_t)nb);
    memcpy(sb, y->shape, sizeof(Dim) * (size_t)nb);
    sa[nb] = L, sa[nb + 1] = K, sb[nb] = K, sb[nb + 1] = R;
    Node *m = ok(e, ir_matmul(c, ok(e, ir_reshape(c, x, nb + 2, sa)), ok(e, ir_reshape(c, y, nb + 2, sb))));
    Dim s[IR_MAXDIM];
    memcpy(s, m->shape, sizeof(Dim) * (size_t)nb);
    memcpy(s + nb, ls, sizeof(Dim) * (size_t)nl);
    memcpy(s + nb + nl, rs, sizeof(Dim) * (size_t)nr);
    r.x = ok(e, ir_reshape(c, m, n, s));
    return r;
  }
  // a broadcast product over [batch, left, right, sum], the sum axes reduced
  int all[IR_MAXDIM];
  memcpy(all, r.lab, sizeof(int) * (size_t)n);
  memcpy(all + n, sum, sizeof(int) * (size_t)ns);
  r.x = ok(e, ir_binary(c, OP_MUL, arrange(e, &a, all, n + ns), arrange(e, &b, all, n + ns)));
  if (ns) r.x = ok(e, ir_reduce(c, OP_SUM, r.x, ((1u << (n + ns)) - 1) & ~((1u << n) - 1), 0));
  return r;
}

// The output labels: after "->", or NumPy's implicit ones (the ellipsis axes,
// then the labels used once, in ASCII order).
static void output_labels(Ein *e, int arrow, int ne, const int *count) {
  if (arrow >= 0) {
    int i = arrow + 2;
    e->nout = parse_term(e, &i, -1, ne, e->out, e->spec_sp);
    if (e->spec[i]) ev_fail(e->ev, char_span(e, i), "einsum: the output term must be the last ('->' once, no ',' after it)");
    for (int k = 0; k < e->nout; k++) {
      char nm[24];
      if (!e->seen[e->out[k]])
        ev_fail(e->ev, e->spec_sp, "einsum: the output label %s is in no input", label_name(e->out[k], nm));
      if (find(e->out, k, e->out[k]) >= 0) ev_fail(e->ev, e->spec_sp, "einsum: the output label %s appears twice", label_name(e->out[k], nm));
    }
    return;
  }
  e->nout = 0;
  for (int k = ne - 1; k >= 0; k--) e->out[e->nout++] = ELLIPSIS + k;
  for (int l = 'A'; l <= 'z'; l++)
    if (count[l] == 1) {
      if (e->nout == IR_MAXDIM) ev_fail(e->ev, e->spec_sp, "einsum: more than %d output axes", IR_MAXDIM);
      e->out[e->nout++] = l;
    }
}

Value b_einsum(Ev *ev, const Builtin *b, Args *a) {
  bi_check(ev, b, a, MAX_OPERANDS + 1, NULL);
  Ein e = {.ev = ev};
  Value spec = bi_need(ev, b, a, 0, "spec", &e.spec_sp);
  if (spec.kind != V_STR) ev_fail(ev, e.spec_sp, "einsum needs its subscripts in quotes first: einsum(\"ij,jk->ik\", a, b)");
  e.spec = spec.s;
  int nt = a->npos - 1, i = 0, ne = 0, count[256] = {0};
  if (nt < 1) ev_fail(ev, a->span, "einsum needs one or more operands after the subscripts: %s", b->usage);
  Term t[MAX_OPERANDS];
  const char *arrow = strstr(e.spec, "->");
  for (int k = 0; k < nt; k++) {
    t[k].sp = a->pos_span[k + 1];
    t[k].x = ev_tensor(ev, a->pos[k + 1], t[k].sp, "an einsum operand");
    if (k && e.spec[i] != ',')
      ev_fail(ev, e.spec_sp, "einsum: the subscripts have %d term%s for %d operands", k, k == 1 ? "" : "s", nt);
    if (k) i++;
    parse_term(&e, &i, t[k].x->ndim, 0, t[k].lab, t[k].sp);
    for (int d = 0; d < t[k].x->ndim; d++)
      if (t[k].lab[d] >= ELLIPSIS && t[k].lab[d] - ELLIPSIS + 1 > ne) ne = t[k].lab[d] - ELLIPSIS + 1;
  }
  if (e.spec[i] == ',') ev_fail(ev, e.spec_sp, "einsum: the subscripts have more terms than the %d operand%s", nt, nt == 1 ? "" : "s");
  if (e.spec[i] && (!arrow || e.spec + i != arrow)) ev_fail(ev, char_span(&e, i), "einsum: expected ',' or '->' here");
  for (int k = 0; k < nt; k++) {
    note_sizes(&e, &t[k], k);
    for (int d = 0; d < t[k].x->ndim; d++) count[t[k].lab[d]]++;
  }
  output_labels(&e, arrow ? (int)(arrow - e.spec) : -1, ne, count);
  for (int k = 0; k < nt; k++) take_diagonals(&e, &t[k]);
  // labels still needed after operand k: the output's and those of later operands
  int need[MAX_OPERANDS][256];
  memset(need, 0, sizeof need);
  for (int k = nt - 1; k >= 0; k--) {
    if (k == nt - 1) for (int j = 0; j < e.nout; j++) need[k][e.out[j]] = 1;
    else {
      memcpy(need[k], need[k + 1], sizeof need[k]);
      for (int d = 0; d < t[k + 1].x->ndim; d++) need[k][t[k + 1].lab[d]] = 1;
    }
  }
  // a label only one operand has and no one needs: summed now
  for (int k = 0; k < nt; k++)
    for (int d = t[k].x->ndim - 1; d >= 0; d--) {
      int l = t[k].lab[d], elsewhere = find(e.out, e.nout, l) >= 0;
      for (int j = 0; j < nt && !elsewhere; j++) elsewhere = j != k && find(t[j].lab, t[j].x->ndim, l) >= 0;
      if (!elsewhere) sum_axis(&e, &t[k], d);
    }
  Term r = t[0];
  for (int k = 1; k < nt; k++) r = contract(&e, r, t[k], need[k]);
  Node *x = arrange(&e, &r, e.out, e.nout);
  Dim full[IR_MAXDIM];
  for (int j = 0; j < e.nout; j++) full[j] = e.size[e.out[j]];
  return ev_tval(ok(&e, ir_broadcast(ev->c, x, e.nout, full)));
}
