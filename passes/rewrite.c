// The shared rewriting engine: bottom-up rebuild with a rule applied to a
// fixpoint at each node. Needs: a well-formed graph. Keeps: shapes and dtypes
// of the outputs (rules must preserve them).
#include "passes.h"
#include <stdlib.h>
#include <string.h>

// map[id] caches each old node's rewritten form; nodes created by rules get
// ids past the old range and are looked up through the same table, grown.
typedef struct { Node **map; int cap; } Memo;

static Node *memo_get(Memo *m, Node *n) { return n->id < m->cap ? m->map[n->id] : NULL; }

static void memo_put(Memo *m, Node *n, Node *v) {
  if (n->id >= m->cap) {
    int cap = m->cap ? m->cap : 1024;
    while (cap <= n->id) cap *= 2;
    m->map = realloc(m->map, sizeof(Node *) * cap);
    if (!m->map) abort();
    memset(m->map + m->cap, 0, sizeof(Node *) * (cap - m->cap));
    m->cap = cap;
  }
  m->map[n->id] = v;
}

static Node *rewrite_node(IrCtx *c, Node *n, RewriteRule rule, void *ud, Memo *m, int depth);

// Rebuild n over rewritten operands (iteratively over the operands' topo order,
// so deep graphs do not overflow the C stack), then apply the rule.
static Node *rewrite_node(IrCtx *c, Node *n, RewriteRule rule, void *ud, Memo *m, int depth) {
  Node *done = memo_get(m, n);
  if (done) return done;
  int count;
  Node **order = ir_topo(c, &n, 1, &count);
  Node *result = NULL;
  for (int i = 0; i < count; i++) {
    Node *t = order[i];
    if (memo_get(m, t)) continue;
    Node *srcbuf[16], **src = t->nsrc <= 16 ? srcbuf : malloc(sizeof(Node *) * t->nsrc);
    int changed = 0;
    for (int s = 0; s < t->nsrc; s++) {
      src[s] = memo_get(m, t->src[s]);
      changed |= src[s] != t->src[s];
    }
    Node *r = changed ? ir_remake(c, t, src) : t;
    if (src != srcbuf) free(src);
    for (int guard = 0; rule && guard < 64; guard++) {
      Node *x = rule(c, r, ud);
      if (!x) {
        if (c->err[0]) { free(order); return NULL; }
        break;
      }
      if (x == r) break;
      // The replacement may contain new nodes that need rewriting themselves.
      if (depth < 32 && !memo_get(m, x)) x = rewrite_node(c, x, rule, ud, m, depth + 1);
      if (!x) { free(order); return NULL; }
      r = x;
    }
    memo_put(m, t, r);
    if (r != t) memo_put(m, r, r);
    result = r;
  }
  free(order);
  return result ? result : memo_get(m, n);
}

IrGraph *pass_rewrite(IrCtx *c, IrGraph *g, RewriteRule rule, void *ud) {
  Memo m = {0};
  c->err[0] = 0;
  Node **outs = malloc(sizeof(Node *) * (g->nout + 1));
  if (!outs) abort();
  for (int i = 0; i < g->nout; i++) {
    outs[i] = rewrite_node(c, g->outs[i], rule, ud, &m, 0);
    if (!outs[i]) { free(outs); free(m.map); return NULL; }
  }
  IrGraph *r = ir_graph_new(c, outs, g->nout, g->ins, g->nin);
  r->donate = g->donate;   // the same outputs and inputs, in the same order
  free(outs);
  free(m.map);
  return r;
}

typedef struct { Node **from, **to; int n; } Subst;

static Node *subst_rule(IrCtx *c, Node *n, void *ud) {
  Subst *s = ud;
  for (int i = 0; i < s->n; i++) if (n == s->from[i]) return s->to[i];
  return NULL;
}

IrGraph *pass_substitute(IrCtx *c, IrGraph *g, Node **from, Node **to, int n) {
  Subst s = {from, to, n};
  return pass_rewrite(c, g, subst_rule, &s);
}

Node *ir_substitute(IrCtx *c, Node *root, Node **from, Node **to, int n) {
  IrGraph *g = ir_graph_new(c, &root, 1, NULL, 0);
  IrGraph *r = pass_substitute(c, g, from, to, n);
  return r ? r->outs[0] : NULL;
}
