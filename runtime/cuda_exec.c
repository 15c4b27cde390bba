// cuda_exec.c: what a graph's generated host function (codegen/cuda.c) calls to
// run on a GPU: launches, the device workspace, copies; and the staging of a
// run's arguments. Memory comes from two device arenas that only grow (the
// workspace, sized by the graph's memory plan, and the arguments), so a run
// after the first allocates nothing. Everything is queued on one stream; the
// first failure is kept in RtCudaExec.err and ends the run.
#include "cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(RtCudaExec *x, CUresult r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failed(RtCudaExec *x, CUresult r, const char *fmt, ...) {
  char what[256], why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  rt_cuda_strerror(x->cu, r, why, sizeof why);
  if (!x->err[0]) snprintf(x->err, sizeof x->err, "CUDA device %d: %s: %s", x->dev.ordinal, what, why);
  return -1;
}

int rt_cuda_exec_open(RtCudaExec *x, RtCuda *cu, int ordinal, char *err, size_t errlen) {
  memset(x, 0, sizeof *x);
  x->cu = cu;
  if (rt_cuda_open(cu, err, errlen) || rt_cuda_device(cu, ordinal, &x->dev, err, errlen)) return -1;
  CUresult r = cu->cuStreamCreate(&x->stream, 0);
  if (r) {
    failed(x, r, "cuStreamCreate");
    snprintf(err, errlen, "%s", x->err);
    rt_cuda_device_release(cu, &x->dev);
    return -1;
  }
  return 0;
}

static void arena_free(RtCudaExec *x, RtCudaArena *a) {
  if (a->base) x->cu->cuMemFree(a->base);
  a->base = 0;
  a->cap = 0;
}

void rt_cuda_exec_close(RtCudaExec *x) {
  if (!x->cu || !x->dev.ctx) return;
  x->cu->cuStreamSynchronize(x->stream);
  arena_free(x, &x->ws);
  arena_free(x, &x->args);
  x->cu->cuStreamDestroy(x->stream);
  rt_cuda_device_release(x->cu, &x->dev);
  x->cu = NULL;
}

// At least `bytes` in a: a larger allocation (a quarter more, so a growing
// size settles) once the stream has finished with the old one. 0 on failure.
static CUdeviceptr arena(RtCudaExec *x, RtCudaArena *a, size_t bytes, const char *what) {
  if (bytes <= a->cap) return a->base;
  CUresult r = x->cu->cuStreamSynchronize(x->stream);
  if (r) return failed(x, r, "cuStreamSynchronize"), 0;
  arena_free(x, a);
  size_t want = bytes + bytes / 4;
  want = (want + 255) & ~(size_t)255;
  if ((r = x->cu->cuMemAlloc(&a->base, want))) {
    a->base = 0;
    return failed(x, r, "cuMemAlloc of %zu bytes for the %s", want, what), 0;
  }
  a->cap = want;
  return a->base;
}

CUdeviceptr rt_cuda_workspace(void *xp, size_t bytes) {
  RtCudaExec *x = xp;
  return arena(x, &x->ws, bytes, "workspace");
}

CUdeviceptr rt_cuda_args(RtCudaExec *x, size_t bytes) { return arena(x, &x->args, bytes, "arguments"); }

// Blocks for `work` items: one block an item (per_block), else a thread an item.
// Kernels stride over their work, so the grid stops at 32 blocks a multiprocessor.
int rt_cuda_launch(void *xp, int step, int64_t work, int per_block, void **params) {
  RtCudaExec *x = xp;
  if (work <= 0) return 0;
  if (!x->fns || step < 0 || step >= x->nfns) {
    snprintf(x->err, sizeof x->err, "internal error: launch of step %d with %d kernels loaded", step, x->nfns);
    return -1;
  }
  int64_t blocks = per_block ? work : (work + x->block[step] - 1) / x->block[step];
  int64_t cap = 32 * (int64_t)(x->dev.multiprocessors > 0 ? x->dev.multiprocessors : 1);
  if (blocks > cap) blocks = cap;
  CUresult r = x->cu->cuLaunchKernel(x->fns[step], (unsigned)blocks, 1, 1, (unsigned)x->block[step], 1, 1, 0, x->stream,
                                     params, NULL);
  return r ? failed(x, r, "cuLaunchKernel (kernel %d of %d, %u blocks)", step, x->nfns, (unsigned)blocks) : 0;
}

int rt_cuda_copy(void *xp, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  RtCudaExec *x = xp;
  CUresult r = x->cu->cuMemcpyDtoDAsync(dst, src, bytes, x->stream);
  return r ? failed(x, r, "cuMemcpyDtoDAsync of %zu bytes", bytes) : 0;
}

int rt_cuda_upload(RtCudaExec *x, CUdeviceptr dst, const void *src, size_t bytes) {
  CUresult r = x->cu->cuMemcpyHtoDAsync(dst, src, bytes, x->stream);
  return r ? failed(x, r, "cuMemcpyHtoDAsync of %zu bytes", bytes) : 0;
}

int rt_cuda_download(RtCudaExec *x, void *dst, CUdeviceptr src, size_t bytes) {
  CUresult r = x->cu->cuMemcpyDtoHAsync(dst, src, bytes, x->stream);
  return r ? failed(x, r, "cuMemcpyDtoHAsync of %zu bytes", bytes) : 0;
}

int rt_cuda_sync(RtCudaExec *x) {
  CUresult r = x->cu->cuStreamSynchronize(x->stream);
  return r ? failed(x, r, "cuStreamSynchronize") : 0;
}
