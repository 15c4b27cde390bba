// cuda_exec.c: what a graph's generated host function (codegen/cuda.c) calls to
// run on a GPU: launches, the device workspace, copies; and the staging of a
// run's arguments. Memory comes from two device arenas that only grow (the
// workspace, sized by the graph's memory plan, and the arguments), so a run
// after the first allocates nothing; a tensor kept on the device (a training
// step's state) has an allocation of its own (rt_cuda_alloc). Everything is
// queued on one stream; the first failure is kept in RtCudaExec.err and ends the run.
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
  // cuBLAS is optional: without it every product runs as the generated tiled
  // kernel; cuBLASLt too: without it epilogues run as kernels after the product.
  snprintf(x->lt_why, sizeof x->lt_why, "no cuBLAS");
  if (rt_cuda_cublas(cu, x->blas_why, sizeof x->blas_why)) return 0;
  cublasStatus_t s;
  if ((s = cu->cublasCreate(&x->blas)) || (s = cu->cublasSetStream(x->blas, x->stream))) {
    snprintf(x->blas_why, sizeof x->blas_why, "cublasCreate or cublasSetStream failed (cuBLAS status %d)", s);
    if (x->blas) cu->cublasDestroy(x->blas);
    x->blas = NULL;
    return 0;
  }
  if (rt_cuda_cublaslt(cu, x->lt_why, sizeof x->lt_why)) return 0;
  if ((s = cu->cublasLtCreate(&x->lt))) {
    snprintf(x->lt_why, sizeof x->lt_why, "cublasLtCreate failed (cuBLAS status %d)", s);
    x->lt = NULL;
  }
  return 0;
}

void rt_cuda_describe(const RtCudaExec *x, char *buf, size_t len) {
  int k = snprintf(buf, len, "CUDA device %d: %s (sm_%d, %zu MiB); products through %s (%s)", x->dev.ordinal, x->dev.name,
                   x->dev.sm, x->dev.total_mem >> 20, x->blas ? "cuBLAS" : "Kiln's tiled kernels",
                   x->blas ? x->cu->cublas_name : x->blas_why);
  if (x->blas && k > 0 && (size_t)k < len)
    snprintf(buf + k, len - k, ", bias and ReLU epilogues %s (%s)", x->lt ? "in cuBLASLt" : "as kernels",
             x->lt ? x->cu->cublaslt_name : x->lt_why);
}

static void arena_free(RtCudaExec *x, RtCudaArena *a) {
  if (a->base) x->cu->cuMemFree(a->base);
  a->base = 0;
  a->cap = 0;
}

int rt_cuda_use(RtCudaExec *x) {
  CUresult r = x->cu->cuCtxSetCurrent(x->dev.ctx);
  return r ? failed(x, r, "cuCtxSetCurrent") : 0;
}

void rt_cuda_exec_close(RtCudaExec *x) {
  if (!x->cu || !x->dev.ctx) return;
  rt_cuda_use(x);
  x->cu->cuStreamSynchronize(x->stream);
  for (int i = 0; i < 2; i++) if (x->span[i]) x->cu->cuEventDestroy(x->span[i]);
  if (x->blas) x->cu->cublasDestroy(x->blas);
  x->blas = NULL;
  if (x->lt) x->cu->cublasLtDestroy(x->lt);
  x->lt = NULL;
  for (int i = 0; i < x->nmarks; i++) x->cu->cuEventDestroy(x->marks[i]);
  free(x->marks);
  x->marks = NULL;
  x->nmarks = 0;
  arena_free(x, &x->ws);
  arena_free(x, &x->args);
  if (x->copy) x->cu->cuStreamSynchronize(x->copy);
  for (int i = 0; i < 2; i++) {
    RtCudaAhead *a = &x->ahead[i];
    arena_free(x, &a->dev);
    if (a->pin) x->cu->cuMemFreeHost(a->pin);
    if (a->copied) x->cu->cuEventDestroy(a->copied);
    *a = (RtCudaAhead){0};
  }
  if (x->copy) x->cu->cuStreamDestroy(x->copy);
  x->copy = NULL;
  if (x->pinned) x->cu->cuMemFreeHost(x->pinned);
  x->pinned = NULL;
  x->pinned_cap = 0;
  free(x->pend);
  x->pend = NULL;
  x->npend = x->pend_cap = 0;
  x->cu->cuStreamDestroy(x->stream);
  rt_cuda_device_release(x->cu, &x->dev);
  x->cu = NULL;
}

// At least `bytes` in a: a larger allocation (a quarter more, so a growing
// size settles) once the stream has finished with the old one. 0 on failure.
static CUdeviceptr arena(RtCudaExec *x, RtCudaArena *a, size_t bytes, const char *what) {
  if (bytes <= a->cap) return a->base;
  CUresult r = a->base ? x->cu->cuStreamSynchronize(x->stream) : 0;
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

CUdeviceptr rt_cuda_alloc(RtCudaExec *x, size_t bytes) {
  CUdeviceptr p = 0;
  if (rt_cuda_use(x)) return 0;
  CUresult r = x->cu->cuMemAlloc(&p, bytes ? bytes : 1);
  return r ? failed(x, r, "cuMemAlloc of %zu bytes", bytes), 0 : p;
}

void rt_cuda_free(RtCudaExec *x, CUdeviceptr p) {
  if (p && !rt_cuda_use(x)) x->cu->cuMemFree(p);
}

int rt_cuda_mark(void *xp, int i) {
  RtCudaExec *x = xp;
  if (!x->profiling) return 0;
  CUresult r = 0;
  if (i >= x->nmarks) {
    CUevent *m = realloc(x->marks, sizeof *m * (i + 1));
    if (!m) abort();
    x->marks = m;
    for (; x->nmarks <= i && !r; x->nmarks++)
      if ((r = x->cu->cuEventCreate(&x->marks[x->nmarks], 0))) break;
    if (r) return failed(x, r, "cuEventCreate");
  }
  r = x->cu->cuEventRecord(x->marks[i], x->stream);
  return r ? failed(x, r, "cuEventRecord") : 0;
}

double rt_cuda_step_ms(RtCudaExec *x, int i) {
  float ms = 0;
  if (i + 1 >= x->nmarks || x->cu->cuEventElapsedTime(&ms, x->marks[i], x->marks[i + 1])) return 0;
  return ms;
}

int rt_cuda_copy(void *xp, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  RtCudaExec *x = xp;
  CUresult r = x->cu->cuMemcpyDtoDAsync(dst, src, bytes, x->stream);
  return r ? failed(x, r, "cuMemcpyDtoDAsync of %zu bytes", bytes) : 0;
}

int rt_cuda_upload(RtCudaExec *x, CUdeviceptr dst, const void *src, size_t bytes) {
  if (rt_cuda_use(x)) return -1;
  CUresult r = x->cu->cuMemcpyHtoDAsync(dst, src, bytes, x->stream);
  return r ? failed(x, r, "cuMemcpyHtoDAsync of %zu bytes", bytes) : 0;
}

int rt_cuda_download(RtCudaExec *x, void *dst, CUdeviceptr src, size_t bytes) {
  if (rt_cuda_use(x)) return -1;
  CUresult r = x->cu->cuMemcpyDtoHAsync(dst, src, bytes, x->stream);
  return r ? failed(x, r, "cuMemcpyDtoHAsync of %zu bytes", bytes) : 0;
}

int rt_cuda_sync(RtCudaExec *x) {
  if (rt_cuda_use(x)) return -1;
  CUresult r = x->cu->cuStreamSynchronize(x->stream);
  return r ? failed(x, r, "cuStreamSynchronize") : 0;
}

// Page-locked staging of at least `bytes` in *buf (of *cap bytes; grown by a
// quarter more, so a growing size settles), NULL if the host cannot lock that
// much: the copies then go from the caller's memory, correct but synchronous.
static char *pinned(RtCudaExec *x, char **buf, size_t *cap, size_t bytes) {
  if (bytes <= *cap) return *buf;
  if (*buf) x->cu->cuMemFreeHost(*buf);
  *buf = NULL;
  *cap = 0;
  size_t want = (bytes + bytes / 4 + 4095) & ~(size_t)4095;
  void *p = NULL;
  if (x->cu->cuMemAllocHost(&p, want)) return NULL;
  *cap = want;
  return *buf = p;
}

int rt_cuda_prefetch(RtCudaExec *x, void *const *host, const size_t *bytes, int n) {
  x->nahead = 0;
  if (n > RT_CUDA_MAXAHEAD) return 0;   // each run copies its own
  if (rt_cuda_use(x)) return -1;
  CUresult r;
  if (!x->copy && (r = x->cu->cuStreamCreate(&x->copy, 0))) return x->copy = NULL, failed(x, r, "cuStreamCreate");
  size_t total = 0, off = 0;
  for (int i = 0; i < n; i++) total += rt_cuda_arg_bytes(bytes[i]);
  for (int k = 0; k < 2; k++) {   // both areas at once, so that the next call allocates nothing
    RtCudaAhead *a = &x->ahead[k];
    if (!a->copied && (r = x->cu->cuEventCreate(&a->copied, 0))) return a->copied = NULL, failed(x, r, "cuEventCreate");
    if (!arena(x, &a->dev, total, "next batch")) return -1;
    pinned(x, &a->pin, &a->pin_cap, total);
  }
  RtCudaAhead *a = &x->ahead[x->ahead_last ^= 1];
  CUdeviceptr base = a->dev.base;
  char *pin = a->pin_cap >= total ? a->pin : NULL;
  for (int i = 0; i < n; off += rt_cuda_arg_bytes(bytes[i]), i++) {
    const void *src = pin && bytes[i] ? memcpy(pin + off, host[i], bytes[i]) : host[i];
    if ((r = x->cu->cuMemcpyHtoDAsync(base + off, src, bytes[i], x->copy))) return failed(x, r, "cuMemcpyHtoDAsync of %zu bytes", bytes[i]);
    x->ahead_host[i] = host[i];
    x->ahead_bytes[i] = bytes[i];
    x->ahead_dev[i] = base + off;
  }
  if ((r = x->cu->cuEventRecord(a->copied, x->copy))) return failed(x, r, "cuEventRecord");
  x->nahead = n;
  return 0;
}

int rt_cuda_take_prefetched(RtCudaExec *x, void *const *host, const size_t *bytes, int nin, CUdeviceptr *resident) {
  int hit = 0;
  for (int i = 0; i < nin; i++)
    for (int j = 0; j < x->nahead; j++)
      if (!resident[i] && bytes[i] && host[i] == x->ahead_host[j] && bytes[i] == x->ahead_bytes[j])
        resident[i] = x->ahead_dev[j], hit++;
  if (!hit) return 0;
  x->nahead = 0;
  if (rt_cuda_use(x)) return -1;
  CUresult r = x->cu->cuStreamWaitEvent(x->stream, x->ahead[x->ahead_last].copied, 0);
  return r ? failed(x, r, "cuStreamWaitEvent") : hit;
}

void rt_cuda_drop_prefetched(RtCudaExec *x) { x->nahead = 0; }

int rt_cuda_zero(RtCudaExec *x, CUdeviceptr p, size_t bytes) {
  if (rt_cuda_use(x)) return -1;
  CUresult r = x->cu->cuMemsetD8Async(p, 0, bytes, x->stream);
  return r ? failed(x, r, "cuMemsetD8Async of %zu bytes", bytes) : 0;
}

static int span_mark(RtCudaExec *x, int i) {
  CUresult r = 0;
  if (rt_cuda_use(x)) return -1;
  if (!x->span[i] && (r = x->cu->cuEventCreate(&x->span[i], 0))) return x->span[i] = NULL, failed(x, r, "cuEventCreate");
  r = x->cu->cuEventRecord(x->span[i], x->stream);
  return r ? failed(x, r, "cuEventRecord") : 0;
}

int rt_cuda_time_begin(RtCudaExec *x) { return span_mark(x, 0); }
int rt_cuda_time_end(RtCudaExec *x) { return span_mark(x, 1); }

double rt_cuda_time_ms(RtCudaExec *x) {
  float ms = 0;
  if (!x->span[0] || !x->span[1] || x->cu->cuEventElapsedTime(&ms, x->span[0], x->span[1])) return 0;
  return ms;
}

// Row-major C = A @ B is column-major C' = B' A': cuBLAS gets B first, and an
// operand stored transposed is op T. Its rules on leading dimensions (at least
// the stored rows) and sizes (int) are checked here, so that a view cuBLAS would
// refuse (a broadcast row, a huge matrix) runs the tiled kernel instead.
int rt_cuda_gemm(void *xp, int f64, int64_t batch, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int ta, int64_t lda,
                 int64_t sa, CUdeviceptr b, int tb, int64_t ldb, int64_t sb, CUdeviceptr c, int64_t ldc, int64_t sc) {
  RtCudaExec *x = xp;
  if (!x->blas) return 1;
  if (m <= 0 || n <= 0 || batch <= 0) return 0;
  const int64_t lim = 2147483647;
  int64_t arow = ta ? m : k, brow = tb ? k : n;   // the stored rows' length: the least leading dimension
  if (m > lim || n > lim || k > lim || batch > lim || lda > lim || ldb > lim || ldc > lim) return 1;
  if (lda < (arow > 1 ? arow : 1) || ldb < (brow > 1 ? brow : 1) || ldc < n || sa < 0 || sb < 0) return 1;
  if (batch > 1 && sc < m * ldc) return 1;
  if (k == 0) return 1;   // C = 0: the kernel writes it
  cublasStatus_t r;
  if (f64) {
    const double one = 1, zero = 0;
    r = x->cu->cublasDgemmStridedBatched(x->blas, tb, ta, (int)n, (int)m, (int)k, &one, b, (int)ldb, sb, a, (int)lda, sa,
                                         &zero, c, (int)ldc, sc, (int)batch);
  } else {
    const float one = 1, zero = 0;
    r = x->cu->cublasSgemmStridedBatched(x->blas, tb, ta, (int)n, (int)m, (int)k, &one, b, (int)ldb, sb, a, (int)lda, sa,
                                         &zero, c, (int)ldc, sc, (int)batch);
  }
  if (r && !x->err[0])
    snprintf(x->err, sizeof x->err, "CUDA device %d: cuBLAS %cgemmStridedBatched (%lld x %lld x %lld, batch %lld): status %d",
             x->dev.ordinal, f64 ? 'D' : 'S', (long long)m, (long long)n, (long long)k, (long long)batch, r);
  return r ? -1 : 0;
}

// As rt_cuda_gemm's mapping: row-major C (m x n) is column-major C' (n x m) =
// B' A', so B is cuBLASLt's A and A its B, each stored transposed or not.
int rt_cuda_gemm_epi(void *xp, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int ta, int64_t lda, CUdeviceptr b, int tb,
                     int64_t ldb, CUdeviceptr c, int epi, CUdeviceptr bias) {
  RtCudaExec *x = xp;
  RtCuda *cu = x->cu;
  const int64_t lim = 2147483647;
  int64_t arow = ta ? m : k, brow = tb ? k : n;
  if (!x->lt || m <= 0 || n <= 0 || k <= 0 || m > lim || n > lim || k > lim || lda < arow || ldb < brow) return 1;
  int type = RT_LT_R_32F, opa = tb, opb = ta;
  int32_t e = epi;
  const float one = 1, zero = 0;
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasStatus_t r = cu->cublasLtMatmulDescCreate(&d, RT_LT_COMPUTE_32F, type);
  if (!r) r = cu->cublasLtMatmulDescSetAttribute(d, RT_LT_TRANSA, &opa, sizeof opa);
  if (!r) r = cu->cublasLtMatmulDescSetAttribute(d, RT_LT_TRANSB, &opb, sizeof opb);
  if (!r) r = cu->cublasLtMatmulDescSetAttribute(d, RT_LT_EPILOGUE, &e, sizeof e);
  if (!r) r = cu->cublasLtMatmulDescSetAttribute(d, RT_LT_BIAS_POINTER, &bias, sizeof bias);
  if (!r) r = cu->cublasLtMatrixLayoutCreate(&la, type, tb ? k : n, tb ? n : k, ldb);
  if (!r) r = cu->cublasLtMatrixLayoutCreate(&lb, type, ta ? m : k, ta ? k : m, lda);
  if (!r) r = cu->cublasLtMatrixLayoutCreate(&lc, type, n, m, n);
  if (!r) r = cu->cublasLtMatmul(x->lt, d, &one, b, la, a, lb, &zero, c, lc, c, lc, NULL, NULL, 0, x->stream);
  if (lc) cu->cublasLtMatrixLayoutDestroy(lc);
  if (lb) cu->cublasLtMatrixLayoutDestroy(lb);
  if (la) cu->cublasLtMatrixLayoutDestroy(la);
  if (d) cu->cublasLtMatmulDescDestroy(d);
  if (r == RT_LT_NOT_SUPPORTED) return 1;   // no algorithm for this epilogue here: the product and the kernel
  if (r && !x->err[0])
    snprintf(x->err, sizeof x->err, "CUDA device %d: cuBLASLt matmul with a %s epilogue (%lld x %lld x %lld): status %d",
             x->dev.ordinal, epi == RT_LT_EPI_RELU_BIAS ? "bias and ReLU" : "bias", (long long)m, (long long)n, (long long)k, r);
  return r ? -1 : 0;
}

int rt_cuda_prog_load(RtCudaExec *x, RtCudaProg *g, const void *image, const char *const *names, const int *block,
                      int nsteps, RtCudaHost host, char *err, size_t errlen) {
  char why[256];
  memset(g, 0, sizeof *g);
  CUresult r = x->cu->cuCtxSetCurrent(x->dev.ctx);
  if (!r) r = x->cu->cuModuleLoadData(&g->mod, image);
  if (r) {
    g->mod = NULL;
    rt_cuda_strerror(x->cu, r, why, sizeof why);
    snprintf(err, errlen, "CUDA device %d: cannot load the kernels: %s", x->dev.ordinal, why);
    return -1;
  }
  g->nsteps = nsteps;
  g->host = host;
  if (!(g->fns = calloc(nsteps ? nsteps : 1, sizeof *g->fns)) || !(g->block = calloc(nsteps ? nsteps : 1, sizeof *g->block)))
    abort();
  for (int i = 0; i < nsteps; i++) {
    g->block[i] = block[i];
    if ((r = x->cu->cuModuleGetFunction(&g->fns[i], g->mod, names[i]))) {
      rt_cuda_strerror(x->cu, r, why, sizeof why);
      snprintf(err, errlen, "CUDA device %d: kernel %s not found in its module: %s", x->dev.ordinal, names[i], why);
      rt_cuda_prog_free(x, g);
      return -1;
    }
  }
  return 0;
}

void rt_cuda_prog_free(RtCudaExec *x, RtCudaProg *g) {
  if (g->mod && !rt_cuda_use(x)) x->cu->cuModuleUnload(g->mod);
  free(g->fns);
  free(g->block);
  memset(g, 0, sizeof *g);
}

size_t rt_cuda_arg_bytes(size_t bytes) { return ((bytes ? bytes : 1) + 255) & ~(size_t)255; }

static void pend(RtCudaExec *x, void *host, size_t off, size_t bytes) {
  if (x->npend == x->pend_cap) {
    x->pend_cap = x->pend_cap ? 2 * x->pend_cap : 16;
    if (!(x->pend = realloc(x->pend, sizeof *x->pend * x->pend_cap))) abort();
  }
  x->pend[x->npend++] = (RtCudaPending){host, off, bytes};
}

// Every argument gets its own place in the arguments' arena, 256-byte aligned
// (the kernels read 16 bytes at a time), and the same place in the pinned
// staging; an output over a donated input starts as a copy of it on the device
// (the host function makes it).
int rt_cuda_run_start(RtCudaExec *x, const RtCudaProg *g, const int64_t *D, void *const *host, const size_t *bytes,
                      int nin, int nconst, int nout, const CUdeviceptr *resident, int profile) {
  int n = nin + nconst + nout;
  x->err[0] = 0;
  x->npend = 0;
  if (rt_cuda_use(x)) return -1;
  // at: where an argument already is (resident, or the next batch copied ahead), else 0
  CUdeviceptr stack[128], *dev = n <= 64 ? stack : malloc(sizeof *dev * 2 * n), *at = dev + (n <= 64 ? 64 : n);
  if (!dev) abort();
  for (int i = 0; i < n; i++) at[i] = resident ? resident[i] : 0;
  if (rt_cuda_take_prefetched(x, host, bytes, nin, at) < 0) {
    if (dev != stack) free(dev);
    return -1;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (at[i]) continue;
    dev[i] = total;
    total += rt_cuda_arg_bytes(bytes[i]);
  }
  x->fns = g->fns;
  x->block = g->block;
  x->nfns = g->nsteps;
  x->profiling = profile;
  CUdeviceptr base = rt_cuda_args(x, total);
  char *pin = base ? pinned(x, &x->pinned, &x->pinned_cap, total) : NULL;   // laid out as the arguments' arena
  int rc = base ? 0 : -1;
#define KEPT(i) (at[i] != 0)
  for (int i = 0; i < n; i++) dev[i] = KEPT(i) ? at[i] : dev[i] + base;
  for (int i = 0; i < nin + nconst && !rc; i++) {
    if (KEPT(i)) continue;
    const void *src = host[i];
    if (pin && bytes[i]) src = memcpy(pin + (dev[i] - base), host[i], bytes[i]);
    rc = rt_cuda_upload(x, dev[i], src, bytes[i]);
  }
  if (!rc) rc = g->host(x, D, dev, dev + nin, dev + nin + nconst);
  for (int i = nin + nconst; i < n && !rc; i++) {
    if (KEPT(i)) continue;
    if (!pin || !bytes[i]) { rc = rt_cuda_download(x, host[i], dev[i], bytes[i]); continue; }
    rc = rt_cuda_download(x, pin + (dev[i] - base), dev[i], bytes[i]);
    pend(x, host[i], dev[i] - base, bytes[i]);
  }
#undef KEPT
  x->fns = NULL;
  x->nfns = 0;
  if (dev != stack) free(dev);
  if (rc) x->npend = 0;
  return rc;
}

int rt_cuda_run_wait(RtCudaExec *x, const RtCudaProg *g, double *step_ms) {
  int rc = rt_cuda_sync(x);
  for (int i = 0; !rc && i < x->npend; i++) memcpy(x->pend[i].host, x->pinned + x->pend[i].off, x->pend[i].bytes);
  x->npend = 0;
  for (int i = 0; step_ms && !rc && i < g->nsteps; i++) step_ms[i] += rt_cuda_step_ms(x, i);
  x->profiling = 0;
  return rc;
}

int rt_cuda_run(RtCudaExec *x, const RtCudaProg *g, const int64_t *D, void *const *host, const size_t *bytes, int nin,
                int nconst, int nout, const CUdeviceptr *resident, double *step_ms) {
  if (rt_cuda_run_start(x, g, D, host, bytes, nin, nconst, nout, resident, step_ms != NULL)) {
    x->profiling = 0;
    return -1;
  }
  return rt_cuda_run_wait(x, g, step_ms);
}
