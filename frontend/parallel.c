// A train statement over several devices (--device cuda:0,1 or cuda+cpu): data
// parallelism. Each batch is split into contiguous shares, one per device, in
// proportion to the devices' measured speed (Caffe con Troll's hybrid CPU+GPU
// training); each device runs the gradient graph on its share, whose loss is
// scaled by the share's fraction of the batch, so that the shares' gradients
// sum to the whole batch's for a loss that is a mean over the batch (plus any
// term that does not depend on the batch, such as weight decay). Then:
//  - GPUs only, with NCCL: the gradients are all-reduced on the GPUs and each
//    GPU applies the optimizer's update to its own copy of the state (the same
//    kernels on the same sums keep the copies equal); the state never leaves
//    the GPUs.
//  - otherwise (the CPU takes a share, or NCCL is missing): the gradients come
//    to the host, are summed there, and the update runs on the CPU; GPUs read
//    the parameters from the host at each step.
// Batch-norm statistics are computed per share and one share's are kept (as
// data-parallel frameworks do without synchronized batch norm), and dropout
// draws a stream of its own on each device.
#include "train_int.h"
#include "runtime/split.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PAR_MAX = PIPE_MAXPEERS + 1 };
_Static_assert((int)PAR_MAX <= (int)RT_SPLIT_MAX, "a split takes every device");

typedef struct {
  Pipe *pipe;            // &ev->pipe for the first, else own
  Pipe own;
  int device;            // CUDA ordinal, -1 the CPU
  Program *grad;         // its share's loss, gradients and statistics
  Program *update;       // with NCCL: the optimizer's update on this GPU
  RtTensor *in, *out;    // grad's arguments; its results (out owned)
  RtTensor share, seed;  // its fraction of the batch (f64), its random stream (i64)
  RtShare *sh;           // its share of each batch (Par's split)
} Worker;

struct Par {
  Ev *ev;
  int nw;
  Worker w[PAR_MAX];
  int nccl;                 // gradients all-reduced between the GPUs, each applying the update
  ncclComm_t comm[PAR_MAX];
  Pipe host;                // without NCCL: the update runs here, on the CPU
  Program *update;
  Node **ins; int nin; int *col; RtTensor **val;   // the gradient graph's inputs: data column, or value
  int np, nstat;            // its outputs: the loss, np gradients, nstat statistics
  RtTensor **stat_dst;      // the states the statistics replace
  RtTensor *gsum;           // without NCCL: the gradients summed (np)
  RtTensor *uin;            // an update's arguments
  RtSplit split;            // each worker's share of a batch
};

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// ev's pipe for another device (-1: the CPU), sharing its JIT, runtime and
// NVRTC; it holds no device of its own until pipe_open_device and keeps nothing.
static void pipe_for(Pipe *p, const Ev *ev, int device) {
  *p = ev->pipe;
  p->device = device;
  p->cx = NULL;
  p->kept = NULL; p->nkept = 0;
  p->mirrors = NULL; p->nmirrors = 0;
  p->npeers = 0;
}

static void worker_open(Ev *ev, Worker *w, Span sp) {
  char err[1024];
  pipe_for(&w->own, ev, w->device);
  w->pipe = &w->own;
  if (w->device >= 0 && pipe_open_device(w->pipe, err, sizeof err)) ev_fail(ev, sp, "%s", err);
}

// Forgets what p keeps on its device, copying nothing back (a copy of what the first device holds).
static void pipe_drop(Pipe *p) {
  char err[8];
  for (int m = 0; m < p->nmirrors; m++) p->mirrors[m].host_stale = 0;
  pipe_cuda_release(p, err, sizeof err);
}

Program *step_compile(Ev *ev, Pipe *p, IrGraph *g, const char *what, int device, Span sp) {
  char err[8192], label[300], who[32];
  rt_split_name(device, who, sizeof who);
  snprintf(label, sizeof label, "%s of %s:%d:%d on %s", what, sp.src->name, sp.line, sp.col, who);
  p->label = label;
  Program *pr = pipe_compile(p, g, err, sizeof err);
  p->label = NULL;
  if (!pr) ev_fail(ev, sp, "could not compile the %s: %s", what, err);
  return pr;
}

void grad_step(Ev *ev, AstNode *s, Node *loss, RtDataset *ds, const char *dname, GradStep *gs) {
  IrCtx *c = ev->c;
  Node **data, **states;
  int nd, ns;
  step_inputs(ev, s, loss, &data, &nd, &gs->params, &gs->np, &states, &ns);
  int np = gs->np;
  for (int i = 0; i < nd; i++)
    if (!data[i]->ndim || !data[i]->shape[0].sym || data[i]->shape[0].k != 1) {
      char b[128];
      ev_fail(ev, s->span, "splitting each batch over devices needs every data input's first axis to be the batch "
              "(a symbolic size such as B); '%s' has shape %s", data[i]->a.name,
              ir_shape_str(c, data[i]->ndim, data[i]->shape, b, sizeof b));
    }
  Node *y = loss->dtype == DT_F32 || loss->dtype == DT_F64 ? loss : ir_cast(c, loss, DT_F32);
  Node *share = ir_input(c, "batch_share", ROLE_INPUT, DT_F64, 0, NULL);
  int cap = nd + np + ns + 2;
  gs->ins = arena_alloc(ev->arena, sizeof(Node *) * cap);
  gs->col = arena_alloc(ev->arena, sizeof(int) * cap);
  gs->val = arena_alloc(ev->arena, sizeof(RtTensor *) * cap);
  Node **outs = arena_alloc(ev->arena, sizeof(Node *) * (1 + np + ev->nupdates + 1));
  gs->stat_dst = arena_alloc(ev->arena, sizeof(RtTensor *) * (ev->nupdates + 1));
  outs[0] = y;
  if (pass_grad(c, ir_binary(c, OP_MUL, y, ir_cast(c, share, y->dtype)), NULL, gs->params, np, outs + 1))
    ev_fail(ev, s->lhs->span, "%s", c->err);
  int ni = 0;
  for (int i = 0; i < nd; i++) gs->ins[ni] = data[i], gs->val[ni] = NULL, gs->col[ni++] = column_of(ev, ds, data[i], dname, s->rhs->span);
  for (int i = 0; i < np; i++) gs->ins[ni] = gs->params[i], gs->val[ni] = ev_param_value(ev, gs->params[i]), gs->col[ni++] = -1;
  for (int i = 0; i < ns; i++) gs->ins[ni] = states[i], gs->val[ni] = ev_param_value(ev, states[i]), gs->col[ni++] = -1;
  gs->nstat = step_stat_updates(ev, states, ns, gs->ins, ni, gs->stat_dst, outs + 1 + np);
  gs->ins[ni] = share, gs->val[ni] = NULL, gs->col[ni++] = COL_SHARE;
  if (ev->step) gs->ins[ni] = ev->step, gs->val[ni] = NULL, gs->col[ni++] = COL_SEED;
  gs->g = step_graph(ev, s->span, outs, 1 + np + gs->nstat, gs->ins, gs->val, gs->col, &ni);
  gs->nin = ni;
}

static void keep_all(Pipe *p, RtTensor *t, int n) {
  for (int i = 0; i < n; i++) pipe_cuda_keep(p, &t[i]);
}

Par *par_new(Ev *ev, AstNode *s, Node *loss, const TrainSpec *ts, RtDataset *ds, const char *dname, Step *up) {
  Span sp = s->span;
  Par *P = calloc(1, sizeof *P);
  if (!P) abort();
  trainer(ev)->run.par = P;   // run_end frees it, also after an error below
  P->ev = ev;
  P->nw = 1 + ev->pipe.npeers;
  if (ts->batch < P->nw)
    ev_fail(ev, sp, "batch %lld is smaller than the %d devices it is split over", (long long)ts->batch, P->nw);
  int cpu = 0, devs[PAR_MAX];
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    w->device = devs[k] = k ? ev->pipe.peers[k - 1] : ev->pipe.device;
    w->sh = &P->split.sh[k];
    cpu |= w->device < 0;
    if (k) worker_open(ev, w, sp);
    else w->pipe = &ev->pipe;
    w->share = rt_tensor_new(RT_F64, 0, NULL);
    w->seed = rt_tensor_new(RT_I64, 0, NULL);
  }
  rt_split_init(&P->split, devs, P->nw);
  char why[512] = "";
  if (!cpu && !rt_cuda_nccl(ev->pipe.cuda, why, sizeof why)) {
    int r = ev->pipe.cuda->ncclCommInitAll(P->comm, P->nw, devs);
    if (r) snprintf(why, sizeof why, "ncclCommInitAll: %s", ev->pipe.cuda->ncclGetErrorString(r));
    P->nccl = !r;
  }
  GradStep gs;
  grad_step(ev, s, loss, ds, dname, &gs);
  IrGraph *g = gs.g;
  P->ins = gs.ins, P->nin = gs.nin, P->col = gs.col, P->val = gs.val;
  P->np = gs.np, P->nstat = gs.nstat, P->stat_dst = gs.stat_dst;
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    w->grad = step_compile(ev, w->pipe, g, "gradient step", w->device, sp);
    w->in = calloc(P->nin + 1, sizeof *w->in);
    w->out = calloc(1 + P->np + P->nstat, sizeof *w->out);
    if (!w->in || !w->out) abort();
  }
  P->uin = arena_alloc(ev->arena, sizeof(RtTensor) * (up->nin + 1));
  if (P->nccl) {
    for (int k = 0; k < P->nw; k++) P->w[k].update = step_compile(ev, P->w[k].pipe, up->g, "optimizer update", P->w[k].device, sp);
    up->pr = P->w[0].update;
  } else {
    pipe_for(&P->host, ev, -1);
    P->update = up->pr = step_compile(ev, &P->host, up->g, "optimizer update", -1, sp);
    P->gsum = calloc(P->np + 1, sizeof *P->gsum);
    if (!P->gsum) abort();
  }
  for (int o = 0; o < up->nout; o++) up->in_place[o] = prog_out_shares(up->pr, o) >= 0;
  // What stays on the GPUs: with NCCL, the whole state; else nothing (the host holds it).
  for (int k = 0; P->nccl && k < P->nw; k++) {
    Worker *w = &P->w[k];
    for (int i = 0; i < up->nin; i++) if (step_state_input(up, i)) pipe_cuda_keep(w->pipe, up->in_val[i]);
    keep_all(w->pipe, up->out + 1, up->nout - 1);
    keep_all(w->pipe, w->out + 1, P->np);
    if (k) continue;
    for (int j = 0; j < P->nstat; j++) pipe_cuda_keep(w->pipe, P->stat_dst[j]);
    keep_all(w->pipe, w->out + 1 + P->np, P->nstat);
  }
  char list[512] = "", who[32];
  for (int k = 0; k < P->nw; k++) {
    rt_split_name(P->w[k].device, who, sizeof who);
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", !k ? "" : k + 1 < P->nw ? ", " : " and ", who);
  }
  if (P->nccl)
    fprintf(stderr, "kiln: the training step splits each batch of %lld between %s; the gradients are summed by NCCL "
            "(%s) on the GPUs, each applying the update\n", (long long)ts->batch, list, ev->pipe.cuda->nccl_name);
  else
    fprintf(stderr, "kiln: the training step splits each batch of %lld between %s; the gradients are summed on the host "
            "and the CPU applies the update%s%s%s\n", (long long)ts->batch, list, cpu ? "" : " (", cpu ? "" : why, cpu ? "" : ")");
  return P;
}

static void fail_on(Par *P, Worker *w, int rc, Span sp) {
  if (rc == PROG_DEVICE_ERROR) ev_fail(P->ev, sp, "%s", w ? w->pipe->cx->err : "device error");
  if (rc == PROG_NO_MEMORY) ev_fail(P->ev, sp, "out of memory for the step's scratch memory");
  ev_fail(P->ev, sp, "the compiled step could not be called");
}

// Binds and (alloc: first) allocates pr's results, then starts it on p.
static void start_on(Par *P, Pipe *p, Worker *w, Program *pr, RtTensor *in, RtTensor *out, int alloc, Span sp) {
  int64_t D[65] = {0}, shape[IR_MAXDIM];
  char err[512];
  if (prog_bind(pr, in, D, err, sizeof err)) ev_fail(P->ev, sp, "%s", err);
  for (int i = 0; alloc && i < pr->g->nout; i++) {
    int nd;
    prog_out_shape(pr, i, D, &nd, shape);
    rt_tensor_free(&out[i]);
    out[i] = rt_tensor_new((RtDType)pr->g->outs[i]->dtype, nd, shape);
    if (!out[i].data) ev_fail(P->ev, sp, "out of memory for the step's results");
  }
  int rc = prog_start(p, pr, D, in, out);
  if (rc) fail_on(P, w, rc, sp);
}

static void wait_on(Par *P, Worker *w, Program *pr, Span sp) {
  int rc = prog_wait(w->pipe, pr);
  if (rc) fail_on(P, w, rc, sp);
}

// Data input i's rows of the batch cols that worker w takes.
static RtTensor share_of(const Par *P, int i, const RtTensor *cols, const Worker *w) {
  RtTensor v = as_input(&cols[P->col[i]], P->ins[i]);
  size_t row_bytes = (size_t)(rt_tensor_numel(&v) / (v.shape[0] ? v.shape[0] : 1)) * rt_dtype_size(v.dtype);
  v.data = (char *)v.data + row_bytes * w->sh->row;
  v.shape[0] = w->sh->n;
  return v;
}

// The worker's arguments: its rows of each data column, its share, its stream.
static void grad_args(Par *P, Worker *w, const RtTensor *cols, int64_t n, int64_t seed, int k) {
  *(double *)w->share.data = (double)w->sh->n / (double)n;
  *(int64_t *)w->seed.data = (int64_t)((uint64_t)seed + (uint64_t)k * 0x9E3779B97F4A7C15ull);
  for (int i = 0; i < P->nin; i++) {
    if (P->col[i] == COL_SHARE) { w->in[i] = w->share; continue; }
    if (P->col[i] == COL_SEED) { w->in[i] = w->seed; continue; }
    if (P->col[i] < 0) { w->in[i] = *P->val[i]; continue; }
    w->in[i] = share_of(P, i, cols, w);
  }
}

// The next batch's shares copied to their GPUs while this step runs, split as
// this one was (after a balance the split differs, and the next step's runs
// copy their shares themselves: pipe_cuda_prefetch matches by storage and size).
static void copy_shares_ahead(Par *P, RtBatcher *b, Span sp) {
  RtTensor cols[RT_DATA_MAXCOL], in[RT_CUDA_MAXAHEAD];
  int64_t was_n[PAR_MAX], was_row[PAR_MAX], m = rt_batcher_peek(b, cols);
  for (int k = 0; k < P->nw; k++) {
    was_n[k] = P->w[k].sh->n, was_row[k] = P->w[k].sh->row;
    if (P->w[k].device >= 0) rt_cuda_drop_prefetched(P->w[k].pipe->cx);
  }
  if (m < P->nw) return;   // the epoch's end, or a batch with fewer rows than devices (its step copies them)
  rt_split_rows(&P->split, m);
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    int n = 0;
    for (int i = 0; w->device >= 0 && w->sh->n && i < P->nin && n < RT_CUDA_MAXAHEAD; i++)
      if (P->col[i] >= 0) in[n++] = share_of(P, i, cols, w);
    if (n && pipe_cuda_prefetch(w->pipe, in, n)) fail_on(P, w, PROG_DEVICE_ERROR, sp);
  }
  for (int k = 0; k < P->nw; k++) P->w[k].sh->n = was_n[k], P->w[k].sh->row = was_row[k];
}

// The update's arguments, its gradients from grads.
static void update_args(Par *P, const Step *up, RtTensor *grads) {
  for (int i = 0; i < up->nin; i++) {
    if (up->in_val[i]) { P->uin[i] = *up->in_val[i]; continue; }
    for (int j = 0; j < P->np; j++) if (up->ins[i] == up->grad_in[j]) P->uin[i] = grads[j];
  }
}

static void sum_gradients(Par *P, Span sp) {
  for (int j = 0; j < P->np; j++) {
    RtTensor *dst = &P->gsum[j];
    const RtTensor *like = &P->w[0].out[1 + j];
    if (!dst->data) {
      *dst = rt_tensor_new(like->dtype, like->ndim, like->shape);
      if (!dst->data) ev_fail(P->ev, sp, "out of memory for the summed gradients");
    }
    memset(dst->data, 0, rt_tensor_nbytes(dst));
    for (int k = 0; k < P->nw; k++)
      if (P->w[k].sh->n) rt_tensor_add(dst, &P->w[k].out[1 + j]);
  }
}

static void all_reduce(Par *P, Span sp) {
  RtCuda *cu = P->ev->pipe.cuda;
  for (int k = 0; k < P->nw; k++) {   // a GPU without rows this step adds zeros
    Worker *w = &P->w[k];
    for (int j = 0; !w->sh->n && j < P->np; j++) {
      CUdeviceptr d = pipe_cuda_mirror(w->pipe, &w->out[1 + j]);
      if (!d || rt_cuda_zero(w->pipe->cx, d, (size_t)rt_tensor_numel(&w->out[1 + j]) * rt_dtype_size(w->out[1 + j].dtype)))
        ev_fail(P->ev, sp, "cuda:%d: cannot clear its gradients: %s", w->device, d ? w->pipe->cx->err : "none on the device");
    }
  }
  int r = cu->ncclGroupStart();
  for (int k = 0; k < P->nw && !r; k++) {
    Worker *w = &P->w[k];
    for (int j = 0; j < P->np && !r; j++) {
      void *d = (void *)(uintptr_t)pipe_cuda_mirror(w->pipe, &w->out[1 + j]);
      r = cu->ncclAllReduce(d, d, (size_t)rt_tensor_numel(&w->out[1 + j]), w->out[1 + j].dtype == RT_F64 ? RT_NCCL_F64 : RT_NCCL_F32,
                            RT_NCCL_SUM, P->comm[k], w->pipe->cx->stream);
    }
  }
  int r2 = cu->ncclGroupEnd();
  if (r || r2) ev_fail(P->ev, sp, "NCCL's all-reduce of the gradients failed: %s", cu->ncclGetErrorString(r ? r : r2));
}

void par_step(Par *P, Step *up, const RtTensor *cols, int64_t n, RtBatcher *b, int64_t seed, int first, Span sp,
              double *loss) {
  double t0 = now_ms();
  rt_split_rows(&P->split, n);
  // The shares' gradients: the GPUs' queued, then the CPU's run, then the GPUs waited for.
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < P->nw; k++) {
      Worker *w = &P->w[k];
      if (!w->sh->n || (w->device < 0) != pass) continue;
      grad_args(P, w, cols, n, seed, k);
      double c0 = now_ms();
      if (w->device >= 0 && rt_cuda_time_begin(w->pipe->cx)) fail_on(P, w, PROG_DEVICE_ERROR, sp);
      start_on(P, w->pipe, w, w->grad, w->in, w->out, first || !w->out[0].data, sp);
      if (w->device >= 0 && rt_cuda_time_end(w->pipe->cx)) fail_on(P, w, PROG_DEVICE_ERROR, sp);
      w->sh->ms = now_ms() - c0;
    }
  copy_shares_ahead(P, b, sp);
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    if (!w->sh->n || w->device < 0) continue;
    wait_on(P, w, w->grad, sp);
    w->sh->ms = rt_cuda_time_ms(w->pipe->cx);
  }
  *loss = 0;
  for (int k = 0; k < P->nw; k++) *loss += P->w[k].sh->n ? scalar_value(&P->w[k].out[0]) * (double)P->w[k].sh->n / (double)n : 0;
  // The update, on the summed gradients.
  RtTensor *out = first ? up->out : up->out_args;
  if (P->nccl) {
    all_reduce(P, sp);
    for (int k = 0; k < P->nw; k++) {
      update_args(P, up, P->w[k].out + 1);
      start_on(P, P->w[k].pipe, &P->w[k], P->w[k].update, P->uin, out, first && !k, sp);
      wait_on(P, &P->w[k], P->w[k].update, sp);
    }
  } else {
    sum_gradients(P, sp);
    update_args(P, up, P->gsum);
    start_on(P, &P->host, NULL, P->update, P->uin, out, first, sp);
  }
  // The statistics of one share: with NCCL the first GPU's, which keeps them
  // (the GPUs' shares are alike); else the largest share's.
  int src = 0;
  for (int k = 1; !P->nccl && k < P->nw; k++) if (P->w[k].sh->n > P->w[src].sh->n) src = k;
  for (int j = 0; P->w[src].sh->n && j < P->nstat; j++) {
    void *tmp = P->stat_dst[j]->data;
    P->stat_dst[j]->data = P->w[src].out[1 + P->np + j].data;
    P->w[src].out[1 + P->np + j].data = tmp;
  }
  char split[1024];
  if (rt_split_step(&P->split, n, now_ms() - t0)) {
    rt_split_text(&P->split, split, sizeof split);
    fprintf(stderr, "kiln: measured over the first steps, each batch now splits %s\n", split);
  }
}

// At the end of the statement: the split, and what splitting gained over the
// fastest device alone (its speed on its own share).
void par_report(Par *P) {
  char split[1024];
  rt_split_report(&P->split, split, sizeof split);
  if (split[0]) fprintf(stderr, "kiln: each batch was split %s\n", split);
}

void par_free(Par *P) {
  if (!P) return;
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    if (w->pipe && w->pipe->cx) { rt_cuda_sync(w->pipe->cx); w->pipe->cx->npend = 0; }
    if (P->ev->pipe.profile && k == 0) {
      if (w->grad) prog_profile_print(stderr, w->grad);
      if (w->update) prog_profile_print(stderr, w->update);
    }
    if (k && w->pipe) pipe_drop(w->pipe);
    prog_free(w->grad);
    prog_free(w->update);
    for (int i = 0; w->out && i < 1 + P->np + P->nstat; i++) rt_tensor_free(&w->out[i]);
    free(w->in);
    free(w->out);
    rt_tensor_free(&w->share);
    rt_tensor_free(&w->seed);
    if (k && w->own.cx) {
      rt_cuda_exec_close(w->own.cx);
      free(w->own.cx);
    }
  }
  if (P->update && P->ev->pipe.profile) prog_profile_print(stderr, P->update);
  prog_free(P->update);
  for (int j = 0; P->gsum && j < P->np; j++) rt_tensor_free(&P->gsum[j]);
  free(P->gsum);
  for (int k = 0; P->nccl && k < P->nw; k++) if (P->comm[k]) P->ev->pipe.cuda->ncclCommDestroy(P->comm[k]);
  free(P);
}
