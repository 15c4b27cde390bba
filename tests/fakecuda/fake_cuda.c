// fake_cuda.c - a test-only stand-in for libcuda.so.1 (KILN_LIBCUDA names it): one
// device, "Kiln fake CUDA device (CPU)", sm_90, whose memory is host memory and
// whose kernels are fake_nvrtc.c's shared libraries. It checks what a real
// driver would reject: copies outside an allocation, unknown pointers freed,
// kernels missing from a module; fresh allocations are filled with 0xFF bytes
// (NaN in any float type) so that a kernel reading memory nothing wrote shows up
// in results.
// Streams are asynchronous, and lazier than a GPU's: work queued on a stream
// runs only when something must see its result (cuStreamSynchronize,
// cuEventSynchronize, another stream's cuStreamWaitEvent reaching it, a copy
// into pageable memory, a free). A caller that reads results it did not wait
// for, or runs work on one stream that needed another's without an event,
// therefore gets stale data here, not the right answer by luck. A launch's
// arguments and a copy from pageable memory are taken when queued, as CUDA
// takes them; a copy from or to pinned memory (cuMemAllocHost) reads or writes
// it when it runs. fake_cublas.c, fake_cublaslt.c and fake_nccl.c queue their
// work here too (kiln_fake_enqueue, kiln_fake_flush).
// Each stream belongs to the context current when it was made, and work queued
// on it while another context is current fails (CUDA_ERROR_INVALID_CONTEXT), as
// it does on a real driver: this catches a caller driving several devices that
// forgot to switch.
// $KILN_FAKE_CUDA_DEVICES: how many devices (default 1; 0 gives CUDA_ERROR_NO_DEVICE).
// $KILN_FAKE_CUDA_SM: their compute capability (default 90: sm_90).
// $KILN_FAKE_CUDA_LOG: a file each copy to the device appends "htod STREAM BYTES"
// to when queued (STREAM: 0 for the first stream made, 1 the next...).
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long CUdeviceptr;
typedef struct Function {
  void (*run)(unsigned gx, unsigned bx, void **params);
  int (*sizes)(size_t *sizes);   // its parameters' sizes
  struct Function *next;
} Function;
typedef struct { void *lib; char path[64]; Function *fns; } Module;   // fns: freed with the module
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100, INVALID_IMAGE = 200,
       NOT_FOUND = 500, INVALID_HANDLE = 400, INVALID_CONTEXT = 201, NOT_READY = 600 };

// Work queued on a stream, run in order. seq: the op's place in its stream (1, 2, ...).
typedef struct Stream Stream;
typedef struct Event { double ms; Stream *s; unsigned long long seq; struct Event *next; } Event;   // s, seq: the last record
typedef struct Op {
  enum { LAUNCH, COPY, SET, RECORD, WAIT, CALL } kind;
  struct Op *next;
  Function *f; unsigned gx, bx; void **args;   // LAUNCH: args copied when queued
  void *dst; const void *src; size_t n; void *own; int v;   // COPY (own: a snapshot to free), SET
  Event *e; unsigned long long seq;            // RECORD: its seq; WAIT: until e's stream passes seq
  Stream *on;                                  // WAIT: that stream
  void (*fn)(void *); void *arg;               // CALL: fn(arg), then arg freed
} Op;
struct Stream {
  void *ctx;   // first: fake_nccl.c reads it
  int id;
  Op *head, *tail;
  unsigned long long queued, done;
  Stream *next;   // all streams
};
static __thread void *current;   // the thread's current context

typedef struct { char *p; size_t n; } Alloc;
// A test double's own bookkeeping: one process, its fake devices, one host thread at a time.
static Alloc *allocs, *pinned;
static int nallocs, npinned, inited, nstreams;
static Stream *streams;
static Event *events;

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
static void run_all(void);
int cuCtxSynchronize(void) { run_all(); return OK; }

// ---- the streams' queues ----
static void run_until(Stream *s, unsigned long long seq);

static void exec(Op *o) {
  switch (o->kind) {
  case LAUNCH: o->f->run(o->gx, o->bx, o->args); break;
  case COPY: memmove(o->dst, o->src, o->n); break;
  case SET: memset(o->dst, o->v, o->n); break;
  case RECORD:
    if (o->e->seq == o->seq) {   // not recorded again since
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      o->e->ms = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
    }
    break;
  case WAIT: run_until(o->on, o->seq); break;
  case CALL: o->fn(o->arg); break;
  }
}

static void drop(Op *o) {
  if (o->args) for (int i = 0; o->args[i]; i++) free(o->args[i]);
  free(o->args);
  free(o->own);
  free(o->arg);
  free(o);
}

// Runs s's work up to and including its op seq.
static void run_until(Stream *s, unsigned long long seq) {
  while (s->done < seq && s->head) {
    Op *o = s->head;
    if (!(s->head = o->next)) s->tail = NULL;
    s->done++;
    exec(o);
    drop(o);
  }
}

static void run_all(void) {
  for (Stream *s = streams; s; s = s->next) run_until(s, s->queued);
}

static unsigned long long queue(Stream *s, Op *o) {
  o->next = NULL;
  if (s->tail) s->tail->next = o; else s->head = o;
  s->tail = o;
  return ++s->queued;
}

static Op *op(int kind) {
  Op *o = calloc(1, sizeof *o);
  if (!o) abort();
  o->kind = kind;
  return o;
}

// The legacy default stream (NULL) runs everything before it and its own work at once.
static int now_or_queue(Stream *s, Op *o) {
  if (s) { queue(s, o); return OK; }
  run_all();
  exec(o);
  drop(o);
  return OK;
}

static int is_pinned(const void *p, size_t n) {
  for (int i = 0; i < npinned; i++)
    if ((const char *)p >= pinned[i].p && (const char *)p + n <= pinned[i].p + pinned[i].n) return 1;
  return 0;
}

// For fake_cublas.c, fake_cublaslt.c and fake_nccl.c: fn(arg) queued on s (arg
// is freed after); all of s's work done now.
int kiln_fake_enqueue(Stream *s, void (*fn)(void *), void *arg) {
  if (s && s->ctx != current) return INVALID_CONTEXT;
  Op *o = op(CALL);
  o->fn = fn;
  o->arg = arg;
  return now_or_queue(s, o);
}
void kiln_fake_flush(Stream *s) { if (s) run_until(s, s->queued); else run_all(); }

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
  run_all();
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
  snprintf(sym, sizeof sym, "kiln_fake_sizes__%s", name);
  void *sizes = dlsym(m->lib, sym);
  if (!sizes) return NOT_FOUND;
  if (!(*f = malloc(sizeof **f))) return OUT_OF_MEMORY;
  *(void **)&(*f)->run = run;
  *(void **)&(*f)->sizes = sizes;
  (*f)->next = m->fns;
  m->fns = *f;
  return OK;
}
int cuLaunchKernel(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, Stream *s, void **params, void **extra) {
  (void)extra;
  if (on(s)) return INVALID_CONTEXT;
  if (!f || gx == 0 || gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024 || shared) return INVALID_VALUE;
  size_t size[256];
  int n = f->sizes(size);
  Op *o = op(LAUNCH);
  o->f = f; o->gx = gx; o->bx = bx;
  if (!(o->args = calloc(n + 1, sizeof *o->args))) abort();
  for (int i = 0; i < n; i++) {
    if (!(o->args[i] = malloc(size[i] ? size[i] : 1))) abort();
    memcpy(o->args[i], params[i], size[i]);
  }
  return now_or_queue(s, o);
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
  run_all();   // as cuMemFree synchronizes
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].p == (char *)p) { free(allocs[i].p); allocs[i] = allocs[--nallocs]; return OK; }
  return INVALID_VALUE;
}
int cuMemAllocHost_v2(void **p, size_t n) {
  Alloc *a = realloc(pinned, sizeof *a * (npinned + 1));
  if (!a || !(*p = malloc(n ? n : 1))) return OUT_OF_MEMORY;
  pinned = a;
  pinned[npinned++] = (Alloc){*p, n};
  return OK;
}
int cuMemFreeHost(void *p) {
  run_all();
  for (int i = 0; i < npinned; i++)
    if (pinned[i].p == p) { free(p); pinned[i] = pinned[--npinned]; return OK; }
  return INVALID_VALUE;
}
static Op *copy_op(void *d, const void *src, size_t n) {
  Op *o = op(COPY);
  o->dst = d; o->src = src; o->n = n;
  return o;
}
int cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0) return INVALID_VALUE;
  const char *log = getenv("KILN_FAKE_CUDA_LOG");
  FILE *f = log && *log ? fopen(log, "a") : NULL;
  if (f) { fprintf(f, "htod %d %zu\n", s ? s->id : -1, n); fclose(f); }
  Op *o = copy_op((void *)d, h, n);
  if (!is_pinned(h, n)) {   // pageable memory is read now
    if (!(o->own = malloc(n))) abort();
    o->src = memcpy(o->own, h, n);
  }
  return now_or_queue(s, o);
}
int cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0) return INVALID_VALUE;
  Op *o = copy_op(h, (void *)d, n);
  if (is_pinned(h, n)) return now_or_queue(s, o);
  if (s) run_until(s, s->queued);   // into pageable memory: done when this returns
  else run_all();
  exec(o);
  drop(o);
  return OK;
}
int cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr src, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0 || find(src, n) < 0) return INVALID_VALUE;
  return now_or_queue(s, copy_op((void *)d, (void *)src, n));
}
int cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!n) return OK;
  if (find(d, n) < 0) return INVALID_VALUE;
  Op *o = op(SET);
  o->dst = (void *)d; o->v = v; o->n = n;
  return now_or_queue(s, o);
}
int cuStreamCreate(Stream **s, unsigned flags) {
  (void)flags;
  if (!current) return INVALID_CONTEXT;
  if (!(*s = calloc(1, sizeof **s))) return OUT_OF_MEMORY;
  (*s)->ctx = current;
  (*s)->id = nstreams++;
  (*s)->next = streams;
  streams = *s;
  return OK;
}
int cuStreamDestroy_v2(Stream *s) {
  run_all();   // its work, and any other stream's waits on it
  for (Stream **p = &streams; *p; p = &(*p)->next)
    if (*p == s) { *p = s->next; break; }
  for (Event *e = events; e; e = e->next) if (e->s == s) e->s = NULL;   // complete
  free(s);
  return OK;
}
int cuStreamSynchronize(Stream *s) {
  int r = on(s);
  if (!r) kiln_fake_flush(s);
  return r;
}
int cuStreamWaitEvent(Stream *s, Event *e, unsigned flags) {
  if (on(s) || !e || flags) return on(s) ? INVALID_CONTEXT : INVALID_VALUE;
  if (!e->s) return OK;   // never recorded: nothing to wait for
  Op *o = op(WAIT);
  o->on = e->s; o->seq = e->seq;
  return now_or_queue(s, o);
}
int cuEventCreate(Event **e, unsigned flags) {
  (void)flags;
  if (!(*e = calloc(1, sizeof **e))) return OUT_OF_MEMORY;
  (*e)->next = events;
  events = *e;
  return OK;
}
int cuEventRecord(Event *e, Stream *s) {
  if (on(s)) return INVALID_CONTEXT;
  if (!s) { run_all(); e->s = NULL; exec(&(Op){.kind = RECORD, .e = e, .seq = e->seq}); return OK; }
  Op *o = op(RECORD);
  o->e = e;
  e->s = s;
  o->seq = e->seq = s->queued + 1;
  queue(s, o);
  return OK;
}
static int complete(const Event *e) { return !e->s || e->s->done >= e->seq; }
int cuEventSynchronize(Event *e) { if (e->s) run_until(e->s, e->seq); return OK; }
int cuEventElapsedTime(float *ms, Event *a, Event *b) {
  if (!complete(a) || !complete(b)) return NOT_READY;
  *ms = (float)(b->ms - a->ms);
  return OK;
}
int cuEventDestroy_v2(Event *e) {
  cuEventSynchronize(e);   // a record still queued would write it
  for (Event **p = &events; *p; p = &(*p)->next)
    if (*p == e) { *p = e->next; break; }
  free(e);
  return OK;
}
