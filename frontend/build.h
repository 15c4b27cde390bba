// kiln build (build.c): while a program runs for a build, its train, evaluate and save
// statements record what a standalone binary needs instead of running.
#ifndef KILN_BUILD_H
#define KILN_BUILD_H
#include "eval.h"
#include "runtime/model.h"

// A compiled graph and where each of its arguments comes from (RtArg's roles).
typedef struct {
  Program *pr;                 // NULL: none; owned by the session's caches or by the Build
  int *role, *col;             // per input of pr->g
  const char **out_names;      // per output
  int *per_example;            // evaluate's metrics
} BuildGraph;

typedef struct Build {
  BuildGraph step, eval, predict;
  BuildGraph grad, update;     // split (--arch): the step as parallel.c splits it over devices
  int split, ngrad;            // ngrad: grad's outputs 1..ngrad are gradients, then statistics
  int ntrain;                  // train statements seen (a binary trains one)
  RtDataSpec train_data, eval_data;
  const char *optimizer;
  double beta1, beta2;
  RtSchedule sched;
  int64_t batch, eval_batch;
  int epochs, shuffle;
  uint64_t seed;
  const char *save_path;
} Build;

// The data column each input of a graph reads: its place among the declared inputs.
int build_input_column(Ev *ev, Node *in);
// A data source's split as the runtime's loader spec.
void build_data_spec(Ev *ev, AstNode *e, int dflt, RtDataSpec *out);

int build_main(int argc, char **argv);

#endif
