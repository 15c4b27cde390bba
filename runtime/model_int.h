// model_int.h: what model.c's sessions share with model_par.c, which splits the
// training step over several devices. Runtime-internal.
#ifndef KILN_MODEL_INT_H
#define KILN_MODEL_INT_H
#include "model.h"

typedef struct { char *name; RtTensor t; } Named;
// A session tensor kept on a device while the training step runs there: its
// copy (cur) and the step's next values beside it (next; 0 while the step has
// written none there, or updates it in place). The host's copy is stale until sync_host.
typedef struct { Named *n; CUdeviceptr cur, next; size_t bytes; } Twin;
typedef struct { Twin *t; int n; } Twins;
// A graph's program loaded on a device at its first run there.
typedef struct { const RtGraph *g; RtCudaProg p; } DevProg;
enum { SESS_NPROGS = 5 };   // predict, step, eval, grad, update
typedef struct RtPar RtPar;

struct RtSession {
  const RtModel *m;
  KRt *rt;
  Named **ts; int nts;         // each allocated alone (graph arguments point into them); parameters first (the initial image's order), then state made on use
  int nparams;
  int64_t step;
  int epoch;
  RtTensor *next;              // the training step's second buffers, one per output
  RtTensor scalars[4];         // lr, bias corrections, step salt
  RtCuda cu;                   // rt_session_device: the driver, the device, each graph loaded there
  RtCudaExec *cx;
  DevProg dev[SESS_NPROGS];
  Twins tw;                    // the training step's state on the device
  int host_stale;              // a step wrote the twins since the host's copies were brought back
  RtBatcher *ahead;            // rt_session_copy_ahead: its next batch copied while a step runs
  RtPar *par;                  // rt_session_devices: the step split over several (model_par.c)
};

int sess_fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
Named *sess_find(RtSession *s, const char *name);
// A state tensor the step reads that no file gave (fresh optimizer state): zeros.
RtTensor *sess_state_of(RtSession *s, const RtArg *a);
// The dims from the inputs' shapes, every input's dtype and shape checked.
int sess_bind(const RtModel *m, const RtGraph *g, RtTensor *const *in, int64_t *D, char *err, size_t errlen);
// A data column viewed with an input's shape: [n, ...] with the same values per example.
int sess_as_input(const RtModel *m, const RtTensor *col, const RtArg *a, RtTensor *v, char *err, size_t errlen);
RtTensor sess_out_tensor(const RtArg *a, const int64_t *D);
// t made with a's shape at D, unless it has it already.
void sess_ensure(RtTensor *t, const RtArg *a, const int64_t *D);
// A step's outputs: each written over the tensor it replaces (RT_ARG_IN_PLACE) or
// into next[o] (made with its shape); after the run, sess_take_next makes the next
// values (outputs 1..) the session's, swapping their storage.
int sess_outputs(RtSession *s, const RtGraph *g, const int64_t *D, RtTensor *next, char *err, size_t errlen);
void sess_take_next(RtSession *s, const RtGraph *g, RtTensor *next);
// The scalar argument of a role (RT_ARG_LR .. RT_ARG_STEP), made at first use; and
// all of them for the step about to run: lr (< 0: the schedule's base rate), the
// bias corrections of step s->step + 1, the random stream's salt.
RtTensor *sess_scalar(RtSession *s, int role);
void sess_step_scalars(RtSession *s, double lr);
// host[] and bytes[] of g's arguments for rt_cuda_run: in, the constants, out.
void sess_args(const RtGraph *g, RtTensor *const *in, const RtTensor *out, void **host, size_t *bytes);
// g on the CPU's threads.
int sess_run_cpu(RtSession *s, const RtGraph *g, const int64_t *D, RtTensor *const *in, RtTensor *out, char *err, size_t errlen);
// g's program on cx's device (dev: what is loaded there), loaded at its first run.
RtCudaProg *sess_device_prog(RtCudaExec *cx, DevProg *dev, const RtGraph *g, char *err, size_t errlen);
// n's copy on cx's device (made and uploaded at first), and all of them freed.
Twin *sess_twin_of(RtCudaExec *cx, Twins *tw, Named *n, char *err, size_t errlen);
void sess_drop_twins(RtCudaExec *cx, Twins *tw);
void sess_swap_twins(Twins *tw);   // the next values (where written) become the current ones

// model_par.c
int rt_par_step(RtSession *s, const RtTensor *cols, double lr, double *loss, char *err, size_t errlen);
void rt_par_drop_twins(RtSession *s);   // the other GPUs' copies of the state (a load replaced it)
void rt_par_free(RtSession *s);
void rt_par_describe(const RtSession *s, char *buf, size_t len);

#endif
