// The compile pipeline: graph -> passes -> schedule -> C -> JIT -> callable
// program. The one place that runs the passes in order (QBE's func()).
#ifndef KILN_PIPELINE_H
#define KILN_PIPELINE_H
#include "codegen/codegen.h"
#include "compiler/jit.h"
#include "passes/passes.h"
#include "runtime/cuda.h"
#include "runtime/rt.h"

// The stages `kiln ir --after=STAGE` can show, in pipeline order.
#define PIPE_STAGES "ir fold convgrad simplify stability dce biasgrad fuse lower epilogue plan"
// Not a stage: as dump_after, `kiln ir --stats` (the planned schedule's
// kernels, workspace, argument sizes and matmul strategies) in place of the graph.
#define PIPE_STATS "stats"

#define PIPE_MAXPEERS 15

// A tensor kept on the device while a train statement runs (pipe_cuda_keep):
// its host storage and its device copy; host_stale once a step wrote the copy.
typedef struct { void *host; size_t bytes; CUdeviceptr dev; int host_stale; } PipeMirror;

typedef struct {
  IrCtx *c;
  Jit *jit;
  KRt *rt;
  const char *dump_after;   // stage name: print the graph there and stop
  FILE *dump;
  int emit_c;               // print the generated C to dump and stop
  int vector_report;        // with emit_c: then how the compiler vectorized each kernel's loops
  int emit_cuda;            // with emit_c: the CUDA C (codegen/cuda.c) instead of the C
  const char *cuda_archs;   // with emit_cuda: NVRTC compiles each graph for these ("sm_80,sm_90")
  RtCuda *cuda;             // NVRTC, loaded by the first compile (pipe_cuda_free)
  int device;               // -1: graphs run on the CPU; N: on CUDA device N (pipe_compile opens it)
  int peers[PIPE_MAXPEERS]; // --device cuda:0,1 or cuda+cpu: what else a train statement splits each
  int npeers;               // batch with (parallel.c): CUDA ordinals, -1 for the CPU
  RtCudaExec *cx;           // with device >= 0: the device, its stream and arenas (pipe_cuda_free)
  RtTensor **kept; int nkept;           // pipe_cuda_keep: whose storage stays on the device
  PipeMirror *mirrors; int nmirrors;    // their device copies
  LowerOpts lower;          // what the runtime offers the lowering (pipe_lower_opts)
  int profile;              // kiln run --profile: programs time their kernels (prog_profile_print)
  const char *label;        // what the next pipe_compile compiles ("training step of f.kiln:3:1"):
                            // its --profile name, and the header of what kiln ir and emit-c print
} Pipe;

// A program compiled for a GPU (cudaemit.c): its kernels' module and the host
// function that launches them (JIT-compiled C).
typedef struct {
  CudaSource cs;
  RtCudaExec *cx;           // the device it is loaded on (Pipe.cx)
  RtCudaProg run;
  int nvrtc_hit;            // the image came from the disk cache
  double nvrtc_ms;          // time in NVRTC
  double *ms;               // with --profile: each launch step's milliseconds in the run under way
} ProgCuda;

typedef struct {
  IrGraph *g;               // the optimized graph
  Schedule *s;
  CSource cs;
  void (*entry)(void **);   // uniform entry: rt, dims, inputs..., consts..., outputs...
  void *call;               // typed entry for libffi
  size_t (*workspace)(const int64_t *D);   // scratch bytes a run needs
  JitStats st;              // the JIT's cache hit or compile time
  char label[200];          // Pipe.label when compiled
  uint64_t *prof_ns;        // with Pipe.profile: nanoseconds per kernel summed over calls, then the calls
  ProgCuda *cuda;           // with Pipe.device >= 0: runs there (entry and call are then NULL)
  int device;               // Pipe.device when compiled: -1 for the CPU
} Program;

int pipe_stage_ok(const char *name);
// The lowering options this runtime supports: rt_gemm on BLIS when built with it.
LowerOpts pipe_lower_opts(void);
// A JIT that knows the runtime's symbols.
Jit *pipe_jit_new(char *err, size_t errlen);
// Optimize, schedule, emit and JIT g. NULL on error (message in err) and
// also when dump_after stopped it (err is then "").
Program *pipe_compile(Pipe *p, IrGraph *g, char *err, size_t errlen);
void prog_free(Program *pr);
// The --profile table of a program that ran: its kernels by time, with their shapes.
void prog_profile_print(FILE *f, const Program *pr);
// `kiln emit-c --vectorize` (vecreport.c): src compiled as the JIT would, with the
// vectorizer's remarks printed per kernel as C comments.
void pipe_vector_report(FILE *out, const char *src);
// `kiln emit-cuda` (cudaemit.c): print s as CUDA C; with cuda_archs, compile it with
// NVRTC for each. 0, or -1 with the reason (NVRTC's log) in err.
int pipe_emit_cuda(Pipe *p, const Schedule *s, char *err, size_t errlen);
int pipe_cuda_archs(const char *s, int *archs, int max);   // "sm_80,sm_90": the count, -1 if malformed
// --device: "cpu", "cuda", "cuda:N", "cuda:0,1" (several GPUs), "cuda+cpu" or
// "cuda:0,1+cpu" (the GPUs and the CPU's threads). The first is where graphs run;
// a train statement splits each batch over all of them. Sets device and peers
// and opens the first GPU. 0, or -1 with the reason.
int pipe_set_devices(Pipe *p, const char *spec, char *err, size_t errlen);
// "CUDA device 0: ...; training batches split with cuda:1 and the CPU", or "cpu (N threads)".
void pipe_describe(const Pipe *p, char *buf, size_t len);
// The device copy a kept tensor has (pipe_cuda_keep), 0 if it has none yet.
CUdeviceptr pipe_cuda_mirror(const Pipe *p, const RtTensor *t);
// Opens Pipe.device (cx) if not yet open. 0, or -1 with the reason: no driver, no such device.
int pipe_open_device(Pipe *p, char *err, size_t errlen);
// Compile pr's schedule for Pipe.device (opened on first use): the kernels with
// NVRTC for the device's architecture, the host function with the JIT. 0 or -1.
int pipe_compile_cuda(Pipe *p, Program *pr, char *err, size_t errlen);
void prog_cuda_free(ProgCuda *c);
// prog_run's body for a program compiled for a GPU: the inputs and constants
// copied to the device, the kernels run, the outputs copied back. 0 or PROG_DEVICE_ERROR.
int prog_run_cuda(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs);
void pipe_cuda_free(Pipe *p);   // closes the device (programs on it must be freed first)
// A training step's state (parameters, optimizer slots, statistics) kept on the
// device between steps: a program run with t's current storage as an argument
// uses the device copy, made at first use, and copies it neither in nor out.
// The host copy is then stale until pipe_cuda_sync; pipe_cuda_release syncs
// and forgets them all. The train statement keeps its state and releases it at
// its end; whatever reads or writes the host copies meanwhile (a checkpoint's
// save or load, the REPL leaving the device) syncs or releases first.
void pipe_cuda_keep(Pipe *p, RtTensor *t);
int pipe_cuda_sync(Pipe *p, char *err, size_t errlen);
// The next batch's n tensors copied to the device while a run is under way
// (rt_cuda_prefetch: call between prog_start and prog_wait). The next run given
// an input in the same storage and of the same size reads the copy instead of
// copying it again (rt_cuda_run_start takes it). pipe_cuda_release forgets it. 0,
// or -1 with the reason in cx->err.
int pipe_cuda_prefetch(Pipe *p, const RtTensor *t, int n);
int pipe_cuda_release(Pipe *p, char *err, size_t errlen);
// Bind the symbolic dimensions (D[sym]) from the inputs' shapes; checks every
// input's dtype and shape. 0, or -1 with a message.
int prog_bind(const Program *pr, const RtTensor *ins, int64_t *D, char *err, size_t errlen);
void prog_out_shape(const Program *pr, int i, const int64_t *D, int *ndim, int64_t *shape);
// The input whose storage output o may be given (the graph donated it and the
// memory plan computes o over it in place: Buffer.shares), or -1.
int prog_out_shares(const Program *pr, int o);
// Run with bound dims: ins[nin], outs[nout] already allocated with prog_out_shape.
// via_ffi calls the typed entry through libffi (the REPL's dynamic path).
// 0; -1 if libffi failed; PROG_NO_MEMORY if the workspace could not be had;
// PROG_DEVICE_ERROR when the GPU failed (the reason in p->cx->err).
enum { PROG_NO_MEMORY = -2, PROG_DEVICE_ERROR = -3 };
int prog_run(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs, int via_ffi);
// prog_run in two halves for a program on a GPU (rt_cuda_run_start and _wait):
// start queues the work and returns; wait waits for it. On the CPU, start runs
// the program and wait does nothing. Each as prog_run's result.
int prog_start(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs);
int prog_wait(Pipe *p, const Program *pr);

#endif
