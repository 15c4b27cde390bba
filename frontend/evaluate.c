// The evaluate statement: metrics (batch means or per-example values)
// averaged over a data split; with save="FILE.npy", one value's rows for every
// example of the split, written in the split's order.
#include "build.h"
#include "train_int.h"
#include "runtime/model.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

double scalar_value(const RtTensor *t) {
  switch (t->dtype) {
  case RT_F32: return *(float *)t->data;
  case RT_F64: return *(double *)t->data;
  case RT_I32: return *(int32_t *)t->data;
  case RT_I64: return (double)*(int64_t *)t->data;
  default: return *(uint8_t *)t->data;
  }
}

static int64_t eval_batch(Ev *ev, AstNode *s);

// ---- metrics (evaluate statements) -------------------------------------------------------

static const char *metric_name(Ev *ev, AstNode *e, int i) {
  if (e->kind == AST_NAME) return e->str;
  if (e->kind == AST_CALL && e->lhs->kind == AST_NAME) return e->lhs->str;
  char b[32];
  snprintf(b, sizeof b, "metric%d", i + 1);
  return arena_strdup(ev->arena, b);
}

// The save= option's node, or NULL.
static AstNode *save_opt(AstNode *s) {
  for (int i = 0; i < s->nopts; i++)
    if (!strcmp(s->opts[i]->str, "save")) return s->opts[i];
  return NULL;
}

int ev_eval_saves(AstNode *s) { return s->kind == AST_EVALUATE && save_opt(s); }

void metrics_compile(Ev *ev, AstNode *s, Metrics *m) {
  int saving = save_opt(s) != NULL;
  if (saving && s->nitems != 1)
    ev_fail(ev, s->items[1]->span, "evaluate with save= writes one value: give one expression");
  m->n = s->nitems;
  m->names = arena_alloc(ev->arena, sizeof(char *) * (m->n + 1));
  m->log_names = arena_alloc(ev->arena, sizeof(char *) * (m->n + 1));
  m->nodes = arena_alloc(ev->arena, sizeof(Node *) * (m->n + 1));
  m->per_example = arena_alloc(ev->arena, sizeof(int) * (m->n + 1));
  for (int i = 0; i < m->n; i++) {
    AstNode *e = s->items[i];
    Node *t = ev_tensor(ev, ev_eval_expr(ev, ev->globals, e), e->span, "a metric");
    int rows = t->ndim >= 1 && t->shape[0].sym && t->shape[0].k == 1;   // [B, ...]: a row per example
    if (saving && !rows) {
      char b[128];
      ev_fail(ev, e->span, "evaluate with save= writes a row per example: the value needs the batch as its first axis, "
              "not shape %s", ir_shape_str(ev->c, t->ndim, t->shape, b, sizeof b));
    }
    if (!ir_is_float(t->dtype) && !saving) t = ir_cast(ev->c, t, DT_F64);
    m->per_example[i] = rows && t->ndim == 1;
    if (t->ndim && !m->per_example[i] && !saving) {
      char b[128];
      ev_fail(ev, e->span, "a metric must be a scalar (a mean over the batch) or one value per example; this has shape %s",
              ir_shape_str(ev->c, t->ndim, t->shape, b, sizeof b));
    }
    m->names[i] = metric_name(ev, e, i);
    int same = 1;   // evaluate mean(a), mean(b): mean, mean.2 (one name per line, log row and plot series)
    for (int j = 0; j < i; j++) same += !strncmp(m->names[j], m->names[i], strlen(m->names[i])) &&
                                        (!m->names[j][strlen(m->names[i])] || m->names[j][strlen(m->names[i])] == '.');
    if (same > 1) {
      char b[300];
      snprintf(b, sizeof b, "%s.%d", m->names[i], same);
      m->names[i] = arena_strdup(ev->arena, b);
    }
    char ln[300];
    snprintf(ln, sizeof ln, "eval_%s", m->names[i]);
    m->log_names[i] = arena_strdup(ev->arena, ln);
    m->nodes[i] = t;
  }
  ev->binding_data = 1;
  m->pr = ev_program(ev, m->nodes, m->n, &m->ins, &m->nin, s->span);
  ev->binding_data = 0;
}

typedef struct { Ev *ev; AstNode *s; Metrics *m; int *col; RtTensor *in; } MetricsRun;

// One batch of an evaluate statement's graph, for the runtime's rt_eval_loop.
static int metrics_batch(void *ctx, const RtTensor *cols, RtTensor *out) {
  MetricsRun *r = ctx;
  for (int i = 0; i < r->m->nin; i++) {
    Node *x = r->m->ins[i];
    r->in[i] = x->a.i[0] == ROLE_PARAM ? *ev_param_value(r->ev, x) : as_input(&cols[r->col[i]], x);
  }
  ev_run_program(r->ev, r->m->pr, r->in, out, 1, r->s->span);
  return 0;
}

// The batcher over an evaluate statement's split, each graph input bound to its
// column (converted to the input's dtype); the run's, so an error frees it.
static RtBatcher *metrics_batcher(Ev *ev, AstNode *s, Metrics *m, MetricsRun *mr, RtDataset **ds, const char **dname) {
  *ds = split_data(ev, s->rhs, SPLIT_TEST, dname);
  RtDType want[RT_DATA_MAXCOL];
  int *col = arena_alloc(ev->arena, sizeof(int) * (m->nin + 1));
  for (int j = 0; j < (*ds)->ncol; j++) want[j] = (*ds)->col[j].t.dtype;
  for (int i = 0; i < m->nin; i++)
    if (m->ins[i]->a.i[0] == ROLE_INPUT) {
      col[i] = column_of(ev, *ds, m->ins[i], *dname, s->rhs->span);
      want[col[i]] = (RtDType)m->ins[i]->dtype;
    }
  *mr = (MetricsRun){ev, s, m, col, arena_alloc(ev->arena, sizeof(RtTensor) * (m->nin + 1))};
  char err[512];
  Run *run = &trainer(ev)->run;
  rt_batcher_free(run->eval_batches);
  run->eval_batches = rt_batcher_new(*ds, eval_batch(ev, s), 0, 0, want, rt_spare_cpu(rt_threads(ev->pipe.rt)), err, sizeof err);
  if (!run->eval_batches) ev_fail(ev, s->span, "%s", err);
  return run->eval_batches;
}

static void metrics_batcher_done(Ev *ev) {
  Run *run = &trainer(ev)->run;
  rt_batcher_free(run->eval_batches);
  run->eval_batches = NULL;
}

// Each metric averaged over the split's examples (batch means weighted by batch size).
void metrics_run(Ev *ev, AstNode *s, Metrics *m, double *vals) {
  const char *dname;
  RtDataset *ds;
  MetricsRun mr;
  RtBatcher *b = metrics_batcher(ev, s, m, &mr, &ds, &dname);
  RtTensor *out = arena_alloc(ev->arena, sizeof *out * (m->n + 1));
  rt_eval_loop(b, m->n, m->per_example, ev->topts.eval_examples, metrics_batch, &mr, out, vals);   // errors unwind with longjmp
  metrics_batcher_done(ev);
}

// An evaluate statement's batch= option (1000 when not given).
static int64_t eval_batch(Ev *ev, AstNode *s) {
  int64_t batch = 1000;
  for (int i = 0; i < s->nopts; i++) {
    if (!strcmp(s->opts[i]->str, "save")) continue;
    if (strcmp(s->opts[i]->str, "batch"))
      ev_fail(ev, s->opts[i]->span, "evaluate's options are batch=N and save=\"FILE.npy\", not '%s'", s->opts[i]->str);
    batch = ev_const_int(ev, ev_eval_expr(ev, ev->globals, s->opts[i]->lhs), s->opts[i]->span, "batch");
    if (batch < 1) ev_fail(ev, s->opts[i]->span, "batch must be at least 1");
  }
  return batch;
}

// kiln build: the first evaluate statement's graph, data and batch size.
void build_record_metrics(Ev *ev, AstNode *s, Metrics *m) {
  Build *b = ev->build;
  if (b->eval.pr) return;
  BuildGraph *g = &b->eval;
  g->pr = m->pr;
  g->role = arena_alloc(ev->arena, sizeof(int) * (m->nin + 1));
  g->col = arena_alloc(ev->arena, sizeof(int) * (m->nin + 1));
  for (int i = 0; i < m->nin; i++) {
    int data = m->ins[i]->a.i[0] == ROLE_INPUT;
    g->role[i] = data ? RT_ARG_DATA : RT_ARG_TENSOR;
    g->col[i] = data ? build_input_column(ev, m->ins[i]) : -1;
  }
  g->out_names = m->names;
  g->per_example = m->per_example;
  b->eval_batch = eval_batch(ev, s);
  build_data_spec(ev, s->rhs, SPLIT_TEST, &b->eval_data);
}

// evaluate X on DATA, save="FILE.npy": X's rows for the split's examples, in order.
static void metrics_save(Ev *ev, AstNode *s, Metrics *m, const char *path) {
  char err[1024];
  if (rt_check_writable(path, err, sizeof err)) ev_fail(ev, save_opt(s)->span, "%s", err);
  const char *dname;
  RtDataset *ds;
  MetricsRun mr;
  RtBatcher *b = metrics_batcher(ev, s, m, &mr, &ds, &dname);
  int64_t limit = ev->topts.eval_examples, n = limit && limit < ds->n ? limit : ds->n, total = 0, got;
  RtTensor cols[RT_DATA_MAXCOL], out, all = {0};
  rt_batcher_start(b, 0);
  while (total < n && (got = rt_batcher_next(b, cols)) > 0) {
    metrics_batch(&mr, cols, &out);   // errors unwind with longjmp
    if (!all.data) {
      int64_t shape[RT_MAXDIM];
      memcpy(shape, out.shape, sizeof shape);
      shape[0] = n;
      all = rt_tensor_new(out.dtype, out.ndim, shape);
      if (!all.data) { rt_tensor_free(&out); ev_fail(ev, s->span, "out of memory for %lld rows", (long long)n); }
    }
    size_t row = rt_tensor_nbytes(&out) / (size_t)(got ? got : 1);
    int64_t take = got < n - total ? got : n - total;
    memcpy((char *)all.data + (size_t)total * row, out.data, (size_t)take * row);
    rt_tensor_free(&out);
    total += take;
  }
  metrics_batcher_done(ev);
  if (!all.data) ev_fail(ev, s->span, "%s has no examples to save", dname);
  int rc = rt_npy_save(path, &all, err, sizeof err);
  char shape[128];
  int nd = all.ndim;
  int64_t *sh = all.shape;
  size_t k = (size_t)snprintf(shape, sizeof shape, "[");
  for (int d = 0; d < nd && k < sizeof shape; d++) k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "", (long long)sh[d]);
  rt_tensor_free(&all);
  if (rc) ev_fail(ev, save_opt(s)->span, "%s", err);
  fprintf(ev->out, "%s: %s%s] saved to %s\n", m->names[0], rt_dtype_name((RtDType)m->nodes[0]->dtype), shape, path);
  fflush(ev->out);
}

void ev_exec_evaluate(Ev *ev, AstNode *s) {
  Metrics m;
  metrics_compile(ev, s, &m);
  if (!m.pr) return;   // kiln ir / emit-c: shown, not run
  AstNode *save = save_opt(s);
  if (save && ev->build) return;   // a built binary's predict command writes such rows
  if (save) {
    Value p = ev_eval_expr(ev, ev->globals, save->lhs);
    if (p.kind != V_STR) ev_fail(ev, save->lhs->span, "save= needs a file name in quotes");
    metrics_save(ev, s, &m, p.s);
    return;
  }
  if (ev->build) { build_record_metrics(ev, s, &m); return; }
  double *v = arena_alloc(ev->arena, sizeof(double) * (m.n + 1));
  metrics_run(ev, s, &m, v);
  for (int i = 0; i < m.n; i++) fprintf(ev->out, "%s: %.6g\n", m.names[i], v[i]);
  fflush(ev->out);
}
