// cuda.h - the CUDA driver, NVRTC and cuBLAS, loaded with dlopen at first use.
//
//   RtCuda cu = {0};
//   char err[512];
//   if (rt_cuda_open(&cu, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
//   RtCudaDevice dev;
//   if (rt_cuda_device(&cu, 0, &dev, err, sizeof err)) ...   // primary context, current
//   CUmodule m; cu.cuModuleLoadData(&m, cubin); ...
//   rt_cuda_device_release(&cu, &dev);
//   rt_cuda_close(&cu);
//
// Kiln never links libcuda, libnvrtc or libcublas (nor the toolkit's stub libcuda.so):
// a binary built here runs on machines without CUDA and says why `--device cuda`
// is unavailable there. Everything loaded lives in the RtCuda the caller owns (no
// global state), as function pointers named after the API's own functions.
// The types below are the driver API's, declared here so that no CUDA header is needed.
//
// Environment: KILN_LIBCUDA (a path or soname to load instead of libcuda.so.1),
// KILN_NVRTC and KILN_CUBLAS (the same for NVRTC and cuBLAS; then no other name is
// tried). Tests point them at missing files to see the failure messages, and at
// the fake CUDA of tests/fakecuda to run without a GPU.
#ifndef KILN_RUNTIME_CUDA_H
#define KILN_RUNTIME_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;                   // CUDA_SUCCESS == 0
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
enum { CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76 };
enum { CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_STUB_LIBRARY = 34 };

typedef int nvrtcResult;                // NVRTC_SUCCESS == 0
typedef struct _nvrtcProgram *nvrtcProgram;

// The driver entry points: X(return, field, symbol, parameters). The symbol is the
// versioned name cuda.h's macros would pick (cuMemAlloc is cuMemAlloc_v2).
#define RT_CUDA_DRIVER(X) \
  X(CUresult, cuInit, "cuInit", (unsigned flags)) \
  X(CUresult, cuDriverGetVersion, "cuDriverGetVersion", (int *version)) \
  X(CUresult, cuGetErrorName, "cuGetErrorName", (CUresult e, const char **s)) \
  X(CUresult, cuGetErrorString, "cuGetErrorString", (CUresult e, const char **s)) \
  X(CUresult, cuDeviceGetCount, "cuDeviceGetCount", (int *n)) \
  X(CUresult, cuDeviceGet, "cuDeviceGet", (CUdevice *d, int ordinal)) \
  X(CUresult, cuDeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice d)) \
  X(CUresult, cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *v, int attr, CUdevice d)) \
  X(CUresult, cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *bytes, CUdevice d)) \
  X(CUresult, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *c, CUdevice d)) \
  X(CUresult, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice d)) \
  X(CUresult, cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext c)) \
  X(CUresult, cuCtxSynchronize, "cuCtxSynchronize", (void)) \
  X(CUresult, cuModuleLoadData, "cuModuleLoadData", (CUmodule *m, const void *image)) \
  X(CUresult, cuModuleUnload, "cuModuleUnload", (CUmodule m)) \
  X(CUresult, cuModuleGetFunction, "cuModuleGetFunction", (CUfunction *f, CUmodule m, const char *name)) \
  X(CUresult, cuLaunchKernel, "cuLaunchKernel", (CUfunction f, unsigned gx, unsigned gy, unsigned gz, \
    unsigned bx, unsigned by, unsigned bz, unsigned shared, CUstream s, void **params, void **extra)) \
  X(CUresult, cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *p, size_t bytes)) \
  X(CUresult, cuMemFree, "cuMemFree_v2", (CUdeviceptr p)) \
  X(CUresult, cuMemAllocHost, "cuMemAllocHost_v2", (void **p, size_t bytes)) \
  X(CUresult, cuMemFreeHost, "cuMemFreeHost", (void *p)) \
  X(CUresult, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr dst, const void *src, size_t n, CUstream s)) \
  X(CUresult, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *dst, CUdeviceptr src, size_t n, CUstream s)) \
  X(CUresult, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)) \
  X(CUresult, cuMemsetD8Async, "cuMemsetD8Async", (CUdeviceptr p, unsigned char v, size_t n, CUstream s)) \
  X(CUresult, cuStreamCreate, "cuStreamCreate", (CUstream *s, unsigned flags)) \
  X(CUresult, cuStreamDestroy, "cuStreamDestroy_v2", (CUstream s)) \
  X(CUresult, cuStreamSynchronize, "cuStreamSynchronize", (CUstream s)) \
  X(CUresult, cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream s, CUevent e, unsigned flags)) \
  X(CUresult, cuEventCreate, "cuEventCreate", (CUevent *e, unsigned flags)) \
  X(CUresult, cuEventRecord, "cuEventRecord", (CUevent e, CUstream s)) \
  X(CUresult, cuEventSynchronize, "cuEventSynchronize", (CUevent e)) \
  X(CUresult, cuEventElapsedTime, "cuEventElapsedTime", (float *ms, CUevent a, CUevent b)) \
  X(CUresult, cuEventDestroy, "cuEventDestroy_v2", (CUevent e))

// NVRTC: what compiler/nvrtc.c calls. nvrtcGetCUBIN exists from CUDA 11.1 and
// nvrtcGetSupportedArchs from 11.2; an older NVRTC loads without them (PTX only).
#define RT_CUDA_NVRTC(X) \
  X(nvrtcResult, nvrtcVersion, "nvrtcVersion", (int *major, int *minor)) \
  X(const char *, nvrtcGetErrorString, "nvrtcGetErrorString", (nvrtcResult r)) \
  X(nvrtcResult, nvrtcCreateProgram, "nvrtcCreateProgram", (nvrtcProgram *p, const char *src, const char *name, \
    int nheaders, const char *const *headers, const char *const *include_names)) \
  X(nvrtcResult, nvrtcDestroyProgram, "nvrtcDestroyProgram", (nvrtcProgram *p)) \
  X(nvrtcResult, nvrtcCompileProgram, "nvrtcCompileProgram", (nvrtcProgram p, int nopts, const char *const *opts)) \
  X(nvrtcResult, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", (nvrtcProgram p, size_t *n)) \
  X(nvrtcResult, nvrtcGetProgramLog, "nvrtcGetProgramLog", (nvrtcProgram p, char *log)) \
  X(nvrtcResult, nvrtcGetPTXSize, "nvrtcGetPTXSize", (nvrtcProgram p, size_t *n)) \
  X(nvrtcResult, nvrtcGetPTX, "nvrtcGetPTX", (nvrtcProgram p, char *ptx))
#define RT_CUDA_NVRTC_OPTIONAL(X) \
  X(nvrtcResult, nvrtcGetCUBINSize, "nvrtcGetCUBINSize", (nvrtcProgram p, size_t *n)) \
  X(nvrtcResult, nvrtcGetCUBIN, "nvrtcGetCUBIN", (nvrtcProgram p, char *cubin)) \
  X(nvrtcResult, nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", (int *n)) \
  X(nvrtcResult, nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", (int *archs))

// cuBLAS: the strided batched GEMMs (column-major, host scalars; cublas.h's values:
// CUBLAS_OP_N 0, CUBLAS_OP_T 1, CUBLAS_STATUS_SUCCESS 0).
typedef int cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;
#define RT_CUDA_CUBLAS(X) \
  X(cublasStatus_t, cublasCreate, "cublasCreate_v2", (cublasHandle_t *h)) \
  X(cublasStatus_t, cublasDestroy, "cublasDestroy_v2", (cublasHandle_t h)) \
  X(cublasStatus_t, cublasGetVersion, "cublasGetVersion_v2", (cublasHandle_t h, int *version)) \
  X(cublasStatus_t, cublasSetStream, "cublasSetStream_v2", (cublasHandle_t h, CUstream s)) \
  X(cublasStatus_t, cublasSgemmStridedBatched, "cublasSgemmStridedBatched", (cublasHandle_t h, int ta, int tb, \
    int m, int n, int k, const float *alpha, CUdeviceptr a, int lda, long long sa, CUdeviceptr b, int ldb, \
    long long sb, const float *beta, CUdeviceptr c, int ldc, long long sc, int batch)) \
  X(cublasStatus_t, cublasDgemmStridedBatched, "cublasDgemmStridedBatched", (cublasHandle_t h, int ta, int tb, \
    int m, int n, int k, const double *alpha, CUdeviceptr a, int lda, long long sa, CUdeviceptr b, int ldb, \
    long long sb, const double *beta, CUdeviceptr c, int ldc, long long sc, int batch))

// cuBLASLt: one GEMM with its bias (and ReLU) applied as it writes (cublasLt.h's
// values: CUBLAS_COMPUTE_32F 68; CUDA_R_32F 0; the descriptor
// attributes TRANSA 3, TRANSB 4, EPILOGUE 7, BIAS_POINTER 8; the epilogues BIAS 4,
// RELU_BIAS 6). The algorithm is cuBLASLt's own heuristic choice (algo NULL).
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque *cublasLtMatrixLayout_t;
enum { RT_LT_COMPUTE_32F = 68, RT_LT_R_32F = 0, RT_LT_TRANSA = 3,
       RT_LT_TRANSB = 4, RT_LT_EPILOGUE = 7, RT_LT_BIAS_POINTER = 8, RT_LT_EPI_BIAS = 4, RT_LT_EPI_RELU_BIAS = 6,
       RT_LT_NOT_SUPPORTED = 15 };
#define RT_CUDA_CUBLASLT(X) \
  X(cublasStatus_t, cublasLtCreate, "cublasLtCreate", (cublasLtHandle_t *h)) \
  X(cublasStatus_t, cublasLtDestroy, "cublasLtDestroy", (cublasLtHandle_t h)) \
  X(cublasStatus_t, cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate", (cublasLtMatmulDesc_t *d, int compute, int scale)) \
  X(cublasStatus_t, cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy", (cublasLtMatmulDesc_t d)) \
  X(cublasStatus_t, cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute", (cublasLtMatmulDesc_t d, int attr, \
    const void *buf, size_t n)) \
  X(cublasStatus_t, cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate", (cublasLtMatrixLayout_t *l, int type, \
    uint64_t rows, uint64_t cols, int64_t ld)) \
  X(cublasStatus_t, cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", (cublasLtMatrixLayout_t l)) \
  X(cublasStatus_t, cublasLtMatmul, "cublasLtMatmul", (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, \
    CUdeviceptr a, cublasLtMatrixLayout_t la, CUdeviceptr b, cublasLtMatrixLayout_t lb, const void *beta, CUdeviceptr c, \
    cublasLtMatrixLayout_t lc, CUdeviceptr dst, cublasLtMatrixLayout_t ld, const void *algo, void *ws, size_t wsn, \
    CUstream s))

// NCCL (nccl.h's values: ncclSuccess 0, ncclSum 0, ncclFloat32 7, ncclFloat64 8): the
// gradients' all-reduce of a training step split over several GPUs. Its streams
// are the runtime API's cudaStream_t, which is the driver's CUstream.
typedef int ncclResult_t;
typedef struct ncclComm *ncclComm_t;
enum { RT_NCCL_SUM = 0, RT_NCCL_F32 = 7, RT_NCCL_F64 = 8 };
#define RT_CUDA_NCCL(X) \
  X(ncclResult_t, ncclGetVersion, "ncclGetVersion", (int *version)) \
  X(const char *, ncclGetErrorString, "ncclGetErrorString", (ncclResult_t r)) \
  X(ncclResult_t, ncclCommInitAll, "ncclCommInitAll", (ncclComm_t *comms, int ndev, const int *devices)) \
  X(ncclResult_t, ncclCommDestroy, "ncclCommDestroy", (ncclComm_t comm)) \
  X(ncclResult_t, ncclGroupStart, "ncclGroupStart", (void)) \
  X(ncclResult_t, ncclGroupEnd, "ncclGroupEnd", (void)) \
  X(ncclResult_t, ncclAllReduce, "ncclAllReduce", (const void *send, void *recv, size_t count, int dtype, int op, \
    ncclComm_t comm, CUstream stream))

#define RT_CUDA_FIELD(ret, name, sym, params) ret (*name) params;
typedef struct {
  void *lib;              // libcuda.so.1; NULL until rt_cuda_open succeeded
  char lib_name[256];     // what was loaded
  int version;            // cuDriverGetVersion: 12040 is 12.4
  int ndevices;
  RT_CUDA_DRIVER(RT_CUDA_FIELD)
  void *nvrtc_lib;        // rt_cuda_nvrtc
  char nvrtc_name[256];
  int nvrtc_major, nvrtc_minor;
  RT_CUDA_NVRTC(RT_CUDA_FIELD)
  RT_CUDA_NVRTC_OPTIONAL(RT_CUDA_FIELD)
  void *cublas_lib;       // rt_cuda_cublas
  char cublas_name[256];
  RT_CUDA_CUBLAS(RT_CUDA_FIELD)
  void *cublaslt_lib;     // rt_cuda_cublaslt
  char cublaslt_name[256];
  RT_CUDA_CUBLASLT(RT_CUDA_FIELD)
  void *nccl_lib;         // rt_cuda_nccl
  char nccl_name[256];
  int nccl_version;       // ncclGetVersion: 22105 is 2.21.5
  RT_CUDA_NCCL(RT_CUDA_FIELD)
} RtCuda;

typedef struct {
  int ordinal;
  CUdevice dev;
  CUcontext ctx;          // the device's primary context, current on the opening thread
  char name[256];
  int sm;                 // compute capability: 90 for sm_90
  int multiprocessors;
  size_t total_mem;
} RtCudaDevice;

// Loads the driver, calls cuInit and counts the devices. 0, or -1 with the reason in
// err: "no NVIDIA driver: libcuda.so.1 not found (...)", "no CUDA device: ...", ...
int rt_cuda_open(RtCuda *cu, char *err, size_t errlen);
// Retains device `ordinal`'s primary context and makes it current. 0 or -1.
int rt_cuda_device(RtCuda *cu, int ordinal, RtCudaDevice *d, char *err, size_t errlen);
void rt_cuda_device_release(RtCuda *cu, RtCudaDevice *d);
// Loads NVRTC (works without a driver or a GPU). 0, or -1 with the names tried.
int rt_cuda_nvrtc(RtCuda *cu, char *err, size_t errlen);
// Loads cuBLAS (KILN_CUBLAS: exactly that library). 0, or -1 with the names tried.
int rt_cuda_cublas(RtCuda *cu, char *err, size_t errlen);
// Loads cuBLASLt (KILN_CUBLASLT: exactly that library). 0, or -1 with why not.
int rt_cuda_cublaslt(RtCuda *cu, char *err, size_t errlen);
// Loads NCCL (KILN_NCCL: exactly that library; else libnccl.so.2). 0, or -1 with why not.
int rt_cuda_nccl(RtCuda *cu, char *err, size_t errlen);
// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver result, via the driver.
void rt_cuda_strerror(const RtCuda *cu, CUresult r, char *buf, size_t len);
// Forgets what cu loaded (cu is zeroed); the libraries stay in the process (cuda.c says why).
void rt_cuda_close(RtCuda *cu);
// ---- running graphs (cuda_exec.c) ----------------------------------------------------
// A device arena: one allocation that only grows.
typedef struct { CUdeviceptr base; size_t cap; } RtCudaArena;
// A run's copy out, waiting in pinned memory for rt_cuda_run_wait.
typedef struct { void *host; size_t off, bytes; } RtCudaPending;

#define RT_CUDA_MAXAHEAD 8   // buffers in a batch copied ahead
// An area the next batch is copied to while a step runs (rt_cuda_prefetch): its
// device memory, its pinned staging, and the event its copies end with.
typedef struct { RtCudaArena dev; char *pin; size_t pin_cap; CUevent copied; } RtCudaAhead;

// The device a program runs on, and what its generated host function needs: the
// kernels of the program running now (fns, block: set by the caller before each
// run, one per launch step), the stream, the arenas, the first error.
typedef struct {
  RtCuda *cu;
  RtCudaDevice dev;
  CUstream stream;
  RtCudaArena ws, args;        // the graph's workspace; the run's inputs, constants and outputs
  char *pinned; size_t pinned_cap;   // page-locked host staging for a run's copies (grows)
  RtCudaPending *pend; int npend, pend_cap;   // the copies out that the wait finishes
  cublasHandle_t blas;         // NULL without cuBLAS: products run as Kiln's tiled kernels
  char blas_why[256];          // then why
  cublasLtHandle_t lt;         // NULL without cuBLASLt (or cuBLAS): epilogues run as kernels
  char lt_why[256];            // then why
  CUfunction *fns;
  const int *block;
  int nfns;
  CUevent *marks; int nmarks; // with profiling: an event before each launch step, and one after the last
  int profiling;              // rt_cuda_mark records events
  CUevent span[2];             // rt_cuda_time_begin and _end: a stretch of the stream, timed
  CUstream copy;               // rt_cuda_prefetch's copies (made at its first call)
  RtCudaAhead ahead[2];        // they alternate: a step reads one while the next batch goes to the other
  int ahead_last;              // the one the last rt_cuda_prefetch filled
  int nahead;                  // what it copied, until a run takes it: the host buffers and their copies
  const void *ahead_host[RT_CUDA_MAXAHEAD]; size_t ahead_bytes[RT_CUDA_MAXAHEAD]; CUdeviceptr ahead_dev[RT_CUDA_MAXAHEAD];
  char err[512];               // the first failure, "" if none; the caller clears it
} RtCudaExec;

// Opens the driver (if cu has not been), device `ordinal`'s context and a stream. 0 or -1.
int rt_cuda_exec_open(RtCudaExec *x, RtCuda *cu, int ordinal, char *err, size_t errlen);
void rt_cuda_exec_close(RtCudaExec *x);   // frees the arenas, the stream and the context
// Makes x's context the thread's current one. Every function below that takes an
// RtCudaExec does so first, so one thread can drive several devices in turn.
int rt_cuda_use(RtCudaExec *x);
// For the generated host function (x is an RtCudaExec); each 0 or -1 (0 for an
// address) with the reason in x->err. launch: step's kernel over `work` items,
// each a block (per_block) or a thread; params as cuLaunchKernel's.
int rt_cuda_launch(void *x, int step, int64_t work, int per_block, void **params);
CUdeviceptr rt_cuda_workspace(void *x, size_t bytes);
// The host function calls it before launch step i and, with i = nfns, after the last:
// with x->profiling, records marks[i] on the stream (rt_cuda_step_ms reads the gaps).
int rt_cuda_mark(void *x, int i);
int rt_cuda_copy(void *x, CUdeviceptr dst, CUdeviceptr src, size_t bytes);
// C[i] = A[i] @ B[i] for i < batch, row-major m x n (row stride ldc, batch stride sc),
// A m x k (k x m stored if ta: A is read transposed), B k x n (n x k if tb), each
// with its row stride and batch stride (0: one matrix for the whole batch), through
// cuBLAS. 0 when done; 1 when cuBLAS cannot take it (not loaded, a stride it does
// not accept, a size past int): the caller runs its own kernel; -1 on an error.
int rt_cuda_gemm(void *x, int f64, int64_t batch, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int ta, int64_t lda,
                 int64_t sa, CUdeviceptr b, int tb, int64_t ldb, int64_t sb, CUdeviceptr c, int64_t ldc, int64_t sc);
// C = epi(A @ B + bias) through cuBLASLt, in f32, with bias (n values) added to
// each row of C (m x n, contiguous) and, for epi RT_LT_EPI_RELU_BIAS, ReLU after
// (RT_LT_EPI_BIAS: none); A and B as rt_cuda_gemm's, one matrix each. 0 when
// done, 1 when cuBLASLt cannot take it (not loaded, no algorithm for it: the
// caller runs the product and its epilogue kernel), -1 on an error.
int rt_cuda_gemm_epi(void *x, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int ta, int64_t lda, CUdeviceptr b, int tb,
                     int64_t ldb, CUdeviceptr c, int epi, CUdeviceptr bias);
// "CUDA device 0: NVIDIA H200 (sm_90, 143771 MiB); products through cuBLAS (libcublas.so.13)",
// or "...; products through Kiln's tiled kernels (why cuBLAS is not used)".
void rt_cuda_describe(const RtCudaExec *x, char *buf, size_t len);
// For the caller: the arguments' arena, copies in and out on the stream, and the wait.
CUdeviceptr rt_cuda_args(RtCudaExec *x, size_t bytes);
int rt_cuda_upload(RtCudaExec *x, CUdeviceptr dst, const void *src, size_t bytes);
int rt_cuda_download(RtCudaExec *x, void *dst, CUdeviceptr src, size_t bytes);
int rt_cuda_sync(RtCudaExec *x);
// After a profiled run and rt_cuda_sync: milliseconds between marks i and i + 1.
double rt_cuda_step_ms(RtCudaExec *x, int i);

// A graph's program on the device: its kernels' module, one function per launch
// step, and the host function that launches them (codegen/cuda.c writes it; the
// JIT or, in a built binary, the linker provides it).
typedef int (*RtCudaHost)(void *x, const int64_t *D, const CUdeviceptr *in, const CUdeviceptr *cst,
                          const CUdeviceptr *out);
typedef struct {
  CUmodule mod;
  CUfunction *fns;
  int *block;
  int nsteps;
  RtCudaHost host;
} RtCudaProg;

// Loads image (a CUBIN or PTX) and looks up the kernels names[0..nsteps). 0, or -1 with the reason.
int rt_cuda_prog_load(RtCudaExec *x, RtCudaProg *g, const void *image, const char *const *names, const int *block,
                      int nsteps, RtCudaHost host, char *err, size_t errlen);
void rt_cuda_prog_free(RtCudaExec *x, RtCudaProg *g);
// Runs g: the nin inputs and nconst constants (host[i], bytes[i]) copied to the
// arguments' arena, the host function, the nout outputs copied back into host[],
// the wait. resident: NULL, or for each argument a device address that holds it
// already (neither copied in nor out), 0 for one to copy. step_ms: with it,
// x->profiling is set and each step's milliseconds are added to step_ms[i].
// 0, or -1 with the reason in x->err.
// The room an argument of `bytes` takes in the arguments' arena: 256-byte aligned, never 0.
size_t rt_cuda_arg_bytes(size_t bytes);
int rt_cuda_run(RtCudaExec *x, const RtCudaProg *g, const int64_t *D, void *const *host, const size_t *bytes, int nin,
                int nconst, int nout, const CUdeviceptr *resident, double *step_ms);
// rt_cuda_run in two halves, so that one thread keeps several devices (and its own
// CPU work) busy at once: start stages the inputs in pinned memory and queues
// their copies, the kernels and the copies out (into pinned memory again: a copy
// to pageable memory would make the host wait for the kernels), and returns;
// wait waits for them, moves the results to host[] and adds the profile (step_ms
// as in rt_cuda_run). Each 0 or -1.
int rt_cuda_run_start(RtCudaExec *x, const RtCudaProg *g, const int64_t *D, void *const *host, const size_t *bytes,
                      int nin, int nconst, int nout, const CUdeviceptr *resident, int profile);
int rt_cuda_run_wait(RtCudaExec *x, const RtCudaProg *g, double *step_ms);
// Times a stretch of x's stream: begin and end record events; after a wait,
// rt_cuda_time_ms gives the milliseconds between them (the device's own time,
// whatever the host did meanwhile). 0 or -1.
int rt_cuda_time_begin(RtCudaExec *x);
int rt_cuda_time_end(RtCudaExec *x);
double rt_cuda_time_ms(RtCudaExec *x);
// The next batch copied while the current step runs. prefetch stages the n
// (at most RT_CUDA_MAXAHEAD) buffers host[i], bytes[i] each, in pinned memory
// and queues their copies on a stream of x's own, into one of two areas that
// alternate, and returns. Call it between a run's start and its wait: the area
// it fills was last read by the run before, which that wait finished (starts and
// waits alternate, as the arguments' arena needs). 0 or -1.
// rt_cuda_run_start takes the copy (take_prefetched): its inputs that are not
// resident and have a buffer's storage and size get the copy's device address
// in resident[], and x's stream waits for the copies by an event. The count, or
// -1. When it is not 0 the copy is used up; else it waits for a later run (a
// several-device step's update reads no batch) until the next prefetch or
// drop_prefetched. The caller keeps the buffers' contents until then.
int rt_cuda_prefetch(RtCudaExec *x, void *const *host, const size_t *bytes, int n);
int rt_cuda_take_prefetched(RtCudaExec *x, void *const *host, const size_t *bytes, int nin, CUdeviceptr *resident);
void rt_cuda_drop_prefetched(RtCudaExec *x);
// Sets bytes of device memory to zero on x's stream. 0 or -1.
int rt_cuda_zero(RtCudaExec *x, CUdeviceptr p, size_t bytes);
// An allocation of its own (a tensor kept on the device), 0 on failure (x->err); and its release.
CUdeviceptr rt_cuda_alloc(RtCudaExec *x, size_t bytes);
void rt_cuda_free(RtCudaExec *x, CUdeviceptr p);

// Parses a --device value: "cpu" (-1), "cuda" (0), "cuda:N" (N). -2 if malformed.
int rt_cuda_parse_device(const char *s);
// Parses a --device value of one or several devices into dev (CUDA ordinals, -1 the
// CPU): cpu, cuda, cuda:N, cuda:0,1 (several GPUs), each of those but cpu with +cpu
// (and the CPU's threads). The count, or -1 if malformed, repeated or more than max.
int rt_cuda_parse_devices(const char *s, int *dev, int max);

#endif
