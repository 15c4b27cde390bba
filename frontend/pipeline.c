// The compile pipeline (see pipeline.h).
#include "pipeline.h"
#include <inttypes.h>
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

// rt_gemm_* is always there: Kiln's packed f32 GEMM (any x86-64: AVX-512, AVX2 or
// C micro-kernels), BLIS for f64 when built with it, blocked loops otherwise.
// Epilogue fusion is on unless KILN_FUSE_EPILOGUE=0, implicit im2col unless
// KILN_IMPLICIT_IM2COL=0 (for comparing: the results are the same bit for bit).
static int env_off(const char *name) {
  const char *e = getenv(name);
  return e && !strcmp(e, "0");
}

LowerOpts pipe_lower_opts(void) {
  return (LowerOpts){.gemm = 1, .epilogue = !env_off("KILN_FUSE_EPILOGUE"), .windows = !env_off("KILN_IMPLICIT_IM2COL"),
                     .winograd = !env_off("KILN_WINOGRAD")};
}

// ---- kiln ir --stats ---------------------------------------------------------------
// Sizes in bytes as polynomials in the symbolic dimensions: a term per
// monomial (40*B, 8*B*T, a constant). A workspace slot is its largest member;
// where no member is at least as large as the others at every size (symbols
// are at least 1), the slot stays a max(...) as written.
typedef struct { uint8_t e[64]; int64_t k; } Term;   // k times the product of symbol y to the power e[y]
typedef struct { Term t[32]; int n; char other[512]; } Poly;

static Term buf_term(const Node *n) {
  Term t = {{0}, (int64_t)ir_dtype_size(n->dtype)};
  for (int d = 0; d < n->ndim; d++) {
    t.k *= n->shape[d].k;
    if (n->shape[d].sym) t.e[n->shape[d].sym]++;
  }
  if (!t.k) memset(t.e, 0, sizeof t.e);
  return t;
}

static int degree(Term t) {
  int d = 0;
  for (int y = 1; y < 64; y++) d += t.e[y];
  return d;
}

static int same_mono(Term a, Term b) { return !memcmp(a.e, b.e, sizeof a.e); }

// a >= b at every size (symbols are at least 1).
static int dominates(Term a, Term b) {
  for (int y = 1; y < 64; y++) if (a.e[y] < b.e[y]) return 0;
  return a.k >= b.k;
}

static void term_str(const IrCtx *c, char *buf, size_t len, Term t) {
  size_t m = snprintf(buf, len, "%" PRId64, t.k);
  if (degree(t) && t.k == 1) m = 0, buf[0] = 0;
  for (int y = 1; y < 64; y++)
    for (int i = 0; i < t.e[y] && m < len - 20; i++)
      m += snprintf(buf + m, len - m, "%s%s", m ? "*" : "", c->symnames[y - 1]);
}

static void poly_add(Poly *p, Term t) {
  if (!t.k) return;
  for (int i = 0; i < p->n; i++)
    if (same_mono(p->t[i], t)) { p->t[i].k += t.k; return; }
  if (p->n < (int)(sizeof p->t / sizeof *p->t)) p->t[p->n++] = t;
}

// Highest degree first, the constant last.
static void poly_print(FILE *f, const IrCtx *c, const Poly *p) {
  char b[96];
  int first = 1, top = 0;
  for (int i = 0; i < p->n; i++) if (degree(p->t[i]) > top) top = degree(p->t[i]);
  for (int deg = top; deg >= 0; deg--)
    for (int i = 0; i < p->n; i++) {
      if (degree(p->t[i]) != deg) continue;
      term_str(c, b, sizeof b, p->t[i]);
      fprintf(f, "%s%s", first ? "" : " + ", b);
      first = 0;
    }
  if (p->other[0]) fprintf(f, "%s%s", first ? "" : " + ", p->other);
  else if (first) fputc('0', f);
}

static void print_stats(FILE *f, const Schedule *s) {
  static const char *kinds[] = {"elementwise", "reduce", "matmul", "row", "scatter"};
  int nk[5] = {0};
  for (int k = 0; k < s->nk; k++) nk[s->ks[k].kind]++;
  fprintf(f, "kernels: %d (", s->nk);
  for (int i = 0, first = 1; i < 5; i++)
    if (nk[i]) { fprintf(f, "%s%s %d", first ? "" : ", ", kinds[i], nk[i]); first = 0; }
  fputs(")\n", f);
  // The workspace as layout() in the emitted C sizes it: each slot its largest
  // member (a constant slot rounded up to 64 bytes, as there).
  Poly peak = {0}, temps = {0}, args[3];
  memset(args, 0, sizeof args);
  size_t no = 0;
  for (int sl = 0; sl < s->nslots; sl++) {
    Poly m = {0};   // the slot's members, less any that another is at least as large as at every size
    for (int b = 0; b < s->nbufs; b++) {
      const Buffer *B = &s->bufs[b];
      if (B->kind != BUF_TEMP || B->slot != sl) continue;
      Term t = buf_term(B->node);
      int i = 0;
      while (i < m.n && !dominates(m.t[i], t)) i++;
      if (i < m.n || !t.k) continue;
      int keep = 0;
      for (i = 0; i < m.n; i++) if (!dominates(t, m.t[i])) m.t[keep++] = m.t[i];
      m.n = keep;
      if (m.n < (int)(sizeof m.t / sizeof *m.t)) m.t[m.n++] = t;
    }
    if (m.n == 1 && !degree(m.t[0])) m.t[0].k = (m.t[0].k + 63) & ~(int64_t)63;
    if (m.n == 1) { poly_add(&peak, m.t[0]); continue; }
    for (int i = 0; i < m.n && no < sizeof peak.other - 100; i++) {
      char ts[96];
      term_str(s->ctx, ts, sizeof ts, m.t[i]);
      no += snprintf(peak.other + no, sizeof peak.other - no, "%s%s", i ? ", " : no ? " + max(" : "max(", ts);
    }
    if (m.n > 1 && no < sizeof peak.other - 2) no += snprintf(peak.other + no, sizeof peak.other - no, ")");
  }
  for (int b = 0; b < s->nbufs; b++) {
    const Buffer *B = &s->bufs[b];
    if (B->kind == BUF_TEMP) poly_add(&temps, buf_term(B->node));
    else poly_add(&args[B->kind], buf_term(B->node));
  }
  fputs("workspace peak: ", f);
  poly_print(f, s->ctx, &peak);
  fprintf(f, " bytes in %d slot%s (without reuse: ", s->nslots, s->nslots == 1 ? "" : "s");
  poly_print(f, s->ctx, &temps);
  fputs(" bytes)\n", f);
  static const char *argnames[] = {"inputs", "constants", "outputs"};
  for (int i = 0; i < 3; i++) {
    int count = 0;
    for (int b = 0; b < s->nbufs; b++) count += (int)s->bufs[b].kind == i;
    if (i == BUF_CONST && !count) continue;
    fprintf(f, "%s: ", argnames[i]);
    poly_print(f, s->ctx, &args[i]);
    fprintf(f, " bytes in %d buffer%s\n", count, count == 1 ? "" : "s");
  }
  for (int k = 0; k < s->nk; k++) {
    const Kernel *K = &s->ks[k];
    if (K->kind != KS_MATMUL) continue;
    fprintf(f, "matmul k%d ", k);
    ir_print_shape(f, s->ctx, K->node);
    fprintf(f, ": %s", K->why[0] ? K->why : "loops");
    if (K->nepi == 1) fprintf(f, "; epilogue k%d", k + 1);
    if (K->nepi > 1) fprintf(f, "; epilogue k%d-k%d", k + 1, k + K->nepi);
    fputc('\n', f);
  }
}

static int stop_at(Pipe *p, const char *stage, IrGraph *g, Schedule *s) {
  if (!p->dump_after || strcmp(p->dump_after, stage)) return 0;
  if (s) sched_print(p->dump, s);
  else ir_print_graph(p->dump, p->c, g);
  return 1;
}

typedef IrGraph *(*GraphPass)(IrCtx *, IrGraph *);
static const struct { const char *name; GraphPass run; } graph_passes[] = {
  {"fold", pass_fold}, {"convgrad", pass_convgrad}, {"simplify", pass_simplify}, {"stability", pass_stability}, {"dce", pass_dce},
};

static JitSymbol runtime_symbols[] = {
  {"rt_parallel_for", (void *)rt_parallel_for},
  {"rt_workspace", (void *)rt_workspace},
  {"rt_rand_normal_f32", (void *)rt_rand_normal_f32},   // under gcc only (codegen/cgen.c); uniforms are inline
  {"rt_rand_normal_f64", (void *)rt_rand_normal_f64},
  {"rt_gemm_f32", (void *)rt_gemm_f32},
  {"rt_gemm_f64", (void *)rt_gemm_f64},
  {"rt_gemm_f32_epi", (void *)rt_gemm_f32_epi},
  {"rt_gemm_f64_epi", (void *)rt_gemm_f64_epi},
  {"rt_gemm_f32_win", (void *)rt_gemm_f32_win},
  {"rt_gemm_f64_win", (void *)rt_gemm_f64_win},
  {"rt_gemm_f32_wino", (void *)rt_gemm_f32_wino},
  {"rt_profile", (void *)rt_profile},
  {"rt_cuda_launch", (void *)rt_cuda_launch},
  {"rt_cuda_workspace", (void *)rt_cuda_workspace},
  {"rt_cuda_copy", (void *)rt_cuda_copy},
  {"rt_cuda_gemm", (void *)rt_cuda_gemm},
  {"rt_cuda_gemm_epi", (void *)rt_cuda_gemm_epi},
  {"rt_cuda_mark", (void *)rt_cuda_mark},
  {"rt_clock_ns", (void *)rt_clock_ns},
};

Jit *pipe_jit_new(char *err, size_t errlen) {
  return jit_new(NULL, runtime_symbols, sizeof runtime_symbols / sizeof *runtime_symbols, err, errlen);
}

Program *pipe_compile(Pipe *p, IrGraph *g, char *err, size_t errlen) {
  err[0] = 0;
  if ((p->dump_after || p->emit_c) && p->label) fprintf(p->dump, "%s %s\n", p->emit_c ? "//" : "#", p->label);
  if (stop_at(p, "ir", g, NULL)) return NULL;
  for (size_t i = 0; i < sizeof graph_passes / sizeof *graph_passes; i++) {
    g = graph_passes[i].run(p->c, g);
    if (!g) { snprintf(err, errlen, "internal error in pass %s: %s", graph_passes[i].name, p->c->err); return NULL; }
    if (stop_at(p, graph_passes[i].name, g, NULL)) return NULL;
  }
  if (p->lower.gemm && !(g = pass_biasgrad(p->c, g))) {
    snprintf(err, errlen, "internal error in pass biasgrad: %s", p->c->err);
    return NULL;
  }
  if (stop_at(p, "biasgrad", g, NULL)) return NULL;
  Schedule *s = pass_fuse(p->c, g, &p->lower);
  if (stop_at(p, "fuse", g, s)) { sched_free(s); return NULL; }
  pass_lower(s, &p->lower);
  if (stop_at(p, "lower", g, s)) { sched_free(s); return NULL; }
  if (p->lower.epilogue) pass_epilogue(s);
  if (stop_at(p, "epilogue", g, s)) { sched_free(s); return NULL; }
  pass_plan(s);
  if (stop_at(p, "plan", g, s)) { sched_free(s); return NULL; }
  if (p->dump_after && !strcmp(p->dump_after, PIPE_STATS)) { print_stats(p->dump, s); sched_free(s); return NULL; }
  if (p->emit_c && p->emit_cuda) {
    pipe_emit_cuda(p, s, err, errlen);
    sched_free(s);
    return NULL;
  }
  Program *pr = calloc(1, sizeof *pr);
  if (!pr) abort();
  pr->g = g; pr->s = s;
  snprintf(pr->label, sizeof pr->label, "%s", p->label ? p->label : "graph");
  pr->device = p->device;
  if (p->profile && !(pr->prof_ns = calloc(s->nk + 1, sizeof(uint64_t)))) abort();
  if (p->device >= 0 && !p->emit_c) {
    if (pipe_compile_cuda(p, pr, err, errlen)) { prog_free(pr); return NULL; }
    return pr;
  }
  CgOpts co = {.profile = p->profile};
  if (cg_emit_c_opts(s, &co, &pr->cs, err, errlen)) { prog_free(pr); return NULL; }
  if (p->emit_c) {
    fputs(pr->cs.src, p->dump);
    if (p->vector_report) pipe_vector_report(p->dump, pr->cs.src);
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

// ---- kiln run --profile -------------------------------------------------------------
// Kernels by their share of the program's time, down to 0.5% (the rest summed),
// for a program that spent a millisecond or more in all its calls. A GEMM's
// time includes its epilogue's kernels.
void prog_profile_print(FILE *f, const Program *pr) {
  const Schedule *s = pr->s;
  if (!pr->prof_ns || !pr->prof_ns[s->nk]) return;
  uint64_t total = 0;
  int *order = malloc(sizeof(int) * (s->nk + 1));
  if (!order) abort();
  for (int k = 0; k < s->nk; k++) total += pr->prof_ns[k], order[k] = k;
  if (total < 1000000) { free(order); return; }   // under a millisecond in all: not worth a table
  for (int i = 1; i < s->nk; i++)   // insertion sort, largest first: a few hundred kernels at most
    for (int j = i; j > 0 && pr->prof_ns[order[j]] > pr->prof_ns[order[j - 1]]; j--) {
      int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
    }
  double calls = (double)pr->prof_ns[s->nk], ms = 1e-6 / calls;
  fprintf(f, "profile: %s: %.0f call%s, %.3f ms per call in %d kernels\n", pr->label, calls, calls == 1 ? "" : "s",
          total * ms, s->nk);
  fprintf(f, "  ms/call   share  kernel\n");
  double rest = 0;
  int nrest = 0;
  for (int i = 0; i < s->nk; i++) {
    const Kernel *K = &s->ks[order[i]];
    double share = total ? 100.0 * pr->prof_ns[order[i]] / total : 0;
    if (K->epi_of) continue;   // counted in its GEMM
    if (share < 0.5) { rest += share, nrest++; continue; }
    fprintf(f, "%9.3f %6.1f%%  k%d %s%s ", pr->prof_ns[order[i]] * ms, share, order[i], ir_ops[K->node->op].name,
            K->kind == KS_MATMUL && K->strategy != MM_LOOPS ? " (gemm)" : "");
    ir_print_shape(f, s->ctx, K->node);
    if (K->nepi) fprintf(f, " + epilogue k%d-k%d", order[i] + 1, order[i] + K->nepi);
    fputc('\n', f);
  }
  if (nrest) fprintf(f, "%9.3f %6.1f%%  %d more kernels under 0.5%% each\n", rest * total * ms / 100, rest, nrest);
  free(order);
}

void prog_free(Program *pr) {
  if (!pr) return;
  free(pr->prof_ns);
  if (pr->cuda) prog_cuda_free(pr->cuda);
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

int prog_out_shares(const Program *pr, int o) {
  for (int b = 0; b < pr->s->nbufs; b++)
    if (pr->s->bufs[b].kind == BUF_OUTPUT && pr->s->bufs[b].arg == o) return pr->s->bufs[b].shares;
  return -1;
}

void prog_out_shape(const Program *pr, int i, const int64_t *D, int *ndim, int64_t *shape) {
  Node *o = pr->g->outs[i];
  *ndim = o->ndim;
  for (int d = 0; d < o->ndim; d++) shape[d] = dim_val(o->shape[d], D);
}

int prog_run(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs, int via_ffi) {
  if (pr->cuda) return prog_run_cuda(p, pr, D, ins, outs);
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
  rt_set_profile(p->rt, pr->prof_ns);
  if (via_ffi) rc = rt_ffi_call_ptrs(pr->call, n, args);
  else pr->entry(args);
  rt_set_profile(p->rt, NULL);
  if (pr->prof_ns) pr->prof_ns[s->nk]++;   // the calls, after the kernels' times
  if (args != stackargs) free(args);
  return rc;
}
