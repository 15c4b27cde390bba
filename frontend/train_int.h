// Shared by the training statements (train.c, evaluate.c, checkpoint.c) and
// the data binding (data.c): the session's Trainer and the helpers that bind
// data sets to compiled graphs. Frontend-internal.
#ifndef KILN_TRAIN_INT_H
#define KILN_TRAIN_INT_H
#include "builtins_int.h"
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

#endif
