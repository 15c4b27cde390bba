// A built binary's training step over several devices (rt_session_devices:
// `OUT train --device cuda:0,1` or `cuda+cpu`), as frontend/parallel.c does it for
// `kiln run`, from the two graphs `kiln build --arch` adds (model.h): each batch is
// split into contiguous shares, one per device, in proportion to the devices'
// measured speed; each device runs the gradient graph on its share, whose loss is
// scaled by the share's fraction of the batch, so that the shares' gradients sum
// to the batch's. Then:
//  - GPUs only, with NCCL: the gradients are all-reduced on the GPUs and each GPU
//    applies the update to its own copy of the parameters and optimizer state (the
//    same kernels on the same sums keep the copies equal; the first GPU's are the
//    session's, which sync_host brings back);
//  - otherwise: the gradients come to the host, are summed there, and the update
//    runs on the CPU; the GPUs read the parameters from the host at each step.
// Batch-norm statistics are one share's (the first GPU's with NCCL, else the
// largest share's), and dropout draws a stream of its own on each device.
#include "model_int.h"
#include "private.h"
#include "split.h"
#include <stdlib.h>
#include <string.h>

enum { PAR_MAX = RT_SPLIT_MAX };

typedef struct {
  int device;               // CUDA ordinal, -1 the CPU
  RtCudaExec *cx;           // the session's for the first; else own (NULL: the CPU)
  RtCudaExec own;
  DevProg own_dev[SESS_NPROGS], *dev;   // what is loaded on its device (the first's: the session's)
  Twins own_tw, *tw;        // with NCCL: the update's state on its device (the first's: the session's)
  CUdeviceptr *gbuf;        // with NCCL: its gradients on its device, one per parameter
  RtTensor *view;           // the gradient step's data inputs: its rows of the batch
  RtTensor *out;            // the gradient step's results on the host (with NCCL, not the gradients)
  RtTensor share, seed;     // its fraction of the batch (f64), its random stream (i64)
  RtCudaProg *prog;         // the gradient step started on its device, until the wait
  RtShare *sh;              // its share of each batch (RtPar's split)
} Worker;

struct RtPar {
  int nw;
  Worker w[PAR_MAX];
  int nccl;                 // gradients all-reduced between the GPUs, each applying the update
  ncclComm_t comm[PAR_MAX];
  char how[600];            // how gradients are summed, for rt_session_describe_device
  RtTensor *gsum;           // without NCCL: the gradients summed on the host
  RtTensor *unext;          // without NCCL: the update's results (next values, swapped in)
  RtTensor uloss;           // with NCCL: the update's loss output (a 0)
  RtTensor **in;            // a graph's arguments
  void **host; size_t *bytes; CUdeviceptr *kept;   // a run's on a device
  RtSplit split;             // each worker's share of a batch
};

static double now_ms(void) { return (double)rt_clock_ns() * 1e-6; }

// "cuda:N: " and the device's error.
static int dev_fail(const Worker *w, char *err, size_t errlen) {
  return sess_fail(err, errlen, "cuda:%d: %s", w->device, w->cx->err);
}

// Whether the update replaces the tensor named name (its state, kept on each GPU with NCCL).
static int update_state(const RtGraph *u, const char *name) {
  for (int o = 1; o < u->nout; o++) if (!strcmp(u->outs[o].name, name)) return 1;
  return 0;
}

int rt_session_devices(RtSession *s, const int *devices, int n, char *err, size_t errlen) {
  if (n <= 1) return rt_session_device(s, n == 1 ? devices[0] : -1, err, errlen);
  const RtModel *m = s->m;
  if (s->par) return sess_fail(err, errlen, "the session trains on several devices already");
  if (n > PAR_MAX) return sess_fail(err, errlen, "at most %d devices", PAR_MAX);
  if (devices[0] < 0) return sess_fail(err, errlen, "the first device is a GPU (cuda+cpu, not cpu+cuda)");
  if (!m->step) return sess_fail(err, errlen, "%s has no train statement to split over devices", m->name);
  if (!m->grad || !m->update || !m->grad->cuda || !m->update->cuda)
    return sess_fail(err, errlen, "this binary carries no CUDA kernels (kiln build --arch sm_XX makes them, and the "
                "training step split over several devices)");
  if (s->tw.n) return sess_fail(err, errlen, "the session has trained on one device; choose several before training");
  if (rt_session_device(s, devices[0], err, errlen)) return -1;
  int cpu = 0;
  for (int k = 1; k < n; k++) {
    if (devices[k] >= s->cu.ndevices)
      return sess_fail(err, errlen, "no CUDA device %d: this machine has %d", devices[k], s->cu.ndevices);
    cpu |= devices[k] < 0;
  }
  RtPar *P = calloc(1, sizeof *P);
  if (!P) return sess_fail(err, errlen, "out of memory");
  s->par = P;   // rt_session_free frees it, also after an error below
  P->nw = n;
  rt_split_init(&P->split, devices, n);
  const RtGraph *G = m->grad, *U = m->update;
  int args = G->nin + G->nconst + G->nout, uargs = U->nin + U->nconst + U->nout;
  if (uargs > args) args = uargs;
  P->in = calloc(args + 1, sizeof *P->in);
  P->host = calloc(args + 1, sizeof *P->host);
  P->bytes = calloc(args + 1, sizeof *P->bytes);
  P->kept = calloc(args + 1, sizeof *P->kept);
  if (!P->in || !P->host || !P->bytes || !P->kept) abort();
  for (int k = 0; k < n; k++) {
    Worker *w = &P->w[k];
    w->device = devices[k];
    w->sh = &P->split.sh[k];
    w->cx = !k ? s->cx : w->device >= 0 ? &w->own : NULL;
    w->dev = !k ? s->dev : w->own_dev;
    w->tw = !k ? &s->tw : &w->own_tw;
    w->share = rt_tensor_new(RT_F64, 0, NULL);
    w->seed = rt_tensor_new(RT_I64, 0, NULL);
    w->view = calloc(G->nin + 1, sizeof *w->view);
    w->out = calloc(G->nout + 1, sizeof *w->out);
    w->gbuf = calloc(m->ngrad + 1, sizeof *w->gbuf);
    if (!w->share.data || !w->seed.data || !w->view || !w->out || !w->gbuf) abort();
    if (k && w->cx && rt_cuda_exec_open(w->cx, &s->cu, w->device, err, errlen)) {
      w->cx = NULL;
      rt_par_free(s);
      return -1;
    }
  }
  char why[400] = "";
  if (!cpu && !rt_cuda_nccl(&s->cu, why, sizeof why)) {
    int r = s->cu.ncclCommInitAll(P->comm, n, devices);
    if (r) snprintf(why, sizeof why, "ncclCommInitAll: %s", s->cu.ncclGetErrorString(r));
    P->nccl = !r;
  }
  if (P->nccl)
    snprintf(P->how, sizeof P->how, "the gradients summed by NCCL (%s) on the GPUs, each applying the update", s->cu.nccl_name);
  else
    snprintf(P->how, sizeof P->how, "the gradients summed on the host, the CPU applying the update%s%s%s", cpu ? "" : " (",
             cpu ? "" : why, cpu ? "" : ")");
  if (!P->nccl && (!(P->gsum = calloc(m->ngrad + 1, sizeof *P->gsum)) || !(P->unext = calloc(U->nout + 1, sizeof *P->unext))))
    abort();
  return 0;
}

void rt_par_describe(const RtSession *s, char *buf, size_t len) {
  const RtPar *P = s->par;
  size_t k = 0;
  char who[32];
  for (int i = 1; i < P->nw && k < len; i++) {
    rt_split_name(P->w[i].device, who, sizeof who);
    k += snprintf(buf + k, len - k, "%s%s", i == 1 ? "; each training batch split with " : i + 1 < P->nw ? ", " : " and ", who);
    if (P->w[i].device < 0 && k < len) k += snprintf(buf + k, len - k, " (%d threads)", rt_threads(s->rt));
  }
  if (k < len) snprintf(buf + k, len - k, ", %s", P->how);
}

// Worker w's rows of data input a's column.
static int share_of(const RtModel *m, const RtArg *a, const RtTensor *col, const Worker *w, RtTensor *v, char *err,
                    size_t errlen) {
  if (sess_as_input(m, col, a, v, err, errlen)) return -1;
  size_t row_bytes = v->shape[0] ? rt_tensor_nbytes(v) / (size_t)v->shape[0] : 0;
  v->data = (char *)v->data + row_bytes * (size_t)w->sh->row;
  v->shape[0] = w->sh->n;
  return 0;
}

// A run of g on w's device: host[] and bytes[] from in[] and out[] (kept[] filled by the caller).
static int start_on(RtSession *s, Worker *w, const RtGraph *g, const int64_t *D, RtTensor *const *in, RtTensor *out,
                    RtCudaProg **prog, char *err, size_t errlen) {
  RtPar *P = s->par;
  if (!(*prog = sess_device_prog(w->cx, w->dev, g, err, errlen))) return -1;
  sess_args(g, in, out, P->host, P->bytes);
  if (rt_cuda_run_start(w->cx, *prog, D, P->host, P->bytes, g->nin, g->nconst, g->nout, P->kept, 0))
    return dev_fail(w, err, errlen);
  return 0;
}

static int gbuf_of(Worker *w, const RtArg *a, int j, char *err, size_t errlen) {
  if (w->gbuf[j]) return 0;
  int64_t D[65] = {0};
  sess_ensure(&w->out[1 + j], a, D);   // a gradient's shape is its parameter's: no batch axis
  if (!(w->gbuf[j] = rt_cuda_alloc(w->cx, rt_tensor_nbytes(&w->out[1 + j])))) return dev_fail(w, err, errlen);
  return 0;
}

// Starts the gradient step on worker k's share of the batch cols (n rows); on the CPU, runs it.
static int grad_start(RtSession *s, int k, const RtTensor *cols, int64_t n, char *err, size_t errlen) {
  RtPar *P = s->par;
  Worker *w = &P->w[k];
  const RtModel *m = s->m;
  const RtGraph *G = m->grad;
  int gpu = w->device >= 0;
  memset(P->kept, 0, sizeof *P->kept * (G->nin + G->nconst + G->nout));
  for (int i = 0; i < G->nin; i++) {
    const RtArg *a = &G->ins[i];
    switch (a->role) {
    case RT_ARG_DATA:
      if (share_of(m, a, &cols[a->col], w, &w->view[i], err, errlen)) return -1;
      P->in[i] = &w->view[i];
      break;
    case RT_ARG_TENSOR:
      P->in[i] = sess_state_of(s, a);
      if (gpu && P->nccl && update_state(m->update, a->name)) {
        Twin *t = sess_twin_of(w->cx, w->tw, sess_find(s, a->name), err, errlen);
        if (!t) return -1;
        P->kept[i] = t->cur;
      }
      break;
    case RT_ARG_SHARE:
      *(double *)w->share.data = (double)w->sh->n / (double)n;
      P->in[i] = &w->share;
      break;
    case RT_ARG_STEP:
      *(int64_t *)w->seed.data = (int64_t)(((uint64_t)m->seed << 32) + (uint64_t)s->step + (uint64_t)k * 0x9E3779B97F4A7C15ull);
      P->in[i] = &w->seed;
      break;
    default: return sess_fail(err, errlen, "internal: the gradient step's input '%s' has role %d", a->name, a->role);
    }
  }
  int64_t D[65] = {0};
  if (sess_bind(m, G, P->in, D, err, errlen)) return -1;
  for (int o = 0; o < G->nout; o++) sess_ensure(&w->out[o], &G->outs[o], D);
  if (!gpu) {
    double t0 = now_ms();
    int rc = sess_run_cpu(s, G, D, P->in, w->out, err, errlen);
    w->sh->ms = now_ms() - t0;
    return rc;
  }
  for (int j = 0; P->nccl && j < m->ngrad; j++) {
    if (gbuf_of(w, &G->outs[1 + j], j, err, errlen)) return -1;
    P->kept[G->nin + G->nconst + 1 + j] = w->gbuf[j];
  }
  if (rt_cuda_time_begin(w->cx)) return dev_fail(w, err, errlen);
  if (start_on(s, w, G, D, P->in, w->out, &w->prog, err, errlen)) return -1;
  return rt_cuda_time_end(w->cx) ? dev_fail(w, err, errlen) : 0;
}

// The next batch's shares copied to their GPUs while this step runs, split as
// this one was (after a balance the split differs, and the next step's runs copy
// their shares themselves: the copy is matched by storage and size).
static int copy_shares_ahead(RtSession *s, char *err, size_t errlen) {
  RtPar *P = s->par;
  const RtGraph *G = s->m->grad;
  RtTensor cols[RT_DATA_MAXCOL], v;
  void *host[RT_CUDA_MAXAHEAD];
  size_t bytes[RT_CUDA_MAXAHEAD];
  int64_t was_n[PAR_MAX], was_row[PAR_MAX], next = rt_batcher_peek(s->ahead, cols);
  for (int k = 0; k < P->nw; k++) {
    was_n[k] = P->w[k].sh->n, was_row[k] = P->w[k].sh->row;
    if (P->w[k].cx) rt_cuda_drop_prefetched(P->w[k].cx);
  }
  if (next < P->nw) return 0;   // the epoch's end, or a batch with fewer rows than devices (its step copies them)
  rt_split_rows(&P->split, next);
  int rc = 0;
  for (int k = 0; k < P->nw && !rc; k++) {
    Worker *w = &P->w[k];
    int c = 0;
    for (int i = 0; w->cx && w->sh->n && i < G->nin && c < RT_CUDA_MAXAHEAD; i++) {
      if (G->ins[i].role != RT_ARG_DATA) continue;
      if (share_of(s->m, &G->ins[i], &cols[G->ins[i].col], w, &v, NULL, 0)) break;   // the next step says why
      host[c] = v.data, bytes[c++] = rt_tensor_nbytes(&v);
    }
    if (c && rt_cuda_prefetch(w->cx, host, bytes, c)) rc = dev_fail(w, err, errlen);
  }
  for (int k = 0; k < P->nw; k++) P->w[k].sh->n = was_n[k], P->w[k].sh->row = was_row[k];
  return rc;
}

static int all_reduce(RtSession *s, char *err, size_t errlen) {
  RtPar *P = s->par;
  RtCuda *cu = &s->cu;
  const RtGraph *G = s->m->grad;
  for (int k = 0; k < P->nw; k++) {   // a GPU without rows this step adds zeros
    Worker *w = &P->w[k];
    for (int j = 0; !w->sh->n && j < s->m->ngrad; j++)
      if (gbuf_of(w, &G->outs[1 + j], j, err, errlen) || rt_cuda_zero(w->cx, w->gbuf[j], rt_tensor_nbytes(&w->out[1 + j])))
        return sess_fail(err, errlen, "cuda:%d: cannot clear its gradients: %s", w->device, w->cx->err);
  }
  int r = cu->ncclGroupStart();
  for (int k = 0; k < P->nw && !r; k++) {
    Worker *w = &P->w[k];
    for (int j = 0; j < s->m->ngrad && !r; j++) {
      const RtTensor *g = &w->out[1 + j];
      void *d = (void *)(uintptr_t)w->gbuf[j];
      r = cu->ncclAllReduce(d, d, (size_t)rt_tensor_numel(g), g->dtype == RT_F64 ? RT_NCCL_F64 : RT_NCCL_F32, RT_NCCL_SUM,
                            P->comm[k], w->cx->stream);
    }
  }
  int r2 = cu->ncclGroupEnd();
  if (r || r2) return sess_fail(err, errlen, "NCCL's all-reduce of the gradients failed: %s", cu->ncclGetErrorString(r ? r : r2));
  return 0;
}

// The update's arguments: the session's tensors and scalars, gradients from grads.
static void update_args(RtSession *s, RtTensor *grads) {
  const RtGraph *U = s->m->update;
  for (int i = 0; i < U->nin; i++) {
    const RtArg *a = &U->ins[i];
    s->par->in[i] = a->role == RT_ARG_TENSOR ? sess_state_of(s, a) : a->role == RT_ARG_GRAD ? &grads[a->col] : sess_scalar(s, a->role);
  }
}

// With NCCL: the update on each GPU, over its copy of the state and its summed gradients.
static int update_on_gpus(RtSession *s, char *err, size_t errlen) {
  RtPar *P = s->par;
  const RtGraph *U = s->m->update;
  int64_t D[65] = {0};
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    update_args(s, w->out + 1);
    if (sess_bind(s->m, U, P->in, D, err, errlen)) return -1;
    memset(P->kept, 0, sizeof *P->kept * (U->nin + U->nconst + U->nout));
    for (int i = 0; i < U->nin; i++) {
      const RtArg *a = &U->ins[i];
      Twin *t = a->role == RT_ARG_TENSOR ? sess_twin_of(w->cx, w->tw, sess_find(s, a->name), err, errlen) : NULL;
      if (a->role == RT_ARG_TENSOR && !t) return -1;
      P->kept[i] = t ? t->cur : a->role == RT_ARG_GRAD ? w->gbuf[a->col] : 0;
    }
    RtTensor *out = calloc(U->nout + 1, sizeof *out);
    if (!out) abort();
    sess_ensure(&P->uloss, &U->outs[0], D);
    out[0] = P->uloss;
    int rc = 0;
    for (int o = 1; o < U->nout && !rc; o++) {
      Named *nm = sess_find(s, U->outs[o].name);
      Twin *t = nm ? sess_twin_of(w->cx, w->tw, nm, err, errlen) : NULL;
      if (!t) {
        rc = nm ? -1 : sess_fail(err, errlen, "internal: the update writes '%s', which the session lacks", U->outs[o].name);
        break;
      }
      int in_place = U->outs[o].role == RT_ARG_IN_PLACE;
      if (!in_place && !t->next && !(t->next = rt_cuda_alloc(w->cx, t->bytes))) rc = dev_fail(w, err, errlen);
      out[o] = nm->t;
      P->kept[U->nin + U->nconst + o] = in_place ? t->cur : t->next;
    }
    RtCudaProg *prog;
    rc = rc || start_on(s, w, U, D, P->in, out, &prog, err, errlen);
    free(out);
    if (rc) return -1;
    if (rt_cuda_run_wait(w->cx, prog, NULL)) return dev_fail(w, err, errlen);
    sess_swap_twins(w->tw);
  }
  s->host_stale = 1;
  return 0;
}

// Without NCCL: the shares' gradients summed on the host, and the update on the CPU.
static int update_on_cpu(RtSession *s, char *err, size_t errlen) {
  RtPar *P = s->par;
  const RtModel *m = s->m;
  const RtGraph *U = m->update;
  int64_t D[65] = {0};
  for (int j = 0; j < m->ngrad; j++) {
    RtTensor *dst = &P->gsum[j];
    sess_ensure(dst, &m->grad->outs[1 + j], D);
    memset(dst->data, 0, rt_tensor_nbytes(dst));
    for (int k = 0; k < P->nw; k++)
      if (P->w[k].sh->n) rt_tensor_add(dst, &P->w[k].out[1 + j]);
  }
  update_args(s, P->gsum);
  if (sess_bind(m, U, P->in, D, err, errlen)) return -1;
  if (sess_outputs(s, U, D, P->unext, err, errlen) || sess_run_cpu(s, U, D, P->in, P->unext, err, errlen)) return -1;
  sess_take_next(s, U, P->unext);
  return 0;
}

void rt_session_split_report(const RtSession *s, char *buf, size_t len) {
  if (s->par) rt_split_report(&s->par->split, buf, len);
  else if (len) buf[0] = 0;
}

int rt_par_step(RtSession *s, const RtTensor *cols, double lr, double *loss, char *err, size_t errlen) {
  RtPar *P = s->par;
  const RtModel *m = s->m;
  const RtGraph *G = m->grad;
  double t0 = now_ms();
  int64_t n = -1;
  for (int i = 0; i < G->nin && n < 0; i++) if (G->ins[i].role == RT_ARG_DATA) n = cols[G->ins[i].col].shape[0];
  if (n < 1) return sess_fail(err, errlen, "the training step reads no data to split");
  rt_split_rows(&P->split, n);
  sess_step_scalars(s, lr);
  // The shares' gradients: the GPUs' queued, then the CPU's run, then the GPUs waited for.
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < P->nw; k++)
      if (P->w[k].sh->n && (P->w[k].device < 0) == pass && grad_start(s, k, cols, n, err, errlen)) return -1;
  if (s->ahead && copy_shares_ahead(s, err, errlen)) return -1;
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    if (!w->sh->n || w->device < 0) continue;
    if (rt_cuda_run_wait(w->cx, w->prog, NULL)) return dev_fail(w, err, errlen);
    w->sh->ms = rt_cuda_time_ms(w->cx);
  }
  *loss = 0;
  for (int k = 0; k < P->nw; k++) {
    const RtTensor *l = &P->w[k].out[0];
    if (P->w[k].sh->n) *loss += (l->dtype == RT_F32 ? *(float *)l->data : *(double *)l->data) * (double)P->w[k].sh->n / (double)n;
  }
  if (P->nccl ? all_reduce(s, err, errlen) || update_on_gpus(s, err, errlen) : update_on_cpu(s, err, errlen)) return -1;
  // The statistics of one share: with NCCL the first GPU's; else the largest share's.
  int src = 0;
  for (int k = 1; !P->nccl && k < P->nw; k++) if (P->w[k].sh->n > P->w[src].sh->n) src = k;
  for (int o = 1 + m->ngrad; P->w[src].sh->n && o < G->nout; o++) {
    Named *nm = sess_find(s, G->outs[o].name);
    if (!nm) return sess_fail(err, errlen, "internal: the gradient step writes '%s', which the session lacks", G->outs[o].name);
    void *tmp = nm->t.data;
    nm->t.data = P->w[src].out[o].data;
    P->w[src].out[o].data = tmp;
  }
  s->step++;
  rt_split_step(&P->split, n, now_ms() - t0);
  return 0;
}

void rt_par_drop_twins(RtSession *s) {
  for (int k = 1; k < s->par->nw; k++)
    if (s->par->w[k].cx) sess_drop_twins(s->par->w[k].cx, s->par->w[k].tw);
}

void rt_par_free(RtSession *s) {
  RtPar *P = s->par;
  if (!P) return;
  const RtModel *m = s->m;
  for (int k = 0; k < P->nw; k++) {
    Worker *w = &P->w[k];
    if (w->cx) {
      rt_cuda_sync(w->cx);
      for (int j = 0; w->gbuf && j < m->ngrad; j++) rt_cuda_free(w->cx, w->gbuf[j]);
    }
    if (k && w->cx) {
      sess_drop_twins(w->cx, w->tw);
      for (int i = 0; i < SESS_NPROGS; i++) if (w->own_dev[i].g) rt_cuda_prog_free(w->cx, &w->own_dev[i].p);
      rt_cuda_exec_close(w->cx);
    }
    for (int o = 0; w->out && o < m->grad->nout; o++) rt_tensor_free(&w->out[o]);
    free(w->out);
    free(w->view);
    free(w->gbuf);
    rt_tensor_free(&w->share);
    rt_tensor_free(&w->seed);
  }
  for (int k = 0; P->nccl && k < P->nw; k++) if (P->comm[k]) s->cu.ncclCommDestroy(P->comm[k]);
  for (int j = 0; P->gsum && j < m->ngrad; j++) rt_tensor_free(&P->gsum[j]);
  for (int o = 0; P->unext && o < m->update->nout; o++) rt_tensor_free(&P->unext[o]);
  rt_tensor_free(&P->uloss);
  free(P->gsum);
  free(P->unext);
  free(P->in);
  free(P->host);
  free(P->bytes);
  free(P->kept);
  free(P);
  s->par = NULL;
}
