// The evaluator: runs a program's statements, building IR for every tensor
// expression (it traces; it never computes tensor values itself). Values that
// must be seen (print, the REPL's echo, parameter initializers) are compiled
// through the pipeline and run.
#ifndef KILN_EVAL_H
#define KILN_EVAL_H
#include "ast.h"
#include "parse.h"
#include "pipeline.h"
#include <setjmp.h>

#ifndef KILN_LIB_DIR
#define KILN_LIB_DIR "lib"
#endif

typedef struct Value Value;
typedef struct Func Func;
typedef struct Env Env;

typedef enum { V_NONE, V_TENSOR, V_FUNC, V_DTYPE, V_STR, V_LIST, V_DATA } VKind;

// A data source (`data fmnist = idx(...)`) and, after `.train`/`.test`, one split.
enum { SPLIT_NONE = -1, SPLIT_TRAIN, SPLIT_TEST, NSPLITS };
typedef struct {
  const char *kind;            // "idx", "cifar10", "csv", "npy"
  const char *dir;             // a directory in the format's standard layout, or NULL
  const char *files[NSPLITS][8]; int nfiles[NSPLITS];   // files given per split
  int normalize, label, header;
  int split;                   // SPLIT_NONE until chosen (training then reads the train split)
  const char *name;            // for messages: "fmnist.train"
} DataSrc;

struct Value {
  VKind kind;
  Node *t;           // V_TENSOR
  int weak;          // a bare number: takes the other operand's dtype
  Func *fn;          // V_FUNC
  DType dt;          // V_DTYPE
  const char *s;     // V_STR
  Value *items;      // V_LIST
  int n;
  DataSrc *data;     // V_DATA
};

typedef struct Builtin Builtin;
struct Func {
  enum { FN_USER, FN_BUILTIN, FN_GRAD } kind;
  const char *name;
  AstNode *def;      // FN_USER: params in def->items, body in def->body
  Env *closure;
  const Builtin *b;  // FN_BUILTIN
  Func *inner;       // FN_GRAD: d inner / d argument argnum
  int argnum;
};

typedef struct { const char *name; Value v; Span span; } Binding;
struct Env { Env *parent; Binding *b; int n, cap; };

// A parameter's current value lives here, outside the IR. State (batch-norm
// statistics) is saved with the parameters but not trained.
// run: the ev_run that declared it (one file with its imports, or one REPL
// chunk); where: its declaration, for the error a second one in the same run gets.
typedef struct { Node *node; RtTensor value; int state; int run; Span where; } Param;

// A declared input; run and where as for Param.
typedef struct { Node *node; int run; Span where; } InputDecl;

// Training settings the command line overrides (0 / NULL: not given).
typedef struct {
  int epochs, batch, seed_set;
  double lr;
  uint64_t seed;
  const char *log, *plot, *resume, *checkpoint;
  int64_t max_steps, eval_examples;   // quick checks: stop training / evaluation early
  int progress;              // -1: a bar when stderr is a terminal; 0: lines; 1: bar
} TrainOpts;

typedef struct Trainer Trainer;   // train.c: optimizer state, loaded data sets

// A compiled graph kept for reuse within the session, keyed by its output.
typedef struct { Node **outs; int nout; Node **ins; int nin; Program *prog; } CachedProgram;

#define EV_MAX_DEPTH 200   // user function calls nested while tracing

typedef struct Ev {
  IrCtx *c;
  Arena *arena;          // ASTs, sources, values: lives as long as the session
  Diag *diag;
  Pipe pipe;
  Env *globals;
  Param *params; int nparams;
  CachedProgram *progs; int nprogs;
  FILE *out;             // where print writes
  uint64_t seed;         // the session's base seed
  uint64_t rng_count;    // random tensors made so far (each gets its own stream)
  int depth;             // call depth, to stop runaway recursion
  struct { const char *fn; Span at; } frames[EV_MAX_DEPTH];   // the calls being traced, for errors' notes
  int run;               // top-level ev_run calls so far (a file, a REPL chunk)
  long calls;            // calls traced in the current statement
  int echo;              // REPL: echo expression statements
  int via_ffi;           // call compiled graphs through libffi
  jmp_buf *on_error;
  const char *lib_dir;
  struct { const char *path; int running; } *imports;   // files imported so far
  int nimports;
  InputDecl *inputs; int ninputs;        // declared inputs, in declaration order (data columns bind so)
  Node *training, *step;                 // mode inputs, replaced when a graph compiles
  const char *scope;                     // parameter-name prefix inside layer calls
  struct { const char *key; int n; } *scopes; int nscopes;   // calls per scope and function
  struct { Node *state, *value; } *updates; int nupdates;    // state updates a training step makes
  TrainOpts topts;
  Trainer *tr;
  AstNode *next_eval;                    // the evaluate statement after the running train
  int interrupted;                       // Ctrl-C stopped training (exit status 130)
  int binding_data;                      // compiling for evaluate: inputs get data
  int tune, tune_threads;                // kiln run --tune: time conv2d's lowerings (conv.c)
  char **conv_notes; int nconv_notes;    // conv2d lowering choices `kiln ir` printed
  struct Build *build;                   // kiln build: train, evaluate, save record (build.h)
} Ev;

Ev *ev_new(FILE *out, Diag *diag);
void ev_free(Ev *ev);
// Run a whole program (or one REPL chunk). 0, or -1 with located errors in diag.
int ev_run(Ev *ev, const char *name, const char *text);
// Parse and evaluate one expression statement, returning its tensor's value (REPL :time, C API).
int ev_eval_tensor(Ev *ev, const char *name, const char *text, RtTensor *out, Node **node);
// Compile (cached) and run a graph with no free inputs but parameters.
int ev_compute(Ev *ev, Node *n, Span where, RtTensor *out);
// Several values from one compiled graph (what `print a, b` does).
int ev_compute_many(Ev *ev, Node **n, int count, Span where, RtTensor *out);
Value *ev_lookup(Ev *ev, const char *name);
RtTensor *ev_param_value(Ev *ev, Node *param);   // a parameter's current value
Param *ev_param(Ev *ev, Node *param);             // its record, NULL if n is not a parameter
// The mode inputs: `training` (bool, true in a training step) and `step`
// (i64, the step number, salting dropout's random stream).
Node *ev_training(Ev *ev);
Node *ev_step(Ev *ev);
// n with the modes fixed: training or not, step 0 (what printing computes).
Node *ev_in_mode(Ev *ev, Node *n, int training);
// A fresh stream number for an unseeded random tensor.
uint64_t ev_next_seed(Ev *ev);
// Statements of train.c
Value ev_data_value(Ev *ev, Env *env, AstNode *s);
void ev_exec_train(Ev *ev, AstNode *s);
void ev_exec_evaluate(Ev *ev, AstNode *s);
int ev_eval_saves(AstNode *s);   // an evaluate statement with save=: it writes rows, not metrics
void ev_exec_save(Ev *ev, AstNode *s);
void ev_exec_load(Ev *ev, AstNode *s);
Value ev_eval_expr(Ev *ev, Env *env, AstNode *e);
// Bind in's sizes, allocate the outputs if alloc (else out[] are given), run;
// fails at where (freeing what it allocated).
void ev_run_program(Ev *ev, Program *pr, const RtTensor *in, RtTensor *out, int alloc, Span where);
// The same; for a program on a GPU, meanwhile(ctx) runs on the host while the
// device works (a training step queues the next batch's copies). Its failure
// (non-zero, the reason in the pipe's cx->err) fails the run once it is done.
void ev_run_program_while(Ev *ev, Program *pr, const RtTensor *in, RtTensor *out, int alloc, Span where,
                          int (*meanwhile)(void *), void *ctx);
// The compiled graph for outs in evaluation mode (cached), its inputs in call order.
Program *ev_program(Ev *ev, Node **outs, int nout, Node ***ins, int *nin, Span where);
// kiln run --profile: each compiled graph's kernel times (training steps print theirs when they end).
void ev_profile_print(Ev *ev, FILE *f);
void ev_train_free(Ev *ev);
// Start the JIT and the thread pool (threads <= 0: all cores). 0, or -1 with a message.
int ev_start(Ev *ev, int threads, char *err, size_t errlen);
char *ev_read_file(const char *path, size_t *len);
// The program file being run: importing it from itself is then a cycle.
void ev_running_file(Ev *ev, const char *path);   // malloc'd, NUL-terminated; NULL if unreadable

// Used by builtins.c
_Noreturn void ev_fail(Ev *ev, Span sp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// After an error is reported: notes for the calls it happened in, then unwind to the statement.
_Noreturn void ev_unwind(Ev *ev);
Node *ev_check(Ev *ev, Node *n, Span sp);   // n or fail with the IR's message at sp
Node *ev_tensor(Ev *ev, Value v, Span sp, const char *what);
// The same without giving a bare number its final dtype (operators and
// arguments that read constants use it: the literal's exact value).
Node *ev_raw(Ev *ev, Value v, Span sp, const char *what);
Value ev_tval(Node *n);
int64_t ev_const_int(Ev *ev, Value v, Span sp, const char *what);
// Whether *n is a constant, folding one computed from constants: then *n is a
// CONST, or a broadcast of a one-element CONST when its elements are equal.
int ev_fold_const(Ev *ev, Node **n);
// The same for a 0-d *n, with its value.
int ev_scalar_const(Ev *ev, Node **n, double *x);
// normal's mean and std, or uniform's low and high, are ones it can draw from.
void ev_check_random(Ev *ev, int normal, double p0, double p1, Span sp0, Span sp1);
Value ev_call(Ev *ev, Func *f, Value *args, int nargs, Span sp);
// Whether train statements train in this run: not under kiln build (which records
// them), kiln ir or emit-c (which show their graphs and stop).
static inline int ev_trains(const Ev *ev) { return !ev->build && !ev->pipe.dump_after && !ev->pipe.emit_c; }
void ev_unify_weak(Ev *ev, Value *a, Value *b, Span sa, Span sb, int widen);
// The gradient of y (which must be a scalar: `needs` words the error) w.r.t. wrt.
Node *ev_grad(Ev *ev, Node *y, Node *wrt, Span ysp, Span wsp, const char *needs);   // a bare number takes the other's dtype

typedef struct {
  Value *pos; Span *pos_span; int npos;
  const char **kw; Value *kwv; Span *kw_span; int nkw;
  Span span;
} Args;
struct Builtin {
  const char *name;
  Value (*fn)(Ev *ev, const Builtin *b, Args *a);
  int op;                // an IR op for the generic handlers
  const char *usage;     // for errors and :help
};
const Builtin *builtin_find(const char *name);
int builtin_names(const char **out, int max);
// The candidate closest to a misspelt name (a few edits, letter case aside), or NULL.
const char *ev_nearest(const char *name, const char *const *cands, int n);
// " (did you mean 'NEAR'?)" in buf, or "" for a NULL near: to append to a message.
const char *ev_did_you_mean(char *buf, size_t size, const char *near);   // every builtin's name (at most max); the count

#endif
