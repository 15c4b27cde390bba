// The command line of a binary `kiln build` made: info, predict and train over the
// sessions of model.c. The generated main() calls rt_model_main with the model's
// description. Every bad input ends in a message and exit status 1 (2 for usage).
#include "model.h"
#include "ckpt.h"
#include "split.h"
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *cmd, *weights, *out, *data, *resume, *progress, *device;
  const char *files[8]; int nfiles;
  int64_t threads, epochs, batch, max_steps, eval_examples;
  int ndev;                  // --device's count
} Args;

static void usage(const RtModel *m, FILE *f) {
  fprintf(f,
    "usage: %s COMMAND [OPTIONS]   (a model built by kiln build from %s)\n"
    "\n"
    "  info                               inputs, outputs, shapes, parameters, memory\n"
    "  predict [--weights W] INPUT... -o OUTPUT.npy\n"
    "                                     run the model on INPUT (.npy, .csv, or an IDX file;\n"
    "                                     one per input, in the order info lists them);\n"
    "                                     without -o the values are printed\n"
    "  train [--data DIR] [--epochs N] [--out CKPT.safetensors]\n"
    "                                     train as the program's train statement does\n"
    "\n"
    "options:\n"
    "  --weights FILE      safetensors weights (default: the embedded ones, if any)\n"
    "  --threads N         worker threads (default: all cores, or $KILN_THREADS)\n"
    "  --device cpu|cuda|cuda:N  where the graphs run (cuda: when built with kiln build --arch);\n"
    "                      train: cuda:0,1 or cuda+cpu split each batch over several GPUs or GPU and CPU\n"
    "  --batch N           predict: rows per call (default 1000); train: batch size\n"
    "  --data DIR          train: read the data set's files from DIR\n"
    "  --epochs N  --max-steps N  --eval-examples N  --resume CKPT  --progress bar|lines\n",
    m->name, m->source);
}

static int bad(const char *what, const char *v) {
  fprintf(stderr, "error: %s needs a number from 1 to 2147483647, not '%s'\n", what, v);
  return -1;
}

static int parse(const RtModel *m, int argc, char **argv, Args *a) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end;
    int64_t *num = !strcmp(s, "--batch") ? &a->batch : !strcmp(s, "--max-steps") ? &a->max_steps
                 : !strcmp(s, "--eval-examples") ? &a->eval_examples : !strcmp(s, "--threads") ? &a->threads
                 : !strcmp(s, "--epochs") ? &a->epochs : NULL;
    if (num) {
      long long x = v ? strtoll(v, &end, 10) : 0;
      if (!v || *end || x < 1 || x > 2147483647) return bad(s, v ? v : "");   // an int: epochs, threads
      *num = x;
      i++;
      continue;
    }
    const char **str = !strcmp(s, "--weights") ? &a->weights : !strcmp(s, "-o") || !strcmp(s, "--out") ? &a->out
                     : !strcmp(s, "--data") ? &a->data : !strcmp(s, "--resume") ? &a->resume
                     : !strcmp(s, "--progress") ? &a->progress : !strcmp(s, "--device") ? &a->device : NULL;
    if (str) {
      if (!v) { fprintf(stderr, "error: %s needs a value\n", s); return -1; }
      if (str == &a->progress && strcmp(v, "bar") && strcmp(v, "lines")) {
        fprintf(stderr, "error: --progress is bar or lines\n");
        return -1;
      }
      *str = v;
      i++;
    } else if (s[0] == '-' && s[1]) {
      fprintf(stderr, "error: unknown option '%s'\n\n", s);
      usage(m, stderr);
      return -1;
    } else if (!a->cmd) a->cmd = s;
    else if (a->nfiles < 8) a->files[a->nfiles++] = s;
    else { fprintf(stderr, "error: at most 8 input files\n"); return -1; }
  }
  return 0;
}

// ---- info ----
static void print_arg(const RtModel *m, const RtArg *a) {
  printf("  %s : %s[", a->name, rt_dtype_name((RtDType)a->dtype));
  for (int d = 0; d < a->ndim; d++) {
    RtDim x = a->shape[d];
    const char *sep = d ? ", " : "";
    if (!x.sym) printf("%s%lld", sep, (long long)x.k);
    else if (x.k == 1) printf("%s%s", sep, m->symnames[x.sym - 1]);
    else printf("%s%lld*%s", sep, (long long)x.k, m->symnames[x.sym - 1]);
  }
  printf("]\n");
}

// Scratch bytes of a graph with every symbolic dimension at n.
static size_t workspace_at(const RtGraph *g, int64_t n) {
  int64_t D[65];
  for (int i = 0; i < 65; i++) D[i] = n;
  return g->workspace(D);
}

static int info(const RtModel *m) {
  printf("model %s (built from %s for %s)\n", m->name, m->source, m->target_cpu);
  if (m->predict) {
    printf("inputs (predict's files, in this order):\n");
    for (int c = 0; c < m->predict->nin; c++)   // by column: the order predict takes them
      for (int i = 0; i < m->predict->nin; i++)
        if (m->predict->ins[i].role == RT_ARG_DATA && m->predict->ins[i].col == c) print_arg(m, &m->predict->ins[i]);
    printf("output:\n");
    print_arg(m, &m->predict->outs[0]);
  }
  int64_t bytes, n = rt_model_param_count(m, &bytes);
  printf("parameters: %lld values, %lld bytes", (long long)n, (long long)bytes);
  printf(!n ? "\n" : m->weights ? " (weights embedded)\n" : " (weights loaded at start-up: --weights FILE)\n");
  if (m->predict)
    printf("planned peak memory, predict: %zu bytes of scratch at batch 1, %zu at batch 1000\n",
           workspace_at(m->predict, 1), workspace_at(m->predict, 1000));
  if (m->step) {
    printf("planned peak memory, training step: %zu bytes of scratch at batch %lld\n", workspace_at(m->step, m->batch),
           (long long)m->batch);
    printf("training: %s lr %g, batch %lld, %d epoch%s, seed %llu, data %s %s\n", m->optimizer, m->sched.lr,
           (long long)m->batch, m->epochs, m->epochs == 1 ? "" : "s", (unsigned long long)m->seed, m->train_data.kind,
           m->train_data.dir ? m->train_data.dir : m->train_data.nfiles ? m->train_data.files[0] : "");
  }
  if (m->eval) {
    printf("evaluate:");
    for (int i = 0; i < m->eval->nout; i++) printf(" %s", m->eval->outs[i].name);
    printf("\n");
  }
  const RtGraph *any = m->predict ? m->predict : m->step ? m->step : m->eval;
  printf("CUDA kernels:");
  for (int i = 0; any && any->cuda && i < any->cuda->nimages; i++)   // compute_XX: PTX, for later GPUs
    printf(" %s_%d", any->cuda->images[i].ptx ? "compute" : "sm", any->cuda->images[i].sm);
  printf(any && any->cuda ? " (--device cuda)\n" : " none (kiln build --arch sm_XX carries them)\n");
  if (m->grad && m->grad->cuda)
    printf("several devices: train splits each batch over GPUs (--device cuda:0,1) or GPU and CPU (--device cuda+cpu)\n");
  return 0;
}

// ---- predict ----
static int weights(RtSession *s, const Args *a, const RtModel *m, char *err, size_t n) {
  if (a->weights) return rt_session_load(s, a->weights, err, n);
  if (m->weights) return rt_session_load_embedded(s, err, n);
  if (!rt_model_param_count(m, NULL)) return 0;   // nothing to load
  snprintf(err, n, "no weights: give --weights FILE.safetensors (this binary embeds none)");
  return -1;
}

// An input file as a tensor: .npy as it is, an array of an .npz archive (A.npz:NAME,
// or A.npz holding one), CSV rows without a label, IDX images (normalized as the
// program's data statement says).
static int read_input(const RtModel *m, const char *path, RtTensor *t, char *err, size_t n) {
  size_t len = strlen(path);
  RtDataset ds;
  int rc;
  char archive[4096];
  if (len > 4 && !strcmp(path + len - 4, ".npy")) return rt_npy_load(path, t, err, n);
  if ((len > 4 && !strcmp(path + len - 4, ".npz")) || rt_npz_split(path, archive, sizeof archive))
    return rt_npz_load_one(path, t, err, n);
  if (len > 4 && !strcmp(path + len - 4, ".csv")) rc = rt_data_csv(path, RT_DATA_NOLABEL, -1, &ds, err, n);
  else rc = rt_data_idx(path, NULL, m->train_data.normalize, &ds, err, n);
  if (rc) return -1;
  *t = ds.col[0].t;          // the dataset's one column is ours now
  ds.col[0].t.data = NULL;
  ds.col[0].t.owns = 0;
  rt_dataset_free(&ds);
  return 0;
}

// The rows [lo, hi) of t, as a view.
static RtTensor rows(const RtTensor *t, int64_t lo, int64_t hi) {
  RtTensor v = *t;
  v.owns = 0;
  v.shape[0] = hi - lo;
  v.data = (char *)t->data + (size_t)lo * (t->ndim ? rt_tensor_nbytes(t) / (size_t)(t->shape[0] ? t->shape[0] : 1) : 0);
  return v;
}

// The output of rows [lo, hi) of the inputs into out (made on the first call, for all
// total rows when the output has a row per example, else for this one call).
static int predict_rows(RtSession *s, int per_row, const RtTensor *in, int nin, int64_t lo, int64_t hi, int64_t total,
                        RtTensor *out, char *err, size_t n) {
  RtTensor part[8], o;
  for (int i = 0; i < nin; i++) part[i] = rows(&in[i], lo, hi);
  if (rt_session_output_shape(s, part, &o, err, n)) return -1;
  int64_t k = per_row ? o.shape[0] / (hi - lo) : 0;   // output rows per example
  if (!out->data) {
    if (per_row) o.shape[0] = k * total;
    if (!(*out = rt_tensor_new(o.dtype, o.ndim, o.shape)).data) return snprintf(err, n, "out of memory"), -1;
  }
  RtTensor dst = per_row ? rows(out, lo * k, hi * k) : *out;
  return rt_session_forward(s, part, &dst, err, n);
}

// A file of another dtype than its input (NumPy's default float64, uint8 pixels read
// as i32) is converted as training converts its data (rt_convert).
static int to_dtype(RtTensor *t, RtDType dt, const char *path, char *err, size_t n) {
  int64_t bad = rt_first_inexact(t->data, t->dtype, dt, rt_tensor_numel(t));
  if (bad >= 0) {
    double v = t->dtype == RT_F32 ? ((const float *)t->data)[bad] : ((const double *)t->data)[bad];
    snprintf(err, n, "%s: %g (element %lld) is not a whole number in %s's range, which its input takes", path, v,
             (long long)bad, rt_dtype_name(dt));
    return -1;
  }
  RtTensor c = rt_tensor_new(dt, t->ndim, t->shape);
  if (!c.data) return snprintf(err, n, "out of memory"), -1;
  rt_convert(c.data, dt, t->data, t->dtype, rt_tensor_numel(t));
  rt_tensor_free(t);
  *t = c;
  return 0;
}

static int predict(const RtModel *m, RtSession *s, const Args *a, char *err, size_t n) {
  const RtGraph *g = m->predict;
  int need = 0;
  for (int i = 0; i < g->nin; i++) need += g->ins[i].role == RT_ARG_DATA;
  if (a->nfiles != need) {
    snprintf(err, n, "predict takes %d input file%s (see info), got %d", need, need == 1 ? "" : "s", a->nfiles);
    return -1;
  }
  if (weights(s, a, m, err, n)) return -1;
  RtTensor in[8] = {{0}}, out = {0};
  int rc = 0;
  for (int i = 0, j = 0; i < a->nfiles && !rc; i++, j++) {
    rc = read_input(m, a->files[i], &in[i], err, n);
    if (!rc && in[i].ndim < 1) rc = -1, snprintf(err, n, "%s: a 0-d array; give one row per example", a->files[i]);
    while (g->ins[j].role != RT_ARG_DATA) j++;
    if (!rc && (int)in[i].dtype != g->ins[j].dtype) rc = to_dtype(&in[i], (RtDType)g->ins[j].dtype, a->files[i], err, n);
  }
  int64_t total = rc || !need ? 1 : in[0].shape[0], step = a->batch ? a->batch : 1000;
  for (int i = 1; i < a->nfiles && !rc; i++)
    if (in[i].shape[0] != total) rc = -1, snprintf(err, n, "%s has %lld rows, %s %lld", a->files[i], (long long)in[i].shape[0], a->files[0], (long long)total);
  if (!rc && !total) rc = -1, snprintf(err, n, "%s has no rows", a->files[0]);
  // An output with a row per example (its first axis grows with the batch) is filled a
  // batch at a time; any other needs all rows in one call.
  int per_row = need && g->outs[0].ndim && g->outs[0].shape[0].sym;
  if (!per_row) step = total;
  for (int64_t lo = 0; !rc && lo < total; lo += step)
    rc = predict_rows(s, per_row, in, a->nfiles, lo, lo + step < total ? lo + step : total, total, &out, err, n);
  if (!rc && a->out) rc = rt_npy_save(a->out, &out, err, n);
  else if (!rc) { rt_tensor_print(stdout, &out); putchar('\n'); }
  for (int i = 0; i < a->nfiles; i++) rt_tensor_free(&in[i]);
  rt_tensor_free(&out);
  return rc;
}

// ---- train ----
static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) { (void)sig; interrupted = 1; }

typedef struct {
  const RtModel *m;
  RtSession *s;
  const Args *a;
  const RtDataset *test;
  int64_t total;                 // steps in all epochs, for the schedule
  const char *names[16];
  double vals[16];
  int nmet;
  char *err; size_t n;
} Train;

static int train_step(RtLoop *l, const RtTensor *cols, int64_t n, int epoch, double *loss) {
  Train *t = l->ctx;
  double lr = rt_schedule_lr(&t->m->sched, rt_session_steps(t->s), t->total, epoch);
  return rt_session_train_step(t->s, cols, lr, loss, t->err, t->n);
}

static int train_epoch_done(RtLoop *l, int epoch, double mean) {
  Train *t = l->ctx;
  rt_session_set_epoch(t->s, epoch + 1);
  if (t->nmet && rt_session_evaluate(t->s, t->test, t->a->eval_examples, t->vals, t->err, t->n)) return -1;
  rt_progress_epoch_end(l->progress, mean, t->names, t->vals, t->nmet);
  return 0;
}

// The train statement's loop (rt_train_loop, as kiln run's) over this binary's step.
static int train(const RtModel *m, RtSession *s, const Args *a, char *err, size_t n) {
  if (!m->step) { snprintf(err, n, "%s has no train statement", m->name); return -1; }
  if (a->resume && rt_session_load(s, a->resume, err, n)) return -1;
  const char *outp = a->out ? a->out : m->save_path;
  char dflt[512];
  if (!outp) snprintf(dflt, sizeof dflt, "%s.safetensors", m->name), outp = dflt;
  RtDataset ds, test = {0};
  if (rt_check_writable(outp, err, n)) return -1;   // now, not after the training
  if (rt_model_data(&m->train_data, a->data, &ds, err, n)) return -1;
  if (m->eval && m->eval_data.kind && rt_model_data(&m->eval_data, a->data, &test, err, n)) { rt_dataset_free(&ds); return -1; }
  const RtGraph *g = m->step;
  RtDType want[RT_DATA_MAXCOL];
  for (int j = 0; j < ds.ncol; j++) want[j] = ds.col[j].t.dtype;
  int rc = 0;
  for (int i = 0; i < g->nin && !rc; i++)
    if (g->ins[i].role == RT_ARG_DATA && g->ins[i].col >= ds.ncol)
      rc = -1, snprintf(err, n, "%s has %d columns; input '%s' needs column %d", ds.source, ds.ncol, g->ins[i].name, g->ins[i].col + 1);
    else if (g->ins[i].role == RT_ARG_DATA) want[g->ins[i].col] = (RtDType)g->ins[i].dtype;
  int epochs = a->epochs ? (int)a->epochs : m->epochs;
  int64_t batch = a->batch ? a->batch : m->batch;
  if (!rc && a->ndev > 1 && batch < a->ndev)
    rc = -1, snprintf(err, n, "batch %lld is smaller than the %d devices it is split over", (long long)batch, a->ndev);
  RtBatcher *b = rc ? NULL : rt_batcher_new(&ds, batch, m->shuffle, m->seed, want,
                                             rt_spare_cpu(rt_session_threads(s)), err, n);
  if (!b) { rt_dataset_free(&ds); rt_dataset_free(&test); return -1; }
  Train t = {m, s, a, &test, rt_batcher_nbatches(b) * epochs, {0}, {0}, 0, err, n};
  t.nmet = m->eval && test.n ? (m->eval->nout < 16 ? m->eval->nout : 16) : 0;
  for (int i = 0; i < t.nmet; i++) t.names[i] = m->eval->outs[i].name;
  RtLoop l = {b, rt_progress_new(stderr, a->progress ? !strcmp(a->progress, "bar") : -1), ds.n, rt_session_epoch(s), epochs,
              a->max_steps, &interrupted, &t, train_step, train_epoch_done};
  struct sigaction sa = {0}, old;
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND;   // a second Ctrl-C ends the process at once
  sigaction(SIGINT, &sa, &old);
  rt_session_copy_ahead(s, b);   // on a GPU, the next batch goes there while a step runs
  rc = rt_train_loop(&l);
  rt_session_copy_ahead(s, NULL);
  sigaction(SIGINT, &old, NULL);
  rt_progress_finish(l.progress, rc == 1 || rc == RT_LOOP_NONFINITE);
  if (rc == RT_LOOP_NONFINITE) {   // nothing saved: the parameters are not numbers any more
    rt_loop_nonfinite_message(&l, err, n);
    rc = -1;
  }
  rt_progress_free(l.progress);
  char split[1024];
  rt_session_split_report(s, split, sizeof split);
  if (split[0]) fprintf(stderr, "each batch was split %s\n", split);
  rt_batcher_free(b);
  if (rc >= 0) {   // trained, or stopped by Ctrl-C: save either way
    int stopped = rc;
    rc = rt_session_save(s, outp, err, n);
    if (!rc) fprintf(stderr, "%s: saved %s\n", stopped ? "interrupted" : "trained", outp);
    if (!rc && stopped) rc = 130;
  }
  for (int i = 0; !rc && i < t.nmet; i++) printf("%s: %.6g\n", t.names[i], t.vals[i]);
  rt_dataset_free(&ds);
  rt_dataset_free(&test);
  return rc;
}

int rt_model_main(const RtModel *m, int argc, char **argv) {
  Args a = {0};
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(m, stdout); return 0; }
  if (parse(m, argc, argv, &a)) return 2;
  if (!a.cmd) { usage(m, stderr); return 2; }
  if (!strcmp(a.cmd, "info")) return info(m);
  if (strcmp(a.cmd, "predict") && strcmp(a.cmd, "train")) {
    fprintf(stderr, "error: unknown command '%s'\n\n", a.cmd);
    usage(m, stderr);
    return 2;
  }
  if (!strcmp(a.cmd, "predict") && !m->predict) { fprintf(stderr, "error: %s has no prediction graph\n", m->name); return 1; }
  char err[2048];
  RtSession *s = rt_session_new(m, (int)a.threads, err, sizeof err);
  int devs[RT_SPLIT_MAX], ndev = a.ndev = a.device ? rt_cuda_parse_devices(a.device, devs, RT_SPLIT_MAX) : 0;
  if (ndev < 0) {
    fprintf(stderr, "error: --device is cpu, cuda, cuda:N, cuda:0,1 (several GPUs) or cuda+cpu (GPU and CPU threads), "
            "not '%s'\n", a.device);
    rt_session_free(s);
    return 2;
  }
  if (ndev > 1 && strcmp(a.cmd, "train")) {
    fprintf(stderr, "error: --device %s: several devices split training batches; %s runs on one (cuda:N)\n", a.device, a.cmd);
    rt_session_free(s);
    return 2;
  }
  if (s && ndev && devs[0] >= 0) {
    if (rt_session_devices(s, devs, ndev, err, sizeof err)) {
      fprintf(stderr, "error: --device %s: %s\n", a.device, err);
      rt_session_free(s);
      return 1;
    }
    rt_session_describe_device(s, err, sizeof err);
    fprintf(stderr, "running on %s\n", err);
  }
  int rc = !s ? 1 : !strcmp(a.cmd, "predict") ? predict(m, s, &a, err, sizeof err) : train(m, s, &a, err, sizeof err);
  if (rc < 0 || !s) fprintf(stderr, "error: %s\n", err), rc = 1;
  rt_session_free(s);
  fflush(stdout);
  return rc;
}
