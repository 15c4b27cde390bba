// shim.h - what the fake NVRTC (fake_nvrtc.c) puts before Kiln's CUDA C so that
// g++ compiles it for the host: CUDA's keywords and intrinsics, and a scheduler
// that runs a block's threads as fibers on one OS thread. __syncthreads() is a
// barrier (each fiber runs until it reaches it, then the next), warp shuffles
// go through a per-block slot array between two barriers, and __shared__ is a
// thread_local static (a block's fibers share it; blocks run one after another).
// What a GPU leaves undefined is made to show: the fibers between two barriers
// run in ascending order, then descending, then ascending... so that a thread
// reading what another wrote without a barrier between gets a different value
// from one stretch to the next (and the test a wrong answer); and a barrier (or
// a shuffle) that some of a block's threads reach while others have returned
// aborts the run with the kernel's name (on a GPU: a hang or garbage), as does a
// turn whose threads wait at different barriers (each __syncthreads and each
// shuffle is known by its source line), and a pointer the kernel assumes
// aligned that is not (a misaligned-address fault on a GPU).
// Test-only: it exists so the host side of the CUDA backend runs in CI without a GPU.
// No system header is included: the generated prelude defines int64_t as
// long long, which glibc's <stdint.h> would contradict.
#ifndef KILN_FAKE_SHIM_H
#define KILN_FAKE_SHIM_H

typedef __SIZE_TYPE__ kiln_size_t;
extern "C" {
double ceil(double); float ceilf(float); double cos(double); float cosf(float);
double exp(double); float expf(float); double expm1(double); float expm1f(float);
double fabs(double); float fabsf(float); double floor(double); float floorf(float);
double fmax(double, double); float fmaxf(float, float); double log(double); float logf(float);
double log1p(double); float log1pf(float); double pow(double, double); float powf(float, float);
double rint(double); float rintf(float); double sin(double); float sinf(float);
double sqrt(double); float sqrtf(float); double tanh(double); float tanhf(float);
double erf(double); float erff(float);
double fmod(double, double); float fmodf(float, float); double copysign(double, double); float copysignf(float, float);
void *memcpy(void *, const void *, kiln_size_t);
void *calloc(kiln_size_t, kiln_size_t);
void free(void *);
void abort(void);
int dprintf(int, const char *, ...);
}
static inline bool isnan(double x) { return __builtin_isnan(x); }
static inline bool isinf(double x) { return __builtin_isinf(x); }

#define __global__
#define __device__
#define __launch_bounds__(n)
#define __shared__ static thread_local

struct kiln_dim3 { unsigned x, y, z; };

enum { KILN_FAKE_MAXT = 1024, KILN_FAKE_STACK = 64 << 10 };
struct KilnFiber { void *sp; kiln_dim3 tid; int done, site; };   // site: the barrier's line, negative for a shuffle
struct KilnBlock {
  void *sched_sp;                      // the scheduler's stack pointer while a fiber runs
  KilnFiber *cur;
  KilnFiber f[KILN_FAKE_MAXT];
  unsigned long long slot[KILN_FAKE_MAXT];   // shuffle values
  char *stacks;
  void (*body)(void **);
  void **params;
};
static thread_local KilnBlock *kiln_fake_b;
static thread_local const char *kiln_fake_kernel;   // the launch running now, for the messages
static thread_local kiln_dim3 kiln_fake_bid, kiln_fake_bdim, kiln_fake_gdim;
#define threadIdx (kiln_fake_b->cur->tid)
#define blockIdx kiln_fake_bid
#define blockDim kiln_fake_bdim
#define gridDim kiln_fake_gdim

// The x86-64 context switch: callee-saved registers on the old stack, then the new one's.
extern "C" void kiln_fake_swap(void **save, void *next) __attribute__((visibility("hidden")));
extern "C" void kiln_fake_start(void) __attribute__((visibility("hidden")));
asm(".text\n"
    ".hidden kiln_fake_swap\n.globl kiln_fake_swap\n.type kiln_fake_swap,@function\nkiln_fake_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".hidden kiln_fake_start\n.globl kiln_fake_start\n.type kiln_fake_start,@function\nkiln_fake_start:\n"
    "  movq %rbx, %rdi\n  call kiln_fake_fiber_main\n  ud2\n");

extern "C" __attribute__((visibility("hidden"), used)) void kiln_fake_fiber_main(KilnFiber *f) {
  kiln_fake_b->body(kiln_fake_b->params);
  f->done = 1;
  void *dead;
  kiln_fake_swap(&dead, kiln_fake_b->sched_sp);
  abort();
}

static inline void kiln_fake_barrier(int site) {
  KilnFiber *f = kiln_fake_b->cur;
  f->site = site;
  kiln_fake_swap(&f->sp, kiln_fake_b->sched_sp);
}
#define __syncthreads() kiln_fake_barrier(__LINE__)

template <typename T> static T kiln_fake_shfl_down(T v, int d, int site) {
  unsigned t = threadIdx.x, lane = t & 31;
  unsigned long long u = 0;
  memcpy(&u, &v, sizeof v);
  kiln_fake_b->slot[t] = u;
  kiln_fake_barrier(-site);
  if (lane + (unsigned)d < 32 && t + d < blockDim.x) memcpy(&v, &kiln_fake_b->slot[t + d], sizeof v);
  kiln_fake_barrier(-site);
  return v;
}
#define __shfl_down_sync(mask, v, d) kiln_fake_shfl_down(v, d, __LINE__)

static inline void *kiln_fake_assume_aligned(const void *p, kiln_size_t a, int line) {
  if ((unsigned long long)p % a) {
    dprintf(2, "fake CUDA: kernel %s, line %d: a pointer assumed %llu-byte aligned is not (%p)\n", kiln_fake_kernel, line,
            (unsigned long long)a, p);
    abort();
  }
  return (void *)p;
}
#define __builtin_assume_aligned(p, a) kiln_fake_assume_aligned(p, a, __LINE__)

static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); return i; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }

// Runs every block of a launch, one after another and last block first (a GPU
// promises no order; a kernel whose blocks depended on running in order would
// show it here); in each, the fibers in turns until all are done, each turn in
// the other order. Each fiber starts at kiln_fake_start with itself in rbx.
static void kiln_fake_run(const char *name, unsigned gx, unsigned bx, void (*body)(void **), void **params) {
  if (bx == 0 || bx > KILN_FAKE_MAXT) abort();
  KilnBlock *b = (KilnBlock *)calloc(1, sizeof *b);
  b->stacks = (char *)calloc(bx, KILN_FAKE_STACK);
  if (!b || !b->stacks) abort();
  b->body = body;
  b->params = params;
  KilnBlock *outer = kiln_fake_b;
  const char *outer_name = kiln_fake_kernel;
  kiln_fake_b = b;
  kiln_fake_kernel = name;
  kiln_fake_gdim = kiln_dim3{gx, 1, 1};
  kiln_fake_bdim = kiln_dim3{bx, 1, 1};
  for (unsigned g = gx; g-- > 0;) {
    kiln_fake_bid = kiln_dim3{g, 0, 0};
    for (unsigned t = 0; t < bx; t++) {
      KilnFiber *f = &b->f[t];
      unsigned long long *top = (unsigned long long *)(b->stacks + (kiln_size_t)(t + 1) * KILN_FAKE_STACK);
      top -= 9;   // 6 registers and the start address; after its ret, rsp is 16-byte aligned
      for (int r = 0; r < 6; r++) top[r] = 0;
      top[4] = (unsigned long long)f;   // rbx
      top[6] = (unsigned long long)kiln_fake_start;
      f->sp = top;
      f->tid = kiln_dim3{t, 0, 0};
      f->done = 0;
    }
    for (unsigned live = bx, turn = 0; live; turn++) {
      unsigned ended = 0, first = 0;
      live = 0;
      for (unsigned i = 0; i < bx; i++) {
        unsigned t = turn & 1 ? bx - 1 - i : i;
        if (b->f[t].done) continue;
        b->cur = &b->f[t];
        kiln_fake_swap(&b->sched_sp, b->f[t].sp);
        if (b->f[t].done) { ended++; continue; }
        if (live++ && b->f[t].site != b->f[first].site) {
          dprintf(2, "fake CUDA: kernel %s, block %u: at barrier %u thread %u waits at line %d, thread %u at line %d "
                     "(negative: a shuffle)\n", name, g, turn + 1, b->f[first].tid.x, b->f[first].site, t, b->f[t].site);
          abort();
        }
        if (live == 1) first = t;
      }
      if (live && ended) {
        dprintf(2, "fake CUDA: kernel %s, block %u: %u threads reached barrier %u (a __syncthreads or a shuffle) "
                   "and %u returned without it\n", name, g, live, turn + 1, ended);
        abort();
      }
    }
  }
  kiln_fake_b = outer;
  kiln_fake_kernel = outer_name;
  free(b->stacks);
  free(b);
}

// A kernel called with the driver's parameter array: each p[i] points at argument i.
template <kiln_size_t... I> struct KilnSeq {};
template <kiln_size_t N, kiln_size_t... I> struct KilnMk : KilnMk<N - 1, N - 1, I...> {};
template <kiln_size_t... I> struct KilnMk<0, I...> { typedef KilnSeq<I...> type; };
template <typename... A, kiln_size_t... I> static void kiln_fake_call(void (*f)(A...), void **p, KilnSeq<I...>) {
  f(*(A *)p[I]...);
}
template <typename... A> static void kiln_fake_apply(void (*f)(A...), void **p) {
  kiln_fake_call(f, p, typename KilnMk<sizeof...(A)>::type());
}
// Its parameters' sizes into sizes[]; their count.
template <typename... A> static int kiln_fake_sizes(void (*)(A...), kiln_size_t *sizes) {
  kiln_size_t s[] = {sizeof(A)..., 0};
  for (kiln_size_t i = 0; i < sizeof...(A); i++) sizes[i] = s[i];
  return (int)sizeof...(A);
}

#endif
