// The C API (include/kiln.h) over the evaluator and the pipeline.
#include "kiln.h"
#include "eval.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_ctx {
  Ev *ev;
  Diag diag;
  char *err;
};

struct kiln_graph {
  kiln_ctx *k;
  Program *prog;
  IrGraph *g;
  Node **params; int nparams;   // trailing graph inputs bound to parameter values
  int nuser;                    // inputs the caller passes
};

static int fail(kiln_ctx *k, const char *fmt, const char *arg) {
  free(k->err);
  size_t n = strlen(fmt) + (arg ? strlen(arg) : 0) + 1;
  k->err = malloc(n);
  if (k->err) snprintf(k->err, n, fmt, arg ? arg : "");
  return -1;
}

static int take_diag(kiln_ctx *k) {
  fail(k, "%s", k->diag.msg ? k->diag.msg : "error");
  diag_clear(&k->diag);
  return -1;
}

const char *kiln_version(void) { return KILN_VERSION; }

kiln_ctx *kiln_new(const kiln_options *opt) {
  kiln_ctx *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  diag_init(&k->diag);
  k->ev = ev_new(opt && opt->out ? opt->out : stdout, &k->diag);
  k->ev->seed = opt ? opt->seed : 0;
  char err[4096];
  if (ev_start(k->ev, opt ? opt->threads : 0, err, sizeof err)) {
    fprintf(stderr, "kiln: %s\n", err);
    kiln_free(k);
    return NULL;
  }
  return k;
}

void kiln_free(kiln_ctx *k) {
  if (!k) return;
  ev_free(k->ev);
  diag_free(&k->diag);
  free(k->err);
  free(k);
}

const char *kiln_error(kiln_ctx *k) { return k->err ? k->err : ""; }

int kiln_exec(kiln_ctx *k, const char *name, const char *text) {
  return ev_run(k->ev, name, text) ? take_diag(k) : 0;
}

int kiln_exec_file(kiln_ctx *k, const char *path) {
  size_t len;
  char *text = ev_read_file(path, &len);
  if (!text) {
    char why[4096 + 128];
    snprintf(why, sizeof why, "cannot read %s: %s", path, strerror(errno));
    return fail(k, "%s", why);
  }
  int rc = kiln_exec(k, path, text);
  free(text);
  return rc;
}

int kiln_eval(kiln_ctx *k, const char *expr, kiln_tensor *out) {
  RtTensor t;
  if (ev_eval_tensor(k->ev, "<eval>", expr, &t, NULL)) return take_diag(k);
  out->dtype = (kiln_dtype)t.dtype;
  out->ndim = t.ndim;
  memcpy(out->shape, t.shape, sizeof out->shape);
  out->data = t.data;   // rt memory: freed by kiln_tensor_free
  return 0;
}

void kiln_tensor_free(kiln_tensor *t) {
  rt_free(t->data);
  t->data = NULL;
}

static RtTensor to_rt(const kiln_tensor *t) {
  RtTensor r = {0};
  r.dtype = (RtDType)t->dtype;
  r.ndim = t->ndim;
  memcpy(r.shape, t->shape, sizeof r.shape);
  r.data = t->data;
  return r;
}

void kiln_tensor_print(FILE *f, const kiln_tensor *t) {
  RtTensor r = to_rt(t);
  rt_tensor_print(f, &r);
}

static Node *named_tensor(kiln_ctx *k, const char *name) {
  Value *v = ev_lookup(k->ev, name);
  if (!v) { fail(k, "no value named '%s'", name); return NULL; }
  if (v->kind != V_TENSOR) { fail(k, "'%s' is not a tensor", name); return NULL; }
  return v->t;
}

kiln_graph *kiln_compile(kiln_ctx *k, const char *const *outputs, int nout, const char *const *inputs, int nin) {
  Ev *ev = k->ev;
  Node **outs = calloc(nout + 1, sizeof(Node *)), **ins = calloc(nin + ev->nparams + 1, sizeof(Node *));
  kiln_graph *g = calloc(1, sizeof *g);
  if (!outs || !ins || !g) abort();
  for (int i = 0; i < nout; i++) if (!(outs[i] = named_tensor(k, outputs[i]))) goto fail;
  for (int i = 0; i < nin; i++) {
    if (!(ins[i] = named_tensor(k, inputs[i]))) goto fail;
    if (ins[i]->op != OP_INPUT || ins[i]->a.i[0] != ROLE_INPUT) { fail(k, "'%s' is not an input", inputs[i]); goto fail; }
  }
  // Every input the outputs reach must be given; parameters are appended.
  int count, n = nin;
  Node **order = ir_topo(ev->c, outs, nout, &count);
  for (int i = 0; i < count; i++) {
    Node *x = order[i];
    if (x->op != OP_INPUT) continue;
    int listed = 0;
    for (int j = 0; j < n; j++) listed |= ins[j] == x;
    if (listed) continue;
    if (x->a.i[0] != ROLE_PARAM) { free(order); fail(k, "the outputs depend on the input '%s', which is not listed", x->a.name); goto fail; }
    ins[n++] = x;
  }
  free(order);
  g->k = k; g->nuser = nin;
  g->params = ins + nin; g->nparams = n - nin;
  g->g = ir_graph_new(ev->c, outs, nout, ins, n);
  char err[8192];
  g->prog = pipe_compile(&ev->pipe, g->g, err, sizeof err);
  if (!g->prog) { fail(k, "compile failed: %s", err); goto fail; }
  free(outs);
  g->params = malloc(sizeof(Node *) * (g->nparams + 1));
  memcpy(g->params, ins + nin, sizeof(Node *) * g->nparams);
  free(ins);
  return g;
fail:
  free(outs); free(ins); free(g);
  return NULL;
}

void kiln_graph_free(kiln_graph *g) {
  if (!g) return;
  prog_free(g->prog);
  free(g->params);
  free(g);
}

int kiln_graph_nout(const kiln_graph *g) { return g->g->nout; }

// All graph inputs: the caller's, then the parameters' current values.
static RtTensor *all_inputs(kiln_graph *g, const kiln_tensor *inputs) {
  RtTensor *in = calloc(g->nuser + g->nparams + 1, sizeof *in);
  if (!in) abort();
  for (int i = 0; i < g->nuser; i++) in[i] = to_rt(&inputs[i]);
  for (int i = 0; i < g->nparams; i++) in[g->nuser + i] = *ev_param_value(g->k->ev, g->params[i]);
  return in;
}

int kiln_output_shape(kiln_graph *g, const kiln_tensor *inputs, int i, kiln_tensor *shape_out) {
  int64_t D[65] = {0};
  char err[512];
  RtTensor *in = all_inputs(g, inputs);
  int rc = prog_bind(g->prog, in, D, err, sizeof err);
  free(in);
  if (rc) return fail(g->k, "%s", err);
  if (i < 0 || i >= g->g->nout) return fail(g->k, "no output %s", "of that number");
  shape_out->dtype = (kiln_dtype)g->g->outs[i]->dtype;
  prog_out_shape(g->prog, i, D, &shape_out->ndim, shape_out->shape);
  return 0;
}

int kiln_run(kiln_graph *g, const kiln_tensor *inputs, kiln_tensor *outputs) {
  int64_t D[65] = {0};
  char err[512];
  RtTensor *in = all_inputs(g, inputs);
  if (prog_bind(g->prog, in, D, err, sizeof err)) { free(in); return fail(g->k, "%s", err); }
  RtTensor out[64];
  if (g->g->nout > 64) { free(in); return fail(g->k, "at most 64 outputs%s", ""); }
  for (int i = 0; i < g->g->nout; i++) {
    int nd;
    int64_t shape[IR_MAXDIM];
    prog_out_shape(g->prog, i, D, &nd, shape);
    int ok = outputs[i].ndim == nd && (int)outputs[i].dtype == (int)g->g->outs[i]->dtype;
    for (int d = 0; ok && d < nd; d++) ok = outputs[i].shape[d] == shape[d];
    if (!ok) {
      free(in);
      char b[256];
      snprintf(b, sizeof b, "output %d must be %s with shape [", i, ir_dtype_name(g->g->outs[i]->dtype));
      for (int d = 0; d < nd; d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? ", " : "", (long long)shape[d]);
      strncat(b, "]", sizeof b - strlen(b) - 1);
      return fail(g->k, "%s", b);
    }
    out[i] = to_rt(&outputs[i]);
  }
  int rc = prog_run(&g->k->ev->pipe, g->prog, D, in, out, 0);
  free(in);
  if (rc == PROG_NO_MEMORY) return fail(g->k, "out of memory for the graph's scratch memory%s", "");
  if (rc == PROG_DEVICE_ERROR) return fail(g->k, "%s", g->k->ev->pipe.cx->err);
  return rc ? fail(g->k, "the compiled graph could not be called%s", "") : 0;
}

char *kiln_graph_dump(kiln_graph *g, const char *stage) {
  Pipe p = g->k->ev->pipe;
  char *buf = NULL;
  size_t len = 0;
  p.dump = open_memstream(&buf, &len);
  if (!p.dump) return NULL;
  if (!strcmp(stage, "c")) p.emit_c = 1;
  else if (pipe_stage_ok(stage)) p.dump_after = stage;
  else { fclose(p.dump); free(buf); fail(g->k, "unknown stage '%s'", stage); return NULL; }
  char err[4096];
  Program *pr = pipe_compile(&p, g->g, err, sizeof err);
  prog_free(pr);
  fclose(p.dump);
  return buf;
}
