// model.h: a model compiled ahead of time (`kiln build`), and the runtime that runs it
// without the compiler: model.c (sessions: weights, forward, training step, checkpoints)
// and standalone.c (the command line of a built binary: info, predict, train).
//
// `kiln build` writes the description below as C data next to the graphs' objects: the
// graphs' entry points (the same emitted C the JIT compiles), each argument's role and
// shape, the data set and training settings of the program's train statement, and the
// parameters as the program initialized them (a safetensors image). A worked example,
// what a library built with `kiln build --lib` does underneath its generated API:
//
//     extern const RtModel mlp_model;                  // written by kiln build
//     char err[512];
//     RtSession *s = rt_session_new(&mlp_model, 1, err, sizeof err);
//     if (!s || rt_session_load(s, "mlp.safetensors", err, sizeof err)) fail(err);
//     float x[784] = {0}, logits[10];
//     RtTensor in = {RT_F32, 2, {1, 784}, x, 0}, out = {RT_F32, 2, {1, 10}, logits, 0};
//     if (rt_session_forward(s, &in, &out, err, sizeof err)) fail(err);
//     rt_session_free(s);
//
// Runtime-only: this header and model.c include nothing outside runtime/.
#ifndef KILN_MODEL_H
#define KILN_MODEL_H
#include "cuda.h"
#include "data.h"
#include "report.h"
#include "rt.h"
#include <signal.h>

// What feeds a graph argument.
enum {
  RT_ARG_DATA,     // a data column (col) or, for predict, the caller's input
  RT_ARG_TENSOR,   // the session's named tensor: a parameter, optimizer state, statistics
  RT_ARG_LR,       // f64 scalars the host sets each training step
  RT_ARG_BIAS1,
  RT_ARG_BIAS2,
  RT_ARG_STEP,     // i64: (seed << 32) + step, dropout's stream salt
  RT_ARG_IN_PLACE, // a step's output: computed over the tensor it replaces, in that tensor's storage
  RT_ARG_SHARE,    // f64: the fraction of the batch a device's share is (the gradient step, below)
  RT_ARG_GRAD,     // the update's input: the summed gradient col (the gradient step's output 1 + col)
};

typedef struct { int64_t k; int sym; } RtDim;   // k * D[sym]; sym 0: the constant k

typedef struct {
  const char *name;   // the input's or tensor's name; for outputs, see RtGraph
  int role, col;      // RT_ARG_*; the data column of RT_ARG_DATA
  int dtype, ndim;    // RtDType
  RtDim shape[RT_MAXDIM];
} RtArg;

// A graph's CUDA kernels (kiln build --arch): a CUBIN per architecture and PTX
// for the newest, the kernels of its launch steps and the host function that
// launches them.
typedef struct { int sm; const unsigned char *image; int ptx; } RtCudaImage;   // a CUBIN for sm_<sm>, or PTX for compute_<sm>
typedef struct {
  const RtCudaImage *images; int nimages;
  const char *const *kernels; const int *block; int nsteps;
  RtCudaHost host;
  size_t (*workspace)(const int64_t *dims);
  const size_t *const_bytes;    // the graph's constants' sizes, for their copies
} RtGraphCuda;

// One compiled graph: args = {rt, dims, inputs..., constants..., outputs...}.
typedef struct {
  void (*entry)(void **args);
  size_t (*workspace)(const int64_t *dims);
  int nin, nconst, nout;
  const RtArg *ins, *outs;      // outs[i].name: predict: the value's name; step: the tensor
                                // its value replaces (outs[0] is the loss); evaluate: the metric
  const void *const *consts;
  const int *per_example;       // evaluate: 1 = a [B] vector summed, 0 = a batch mean
  const RtGraphCuda *cuda;      // NULL: built without CUDA kernels
} RtGraph;

// A data source as the program's data statement gave it (runtime/data.h loads it).
typedef struct {
  const char *kind;              // "idx", "cifar10", "csv", "npy"; NULL: none
  const char *dir;               // a directory in the format's layout, or NULL
  const char *files[8];          // or files of the split
  int nfiles, split;             // split: 0 train, 1 test
  int normalize, label, header;  // label: RT_DATA_NOLABEL for none
} RtDataSpec;

enum { RT_SCHED_CONSTANT, RT_SCHED_STEP, RT_SCHED_COSINE };
typedef struct {
  double lr, gamma, min_lr;
  int64_t warmup, step_size;
  int schedule;
} RtSchedule;

// The learning rate at a step: warmup, then the schedule (`kiln run` and built binaries).
double rt_schedule_lr(const RtSchedule *s, int64_t step, int64_t total, int epoch);

typedef struct {
  const char *name;              // the model (the program's file name without .kiln)
  const char *source;            // the program file it was built from
  const char *target_cpu;        // what the graphs were compiled for
  const char *const *symnames;   // symbolic dimension names, symnames[sym - 1]
  int nsyms;
  const RtGraph *predict, *step, *eval;   // NULL when the program has none
  const char *output;            // predict's output name
  // Training, when the program trains: its train statement's settings.
  RtDataSpec train_data, eval_data;
  const char *optimizer;         // "sgd", "adam", "adamw"
  double beta1, beta2;
  RtSchedule sched;
  int64_t batch, eval_batch;
  int epochs, shuffle;
  uint64_t seed;
  const char *save_path;         // the program's save statement, or NULL
  // safetensors images: the parameters as the program initialized them, and the
  // weights embedded with --embed-weights (NULL when none).
  const unsigned char *init, *init_end, *weights, *weights_end;
  // The training step split for several devices (built with --arch; else NULL): grad
  // computes a share's loss, gradients (outputs 1..ngrad, named by their parameters) and
  // statistics (then, named by the state they replace) over a share of the batch, its
  // loss scaled by RT_ARG_SHARE; update applies the optimizer to the gradients summed
  // (RT_ARG_GRAD), its outputs as the step's.
  const RtGraph *grad, *update;
  int ngrad;
} RtModel;

// ---- the training loop (model.c): `kiln run`'s train statement and built binaries ----
// Epochs of mini-batches from a batcher, with the progress display; the caller's
// callbacks take the steps and finish each epoch (evaluate, log, save).
typedef struct RtLoop RtLoop;
struct RtLoop {
  RtBatcher *batches;
  RtProgress *progress;          // NULL: none
  int64_t nexamples;             // per epoch, for the progress display
  int first_epoch, epochs;       // epochs [first_epoch, epochs), 0-based
  int64_t max_steps;             // > 0: end after this many steps (--max-steps)
  volatile sig_atomic_t *stop;   // set (by a SIGINT handler): stop after the current step
  void *ctx;                     // the callbacks'
  // One step on a batch of n examples, its loss in *loss. 0, or -1 to end the loop.
  int (*step)(RtLoop *l, const RtTensor *cols, int64_t n, int epoch, double *loss);
  // After an epoch's steps (the progress already told training is over): evaluate,
  // rt_progress_epoch_end, log, save. 0, or -1 to end the loop.
  int (*epoch_done)(RtLoop *l, int epoch, double mean_loss);
  // Set when the loop ends with RT_LOOP_NONFINITE: the loss, its epoch (0-based)
  // and its step within the epoch (1-based).
  double bad_loss;
  int bad_epoch;
  int64_t bad_step;
};
enum { RT_LOOP_NONFINITE = 2 };
// 0 when the epochs (or max_steps) ran out, 1 when *stop ended them, -1 when a callback did,
// RT_LOOP_NONFINITE when a step's loss was NaN or infinite: its gradients, and so the
// parameters the step updated, are not numbers any more, and every later step would only
// spread them; rt_loop_nonfinite_message says so.
int rt_train_loop(RtLoop *l);
// "the loss became nan at epoch 2, step 17; ..." with the usual causes, into buf.
void rt_loop_nonfinite_message(const RtLoop *l, char *buf, size_t len);

// The evaluate statement's averages (kiln run's and built binaries'): batches from b (from
// its start), run(ctx, cols, out) computing the nmet metrics of one batch into out[] (which
// the loop frees), each metric a batch mean (weighted by the batch's size) or, where
// per_example[k], a value per example (summed); over the first `limit` examples (0: all,
// in whole batches). vals[k] gets the means. 0, or -1 when run failed.
int rt_eval_loop(RtBatcher *b, int nmet, const int *per_example, int64_t limit,
                 int (*run)(void *ctx, const RtTensor *cols, RtTensor *out), void *ctx, RtTensor *out, double *vals);

// ---- sessions (model.c) ---------------------------------------------------------------
// A session holds the weights (the initial ones until a load), the optimizer state and a
// thread pool. Functions return 0 or -1 with a message in err.
typedef struct RtSession RtSession;
RtSession *rt_session_new(const RtModel *m, int threads, char *err, size_t errlen);
void rt_session_free(RtSession *s);
// Run the graphs on CUDA device `ordinal` from now on (the binary must carry
// kernels for its architecture: kiln build --arch). 0, or -1 with the reason.
int rt_session_device(RtSession *s, int ordinal, char *err, size_t errlen);
// Train on several devices from now on (model_par.c): devices[] are CUDA ordinals and
// -1 for the CPU's threads (rt_cuda_parse_devices), the first a GPU, where the other
// graphs run. Each batch splits between them in proportion to their measured speed
// (measured over the first steps, then every 50); the gradients are summed by NCCL
// between GPUs, each GPU applying the update to its copy of the state, or else on the
// host, the CPU applying it. Needs a binary built with --arch. 0, or -1 with the reason.
int rt_session_devices(RtSession *s, const int *devices, int n, char *err, size_t errlen);
// After training on several devices: "cuda:0 61% (9100 examples/s), cuda:1 39% (...);
// the steps ran at N examples/s, 1.6x cuda:0's speed alone"; "" when the session has
// not split a step, or too few to have measured.
void rt_session_split_report(const RtSession *s, char *buf, size_t len);
// "CUDA device 0: NAME (sm_90, ...)" or "cpu (N threads)"; on several devices, how a
// batch splits too.
void rt_session_describe_device(const RtSession *s, char *buf, size_t len);
// Parameters (and optimizer state, step and epoch, when the file has them) from a
// safetensors file; every parameter must be there with its dtype and shape.
int rt_session_load(RtSession *s, const char *path, char *err, size_t errlen);
int rt_session_load_embedded(RtSession *s, char *err, size_t errlen);   // --embed-weights
int rt_session_save(RtSession *s, const char *path, char *err, size_t errlen);
// The predict graph on caller tensors: ins[] are its data inputs in order (rt_model_inputs),
// out is filled in (rt_session_output_shape) by the caller, data included.
int rt_session_output_shape(RtSession *s, const RtTensor *ins, RtTensor *out, char *err, size_t errlen);
int rt_session_forward(RtSession *s, const RtTensor *ins, RtTensor *out, char *err, size_t errlen);
// One training step on a batch (cols: the data columns); lr < 0: the schedule's rate.
// On a device (rt_session_device) the parameters and optimizer state stay there
// between steps; the session brings them back when something reads or replaces
// them (save, forward, evaluate, load).
int rt_session_train_step(RtSession *s, const RtTensor *cols, double lr, double *loss, char *err,
                          size_t errlen);
// On a device: while a training step runs, the session copies the next batch of
// b (rt_batcher_peek) there, for the next step to find. b must be the batcher the
// steps' batches come from; NULL stops it (before b is freed).
void rt_session_copy_ahead(RtSession *s, RtBatcher *b);
int64_t rt_session_steps(const RtSession *s);   // optimizer steps taken
int rt_session_threads(const RtSession *s);     // its pool's threads (rt_threads)
int rt_session_epoch(const RtSession *s);        // epochs completed (saved in checkpoints)
void rt_session_set_epoch(RtSession *s, int epoch);
// The evaluate statement's metrics over a data set (limit > 0: the first limit examples).
int rt_session_evaluate(RtSession *s, const RtDataset *ds, int64_t limit, double *vals, char *err,
                        size_t errlen);
// A data spec's split, read with data.h's loaders (dir: --data DIR in place of the program's).
int rt_model_data(const RtDataSpec *d, const char *dir, RtDataset *out, char *err, size_t errlen);
// The number of parameter values (and their bytes, when bytes is not NULL), from the
// initial image; -1 if it cannot be read.
int64_t rt_model_param_count(const RtModel *m, int64_t *bytes);

// ---- the command line of a built binary (standalone.c) ---------------------------------
int rt_model_main(const RtModel *m, int argc, char **argv);

#endif
