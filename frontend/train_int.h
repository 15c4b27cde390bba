// Shared by the training statements (train.c, evaluate.c, checkpoint.c) and
// the data binding (data.c): the session's Trainer and the helpers that bind
// data sets to compiled graphs. Frontend-internal.
#ifndef KILN_TRAIN_INT_H
#define KILN_TRAIN_INT_H
#include "builtins_int.h"
#include "optim.h"
#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "runtime/report.h"
#include <signal.h>

typedef struct { char *key; RtDataset ds; } LoadedData;
// Optimizer state of one parameter, by the parameter's name (so it survives a save and load).
typedef struct { char *name; int n; RtTensor slot[2]; } OptSlots;

// What a running train or evaluate statement holds that an error (which
// unwinds with longjmp) must not leak; freed by run_end and ev_train_free.
typedef struct {
  RtBatcher *batches, *eval_batches;
  RtProgress *progress;
  Program *step;
  RtTensor *out; int nout;       // the step's results
  RtTensor scalars[4];           // lr, bias corrections, step number
  struct Par *par;               // a step split over several devices (parallel.c)
  int sigint_set;                // on_sigint is installed; old is the handler to put back
  struct sigaction old;
} Run;

struct Trainer {
  Run run;
  RtMetrics *metrics;           // --log and --plot: every train statement of the session
  int64_t logged;               // steps logged so far (the log's step column)
  LoadedData **data; int ndata;   // each allocated alone: statements hold pointers into them
  char opt_kind[16];            // the optimizer whose state is held ("" none)
  OptSlots **slots; int nslots;   // each allocated alone: steps hold pointers into them
  int64_t step;                 // optimizer steps taken
  int epoch;                    // epochs completed: a resumed run continues after them
  int resumed;
};


typedef struct {
  int n;
  const char **names;
  const char **log_names;   // in --log files: eval_NAME, apart from the per-step loss
  Node **nodes;
  int *per_example;      // 1: a [B] vector, summed; 0: a scalar mean over the batch
  Program *pr;
  Node **ins; int nin;
} Metrics;

// The train statement's settings (train.c).
typedef struct {
  OptSpec opt;
  int64_t batch;
  int epochs;
  uint64_t seed;
  double clip, gamma, min_lr;
  int64_t warmup, step_size;
  int schedule;            // RT_SCHED_*
  const char *checkpoint;
  int shuffle;
} TrainSpec;

// The step graph's inputs and outputs, and where each one's value lives.
typedef struct {
  Program *pr;
  Node **ins; int nin;
  RtTensor **in_val;     // per input: the tensor it reads (NULL: a data column)
  int *in_col;           // per input: the data column, or -1
  int nout;
  RtTensor **out_dst;    // per output after the loss: the tensor the new value replaces
  int *in_place;         // per output: written over its out_dst (prog_out_shares), not swapped
  RtTensor *out;         // the step's results: out[0] the loss, then next values (Run owns them)
  RtTensor *out_args;    // the outputs a step is given: out, or out_dst where in place
  RtTensor *scalars;     // lr, bias corrections, step (the last; Run owns them)
  IrGraph *g;            // the graph pr was compiled from
  Node **grad_in;        // an update step's gradient inputs, one per parameter (else NULL)
} Step;
// Input i is the step's state (a parameter, an optimizer slot, a statistic),
// which stays on a GPU between steps; not a data column, a gradient input or a
// scalar the host sets each step.
int step_state_input(const Step *st, int i);

Trainer *trainer(Ev *ev);                      // the session's, made on first use
void drop_slots(Trainer *t);                   // forget the optimizer state
void run_end(Run *r);                          // free what a statement held; safe twice
OptSlots *slots_of(Trainer *t, const char *name);   // a parameter's optimizer state, made if new
// The split a statement reads (dflt when the value names none), loaded once per session.
RtDataset *split_data(Ev *ev, AstNode *e, int dflt, const char **name);
// The data column that feeds input `in` (columns bind to inputs in declaration order).
int column_of(Ev *ev, RtDataset *ds, Node *in, const char *dname, Span sp);
RtTensor as_input(const RtTensor *batch, Node *in);   // a batch viewed with the input's shape
double scalar_value(const RtTensor *t);
void metrics_compile(Ev *ev, AstNode *s, Metrics *m);       // an evaluate statement's graph
void metrics_run(Ev *ev, AstNode *s, Metrics *m, double *vals);   // its means over the split
void build_record_metrics(Ev *ev, AstNode *s, Metrics *m);   // kiln build (evaluate.c)
int save_checkpoint(Ev *ev, const char *path, char *err, size_t len);
void load_checkpoint(Ev *ev, const char *path, Span sp);

// A train statement over several devices (parallel.c, --device cuda:0,1 or
// cuda+cpu): each batch split between them in proportion to their measured
// speed, each computing its share's gradients, which are summed (through NCCL
// between GPUs, else through the host) and applied by the optimizer's update.
typedef struct Par Par;
// The parameters, data inputs and states the loss reads (data, params, states: ev's arena).
void step_inputs(Ev *ev, AstNode *s, Node *loss, Node ***data, int *nd, Node ***params, int *np, Node ***states, int *ns);
// The statistics updates a step computes (the last of each state) whose values
// depend only on ins: their states' values (dst) and the values (outs). The count.
int step_stat_updates(Ev *ev, Node **states, int ns, Node **ins, int nin, RtTensor **dst, Node **outs);
// The graph with training mode on and only the inputs it reads kept (ins, and
// vals and cols beside them, compacted; *nin updated).
IrGraph *step_graph(Ev *ev, Span sp, Node **outs, int nout, Node **ins, RtTensor **vals, int *cols, int *nin);
// The gradient step of a split train statement: its share's loss, the
// gradients of the loss times the share's fraction of the batch (an input), and
// the statistics updates. Inputs: data columns, params and states (val), the
// share (col COL_SHARE) and the random stream (COL_SEED), compacted to those read.
enum { COL_SHARE = -2, COL_SEED = -3 };
typedef struct {
  IrGraph *g;
  Node **ins; int nin;
  int *col;                // per input: its data column, -1 (its value in val), COL_SHARE or COL_SEED
  RtTensor **val;
  Node **params; int np;   // outputs 1..np: the gradients of these
  int nstat;               // then the statistics, which replace stat_dst's
  RtTensor **stat_dst;
} GradStep;
void grad_step(Ev *ev, AstNode *s, Node *loss, RtDataset *ds, const char *dname, GradStep *gs);
// g compiled on p, labelled "WHAT of FILE:LINE:COL on DEVICE" (-1: the CPU); an error at sp if it fails.
Program *step_compile(Ev *ev, Pipe *p, IrGraph *g, const char *what, int device, Span sp);
Par *par_new(Ev *ev, AstNode *s, Node *loss, const TrainSpec *ts, RtDataset *ds, const char *dname, Step *update);
// One step over the batch cols (n rows): loss the batch's mean; new values in update's outputs, as a step's.
void par_step(Par *p, Step *update, const RtTensor *cols, int64_t n, RtBatcher *b, int64_t seed, int first, Span sp,
              double *loss);
void par_report(Par *p);    // the split and what it gained, on stderr
void par_free(Par *p);

#endif
