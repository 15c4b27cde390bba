// pool.c: the runtime context, a persistent thread pool and a scratch workspace.
//
// Design. A KRt with n threads owns n-1 workers that live as long as it does; the
// calling thread is thread 0. A job is numbered (gen) and cut into chunks with a
// static partition. Each worker has a mailbox on its own cache line: `seq`, the
// number of the last job it was called to, that only the dispatcher writes. To hand
// out a job the dispatcher writes the job into the KRt, marks each chunk unclaimed
// for this job (claims[t] = gen << 1), then stores gen in the seq of each worker
// that gets a chunk (a small job wakes only the threads it uses). A worker spins on
// its seq for SPIN_NS, then sleeps on its own mutex/condvar; the dispatcher takes
// the lock and signals only when the worker's `sleeping` flag is set, so
// back-to-back calls cost a store per worker and no syscall.
//
// Chunks are claimed, not owned: a thread runs a chunk only after turning its claim
// from gen << 1 into gen << 1 | 1 (a compare-and-swap), its own chunk first (chunk 0
// for the caller, chunk t for worker t), then any chunk still unclaimed. So a worker
// that the machine has not yet run (a shared VM's busy core, a sleeping worker's
// wake-up) does not hold the job up: the caller takes its chunk instead of waiting.
// The chunks are the same whoever runs them, so results are too, bit for bit. A
// thread that comes late holds an old gen, and every claim of an old job has been
// taken (the job ended only when all its chunks had run), so its compare-and-swap
// fails and it touches nothing of the current job. Completion is the atomic
// countdown `pending` of chunks not yet run: the caller spins on it, then sleeps on
// done_cv the same way, and the thread that runs the last chunk signals only if the
// caller's `waiting` flag is set. Each flag is set before its counter is rechecked,
// both seq_cst, so a sleeper and a waker can't both miss (Dekker). The job fields
// are written before the claims (release) and read after a successful claim
// (acquire), and stay stable while pending > 0.
// Spinning yields every 64 pauses: on a busy machine, or with more threads than CPUs,
// the thread being waited for may need this CPU. A thread-local depth marks threads
// inside a parallel region, so nested calls run inline instead of deadlocking.
#include "private.h"
#include "rt.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 100000   // about the gap between kernels in a step; longer burns CPU
#define MAX_THREADS 1024

typedef struct {
    _Alignas(64) _Atomic uint64_t seq;   // the last job (gen) this worker was called to
    _Atomic int sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t tid;
    int index;   // the chunk this worker claims first
    KRt *rt;
} Worker;

struct KRt {
    int nthreads;   // including the caller
    Worker *workers;   // nthreads - 1 of them
    pthread_mutex_t call_mu;   // one job at a time per KRt

    // The current job: written before its claims, read-only while pending > 0.
    RtRangeFn fn;
    void *ctx;
    int64_t base, rem;   // chunk t has base + (t < rem) items
    uint64_t gen;        // the job's number, from 1; written by the dispatcher only
    _Atomic uint64_t *claims;   // per chunk (nthreads): gen << 1 while unclaimed, | 1 once taken

    _Alignas(64) _Atomic uint64_t pending;   // chunks of the job not yet run
    _Atomic int waiting;   // the caller sleeps on done_cv
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t done_cv;

    void *ws;
    size_t ws_size;
    void *gemm_ws;   // gemm.c's packing buffers
    size_t gemm_ws_size;
    int gemm_kind;   // KILN_GEMM, read once in rt_new
    int keep_denormals;   // KILN_DENORMALS=keep, read once in rt_new (see fp_enter)
    uint64_t *profile;   // rt_set_profile's array, NULL when not profiling
};

// Denormal floats. On x86 an operation whose input or result is subnormal takes a
// microcode assist, ~100 cycles instead of ~4: Adam's moments and the gradients
// of a training run drift there, and examples/mlp.kiln's epochs slowed from
// 20,000 to 11,600 examples/s over 4 epochs (1 thread) while the arithmetic
// stayed the same. So Kiln's kernels run with FTZ (results flush to zero) and
// DAZ (inputs read as zero), as TensorFlow's CPU threads do: workers set it once,
// and a call runs its share on the caller's thread with the caller's MXCSR saved
// and restored, so the host program's floating-point environment is untouched.
// KILN_DENORMALS=keep turns it off (IEEE gradual underflow, slower).
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FTZ_DAZ 0x8040u
static unsigned fp_enter(const KRt *rt) {
    unsigned old = _mm_getcsr();
    if (!rt->keep_denormals) _mm_setcsr(old | FTZ_DAZ);
    return old;
}
static void fp_leave(unsigned old) { _mm_setcsr(old); }
#else
static unsigned fp_enter(const KRt *rt) { (void)rt; return 0; }
static void fp_leave(unsigned old) { (void)old; }
#endif

// Nesting depth of parallel regions on this thread; per thread, so not shared state.
static _Thread_local int tls_depth;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Spin until (*p == v) == until_eq, or SPIN_NS passes; returns 1 if the condition held.
static int spin(_Atomic uint64_t *p, uint64_t v, int until_eq) {
    uint64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        if ((atomic_load_explicit(p, memory_order_acquire) == v) == until_eq)
            return 1;
        if (i % 64 == 0) {
            uint64_t t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > SPIN_NS)
                return 0;
            sched_yield();   // let a descheduled worker or the caller have this CPU
        }
        cpu_relax();
    }
}

// Run chunk t of job gen if it is still unclaimed.
static void claim_chunk(KRt *rt, uint64_t gen, int64_t t) {
    uint64_t want = gen << 1;
    if (atomic_load_explicit(&rt->claims[t], memory_order_relaxed) != want ||
        !atomic_compare_exchange_strong_explicit(&rt->claims[t], &want, want | 1, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return;
    int64_t lo = t * rt->base + (t < rt->rem ? t : rt->rem);
    int64_t hi = lo + rt->base + (t < rt->rem);
    rt->fn(rt->ctx, lo, hi);
    if (atomic_fetch_sub(&rt->pending, 1) == 1 && atomic_load(&rt->waiting)) {
        pthread_mutex_lock(&rt->mu);
        pthread_cond_signal(&rt->done_cv);
        pthread_mutex_unlock(&rt->mu);
    }
}

// This thread's own chunk first, then whichever of the others no thread has taken.
// All nthreads claims, not the job's chunk count: a late thread may not read the
// job, and a claim past its chunks holds an old job's taken mark, so it fails.
static void run_claims(KRt *rt, uint64_t gen, int own) {
    int n = rt->nthreads;
    for (int i = 0; i < n; i++)
        claim_chunk(rt, gen, (own + i) % n);
}

static uint64_t wait_job(Worker *w, uint64_t seen) {
    if (!spin(&w->seq, seen, 0)) {
        pthread_mutex_lock(&w->mu);
        atomic_store(&w->sleeping, 1);
        while (atomic_load(&w->seq) == seen)
            pthread_cond_wait(&w->cv, &w->mu);
        atomic_store(&w->sleeping, 0);
        pthread_mutex_unlock(&w->mu);
    }
    return atomic_load_explicit(&w->seq, memory_order_acquire);
}

static void wake(Worker *w, uint64_t gen) {
    atomic_store(&w->seq, gen);
    if (atomic_load(&w->sleeping)) {
        pthread_mutex_lock(&w->mu);
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    KRt *rt = w->rt;
    uint64_t seen = 0;
    tls_depth = 1;
    fp_enter(rt);   // for the thread's life
    for (;;) {
        seen = wait_job(w, seen);
        if (atomic_load(&rt->stop))
            return NULL;
        run_claims(rt, seen, w->index);
    }
}

static void wait_done(KRt *rt) {
    if (spin(&rt->pending, 0, 1))
        return;
    pthread_mutex_lock(&rt->mu);
    atomic_store(&rt->waiting, 1);
    while (atomic_load(&rt->pending) != 0)
        pthread_cond_wait(&rt->done_cv, &rt->mu);
    atomic_store(&rt->waiting, 0);
    pthread_mutex_unlock(&rt->mu);
}

static int ncpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int rt_spare_cpu(int threads) { return ncpus() > threads; }

static int default_threads(void) {
    const char *s = getenv("KILN_THREADS");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v > 0)
            return v > MAX_THREADS ? MAX_THREADS : (int)v;
    }
    return ncpus();
}

static void stop_workers(KRt *rt) {
    atomic_store(&rt->stop, 1);
    rt->gen++;
    for (int i = 0; i < rt->nthreads - 1; i++)
        wake(&rt->workers[i], rt->gen);
    for (int i = 0; i < rt->nthreads - 1; i++) {
        Worker *w = &rt->workers[i];
        pthread_join(w->tid, NULL);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    rt_free(rt->workers);
    rt_free((void *)rt->claims);
    rt->workers = NULL;
    rt->claims = NULL;
    rt->nthreads = 1;
    atomic_store(&rt->stop, 0);
}

// Start n-1 workers; on failure keep the ones that started (at worst run inline).
static void start_workers(KRt *rt, int n) {
    if (n <= 0)
        n = default_threads();
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    rt->nthreads = 1;
    if (n == 1 || !(rt->claims = rt_calloc(sizeof(*rt->claims) * (size_t)n)))
        return;
    if (!(rt->workers = rt_calloc(sizeof(Worker) * (size_t)(n - 1)))) {
        rt_free((void *)rt->claims);
        rt->claims = NULL;
        return;
    }
    // Workers inherit a full signal mask: signals (SIGINT in the REPL) go to the caller.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < n - 1; i++) {
        Worker *w = &rt->workers[i];
        w->index = i + 1;
        w->rt = rt;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            pthread_mutex_destroy(&w->mu);
            pthread_cond_destroy(&w->cv);
            break;
        }
        rt->nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

KRt *rt_new(int nthreads) {
    KRt *rt = rt_calloc(sizeof(KRt));
    if (!rt)
        return NULL;
    pthread_mutex_init(&rt->call_mu, NULL);
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->done_cv, NULL);
    rt->gemm_kind = rt_gemm_kind_env();
    const char *dn = getenv("KILN_DENORMALS");
    rt->keep_denormals = dn && !strcmp(dn, "keep");
    start_workers(rt, nthreads);
    return rt;
}

void rt_free_ctx(KRt *rt) {
    if (!rt)
        return;
    stop_workers(rt);
    pthread_mutex_destroy(&rt->call_mu);
    pthread_mutex_destroy(&rt->mu);
    pthread_cond_destroy(&rt->done_cv);
    rt_free(rt->ws);
    rt_free(rt->gemm_ws);
    rt_free(rt);
}

int rt_threads(const KRt *rt) { return rt ? rt->nthreads : 1; }

void rt_set_threads(KRt *rt, int n) {
    if (!rt || tls_depth > 0)
        return;
    pthread_mutex_lock(&rt->call_mu);
    stop_workers(rt);
    start_workers(rt, n);
    pthread_mutex_unlock(&rt->call_mu);
}

void rt_parallel_for(KRt *rt, RtRangeFn fn, void *ctx, int64_t n, int64_t grain) {
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t nchunks = n / grain;
    if (!rt || tls_depth > 0) {   // nested: the outer call set the environment
        fn(ctx, 0, n);
        return;
    }
    unsigned csr = fp_enter(rt);
    if (n <= grain || nchunks < 2 || rt->nthreads < 2) {
        fn(ctx, 0, n);
        fp_leave(csr);
        return;
    }
    pthread_mutex_lock(&rt->call_mu);
    if (nchunks > rt->nthreads)
        nchunks = rt->nthreads;
    rt->fn = fn;
    rt->ctx = ctx;
    rt->base = n / nchunks;
    rt->rem = n % nchunks;
    uint64_t gen = ++rt->gen;
    atomic_store(&rt->pending, (uint64_t)nchunks);
    for (int64_t t = 0; t < nchunks; t++)
        atomic_store_explicit(&rt->claims[t], gen << 1, memory_order_release);
    for (int64_t t = 1; t < nchunks; t++)
        wake(&rt->workers[t - 1], gen);
    tls_depth++;
    run_claims(rt, gen, 0);
    tls_depth--;
    wait_done(rt);
    pthread_mutex_unlock(&rt->call_mu);
    fp_leave(csr);
}

void *rt_workspace(KRt *rt, size_t bytes) {
    if (!rt)
        return NULL;
    if (rt->ws && bytes <= rt->ws_size)
        return rt->ws;
    // Free first: the old contents are not kept, and peak memory stays one buffer.
    rt_free(rt->ws);
    rt->ws = rt_alloc(bytes);
    rt->ws_size = rt->ws ? bytes : 0;
    return rt->ws;
}

void *rt_gemm_workspace(KRt *rt, size_t bytes) {
    if (rt->gemm_ws && bytes <= rt->gemm_ws_size)
        return rt->gemm_ws;
    rt_free(rt->gemm_ws);
    rt->gemm_ws = rt_alloc(bytes);
    rt->gemm_ws_size = rt->gemm_ws ? bytes : 0;
    return rt->gemm_ws;
}

int rt_gemm_kind(const KRt *rt) { return rt ? rt->gemm_kind : rt_gemm_kind_env(); }

int rt_in_parallel(void) { return tls_depth > 0; }

void rt_set_profile(KRt *rt, uint64_t *ns) { rt->profile = ns; }
uint64_t *rt_profile(KRt *rt) { return rt ? rt->profile : NULL; }
uint64_t rt_clock_ns(void) { return now_ns(); }
