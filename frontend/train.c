// The train statement: one graph for the whole step (forward, gradient,
// clipping, the optimizer's update, batch-norm statistics), compiled once and
// run over mini-batches from the runtime's batcher. Parameters and optimizer
// state are updated in place where the memory plan allows it (the step graph
// donates each current value to its next one, IrGraph.donate: an update such
// as Adam's reads the element it writes, as the last reader); any other is
// double-buffered: the step writes the next values while it reads the current
// ones, and the trainer swaps the pointers.
#include "build.h"
#include "optim.h"
#include "train_int.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- the train statement --------------------------------------------------------------------

// A setting's value: a constant number, finite and not negative.
static double opt_num(Ev *ev, AstNode *e, const char *name) {
  Node *t = ev_raw(ev, ev_eval_expr(ev, ev->globals, e), e->span, name);
  double x;
  if (!ev_scalar_const(ev, &t, &x)) ev_fail(ev, e->span, "%s must be a constant number", name);
  if (!isfinite(x) || x < 0) ev_fail(ev, e->span, "%s must be a finite number >= 0", name);
  return x;
}

static void optimizer_spec(Ev *ev, AstNode *e, OptSpec *o) {
  AstNode *callee = e->kind == AST_CALL ? e->lhs : e;
  const char *name = callee->kind == AST_NAME ? callee->str : "";
  memset(o, 0, sizeof *o);
  o->beta1 = 0.9; o->beta2 = 0.999; o->eps = 1e-8;
  if (!strcmp(name, "sgd")) { o->kind = OPT_SGD; o->lr = 0.01; }
  else if (!strcmp(name, "adam")) { o->kind = OPT_ADAM; o->lr = 1e-3; }
  else if (!strcmp(name, "adamw")) { o->kind = OPT_ADAMW; o->lr = 1e-3; o->weight_decay = 0.01; }
  else ev_fail(ev, callee->span, "unknown optimizer; use sgd(lr, momentum, nesterov, weight_decay), adam(lr, beta1, beta2, eps, weight_decay) or adamw(...)");
  for (int i = 0; e->kind == AST_CALL && i < e->nitems; i++) {
    AstNode *kw = e->items[i];
    if (kw->kind != AST_KWARG) {
      if (i == 0) { o->lr = opt_num(ev, kw, "lr"); continue; }
      ev_fail(ev, kw->span, "optimizer settings other than lr are given by name (momentum=0.9)");
    }
    const char *k = kw->str;
    double v = opt_num(ev, kw->lhs, k);
    if (!strcmp(k, "lr")) o->lr = v;
    else if (!strcmp(k, "weight_decay")) o->weight_decay = v;
    else if (o->kind == OPT_SGD && !strcmp(k, "momentum")) o->momentum = v;
    else if (o->kind == OPT_SGD && !strcmp(k, "nesterov")) o->nesterov = v != 0;
    else if (o->kind != OPT_SGD && !strcmp(k, "beta1")) o->beta1 = v;
    else if (o->kind != OPT_SGD && !strcmp(k, "beta2")) o->beta2 = v;
    else if (o->kind != OPT_SGD && !strcmp(k, "eps")) o->eps = v;
    else {
      static const char *const sgd[] = {"lr", "weight_decay", "momentum", "nesterov"};
      static const char *const adam[] = {"lr", "weight_decay", "beta1", "beta2", "eps"};
      char hint[300];
      ev_fail(ev, kw->span, "%s has no setting '%s'%s", name, k,
              ev_did_you_mean(hint, sizeof hint, o->kind == OPT_SGD ? ev_nearest(k, sgd, 4) : ev_nearest(k, adam, 5)));
    }
  }
  if (o->nesterov && o->momentum <= 0) ev_fail(ev, e->span, "nesterov needs momentum > 0");
  if (o->beta1 >= 1 || o->beta2 >= 1) ev_fail(ev, e->span, "beta1 and beta2 must be below 1");
}

// The settings that are whole numbers, and their ranges: they are cast below, so a
// fraction or a wrapped epochs count would train something else without a word.
static const struct { const char *name; double least, most; } whole_opts[] = {
  {"batch", 1, 2147483647.0}, {"epochs", 0, 2147483647.0}, {"seed", 0, 9007199254740992.0},
  {"step_size", 1, 1e15}, {"warmup", 0, 1e15},
};

static void train_spec(Ev *ev, AstNode *s, TrainSpec *ts) {
  memset(ts, 0, sizeof *ts);
  optimizer_spec(ev, s->start, &ts->opt);
  ts->batch = 32; ts->epochs = 1; ts->gamma = 0.1; ts->step_size = 1; ts->shuffle = 1;
  ts->seed = ev->seed;
  for (int i = 0; i < s->nopts; i++) {
    AstNode *kw = s->opts[i];
    const char *k = kw->str;
    if (!strcmp(k, "schedule") || !strcmp(k, "checkpoint")) {
      Value v = ev_eval_expr(ev, ev->globals, kw->lhs);
      if (v.kind != V_STR) ev_fail(ev, kw->lhs->span, "%s must be a string", k);
      if (!strcmp(k, "checkpoint")) { ts->checkpoint = v.s; continue; }
      if (!strcmp(v.s, "constant")) ts->schedule = RT_SCHED_CONSTANT;
      else if (!strcmp(v.s, "step")) ts->schedule = RT_SCHED_STEP;
      else if (!strcmp(v.s, "cosine")) ts->schedule = RT_SCHED_COSINE;
      else ev_fail(ev, kw->lhs->span, "schedule must be \"constant\", \"step\" or \"cosine\"");
      continue;
    }
    double v = opt_num(ev, kw->lhs, k);
    for (size_t w = 0; w < sizeof whole_opts / sizeof *whole_opts; w++)
      if (!strcmp(k, whole_opts[w].name) && (v != floor(v) || v < whole_opts[w].least || v > whole_opts[w].most))
        ev_fail(ev, kw->lhs->span, "%s must be a whole number from %.0f to %.0f", k, whole_opts[w].least,
                whole_opts[w].most);
    if (!strcmp(k, "batch")) ts->batch = (int64_t)v;
    else if (!strcmp(k, "epochs")) ts->epochs = (int)v;
    else if (!strcmp(k, "seed")) ts->seed = (uint64_t)v;
    else if (!strcmp(k, "clip")) ts->clip = v;
    else if (!strcmp(k, "gamma")) ts->gamma = v;
    else if (!strcmp(k, "step_size")) ts->step_size = (int64_t)v;
    else if (!strcmp(k, "warmup")) ts->warmup = (int64_t)v;
    else if (!strcmp(k, "min_lr")) ts->min_lr = v;
    else if (!strcmp(k, "shuffle")) ts->shuffle = v != 0;
    else {
      static const char *const names[] = {"batch", "epochs", "seed", "clip", "schedule", "step_size", "gamma",
                                          "warmup", "min_lr", "shuffle", "checkpoint"};
      char hint[300];
      ev_fail(ev, kw->span, "train has no option '%s'%s (options: batch, epochs, seed, clip, schedule, step_size, gamma, warmup, min_lr, shuffle, checkpoint)",
              k, ev_did_you_mean(hint, sizeof hint, ev_nearest(k, names, (int)(sizeof names / sizeof *names))));
    }
  }
  TrainOpts *o = &ev->topts;
  if (o->epochs > 0) ts->epochs = o->epochs;
  if (o->batch > 0) ts->batch = o->batch;
  if (o->lr > 0) ts->opt.lr = o->lr;
  if (o->seed_set) ts->seed = o->seed;
  if (o->checkpoint) ts->checkpoint = o->checkpoint;
  if (ts->batch < 1) ev_fail(ev, s->span, "batch must be at least 1");
  if (ts->step_size < 1) ev_fail(ev, s->span, "step_size must be at least 1");
}

// The learning rate at a step: the runtime's, which built binaries use too.
static double lr_at(const TrainSpec *ts, int64_t step, int64_t total, int epoch) {
  RtSchedule sc = {ts->opt.lr, ts->gamma, ts->min_lr, ts->warmup, ts->step_size, (int)ts->schedule};
  return rt_schedule_lr(&sc, step, total, epoch);
}


static int depends_only_on(Ev *ev, Node *n, Node **allowed, int nallowed) {
  int count, ok = 1;
  Node **order = ir_topo(ev->c, &n, 1, &count);
  for (int i = 0; i < count && ok; i++) {
    if (order[i]->op != OP_INPUT || order[i]->a.i[0] == ROLE_MODE) continue;
    int found = 0;
    for (int j = 0; j < nallowed && !found; j++) found = allowed[j] == order[i];
    ok = found;
  }
  free(order);
  return ok;
}

static RtTensor *slot_tensor(Ev *ev, const char *name, int k, const RtTensor *like) {
  OptSlots *os = slots_of(trainer(ev), name);
  RtTensor *t = &os->slot[k];
  int same = t->data && t->dtype == like->dtype && t->ndim == like->ndim;
  for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == like->shape[d];
  if (!same) {
    rt_tensor_free(t);
    *t = rt_tensor_new(like->dtype, like->ndim, like->shape);   // zeros: a fresh optimizer
    if (!t->data) abort();
  }
  if (k + 1 > os->n) os->n = k + 1;
  return t;
}

void step_inputs(Ev *ev, AstNode *s, Node *loss, Node ***data, int *nd, Node ***params, int *np, Node ***states, int *ns) {
  int count;
  Node **order = ir_topo(ev->c, &loss, 1, &count);
  *data = arena_alloc(ev->arena, sizeof(Node *) * (count + 1));
  *params = arena_alloc(ev->arena, sizeof(Node *) * (count + 1));
  *states = arena_alloc(ev->arena, sizeof(Node *) * (count + 1));
  *nd = *np = *ns = 0;
  for (int i = 0; i < count; i++) {
    Node *n = order[i];
    if (n->op != OP_INPUT) continue;
    if (n->a.i[0] == ROLE_INPUT) (*data)[(*nd)++] = n;
    else if (n->a.i[0] == ROLE_PARAM && ev_param(ev, n)->state) (*states)[(*ns)++] = n;
    else if (n->a.i[0] == ROLE_PARAM) (*params)[(*np)++] = n;
  }
  free(order);
  if (!*np) ev_fail(ev, s->lhs->span, "the loss depends on no trainable parameter, so there is nothing to train");
  for (int i = 0; i < *np; i++)
    if (!ir_is_float((*params)[i]->dtype)) ev_fail(ev, s->lhs->span, "parameter '%s' is an integer tensor; only float parameters train", (*params)[i]->a.name);
}

int step_stat_updates(Ev *ev, Node **states, int ns, Node **ins, int nin, RtTensor **dst, Node **outs) {
  int no = 0;
  for (int u = ev->nupdates - 1; u >= 0; u--) {
    Node *sn = ev->updates[u].state;
    int seen = 0;
    for (int j = u + 1; j < ev->nupdates && !seen; j++) seen = ev->updates[j].state == sn;
    int have = 0;
    for (int j = 0; j < ns && !have; j++) have = states[j] == sn;
    if (seen || !have || !depends_only_on(ev, ev->updates[u].value, ins, nin)) continue;
    dst[no] = ev_param_value(ev, sn);
    outs[no++] = ev->updates[u].value;
  }
  return no;
}

IrGraph *step_graph(Ev *ev, Span sp, Node **outs, int no, Node **ins, RtTensor **vals, int *cols, int *nin) {
  IrCtx *c = ev->c;
  if (ev->training) {   // the step runs in training mode
    Node *on = ir_scalar(c, DT_BOOL, 1);
    for (int i = 0; i < no; i++) outs[i] = ev_check(ev, ir_substitute(c, outs[i], &ev->training, &on, 1), sp);
  }
  int nused, keep = 0;
  Node **used = ir_topo(c, outs, no, &nused);
  for (int i = 0; i < *nin; i++) {   // only the inputs the graph reads
    int found = 0;
    for (int j = 0; j < nused && !found; j++) found = used[j] == ins[i];
    if (!found) continue;
    ins[keep] = ins[i]; vals[keep] = vals[i]; cols[keep++] = cols[i];
  }
  free(used);
  *nin = keep;
  return ir_graph_new(c, outs, no, ins, keep);
}

// The step's graph: with split (a step over several devices, parallel.c), the
// optimizer's update alone, whose gradients are inputs (st->grad_in) and whose
// loss output is 0; else the whole step, compiled on ev's pipe.
static void build_step(Ev *ev, AstNode *s, Node *loss, const TrainSpec *ts, RtDataset *ds, const char *dname, Step *st,
                       int split) {
  IrCtx *c = ev->c;
  Span sp = s->span;
  Node **params, **data, **states;
  int np, nd, ns;
  step_inputs(ev, s, loss, &data, &nd, &params, &np, &states, &ns);
  Node **grads = arena_alloc(ev->arena, sizeof(Node *) * (np + 1));
  Node *y = loss->dtype == DT_F32 || loss->dtype == DT_F64 ? loss : ir_cast(c, loss, DT_F32);
  if (split) {
    st->grad_in = arena_alloc(ev->arena, sizeof(Node *) * (np + 1));
    for (int i = 0; i < np; i++) {
      char nm[700];
      snprintf(nm, sizeof nm, "gradient.%s", params[i]->a.name);
      grads[i] = st->grad_in[i] = ir_input(c, arena_strdup(ev->arena, nm), ROLE_INPUT, params[i]->dtype, params[i]->ndim,
                                           params[i]->shape);
    }
    y = ir_scalar(c, DT_F32, 0);
    nd = ns = 0;
  } else if (pass_grad(c, y, NULL, params, np, grads)) {
    ev_fail(ev, s->lhs->span, "%s", c->err);
  }
  if (ts->clip > 0 && opt_clip(c, grads, np, ts->clip)) ev_fail(ev, sp, "%s", c->err);
  // Scalars the trainer sets each step.
  st->scalars = trainer(ev)->run.scalars;
  Node *scal[OPT_NSCALARS];
  static const char *sname[OPT_NSCALARS] = {"lr", "bias1", "bias2"};
  for (int i = 0; i < OPT_NSCALARS; i++) scal[i] = ir_input(c, sname[i], ROLE_INPUT, DT_F64, 0, NULL);
  int nslot = opt_nslots(&ts->opt);
  // Outputs: loss, new parameters, new optimizer state, new statistics.
  int maxout = 1 + np * (1 + nslot) + ev->nupdates;
  Node **outs = arena_alloc(ev->arena, sizeof(Node *) * (maxout + 1));
  st->out_dst = arena_alloc(ev->arena, sizeof(RtTensor *) * (maxout + 1));
  int maxin = nd + 2 * np + ns + np * nslot + OPT_NSCALARS + 2;
  Node **ins = arena_alloc(ev->arena, sizeof(Node *) * maxin);
  st->in_val = arena_alloc(ev->arena, sizeof(RtTensor *) * maxin);
  st->in_col = arena_alloc(ev->arena, sizeof(int) * maxin);
  int no = 0, ni = 0;
  outs[no++] = y;
  for (int i = 0; i < nd; i++) { ins[ni] = data[i]; st->in_col[ni++] = column_of(ev, ds, data[i], dname, s->rhs->span); }
  for (int i = 0; i < np; i++) {
    RtTensor *pv = ev_param_value(ev, params[i]);
    Node *slot[2] = {0}, *next[2] = {0};
    for (int k = 0; k < nslot; k++) {
      char nm[700];
      snprintf(nm, sizeof nm, "optimizer.%s.%s", opt_slot_name(ts->opt.kind, k), params[i]->a.name);
      slot[k] = ir_input(c, arena_strdup(ev->arena, nm), ROLE_INPUT, params[i]->dtype, params[i]->ndim, params[i]->shape);
      ins[ni] = slot[k]; st->in_col[ni] = -1; st->in_val[ni++] = slot_tensor(ev, params[i]->a.name, k, pv);
    }
    Node *np_ = opt_update(c, &ts->opt, params[i], grads[i], slot, next, scal);
    if (!np_) ev_fail(ev, sp, "%s", c->err);
    ins[ni] = params[i]; st->in_col[ni] = -1; st->in_val[ni++] = pv;
    st->out_dst[no] = pv; outs[no++] = np_;
    for (int k = 0; k < nslot; k++) { st->out_dst[no] = st->in_val[ni - 1 - nslot + k]; outs[no++] = next[k]; }
    if (split) { ins[ni] = grads[i]; st->in_col[ni] = -1; st->in_val[ni++] = NULL; }   // parallel.c gives them
  }
  for (int i = 0; i < ns; i++) { ins[ni] = states[i]; st->in_col[ni] = -1; st->in_val[ni++] = ev_param_value(ev, states[i]); }
  no += step_stat_updates(ev, states, ns, ins, ni, st->out_dst + no, outs + no);
  for (int i = 0; i < OPT_NSCALARS; i++) {
    ins[ni] = scal[i]; st->in_col[ni] = -1;
    st->scalars[i] = rt_tensor_new(RT_F64, 0, NULL);
    st->in_val[ni++] = &st->scalars[i];
  }
  if (ev->step) {
    ins[ni] = ev->step; st->in_col[ni] = -1;
    st->scalars[OPT_NSCALARS] = rt_tensor_new(RT_I64, 0, NULL);
    st->in_val[ni++] = &st->scalars[OPT_NSCALARS];
  }
  IrGraph *g = st->g = step_graph(ev, sp, outs, no, ins, st->in_val, st->in_col, &ni);
  st->ins = ins; st->nin = ni; st->nout = no;
  // Each next value may take its current value's storage.
  g->donate = arena_alloc(ev->arena, sizeof(int) * (no + 1));
  for (int o = 0; o < no; o++) {
    g->donate[o] = -1;
    for (int i = 0; o > 0 && i < ni; i++) if (st->in_val[i] == st->out_dst[o]) g->donate[o] = i;
  }
  st->in_place = arena_alloc(ev->arena, sizeof(int) * (no + 1));
  if (split) return;
  char err[8192], label[200];
  snprintf(label, sizeof label, "training step of %s:%d:%d", sp.src->name, sp.line, sp.col);
  ev->pipe.label = label;
  st->pr = trainer(ev)->run.step = pipe_compile(&ev->pipe, g, err, sizeof err);
  ev->pipe.label = NULL;
  if (!st->pr && err[0]) ev_fail(ev, sp, "could not compile the training step: %s", err);
  for (int o = 0; o < no; o++) st->in_place[o] = st->pr && prog_out_shares(st->pr, o) >= 0;
}

// kiln build: where each argument of a step's graph comes from (a data column, a
// session tensor, a scalar the host sets, a summed gradient: RtArg's roles), and
// the tensor each output after the loss replaces.
static void record_graph(Ev *ev, AstNode *s, const Step *st, BuildGraph *g, const char *what) {
  g->role = arena_alloc(ev->arena, sizeof(int) * (st->nin + 1));
  g->col = arena_alloc(ev->arena, sizeof(int) * (st->nin + 1));
  for (int i = 0; i < st->nin; i++) {
    g->col[i] = st->in_col[i];
    g->role[i] = st->in_col[i] >= 0 ? RT_ARG_DATA : RT_ARG_TENSOR;
    for (int k = 0; k <= OPT_NSCALARS; k++)
      if (st->in_val[i] == &st->scalars[k]) g->role[i] = RT_ARG_LR + k;
    for (int j = 0; st->grad_in && st->grad_in[j]; j++)
      if (st->ins[i] == st->grad_in[j]) g->role[i] = RT_ARG_GRAD, g->col[i] = j;
  }
  g->out_names = arena_alloc(ev->arena, sizeof(char *) * (st->nout + 1));
  g->out_names[0] = "loss";
  for (int o = 1; o < st->nout; o++) {
    for (int i = 0; i < st->nin && !g->out_names[o]; i++)
      if (st->in_val[i] == st->out_dst[o]) g->out_names[o] = st->ins[i]->a.name;
    if (!g->out_names[o]) ev_fail(ev, s->span, "kiln build: output %d of the %s replaces a value it does not read", o, what);
  }
}

// kiln build: the step graph and where its arguments come from, instead of a run.
static void record_train(Ev *ev, AstNode *s, const TrainSpec *ts, Step *st) {
  Build *b = ev->build;
  if (b->ntrain++) ev_fail(ev, s->span, "kiln build: a built binary runs one train statement, and this is the second");
  b->step.pr = st->pr;
  trainer(ev)->run.step = NULL;   // the Build holds it now
  record_graph(ev, s, st, &b->step, "training step");
  build_data_spec(ev, s->rhs, SPLIT_TRAIN, &b->train_data);
  b->optimizer = opt_name(ts->opt.kind);
  b->beta1 = ts->opt.beta1;
  b->beta2 = ts->opt.beta2;
  b->sched = (RtSchedule){ts->opt.lr, ts->gamma, ts->min_lr, ts->warmup, ts->step_size, (int)ts->schedule};
  b->batch = ts->batch;
  b->epochs = ts->epochs;
  b->shuffle = ts->shuffle;
  b->seed = ts->seed;
}

// The name of the parameter or state whose value t is.
static const char *value_name(Ev *ev, const RtTensor *t) {
  for (int i = 0; i < ev->nparams; i++) if (&ev->params[i].value == t) return ev->params[i].node->a.name;
  return NULL;
}

// kiln build --arch: the step split as parallel.c splits it, for a binary's
// `train --device cuda:0,1` or `cuda+cpu`: the gradient step (its share's loss,
// gradients and statistics) and the optimizer's update on summed gradients.
static void record_split(Ev *ev, AstNode *s, Node *loss, const TrainSpec *ts, RtDataset *ds, const char *dname, Step *whole) {
  Build *b = ev->build;
  GradStep gs;   // (data inputs' first axes are the batch: column_of checked them for the step)
  grad_step(ev, s, loss, ds, dname, &gs);
  BuildGraph *g = &b->grad;
  g->pr = step_compile(ev, &ev->pipe, gs.g, "gradient step", -1, s->span);
  g->role = arena_alloc(ev->arena, sizeof(int) * (gs.nin + 1));
  g->col = arena_alloc(ev->arena, sizeof(int) * (gs.nin + 1));
  for (int i = 0; i < gs.nin; i++) {
    g->col[i] = gs.col[i] >= 0 ? gs.col[i] : -1;
    g->role[i] = gs.col[i] >= 0 ? RT_ARG_DATA : gs.col[i] == COL_SHARE ? RT_ARG_SHARE : gs.col[i] == COL_SEED ? RT_ARG_STEP
               : RT_ARG_TENSOR;
  }
  g->out_names = arena_alloc(ev->arena, sizeof(char *) * (1 + gs.np + gs.nstat));
  g->out_names[0] = "loss";
  for (int j = 0; j < gs.np; j++) g->out_names[1 + j] = gs.params[j]->a.name;
  for (int j = 0; j < gs.nstat; j++)
    if (!(g->out_names[1 + gs.np + j] = value_name(ev, gs.stat_dst[j])))
      ev_fail(ev, s->span, "kiln build: a statistic of the gradient step replaces no state");
  b->ngrad = gs.np;
  // The update: whole's scalars are recorded (record_train); the split step makes its own.
  for (int k = 0; k <= OPT_NSCALARS; k++) rt_tensor_free(&whole->scalars[k]);
  Step up;
  memset(&up, 0, sizeof up);
  build_step(ev, s, loss, ts, ds, dname, &up, 1);
  b->update.pr = step_compile(ev, &ev->pipe, up.g, "optimizer update", -1, s->span);
  record_graph(ev, s, &up, &b->update, "optimizer update");
}

int step_state_input(const Step *st, int i) {
  int scalar = st->in_val[i] >= st->scalars && st->in_val[i] < st->scalars + OPT_NSCALARS + 1;
  return st->in_col[i] < 0 && st->in_val[i] && !scalar;
}

static size_t device_bytes(const Node *n, const int64_t *D) {
  size_t e = ir_dtype_size(n->dtype);
  for (int d = 0; d < n->ndim; d++) e *= (size_t)(n->shape[d].sym ? n->shape[d].k * D[n->shape[d].sym] : n->shape[d].k);
  return rt_cuda_arg_bytes(e);
}

// The device memory the step plans at the batch size, said before the first
// step: the workspace and the state kept there, taken by the second step (the
// first writes its results to fresh storage), and what each step copies.
static void device_plan(Ev *ev, const Step *st, int64_t batch) {
  int64_t D[65] = {0};
  for (int i = 0; i < st->nin; i++) {
    const Node *n = st->ins[i];
    if (st->in_col[i] >= 0 && n->ndim && n->shape[0].sym && n->shape[0].k) D[n->shape[0].sym] = batch / n->shape[0].k;
  }
  size_t ws = st->pr->workspace(D), state = 0, copied = device_bytes(st->pr->g->outs[0], D), data = 0;   // the loss
  for (int i = 0; i < st->nin; i++)
    *(step_state_input(st, i) ? &state : st->in_col[i] >= 0 ? &data : &copied) += device_bytes(st->ins[i], D);
  for (int i = 0; i < st->pr->s->nconst; i++) copied += rt_cuda_arg_bytes(st->pr->s->consts[i]->a.nbytes);
  fprintf(stderr, "kiln: CUDA device %d: the training step plans %.1f MiB of device memory at batch %lld: workspace %.1f, "
          "state kept on the device %.1f (twice that in its first step, whose results go beside it), the batch %.1f "
          "(three times: the first step's, then two areas that the next batch is copied to while a step runs), other "
          "copies %.1f; allocated by the first steps, none after\n",
          ev->pipe.device, (ws + 2 * state + 3 * data + copied) / 1048576.0, (long long)batch, ws / 1048576.0,
          state / 1048576.0, data / 1048576.0, copied / 1048576.0);
}

static volatile sig_atomic_t interrupt_flag;
static void on_sigint(int sig) { (void)sig; interrupt_flag = 1; }

// The loop's state for its callbacks (runtime/model.h: rt_train_loop, which built binaries run too).
typedef struct {
  Ev *ev;
  AstNode *s;
  Trainer *t;
  Step *st;
  const TrainSpec *ts;
  RtTensor *in;                 // the step's arguments
  Metrics *em;                  // the evaluate statement after the train statement, if any
  double *vals;                 // its values after each epoch
  int64_t step0, total;         // the schedule's origin and length, in steps
  int first;                    // the first step allocates the outputs
  Par *par;                     // the step split over several devices, or NULL
} Loop;

// The next batch's copies to the GPU, queued while this step runs there; the
// next step finds its data on the device (pipe_cuda_prefetch).
typedef struct { Loop *c; RtBatcher *b; } Ahead;

static int copy_next_batch(void *p) {
  Ahead *a = p;
  Step *st = a->c->st;
  Pipe *pipe = &a->c->ev->pipe;
  RtTensor cols[RT_DATA_MAXCOL], in[RT_CUDA_MAXAHEAD];
  int n = 0;
  rt_cuda_drop_prefetched(pipe->cx);
  if (rt_batcher_peek(a->b, cols) <= 0) return 0;   // the epoch's last batch
  for (int i = 0; i < st->nin && n < RT_CUDA_MAXAHEAD; i++)
    if (st->in_col[i] >= 0) in[n++] = as_input(&cols[st->in_col[i]], st->ins[i]);
  return pipe_cuda_prefetch(pipe, in, n);
}

static int train_step(RtLoop *l, const RtTensor *cols, int64_t n, int epoch, double *loss) {
  Loop *c = l->ctx;
  Step *st = c->st;
  Trainer *t = c->t;
  double lr = lr_at(c->ts, t->step - c->step0, c->total, epoch);
  *(double *)st->scalars[OPT_LR].data = lr;
  *(double *)st->scalars[OPT_BIAS1].data = 1 / (1 - pow(c->ts->opt.beta1, (double)(t->step + 1)));
  *(double *)st->scalars[OPT_BIAS2].data = 1 / (1 - pow(c->ts->opt.beta2, (double)(t->step + 1)));
  int64_t seed = (int64_t)(c->ts->seed << 32) + t->step;
  if (st->scalars[OPT_NSCALARS].data) *(int64_t *)st->scalars[OPT_NSCALARS].data = seed;
  // The first step allocates every output; after it, an output updated in place
  // is given the storage of the value it replaces.
  RtTensor *out = c->first ? st->out : st->out_args;
  for (int o = 0; !c->first && o < st->nout; o++) out[o] = st->in_place[o] ? *st->out_dst[o] : st->out[o];
  if (c->par) {
    par_step(c->par, st, cols, n, l->batches, seed, c->first, c->s->span, loss);
  } else {
    for (int i = 0; i < st->nin; i++)
      c->in[i] = st->in_col[i] >= 0 ? as_input(&cols[st->in_col[i]], st->ins[i]) : *st->in_val[i];
    Ahead a = {c, l->batches};
    ev_run_program_while(c->ev, st->pr, c->in, out, c->first, c->s->span, copy_next_batch, &a);
    *loss = scalar_value(&st->out[0]);
  }
  for (int o = 1; o < st->nout; o++) {   // the next values become the current ones
    if (st->in_place[o] && !c->first) continue;
    void *tmp = st->out_dst[o]->data;
    st->out_dst[o]->data = st->out[o].data;
    st->out[o].data = tmp;
    if (st->in_place[o]) rt_tensor_free(&st->out[o]);   // the first values' storage: no second buffer
  }
  c->first = 0;
  t->step++;
  rt_metrics_step(t->metrics, epoch + 1, ++t->logged, *loss, lr);
  return 0;
}

static int train_epoch_done(RtLoop *l, int epoch, double mean) {
  Loop *c = l->ctx;
  Ev *ev = c->ev;
  Trainer *t = c->t;
  Metrics *em = c->em;
  char err[1024];
  t->epoch = epoch + 1;
  if (em->pr) metrics_run(ev, ev->next_eval, em, c->vals);
  rt_progress_epoch_end(l->progress, mean, em->names, c->vals, em->pr ? em->n : 0);
  const char *tl = "train_loss";
  rt_metrics_epoch(t->metrics, epoch + 1, t->logged, &tl, &mean, 1);
  if (em->pr) rt_metrics_epoch(t->metrics, epoch + 1, t->logged, em->log_names, c->vals, em->n);
  if (c->ts->checkpoint && save_checkpoint(ev, c->ts->checkpoint, err, sizeof err)) fprintf(stderr, "kiln: %s\n", err);
  return 0;
}

// The plot is redrawn after each train statement with all of them so far.
static void finish_run(Ev *ev, Trainer *t, int stopped, const char *title) {
  char err[1024];
  rt_progress_finish(t->run.progress, stopped);
  if (ev->topts.plot && rt_metrics_plot(t->metrics, ev->topts.plot, title, err, sizeof err))
    fprintf(stderr, "kiln: %s\n", err);
  run_end(&t->run);
}

void ev_exec_train(Ev *ev, AstNode *s) {
  Trainer *t = trainer(ev);
  Run *run = &t->run;
  run_end(run);   // what an earlier statement's error left (the REPL goes on after errors)
  char perr[1024];
  if (pipe_cuda_release(&ev->pipe, perr, sizeof perr)) ev_fail(ev, s->span, "%s", perr);
  Node *loss = ev_tensor(ev, ev_eval_expr(ev, ev->globals, s->lhs), s->lhs->span, "the loss");
  if (loss->ndim) {
    char b[128];
    ev_fail(ev, s->lhs->span, "the loss must be a scalar (take mean(...) over the batch); it has shape %s",
            ir_shape_str(ev->c, loss->ndim, loss->shape, b, sizeof b));
  }
  TrainSpec ts;
  train_spec(ev, s, &ts);
  char cerr[1024];   // a checkpoint that cannot be written is said now, not after the first epoch
  if (ts.checkpoint && ev_trains(ev) && rt_check_writable(ts.checkpoint, cerr, sizeof cerr))
    ev_fail(ev, s->span, "the checkpoint: %s", cerr);
  // Each train statement runs its own epochs; only the one --resume applies to
  // (the first) starts after the checkpoint's.
  int first_epoch = 0;
  if (ev->topts.resume && !t->resumed) {
    load_checkpoint(ev, ev->topts.resume, s->span);
    t->resumed = 1;
    first_epoch = t->epoch;
  }
  t->epoch = first_epoch;
  if (t->opt_kind[0] && strcmp(t->opt_kind, opt_name(ts.opt.kind))) {   // another optimizer starts fresh
    drop_slots(t);
    t->step = 0;   // its bias corrections count its own steps
  }
  // The schedule counts this statement's steps (a resumed one's include the checkpoint's).
  int64_t step0 = first_epoch ? 0 : t->step;
  snprintf(t->opt_kind, sizeof t->opt_kind, "%s", opt_name(ts.opt.kind));
  const char *dname;
  RtDataset *ds = split_data(ev, s->rhs, SPLIT_TRAIN, &dname);
  Step st;
  memset(&st, 0, sizeof st);
  // Over several devices (--device cuda:0,1, cuda+cpu), the step splits (parallel.c).
  int split = ev->pipe.npeers > 0 && ev_trains(ev);
  build_step(ev, s, loss, &ts, ds, dname, &st, split);
  if (!st.pr && !split) return;   // kiln ir / emit-c showed it
  st.out = run->out = arena_alloc(ev->arena, sizeof *st.out * (st.nout + 1));
  st.out_args = arena_alloc(ev->arena, sizeof *st.out_args * (st.nout + 1));
  run->nout = st.nout;
  if (split) par_new(ev, s, loss, &ts, ds, dname, &st);
  Metrics em = {0};
  if (ev->next_eval) metrics_compile(ev, ev->next_eval, &em);
  if (ev->build) {
    record_train(ev, s, &ts, &st);
    if (ev->build->split) record_split(ev, s, loss, &ts, ds, dname, &st);
    if (em.pr) build_record_metrics(ev, ev->next_eval, &em);
    return;
  }
  RtDType want[RT_DATA_MAXCOL];
  for (int j = 0; j < ds->ncol; j++) want[j] = ds->col[j].t.dtype;
  for (int i = 0; i < st.nin; i++) if (st.in_col[i] >= 0) want[st.in_col[i]] = (RtDType)st.ins[i]->dtype;
  char err[1024];
  RtBatcher *b = run->batches = rt_batcher_new(ds, ts.batch, ts.shuffle, ts.seed, want, rt_spare_cpu(rt_threads(ev->pipe.rt)), err,
                                                  sizeof err);
  if (!b) ev_fail(ev, s->span, "%s", err);
  if (!t->metrics && !(t->metrics = rt_metrics_new(ev->topts.log, err, sizeof err))) ev_fail(ev, s->span, "%s", err);
  Loop c = {ev, s, t, &st, &ts, arena_alloc(ev->arena, sizeof(RtTensor) * (st.nin + 1)), &em,
            arena_alloc(ev->arena, sizeof(double) * (em.n + 1)), step0, rt_batcher_nbatches(b) * ts.epochs, 1, run->par};
  RtLoop l = {b, run->progress = rt_progress_new(stderr, ev->topts.progress), ds->n, first_epoch, ts.epochs,
              ev->topts.max_steps, &interrupt_flag, &c, train_step, train_epoch_done};
  if (!run->par && st.pr->cuda) {
    device_plan(ev, &st, ts.batch);
    for (int i = 0; i < st.nin; i++) if (step_state_input(&st, i)) pipe_cuda_keep(&ev->pipe, st.in_val[i]);
    // and so do the step's next values, in the storage the first step gives them
    for (int o = 1; o < st.nout; o++) pipe_cuda_keep(&ev->pipe, &st.out[o]);
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND;   // a second Ctrl-C ends the process at once
  interrupt_flag = 0;
  sigaction(SIGINT, &sa, &run->old);
  run->sigint_set = 1;
  int rc = rt_train_loop(&l), stopped = rc == 1;   // errors unwind from ev_run_program with longjmp
  if (run->par) par_report(run->par);
  if (pipe_cuda_release(&ev->pipe, err, sizeof err)) ev_fail(ev, s->span, "%s", err);   // the host's copies current again
  const char *title = strrchr(s->span.src->name, '/');
  finish_run(ev, t, stopped || rc == RT_LOOP_NONFINITE, title ? title + 1 : s->span.src->name);
  if (rc == RT_LOOP_NONFINITE) {   // the program stops here: no later save sees those parameters
    rt_loop_nonfinite_message(&l, err, sizeof err);
    ev_fail(ev, s->lhs->span, "%s", err);
  }
  if (stopped) {
    if (ts.checkpoint && !save_checkpoint(ev, ts.checkpoint, err, sizeof err))
      fprintf(stderr, "kiln: interrupted; checkpoint saved to %s (continue with --resume %s)\n", ts.checkpoint, ts.checkpoint);
    else if (ts.checkpoint)
      fprintf(stderr, "kiln: interrupted; could not save the checkpoint: %s\n", err);
    else
      fprintf(stderr, "kiln: interrupted (give --checkpoint FILE to save one when stopped)\n");
    ev->interrupted = 1;
    longjmp(*ev->on_error, 1);
  }
}

