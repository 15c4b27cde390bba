// The compile pipeline (see pipeline.h).
#include "pipeline.h"
#include <stdlib.h>
#include <string.h>


int pipe_stage_ok(const char *name) {
  const char *all = PIPE_STAGES, *p = all;
  size_t n = strlen(name);
  while (n && (p = strstr(p, name))) {
    if ((p == all || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    p += n;
  }
  return 0;
}

LowerOpts pipe_lower_opts(void) { return (LowerOpts){.gemm = rt_have_blis()}; }

static int stop_at(Pipe *p, const char *stage, IrGraph *g, Schedule *s) {
  if (!p->dump_after || strcmp(p->dump_after, stage)) return 0;
  if (s) sched_print(p->dump, s);
  else ir_print_graph(p->dump, p->c, g);
  return 1;
}

typedef IrGraph *(*GraphPass)(IrCtx *, IrGraph *);
static const struct { const char *name; GraphPass run; } graph_passes[] = {
  {"fold", pass_fold}, {"simplify", pass_simplify}, {"stability", pass_stability}, {"dce", pass_dce},
};

static JitSymbol runtime_symbols[] = {
  {"rt_parallel_for", (void *)rt_parallel_for},
  {"rt_workspace", (void *)rt_workspace},
  {"rt_rand_uniform_f32", (void *)rt_rand_uniform_f32},
  {"rt_rand_uniform_f64", (void *)rt_rand_uniform_f64},
  {"rt_rand_normal_f32", (void *)rt_rand_normal_f32},
  {"rt_rand_normal_f64", (void *)rt_rand_normal_f64},
  {"rt_gemm_f32", (void *)rt_gemm_f32},
  {"rt_gemm_f64", (void *)rt_gemm_f64},
};

Jit *pipe_jit_new(char *err, size_t errlen) {
  return jit_new(NULL, runtime_symbols, sizeof runtime_symbols / sizeof *runtime_symbols, err, errlen);
}

Program *pipe_compile(Pipe *p, IrGraph *g, char *err, size_t errlen) {
  err[0] = 0;
  if (stop_at(p, "ir", g, NULL)) return NULL;
  for (size_t i = 0; i < sizeof graph_passes / sizeof *graph_passes; i++) {
    g = graph_passes[i].run(p->c, g);
    if (!g) { snprintf(err, errlen, "internal error in pass %s: %s", graph_passes[i].name, p->c->err); return NULL; }
    if (stop_at(p, graph_passes[i].name, g, NULL)) return NULL;
  }
  Schedule *s = pass_fuse(p->c, g);
  if (stop_at(p, "fuse", g, s)) { sched_free(s); return NULL; }
  pass_lower(s, &p->lower);
  if (stop_at(p, "lower", g, s)) { sched_free(s); return NULL; }
  pass_plan(s);
  if (stop_at(p, "plan", g, s)) { sched_free(s); return NULL; }
  Program *pr = calloc(1, sizeof *pr);
  if (!pr) abort();
  pr->g = g; pr->s = s;
  if (cg_emit_c(s, &pr->cs, err, errlen)) { prog_free(pr); return NULL; }
  if (p->emit_c) {
    fputs(pr->cs.src, p->dump);
    prog_free(pr);
    return NULL;
  }
  const char *names[3] = {pr->cs.entry, pr->cs.call, pr->cs.workspace};
  void *addrs[3];
  if (jit_compile(p->jit, pr->cs.src, names, 3, addrs, &pr->st, err, errlen)) { prog_free(pr); return NULL; }
  pr->entry = (void (*)(void **))addrs[0];
  pr->call = addrs[1];
  pr->workspace = (size_t (*)(const int64_t *))addrs[2];
  return pr;
}

void prog_free(Program *pr) {
  if (!pr) return;
  sched_free(pr->s);
  cg_source_free(&pr->cs);
  free(pr);
}

static int64_t dim_val(Dim d, const int64_t *D) { return d.sym ? d.k * D[d.sym] : d.k; }

int prog_bind(const Program *pr, const RtTensor *ins, int64_t *D, char *err, size_t errlen) {
  IrGraph *g = pr->g;
  IrCtx *c = pr->s->ctx;
  uint64_t bound = 0;
  for (int i = 0; i < g->nin; i++) {
    Node *n = g->ins[i];
    const RtTensor *t = &ins[i];
    if ((int)t->dtype != (int)n->dtype) {
      snprintf(err, errlen, "input %s: expected dtype %s, got %s", n->a.name, ir_dtype_name(n->dtype), rt_dtype_name(t->dtype));
      return -1;
    }
    if (t->ndim != n->ndim) {
      snprintf(err, errlen, "input %s: expected %d dimensions, got %d", n->a.name, n->ndim, t->ndim);
      return -1;
    }
    for (int d = 0; d < n->ndim; d++) {
      Dim x = n->shape[d];
      if (x.sym && x.k) {
        if (!(bound & (1ull << x.sym))) {
          if (t->shape[d] % x.k) goto bad;
          D[x.sym] = t->shape[d] / x.k;
          bound |= 1ull << x.sym;
        }
      }
      if (dim_val(x, D) != t->shape[d]) goto bad;
      continue;
    bad:;
      char b[128];
      snprintf(err, errlen, "input %s: shape %s does not match axis %d of size %lld", n->a.name,
               ir_shape_str(c, n->ndim, n->shape, b, sizeof b), d, (long long)t->shape[d]);
      return -1;
    }
  }
  return 0;
}

void prog_out_shape(const Program *pr, int i, const int64_t *D, int *ndim, int64_t *shape) {
  Node *o = pr->g->outs[i];
  *ndim = o->ndim;
  for (int d = 0; d < o->ndim; d++) shape[d] = dim_val(o->shape[d], D);
}

int prog_run(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs, int via_ffi) {
  const Schedule *s = pr->s;
  int nin = pr->g->nin, nout = pr->g->nout, n = 2 + nin + s->nconst + nout;
  void *stackargs[64], **args = n <= 64 ? stackargs : malloc(sizeof(void *) * n);
  if (!args) abort();
  args[0] = p->rt;
  args[1] = (void *)D;
  for (int i = 0; i < nin; i++) args[2 + i] = ins[i].data;
  for (int i = 0; i < s->nconst; i++) args[2 + nin + i] = (void *)s->consts[i]->a.data;
  for (int i = 0; i < nout; i++) args[2 + nin + s->nconst + i] = outs[i].data;
  // The scratch memory is made sure of here, where running out can be reported.
  size_t need = pr->workspace(D);
  if (need && !rt_workspace(p->rt, need)) {
    if (args != stackargs) free(args);
    return PROG_NO_MEMORY;
  }
  int rc = 0;
  if (via_ffi) rc = rt_ffi_call_ptrs(pr->call, n, args);
  else pr->entry(args);
  if (args != stackargs) free(args);
  return rc;
}
