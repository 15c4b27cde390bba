// fake_cuda.c - a test-only stand-in for libcuda.so.1 (KILN_LIBCUDA names it): one
// device, "Kiln fake CUDA device (CPU)", sm_90, whose memory is host memory and
// whose kernels are fake_nvrtc.c's shared libraries, run when launched. Streams
// and events are synchronous. It checks what a real driver would reject:
// copies outside an allocation, unknown pointers freed, kernels missing from a
// module; fresh allocations are filled with 0xFF bytes (NaN in any float type)
// so that a kernel reading memory nothing wrote shows up in results.
// Each stream belongs to the context current when it was made, and work queued
// on it while another context is current fails (CUDA_ERROR_INVALID_CONTEXT), as
// it does on a real driver: this catches a caller driving several devices that
// forgot to switch.
// $KILN_FAKE_CUDA_DEVICES: how many devices (default 1; 0 gives CUDA_ERROR_NO_DEVICE).
// $KILN_FAKE_CUDA_SM: their compute capability (default 90: sm_90).
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long CUdeviceptr;
typedef struct Function { void (*run)(unsigned gx, unsigned bx, void **params); struct Function *next; } Function;
typedef struct { void *lib; char path[64]; Function *fns; } Module;   // fns: freed with the module
typedef struct { double ms; } Event;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100, INVALID_IMAGE = 200,
       NOT_FOUND = 500, INVALID_HANDLE = 400, INVALID_CONTEXT = 201 };
typedef struct { void *ctx; } Stream;
static __thread void *current;   // the thread's current context

typedef struct { char *p; size_t n; } Alloc;
static Alloc *allocs;   // a test double's own bookkeeping: one process, one fake device
static int nallocs, inited;

static int ndevices(void) {
  const char *e = getenv("KILN_FAKE_CUDA_DEVICES");
  return e && *e ? atoi(e) : 1;
}

int cuInit(unsigned flags) { (void)flags; inited = 1; return ndevices() ? OK : NO_DEVICE; }
int cuDriverGetVersion(int *v) { *v = 13000; return OK; }
int cuGetErrorName(int e, const char **s) {
  *s = e == OK ? "CUDA_SUCCESS" : e == INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : e == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
       : e == NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : e == INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT" : e == INVALID_IMAGE ? "CUDA_ERROR_INVALID_IMAGE" : e == NOT_FOUND ? "CUDA_ERROR_NOT_FOUND"
       : "CUDA_ERROR_UNKNOWN";
  return OK;
}
int cuGetErrorString(int e, const char **s) { return cuGetErrorName(e, s) || (*s = "fake driver", 0); }
int cuDeviceGetCount(int *n) { *n = inited ? ndevices() : 0; return inited ? OK : NOT_INITIALIZED; }
int cuDeviceGet(int *d, int ordinal) { if (ordinal < 0 || ordinal >= ndevices()) return INVALID_VALUE; *d = ordinal; return OK; }
int cuDeviceGetName(char *name, int len, int d) { snprintf(name, len, "Kiln fake CUDA device %d (CPU)", d); return OK; }
int cuDeviceGetAttribute(int *v, int attr, int d) {
  (void)d;
  const char *e = getenv("KILN_FAKE_CUDA_SM");
  int sm = e && *e ? atoi(e) : 90;
  *v = attr == 16 ? 2 : attr == 75 ? sm / 10 : attr == 76 ? sm % 10 : 0;   // 2 multiprocessors
  return OK;
}
int cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)4 << 30; return OK; }
int cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)(intptr_t)(d + 1); return OK; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return OK; }
int cuCtxSetCurrent(void *c) {
  if ((intptr_t)c < 0 || (intptr_t)c > ndevices()) return INVALID_VALUE;
  current = c;
  return OK;
}
// Work on stream s needs s's context current.
static int on(const Stream *s) { return !s ? (current ? OK : INVALID_CONTEXT) : s->ctx == current ? OK : INVALID_CONTEXT; }
int cuCtxSynchronize(void) { return OK; }

int cuModuleLoadData(Module **m, const void *image) {
  const char *im = image;
  unsigned long long n;
  if (memcmp(im, "KILNFAKE", 8)) return INVALID_IMAGE;
  memcpy(&n, im + 8, 8);
  Module *mod = calloc(1, sizeof *mod);
  if (!mod) return OUT_OF_MEMORY;
  snprintf(mod->path, sizeof mod->path, "/tmp/kiln-fake-module-XXXXXX");
  int fd = mkstemp(mod->path);
  if (fd < 0 || write(fd, im + 16, n) != (ssize_t)n) { if (fd >= 0) close(fd); free(mod); return INVALID_IMAGE; }
  close(fd);
  mod->lib = dlopen(mod->path, RTLD_NOW | RTLD_LOCAL);
  unlink(mod->path);
  if (!mod->lib) { fprintf(stderr, "fake cuda: %s\n", dlerror()); free(mod); return INVALID_IMAGE; }
  *m = mod;
  return OK;
}
int cuModuleUnload(Module *m) {
  if (!m) return INVALID_HANDLE;
  while (m->fns) { Function *f = m->fns; m->fns = f->next; free(f); }
  dlclose(m->lib);
  free(m);
  return OK;
}
int cuModuleGetFunction(Function **f, Module *m, const char *name) {
  char sym[256];
  snprintf(sym, sizeof sym, "kiln_fake__%s", name);
  void *run = dlsym(m->lib, sym);
  if (!run) return NOT_FOUND;
  if (!(*f = malloc(sizeof **f))) return OUT_OF_MEMORY;
  *(void **)&(*f)->run = run;
  (*f)->next = m->fns;
  m->fns = *f;
  return OK;
}
int cuLaunchKernel(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, Stream *s, void **params, void **extra) {
  (void)extra;
  if (on(s)) return INVALID_CONTEXT;
  if (!f || gx == 0 || gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024 || shared) return INVALID_VALUE;
  f->run(gx, bx, params);
  return OK;
}

// The allocation [p, p + n) lies in, or -1.
static int find(CUdeviceptr p, size_t n) {
  for (int i = 0; i < nallocs; i++)
    if ((char *)p >= allocs[i].p && (char *)p + n <= allocs[i].p + allocs[i].n) return i;
  return -1;
}
int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (!n) return INVALID_VALUE;
  char *m = aligned_alloc(256, (n + 255) & ~(size_t)255);
  if (!m) return OUT_OF_MEMORY;
  memset(m, 0xFF, n);
  Alloc *a = realloc(allocs, sizeof *a * (nallocs + 1));
  if (!a) { free(m); return OUT_OF_MEMORY; }
  allocs = a;
  allocs[nallocs++] = (Alloc){m, n};
  *p = (CUdeviceptr)m;
  return OK;
}
int cuMemFree_v2(CUdeviceptr p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].p == (char *)p) { free(allocs[i].p); allocs[i] = allocs[--nallocs]; return OK; }
  return INVALID_VALUE;
}
int cuMemAllocHost_v2(void **p, size_t n) { return (*p = malloc(n ? n : 1)) ? OK : OUT_OF_MEMORY; }
int cuMemFreeHost(void *p) { free(p); return OK; }
int cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0) return INVALID_VALUE;
  memcpy((void *)d, h, n);
  return OK;
}
int cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0) return INVALID_VALUE;
  memcpy(h, (void *)d, n);
  return OK;
}
int cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr src, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0 || find(src, n) < 0) return INVALID_VALUE;
  memmove((void *)d, (void *)src, n);
  return OK;
}
int cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0) return INVALID_VALUE;
  memset((void *)d, v, n);
  return OK;
}
int cuStreamCreate(Stream **s, unsigned flags) {
  (void)flags;
  if (!current) return INVALID_CONTEXT;
  if (!(*s = malloc(sizeof **s))) return OUT_OF_MEMORY;
  (*s)->ctx = current;
  return OK;
}
int cuStreamDestroy_v2(Stream *s) { free(s); return OK; }
int cuStreamSynchronize(Stream *s) { return on(s); }
int cuEventCreate(Event **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof **e); return *e ? OK : OUT_OF_MEMORY; }
int cuEventRecord(Event *e, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  e->ms = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
  return OK;
}
int cuEventSynchronize(Event *e) { (void)e; return OK; }
int cuEventElapsedTime(float *ms, Event *a, Event *b) { *ms = (float)(b->ms - a->ms); return OK; }
int cuEventDestroy_v2(Event *e) { free(e); return OK; }
