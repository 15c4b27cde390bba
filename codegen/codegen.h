// Emitters: a Schedule in, source text out. One expression printer (the op
// table's C templates) serves the C emitter and the CUDA emitter.
#ifndef KILN_CODEGEN_H
#define KILN_CODEGEN_H
#include "ir/sched.h"

typedef struct {
  char *src;           // the translation unit (malloc'd)
  char entry[48];      // void entry(void **args): args = rt, dims, inputs..., consts..., outputs...
  char call[48];       // void call(void *rt, void *dims, void *a0, ...): the same, one pointer each (libffi)
  char workspace[48];  // size_t workspace(const int64_t *dims): scratch bytes a run needs
  int nargs;           // pointer arguments after rt and dims
} CSource;

typedef struct {
  int profile;   // time each kernel into rt_profile(rt)[k] (kiln run --profile)
} CgOpts;

// Emit C99 for the whole schedule. Function names carry a hash of the text,
// so objects of different graphs never clash in one JIT. cg_emit_c: default options.
int cg_emit_c_opts(const Schedule *s, const CgOpts *o, CSource *out, char *err, size_t errlen);
int cg_emit_c(const Schedule *s, CSource *out, char *err, size_t errlen);
void cg_source_free(CSource *cs);

// The CUDA emitter (cuda.c): the same kernels as `extern "C" __global__` functions
// for NVRTC, and a host function in C that runs them. A kernel's parameters are the
// dimensions by value (<prefix>_dims), then its output buffer, then the buffers it reads,
// in Kernel.reads order. Matrix products are tiled kernels too; the host function
// calls cuBLAS instead where the operands' layout allows.
typedef struct {
  int k;               // the schedule's kernel
  char name[48];       // the __global__ function
  char work[160];      // C expression over D[] of its work items
  int per_block;       // 1: a work item is a block (a reduction's output, a row, a tile of C); 0: a thread
  int block;           // threads per block
} CudaStep;

typedef struct {
  char *src;           // CUDA C for NVRTC (malloc'd)
  CudaStep *steps; int nsteps;
  int ndims;           // <prefix>_dims holds D[0..ndims)
  char *host;          // C for the CPU's JIT (malloc'd), defining:
  char host_entry[48];      // int host(void *x, const int64_t *D, const CUdeviceptr *in, *cst, *out):
                            // launches every step through rt_cuda_launch (runtime/cuda.h); 0 or -1
  char host_workspace[48];  // size_t workspace(const int64_t *D): device scratch bytes a run needs
} CudaSource;

int cg_emit_cuda(const Schedule *s, CudaSource *out, char *err, size_t errlen);
void cg_cuda_free(CudaSource *cs);

#endif
