// Sessions over a model compiled ahead of time (model.h): the weights, the optimizer
// state, and calls of the graphs `kiln build` linked in. What `kiln run` does with a
// Program (frontend/pipeline.c: prog_bind, prog_run) done here from the RtModel's
// description, since a built binary has no IR.
#include "model_int.h"
#include "ckpt.h"
#include "private.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int sess_fail(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && len) vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}
double rt_schedule_lr(const RtSchedule *s, int64_t step, int64_t total, int epoch) {
  double lr = s->lr;
  if (s->warmup && step < s->warmup) return lr * (double)(step + 1) / (double)s->warmup;
  if (s->schedule == RT_SCHED_STEP) lr *= pow(s->gamma, (double)(epoch / s->step_size));
  if (s->schedule == RT_SCHED_COSINE && total > s->warmup) {
    double f = (double)(step - s->warmup) / (double)(total - s->warmup);
    if (f > 1) f = 1;
    lr = s->min_lr + 0.5 * (lr - s->min_lr) * (1 + cos(M_PI * f));
  }
  return lr;
}

int rt_train_loop(RtLoop *l) {
  int64_t nb = rt_batcher_nbatches(l->batches), steps = 0;
  RtTensor cols[RT_DATA_MAXCOL];
  for (int epoch = l->first_epoch; epoch < l->epochs; epoch++) {
    rt_batcher_start(l->batches, epoch);
    rt_progress_epoch_begin(l->progress, epoch + 1, l->epochs, nb, l->nexamples);
    int64_t got, done = 0, seen = 0;
    double sum = 0, loss;
    int cut = 0;
    for (;;) {
      uint64_t t0 = rt_clock_ns();
      got = rt_batcher_next(l->batches, cols);
      rt_progress_data(l->progress, (double)(rt_clock_ns() - t0) * 1e-9);
      if (got <= 0) break;
      if (l->step(l, cols, got, epoch, &loss)) return -1;
      done++;
      seen += got;
      sum += loss * (double)got;
      rt_progress_step(l->progress, done, seen, loss);
      if (!isfinite(loss)) {
        l->bad_loss = loss, l->bad_epoch = epoch, l->bad_step = done;
        return RT_LOOP_NONFINITE;
      }
      if (l->stop && *l->stop) return 1;
      if (l->max_steps && ++steps >= l->max_steps) { cut = 1; break; }
    }
    rt_progress_epoch_trained(l->progress);   // the epoch line's time and ex/s: training, not evaluation
    if (l->epoch_done && l->epoch_done(l, epoch, seen ? sum / (double)seen : NAN)) return -1;
    if (cut) break;
  }
  return 0;
}

void rt_loop_nonfinite_message(const RtLoop *l, char *buf, size_t len) {
  snprintf(buf, len, "the loss became %s at epoch %d, step %lld, and training stopped: that step's gradients, and the "
           "parameters it updated, are not numbers any more (nothing is saved from it). Usual causes: a label outside "
           "[0, C) in softmax_cross_entropy, the log of 0, a learning rate too large",
           isnan(l->bad_loss) ? "nan" : l->bad_loss > 0 ? "inf" : "-inf", l->bad_epoch + 1, (long long)l->bad_step);
}

static int64_t dim_val(RtDim d, const int64_t *D) { return d.sym ? d.k * D[d.sym] : d.k; }

static void shape_str(const RtModel *m, const RtArg *a, char *b, size_t n) {
  size_t k = snprintf(b, n, "%s[", rt_dtype_name((RtDType)a->dtype));
  for (int d = 0; d < a->ndim && k < n; d++) {
    RtDim x = a->shape[d];
    const char *sym = x.sym && x.sym <= m->nsyms ? m->symnames[x.sym - 1] : "?";
    if (!x.sym) k += snprintf(b + k, n - k, "%s%lld", d ? ", " : "", (long long)x.k);
    else if (x.k == 1) k += snprintf(b + k, n - k, "%s%s", d ? ", " : "", sym);
    else k += snprintf(b + k, n - k, "%s%lld*%s", d ? ", " : "", (long long)x.k, sym);
  }
  if (k < n) snprintf(b + k, n - k, "]");
}

// ---- named tensors ----
Named *sess_find(RtSession *s, const char *name) {
  for (int i = 0; i < s->nts; i++) if (!strcmp(s->ts[i]->name, name)) return s->ts[i];
  return NULL;
}

static Named *add(RtSession *s, const char *name, RtTensor t) {
  Named **ts = realloc(s->ts, sizeof *ts * (s->nts + 1)), *n = malloc(sizeof *n);
  if (!ts || !n) abort();
  s->ts = ts;
  *n = (Named){strdup(name), t};
  return s->ts[s->nts++] = n;
}

static RtTensor copy_of(const RtTensor *t) {
  RtTensor c = rt_tensor_new(t->dtype, t->ndim, t->shape);
  if (!c.data) abort();
  memcpy(c.data, t->data, rt_tensor_nbytes(t));
  return c;
}

RtTensor *sess_state_of(RtSession *s, const RtArg *a) {
  Named *n = sess_find(s, a->name);
  if (n) return &n->t;
  int64_t shape[RT_MAXDIM];
  for (int d = 0; d < a->ndim; d++) shape[d] = a->shape[d].k;
  RtTensor t = rt_tensor_new((RtDType)a->dtype, a->ndim, shape);
  if (!t.data) abort();
  return &add(s, a->name, t)->t;
}

// ---- the training step's state on the device ----
Twin *sess_twin_of(RtCudaExec *cx, Twins *tw, Named *n, char *err, size_t errlen) {
  for (int i = 0; i < tw->n; i++) if (tw->t[i].n == n) return &tw->t[i];
  size_t bytes = rt_tensor_nbytes(&n->t);
  CUdeviceptr d = rt_cuda_alloc(cx, bytes);
  if (!d || rt_cuda_upload(cx, d, n->t.data, bytes)) {
    rt_cuda_free(cx, d);
    return sess_fail(err, errlen, "%s", cx->err), NULL;
  }
  Twin *t = realloc(tw->t, sizeof *t * (tw->n + 1));
  if (!t) abort();
  tw->t = t;
  t[tw->n] = (Twin){n, d, 0, bytes};
  return &t[tw->n++];
}

// The host's copies current again (before anything reads or replaces them).
static int sync_host(RtSession *s, char *err, size_t errlen) {
  if (!s->host_stale) return 0;
  int rc = 0;
  for (int i = 0; i < s->tw.n && !rc; i++) rc = rt_cuda_download(s->cx, s->tw.t[i].n->t.data, s->tw.t[i].cur, s->tw.t[i].bytes);
  if (rc || rt_cuda_sync(s->cx)) return sess_fail(err, errlen, "%s", s->cx->err);
  s->host_stale = 0;
  return 0;
}

void sess_drop_twins(RtCudaExec *cx, Twins *tw) {
  for (int i = 0; i < tw->n; i++) {
    rt_cuda_free(cx, tw->t[i].cur);
    rt_cuda_free(cx, tw->t[i].next);
  }
  free(tw->t);
  tw->t = NULL;
  tw->n = 0;
}

// Every device's copies of the state forgotten (the host's are current or replaced).
static void drop_twins(RtSession *s) {
  sess_drop_twins(s->cx, &s->tw);
  if (s->par) rt_par_drop_twins(s);
  s->host_stale = 0;
}

// The step's arguments kept on the device: each state input's twin, each
// output's (the twin's next buffer, or its copy for one updated in place).
static CUdeviceptr *step_twins(RtSession *s, const RtGraph *g, char *err, size_t errlen) {
  int n = g->nin + g->nconst + g->nout;
  CUdeviceptr *kept = calloc(n + 1, sizeof *kept);
  if (!kept) abort();
  for (int i = 0; i < n; i++) {
    int o = i - g->nin - g->nconst;
    const char *name = i < g->nin && g->ins[i].role == RT_ARG_TENSOR ? g->ins[i].name : o > 0 ? g->outs[o].name : NULL;
    Named *nm = name ? sess_find(s, name) : NULL;
    Twin *t = nm ? sess_twin_of(s->cx, &s->tw, nm, err, errlen) : NULL;
    if (name && (!t || (o > 0 && g->outs[o].role != RT_ARG_IN_PLACE && !t->next && !(t->next = rt_cuda_alloc(s->cx, t->bytes))))) {
      if (!nm) sess_fail(err, errlen, "internal: the step writes '%s', which the session lacks", name);
      else if (t) sess_fail(err, errlen, "%s", s->cx->err);
      free(kept);
      return NULL;
    }
    if (t) kept[i] = o > 0 && g->outs[o].role != RT_ARG_IN_PLACE ? t->next : t->cur;
  }
  return kept;
}

RtSession *rt_session_new(const RtModel *m, int threads, char *err, size_t errlen) {
  RtSession *s = calloc(1, sizeof *s);
  if (!s) return sess_fail(err, errlen, "out of memory"), NULL;
  s->m = m;
  RtTensorFile f;
  if (rt_safetensors_load_mem(m->init, (size_t)(m->init_end - m->init), "the initial parameters", &f, err, errlen)) {
    free(s);
    return NULL;
  }
  for (int i = 0; i < f.n; i++) add(s, f.names[i], copy_of(&f.t[i]));
  s->nparams = f.n;
  rt_tensorfile_free(&f);
  if (!(s->rt = rt_new(threads))) {
    rt_session_free(s);
    return sess_fail(err, errlen, "out of memory"), NULL;
  }
  return s;
}

void rt_session_free(RtSession *s) {
  if (!s) return;
  drop_twins(s);
  rt_par_free(s);
  if (s->cx) {
    for (int i = 0; i < SESS_NPROGS; i++) if (s->dev[i].g) rt_cuda_prog_free(s->cx, &s->dev[i].p);
    rt_cuda_exec_close(s->cx);
    free(s->cx);
    rt_cuda_close(&s->cu);
  }
  for (int i = 0; i < s->nts; i++) { free(s->ts[i]->name); rt_tensor_free(&s->ts[i]->t); free(s->ts[i]); }
  if (s->next && s->m->step)
    for (int i = 0; i < s->m->step->nout; i++) rt_tensor_free(&s->next[i]);
  for (int i = 0; i < 4; i++) rt_tensor_free(&s->scalars[i]);
  free(s->next);
  free(s->ts);
  rt_free_ctx(s->rt);
  free(s);
}

int64_t rt_model_param_count(const RtModel *m, int64_t *bytes) {
  RtTensorFile f;
  if (rt_safetensors_load_mem(m->init, (size_t)(m->init_end - m->init), "init", &f, NULL, 0)) return -1;
  int64_t n = 0;
  if (bytes) *bytes = 0;
  for (int i = 0; i < f.n; i++) {
    n += rt_tensor_numel(&f.t[i]);
    if (bytes) *bytes += (int64_t)rt_tensor_nbytes(&f.t[i]);
  }
  rt_tensorfile_free(&f);
  return n;
}

int64_t rt_session_steps(const RtSession *s) { return s->step; }
int rt_session_threads(const RtSession *s) { return rt_threads(s->rt); }
int rt_session_epoch(const RtSession *s) { return s->epoch; }
void rt_session_set_epoch(RtSession *s, int epoch) { s->epoch = epoch; }
void rt_session_copy_ahead(RtSession *s, RtBatcher *b) {
  s->ahead = b;
  if (s->cx) rt_cuda_drop_prefetched(s->cx);
}

// ---- weights ----
static int same_shape(const RtTensor *a, const RtTensor *b) {
  int same = a->dtype == b->dtype && a->ndim == b->ndim;
  for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
  return same;
}

static void tensor_str(const RtTensor *t, char *b, size_t n) {
  size_t k = snprintf(b, n, "%s[", rt_dtype_name(t->dtype));
  for (int d = 0; d < t->ndim && k < n; d++) k += snprintf(b + k, n - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (k < n) snprintf(b + k, n - k, "]");
}

// Every parameter from f, checked before anything is copied; then optimizer state,
// step and epoch when f has them (what `kiln run --resume` continues from).
static int load_file(RtSession *s, RtTensorFile *f, const char *path, char *err, size_t errlen) {
  for (int i = 0; i < s->nparams; i++) {
    const RtTensor *t = rt_tensorfile_find(f, s->ts[i]->name);
    if (!t) return sess_fail(err, errlen, "%s: no tensor '%s' (a parameter of %s)", path, s->ts[i]->name, s->m->name);
    if (!same_shape(t, &s->ts[i]->t)) {
      char have[128], want[128];
      tensor_str(t, have, sizeof have);
      tensor_str(&s->ts[i]->t, want, sizeof want);
      return sess_fail(err, errlen, "%s: tensor '%s' is %s, but the parameter is %s", path, s->ts[i]->name, have, want);
    }
  }
  for (int i = 0; i < s->nparams; i++) memcpy(s->ts[i]->t.data, rt_tensorfile_find(f, s->ts[i]->name)->data, rt_tensor_nbytes(&s->ts[i]->t));
  if (rt_tensorfile_meta(f, "optimizer"))
    for (int i = 0; i < f->n; i++) {
      if (strncmp(f->names[i], "optimizer.", 10)) continue;
      Named *n = sess_find(s, f->names[i]);
      if (n) { rt_tensor_free(&n->t); n->t = copy_of(&f->t[i]); }
      else add(s, f->names[i], copy_of(&f->t[i]));
    }
  const char *step = rt_tensorfile_meta(f, "step"), *epoch = rt_tensorfile_meta(f, "epoch");
  s->step = step ? atoll(step) : 0;
  s->epoch = epoch ? atoi(epoch) : 0;
  return 0;
}

int rt_session_load(RtSession *s, const char *path, char *err, size_t errlen) {
  RtTensorFile f;
  if (sync_host(s, err, errlen)) return -1;   // what the file lacks stays as trained
  drop_twins(s);
  if (rt_safetensors_load(path, &f, err, errlen)) return -1;
  int rc = load_file(s, &f, path, err, errlen);
  rt_tensorfile_free(&f);
  return rc;
}

int rt_session_load_embedded(RtSession *s, char *err, size_t errlen) {
  const RtModel *m = s->m;
  if (!m->weights) return sess_fail(err, errlen, "%s embeds no weights (build it with --embed-weights FILE)", m->name);
  if (sync_host(s, err, errlen)) return -1;
  drop_twins(s);
  RtTensorFile f;
  if (rt_safetensors_load_mem(m->weights, (size_t)(m->weights_end - m->weights), "the embedded weights", &f, err, errlen)) return -1;
  int rc = load_file(s, &f, "the embedded weights", err, errlen);
  rt_tensorfile_free(&f);
  return rc;
}

// Parameters, then optimizer state, with `kiln run`'s names and metadata.
int rt_session_save(RtSession *s, const char *path, char *err, size_t errlen) {
  if (sync_host(s, err, errlen)) return -1;
  RtNamedTensor *ts = calloc(s->nts + 1, sizeof *ts);
  if (!ts) return sess_fail(err, errlen, "out of memory");
  int n = 0;
  for (int i = 0; i < s->nts; i++)
    if (i < s->nparams || !strncmp(s->ts[i]->name, "optimizer.", 10)) ts[n++] = (RtNamedTensor){s->ts[i]->name, &s->ts[i]->t};
  char step[32], epoch[32];
  snprintf(step, sizeof step, "%lld", (long long)s->step);
  snprintf(epoch, sizeof epoch, "%d", s->epoch);
  const char *opt = s->m->step && s->m->optimizer ? s->m->optimizer : "";
  const char *meta[] = {"format", "kiln-checkpoint-1", "optimizer", opt, "step", step, "epoch", epoch};
  int rc = rt_safetensors_save(path, ts, n, meta, 4, err, errlen);
  free(ts);
  return rc;
}

// ---- running a graph ----
int sess_bind(const RtModel *m, const RtGraph *g, RtTensor *const *in, int64_t *D, char *err, size_t errlen) {
  uint64_t bound = 0;
  for (int i = 0; i < g->nin; i++) {
    const RtArg *a = &g->ins[i];
    const RtTensor *t = in[i];
    char want[160];
    shape_str(m, a, want, sizeof want);
    if ((int)t->dtype != a->dtype)
      return sess_fail(err, errlen, "input '%s' is %s, but the model takes %s", a->name, rt_dtype_name(t->dtype), want);
    if (t->ndim != a->ndim) return sess_fail(err, errlen, "input '%s' has %d dimensions, but the model takes %s", a->name, t->ndim, want);
    for (int d = 0; d < a->ndim; d++) {
      RtDim x = a->shape[d];
      if (x.sym && !(bound & (1ull << x.sym)) && x.k && t->shape[d] % x.k == 0) {
        D[x.sym] = t->shape[d] / x.k;
        bound |= 1ull << x.sym;
      }
      if (dim_val(x, D) != t->shape[d]) {
        char have[128];
        tensor_str(t, have, sizeof have);
        return sess_fail(err, errlen, "input '%s' is %s, which does not fit %s (axis %d)", a->name, have, want, d);
      }
    }
  }
  return 0;
}

int rt_session_device(RtSession *s, int ordinal, char *err, size_t errlen) {
  if (s->cx && s->cx->dev.ordinal != ordinal)   // its graphs are loaded in that device's context
    return sess_fail(err, errlen, "the session runs on CUDA device %d", s->cx->dev.ordinal);
  if (s->cx || ordinal < 0) return 0;
  if (!(s->cx = calloc(1, sizeof *s->cx))) return sess_fail(err, errlen, "out of memory");
  if (rt_cuda_exec_open(s->cx, &s->cu, ordinal, err, errlen)) {
    free(s->cx);
    s->cx = NULL;
    return -1;
  }
  return 0;
}

void rt_session_describe_device(const RtSession *s, char *buf, size_t len) {
  if (s->cx) rt_cuda_describe(s->cx, buf, len);
  else snprintf(buf, len, "cpu (%d threads)", rt_threads(s->rt));
  size_t k = strlen(buf);
  if (s->par && k < len) rt_par_describe(s, buf + k, len - k);
}

// g's program on the session's device, loaded at its first run: the CUBIN of the
// device's architecture, or of the newest one below it with the same major number
// (a CUBIN runs on later minor versions, not on another major); else the PTX, if
// its architecture is not past the device's (the driver compiles it for the device).
RtCudaProg *sess_device_prog(RtCudaExec *cx, DevProg *dev, const RtGraph *g, char *err, size_t errlen) {
  int i = 0;
  while (i < SESS_NPROGS && dev[i].g && dev[i].g != g) i++;
  if (i < SESS_NPROGS && dev[i].g == g) return &dev[i].p;
  const RtGraphCuda *c = g->cuda;
  int sm = cx->dev.sm, best = -1;
  if (!c) return sess_fail(err, errlen, "this binary carries no CUDA kernels (kiln build --arch sm_XX makes them)"), NULL;
  for (int k = 0; k < c->nimages; k++)
    if (!c->images[k].ptx && c->images[k].sm / 10 == sm / 10 && c->images[k].sm <= sm && (best < 0 || c->images[k].sm > c->images[best].sm)) best = k;
  for (int k = 0; k < c->nimages && best < 0; k++)
    if (c->images[k].ptx && c->images[k].sm <= sm) best = k;
  if (best < 0) {
    char have[256] = "";
    size_t n = 0;
    for (int k = 0; k < c->nimages && n < sizeof have; k++)
      n += snprintf(have + n, sizeof have - n, "%s%s_%d", k ? ", " : "", c->images[k].ptx ? "PTX for compute" : "sm", c->images[k].sm);
    return sess_fail(err, errlen, "this binary carries CUDA kernels for %s, none of which runs on %s (sm_%d): rebuild with "
                "kiln build --arch sm_%d", have, cx->dev.name, sm, sm), NULL;
  }
  if (i == SESS_NPROGS || rt_cuda_prog_load(cx, &dev[i].p, c->images[best].image, c->kernels, c->block, c->nsteps, c->host, err, errlen))
    return i == SESS_NPROGS ? sess_fail(err, errlen, "internal error: more than five graphs on the device"), NULL : NULL;
  dev[i].g = g;
  return &dev[i].p;
}


// The training step's next batch, copied to the device while the step runs.
static int copy_ahead(RtSession *s, const RtGraph *g, char *err, size_t errlen) {
  RtTensor cols[RT_DATA_MAXCOL], v;
  void *host[RT_CUDA_MAXAHEAD];
  size_t bytes[RT_CUDA_MAXAHEAD];
  int n = 0;
  rt_cuda_drop_prefetched(s->cx);
  if (rt_batcher_peek(s->ahead, cols) <= 0) return 0;   // the epoch's last batch
  for (int i = 0; i < g->nin && n < RT_CUDA_MAXAHEAD; i++) {
    if (g->ins[i].role != RT_ARG_DATA) continue;
    if (sess_as_input(s->m, &cols[g->ins[i].col], &g->ins[i], &v, NULL, 0)) return 0;   // the next step says so
    host[n] = v.data, bytes[n++] = rt_tensor_nbytes(&v);
  }
  return rt_cuda_prefetch(s->cx, host, bytes, n) ? sess_fail(err, errlen, "%s", s->cx->err) : 0;
}

void sess_args(const RtGraph *g, RtTensor *const *in, const RtTensor *out, void **host, size_t *bytes) {
  for (int i = 0; i < g->nin; i++) host[i] = in[i]->data, bytes[i] = rt_tensor_nbytes(in[i]);
  for (int i = 0; i < g->nconst; i++) host[g->nin + i] = (void *)g->consts[i], bytes[g->nin + i] = g->cuda->const_bytes[i];
  for (int i = 0, o = g->nin + g->nconst; i < g->nout; i++) host[o + i] = out[i].data, bytes[o + i] = rt_tensor_nbytes(&out[i]);
}

// kept: NULL, or per argument a device address that holds it (rt_cuda_run's resident).
static int run_cuda(RtSession *s, const RtGraph *g, const int64_t *D, RtTensor *const *in, RtTensor *out,
                    const CUdeviceptr *kept, char *err, size_t errlen) {
  RtCudaProg *p = sess_device_prog(s->cx, s->dev, g, err, errlen);
  if (!p) return -1;
  int n = g->nin + g->nconst + g->nout;
  void **host = malloc(sizeof *host * (n ? n : 1));
  size_t *bytes = malloc(sizeof *bytes * (n ? n : 1));
  if (!host || !bytes) abort();
  sess_args(g, in, out, host, bytes);
  int rc = rt_cuda_run_start(s->cx, p, D, host, bytes, g->nin, g->nconst, g->nout, kept, 0);
  char why[512] = "";
  if (!rc && s->ahead && g == s->m->step) copy_ahead(s, g, why, sizeof why);
  rc = rc || rt_cuda_run_wait(s->cx, p, NULL);
  free(host);
  free(bytes);
  return rc ? sess_fail(err, errlen, "%s", s->cx->err) : why[0] ? sess_fail(err, errlen, "%s", why) : 0;
}

int sess_run_cpu(RtSession *s, const RtGraph *g, const int64_t *D, RtTensor *const *in, RtTensor *out, char *err, size_t errlen) {
  int n = 2 + g->nin + g->nconst + g->nout;
  void **args = malloc(sizeof(void *) * n);
  if (!args) return sess_fail(err, errlen, "out of memory");
  args[0] = s->rt;
  args[1] = (void *)D;
  for (int i = 0; i < g->nin; i++) args[2 + i] = in[i]->data;
  for (int i = 0; i < g->nconst; i++) args[2 + g->nin + i] = (void *)g->consts[i];
  for (int i = 0; i < g->nout; i++) args[2 + g->nin + g->nconst + i] = out[i].data;
  size_t need = g->workspace(D);
  if (need && !rt_workspace(s->rt, need)) {
    free(args);
    return sess_fail(err, errlen, "out of memory for the graph's scratch memory (%zu bytes)", need);
  }
  g->entry(args);
  free(args);
  return 0;
}

static int run(RtSession *s, const RtGraph *g, const int64_t *D, RtTensor *const *in, RtTensor *out, char *err, size_t errlen) {
  return s->cx ? run_cuda(s, g, D, in, out, NULL, err, errlen) : sess_run_cpu(s, g, D, in, out, err, errlen);
}

RtTensor sess_out_tensor(const RtArg *a, const int64_t *D) {
  int64_t shape[RT_MAXDIM];
  for (int d = 0; d < a->ndim; d++) shape[d] = dim_val(a->shape[d], D);
  return rt_tensor_new((RtDType)a->dtype, a->ndim, shape);
}

int sess_as_input(const RtModel *m, const RtTensor *col, const RtArg *a, RtTensor *v, char *err, size_t errlen) {
  int64_t want = 1, have = 1;
  for (int d = 1; d < a->ndim; d++) want *= a->shape[d].sym ? -1 : a->shape[d].k;
  for (int d = 1; d < col->ndim; d++) have *= col->shape[d];
  if (col->ndim < 1 || want != have) {
    char ws[160], hs[128];
    shape_str(m, a, ws, sizeof ws);
    tensor_str(col, hs, sizeof hs);
    return sess_fail(err, errlen, "input '%s' takes %s (%lld values per example), not %s", a->name, ws, (long long)want, hs);
  }
  *v = *col;
  v->owns = 0;
  v->ndim = a->ndim;
  for (int d = 1; d < a->ndim; d++) v->shape[d] = a->shape[d].k;
  return 0;
}

RtTensor *sess_scalar(RtSession *s, int role) {
  RtTensor *t = &s->scalars[role - RT_ARG_LR];
  if (!t->data) *t = rt_tensor_new(role == RT_ARG_STEP ? RT_I64 : RT_F64, 0, NULL);
  if (!t->data) abort();
  return t;
}

void sess_step_scalars(RtSession *s, double lr) {
  const RtModel *m = s->m;
  double step = (double)(s->step + 1);
  *(double *)sess_scalar(s, RT_ARG_LR)->data = lr < 0 ? m->sched.lr : lr;
  *(double *)sess_scalar(s, RT_ARG_BIAS1)->data = 1 / (1 - pow(m->beta1, step));
  *(double *)sess_scalar(s, RT_ARG_BIAS2)->data = 1 / (1 - pow(m->beta2, step));
  *(int64_t *)sess_scalar(s, RT_ARG_STEP)->data = (int64_t)(m->seed << 32) + s->step;
}

// A graph's arguments: data from cols, the rest from the session.
static int gather(RtSession *s, const RtGraph *g, const RtTensor *cols, RtTensor *view, RtTensor **in, char *err, size_t errlen) {
  for (int i = 0; i < g->nin; i++) {
    const RtArg *a = &g->ins[i];
    switch (a->role) {
    case RT_ARG_DATA:
      if (sess_as_input(s->m, &cols[a->col], a, &view[i], err, errlen)) return -1;
      in[i] = &view[i];
      break;
    case RT_ARG_TENSOR: in[i] = sess_state_of(s, a); break;
    default: in[i] = sess_scalar(s, a->role);
    }
  }
  return 0;
}

int rt_session_output_shape(RtSession *s, const RtTensor *ins, RtTensor *out, char *err, size_t errlen) {
  const RtGraph *g = s->m->predict;
  if (!g) return sess_fail(err, errlen, "%s has no prediction graph", s->m->name);
  RtTensor *view = calloc(g->nin + 1, sizeof *view), **in = calloc(g->nin + 1, sizeof *in);
  int64_t D[65] = {0};
  int rc = !view || !in ? sess_fail(err, errlen, "out of memory") : gather(s, g, ins, view, in, err, errlen);
  if (!rc) rc = sess_bind(s->m, g, in, D, err, errlen);
  if (!rc) {
    const RtArg *a = &g->outs[0];
    out->dtype = (RtDType)a->dtype;
    out->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) out->shape[d] = dim_val(a->shape[d], D);
  }
  free(view); free(in);
  return rc;
}

int rt_session_forward(RtSession *s, const RtTensor *ins, RtTensor *out, char *err, size_t errlen) {
  const RtGraph *g = s->m->predict;
  RtTensor want;
  if (rt_session_output_shape(s, ins, &want, err, errlen) || sync_host(s, err, errlen)) return -1;
  if (!same_shape(&want, out)) {
    char ws[128], hs[128];
    tensor_str(&want, ws, sizeof ws);
    tensor_str(out, hs, sizeof hs);
    return sess_fail(err, errlen, "the output buffer is %s; this input needs %s", hs, ws);
  }
  RtTensor *view = calloc(g->nin + 1, sizeof *view), **in = calloc(g->nin + 1, sizeof *in);
  int64_t D[65] = {0};
  int rc = !view || !in ? sess_fail(err, errlen, "out of memory") : gather(s, g, ins, view, in, err, errlen);
  if (!rc) rc = sess_bind(s->m, g, in, D, err, errlen);
  if (!rc) rc = run(s, g, D, in, out, err, errlen);
  free(view); free(in);
  return rc;
}

// ---- training ----
void sess_ensure(RtTensor *t, const RtArg *a, const int64_t *D) {
  int same = t->data && (int)t->dtype == a->dtype && t->ndim == a->ndim;
  for (int d = 0; same && d < a->ndim; d++) same = t->shape[d] == dim_val(a->shape[d], D);
  if (same) return;
  rt_tensor_free(t);
  if (!(*t = sess_out_tensor(a, D)).data) abort();
}

int sess_outputs(RtSession *s, const RtGraph *g, const int64_t *D, RtTensor *next, char *err, size_t errlen) {
  for (int o = 0; o < g->nout; o++) {
    Named *n = o ? sess_find(s, g->outs[o].name) : NULL;   // output 0 is the loss
    if (o && !n) return sess_fail(err, errlen, "internal: the step writes '%s', which the session lacks", g->outs[o].name);
    if (g->outs[o].role != RT_ARG_IN_PLACE) {
      sess_ensure(&next[o], &g->outs[o], D);
      continue;
    }
    rt_tensor_free(&next[o]);   // written into the tensor it replaces
    next[o] = n->t;
    next[o].owns = 0;
  }
  return 0;
}

void sess_take_next(RtSession *s, const RtGraph *g, RtTensor *next) {
  for (int o = 1; o < g->nout; o++) {
    if (g->outs[o].role == RT_ARG_IN_PLACE) continue;
    Named *n = sess_find(s, g->outs[o].name);   // sess_outputs found it
    void *tmp = n->t.data;
    n->t.data = next[o].data;
    next[o].data = tmp;
  }
}

void sess_swap_twins(Twins *tw) {
  for (int i = 0; i < tw->n; i++)
    if (tw->t[i].next) { CUdeviceptr t = tw->t[i].cur; tw->t[i].cur = tw->t[i].next; tw->t[i].next = t; }
}

int rt_session_train_step(RtSession *s, const RtTensor *cols, double lr, double *loss, char *err, size_t errlen) {
  const RtModel *m = s->m;
  const RtGraph *g = m->step;
  if (!g) return sess_fail(err, errlen, "%s has no train statement", m->name);
  if (s->par) return rt_par_step(s, cols, lr, loss, err, errlen);
  RtTensor *view = calloc(g->nin + 1, sizeof *view), **in = calloc(g->nin + 1, sizeof *in);
  int64_t D[65] = {0};
  int rc = !view || !in ? sess_fail(err, errlen, "out of memory") : gather(s, g, cols, view, in, err, errlen);
  if (!rc) rc = sess_bind(m, g, in, D, err, errlen);
  if (rc) goto done;
  if (!s->next && !(s->next = calloc(g->nout, sizeof *s->next))) abort();
  if ((rc = sess_outputs(s, g, D, s->next, err, errlen))) goto done;
  sess_step_scalars(s, lr);
  if (s->cx) {   // the state stays on the device, its next values beside it
    CUdeviceptr *kept = step_twins(s, g, err, errlen);
    rc = !kept || run_cuda(s, g, D, in, s->next, kept, err, errlen);
    free(kept);
    if (rc) goto done;
    s->host_stale = 1;
    sess_swap_twins(&s->tw);
  } else if ((rc = run(s, g, D, in, s->next, err, errlen))) {
    goto done;
  } else {
    sess_take_next(s, g, s->next);
  }
  const RtTensor *l = &s->next[0];
  *loss = l->dtype == RT_F32 ? *(float *)l->data : *(double *)l->data;
  s->step++;
done:
  free(view); free(in);
  return rc;
}

static double value_at(const RtTensor *t, int64_t i) {
  switch (t->dtype) {
  case RT_F32: return ((float *)t->data)[i];
  case RT_F64: return ((double *)t->data)[i];
  case RT_I32: return ((int32_t *)t->data)[i];
  case RT_I64: return (double)((int64_t *)t->data)[i];
  default: return ((uint8_t *)t->data)[i];
  }
}

int rt_eval_loop(RtBatcher *b, int nmet, const int *per_example, int64_t limit,
                 int (*run)(void *ctx, const RtTensor *cols, RtTensor *out), void *ctx, RtTensor *out, double *vals) {
  RtTensor cols[RT_DATA_MAXCOL];
  int64_t got, total = 0;
  for (int k = 0; k < nmet; k++) vals[k] = 0;   // the sums, until the end
  rt_batcher_start(b, 0);
  while ((!limit || total < limit) && (got = rt_batcher_next(b, cols)) > 0) {
    if (run(ctx, cols, out)) return -1;
    for (int k = 0; k < nmet; k++) {
      if (!per_example[k]) vals[k] += value_at(&out[k], 0) * (double)got;
      else for (int64_t r = 0; r < got; r++) vals[k] += value_at(&out[k], r);
      rt_tensor_free(&out[k]);
    }
    total += got;
  }
  for (int k = 0; k < nmet; k++) vals[k] = total ? vals[k] / (double)total : NAN;
  return 0;
}

typedef struct { RtSession *s; RtTensor *view, **in; char *err; size_t n; } EvalRun;

// One batch of the evaluate graph, for rt_eval_loop.
static int eval_batch(void *ctx, const RtTensor *cols, RtTensor *out) {
  EvalRun *e = ctx;
  const RtGraph *g = e->s->m->eval;
  int64_t D[65] = {0};
  if (gather(e->s, g, cols, e->view, e->in, e->err, e->n) || sess_bind(e->s->m, g, e->in, D, e->err, e->n)) return -1;
  for (int k = 0; k < g->nout; k++)
    if (!(out[k] = sess_out_tensor(&g->outs[k], D)).data) abort();
  if (!run(e->s, g, D, e->in, out, e->err, e->n)) return 0;
  for (int k = 0; k < g->nout; k++) rt_tensor_free(&out[k]);
  return -1;
}

int rt_session_evaluate(RtSession *s, const RtDataset *ds, int64_t limit, double *vals, char *err, size_t errlen) {
  const RtGraph *g = s->m->eval;
  if (!g) return sess_fail(err, errlen, "%s has no evaluate statement", s->m->name);
  if (sync_host(s, err, errlen)) return -1;
  RtDType want[RT_DATA_MAXCOL];
  for (int j = 0; j < ds->ncol; j++) want[j] = ds->col[j].t.dtype;
  for (int i = 0; i < g->nin; i++) {
    const RtArg *a = &g->ins[i];
    if (a->role != RT_ARG_DATA) continue;
    if (a->col >= ds->ncol) return sess_fail(err, errlen, "%s has %d columns; input '%s' needs column %d", ds->source, ds->ncol, a->name, a->col + 1);
    want[a->col] = (RtDType)a->dtype;
  }
  RtBatcher *b = rt_batcher_new(ds, s->m->eval_batch, 0, 0, want, rt_spare_cpu(rt_threads(s->rt)), err, errlen);
  if (!b) return -1;
  EvalRun e = {s, calloc(g->nin + 1, sizeof(RtTensor)), calloc(g->nin + 1, sizeof(RtTensor *)), err, errlen};
  RtTensor *out = calloc(g->nout + 1, sizeof *out);
  int rc = !e.view || !e.in || !out ? sess_fail(err, errlen, "out of memory")
         : rt_eval_loop(b, g->nout, g->per_example, limit, eval_batch, &e, out, vals);
  rt_batcher_free(b);
  free(e.view); free(e.in); free(out);
  return rc;
}

// ---- data ----
// A file of the program's data statement, looked for in dir when --data DIR is given.
static const char *in_dir(const char *dir, const char *file, char *buf, size_t n) {
  if (!dir) return file;
  const char *base = strrchr(file, '/');
  snprintf(buf, n, "%s/%s", dir, base ? base + 1 : file);
  return buf;
}

int rt_model_data(const RtDataSpec *d, const char *dir, RtDataset *out, char *err, size_t errlen) {
  static const char *names[2] = {"train", "test"};
  memset(out, 0, sizeof *out);
  if (!d->kind) return sess_fail(err, errlen, "the program reads no data set here");
  char b[8][4096];
  const char *f[8];
  for (int i = 0; i < d->nfiles; i++) f[i] = in_dir(dir, d->files[i], b[i], sizeof b[i]);
  const char *ddir = dir ? dir : d->dir;
  if (!d->nfiles && !ddir) return sess_fail(err, errlen, "the data set has no %s split", names[d->split]);
  if (!strcmp(d->kind, "idx"))
    return d->nfiles ? rt_data_idx(f[0], d->nfiles > 1 ? f[1] : NULL, d->normalize, out, err, errlen)
                     : rt_data_idx_dir(ddir, names[d->split], d->normalize, out, err, errlen);
  if (!strcmp(d->kind, "cifar10"))
    return d->nfiles ? rt_data_cifar10(f, d->nfiles, d->normalize, out, err, errlen)
                     : rt_data_cifar10_dir(ddir, names[d->split], d->normalize, out, err, errlen);
  if (!strcmp(d->kind, "csv")) return rt_data_csv(f[0], d->label, d->header, out, err, errlen);
  return rt_data_npy(f, d->nfiles, out, err, errlen);
}
