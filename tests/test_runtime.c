// test_runtime.c: the runtime alone: pool, memory, GEMM, tensors and printing, Philox, libffi, .npy.
// One line per check, then "N passed, N failed"; exits nonzero on any failure.
#include "runtime/private.h"
#include "runtime/rt.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "check.h"




static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

//
// Memory
//

static void test_mem(void) {
    static const char *names[] = {"bool", "i32", "i64", "f32", "f64"};
    static const size_t sizes[] = {1, 4, 8, 4, 8};
    int ok = 1;
    for (int t = 0; t < RT_NDTYPES; t++)
        ok &= rt_dtype_size((RtDType)t) == sizes[t] && !strcmp(rt_dtype_name((RtDType)t), names[t]);
    check(ok && RT_BOOL == 0 && RT_F64 == 4, "dtype sizes, names and values");
    check(rt_dtype_size((RtDType)9) == 0 && !strcmp(rt_dtype_name((RtDType)9), "?"),
          "invalid dtype");

    ok = 1;
    for (size_t n = 0; n < 300; n += 37) {
        uint8_t *p = rt_calloc(n);
        ok &= p && (uintptr_t)p % 64 == 0;
        for (size_t i = 0; i < n; i++)
            ok &= p[i] == 0;
        rt_free(p);
    }
    void *a = rt_alloc(0), *b = rt_alloc(0);
    check(ok && a && b && a != b, "rt_alloc/rt_calloc: 64-byte aligned, zeroed, 0 bytes unique");
    rt_free(a);
    rt_free(b);
    rt_free(NULL);
    check(rt_alloc(SIZE_MAX - 3) == NULL, "rt_alloc: overflowing size gives NULL");
}

//
// Pool
//

typedef struct {
    _Atomic int64_t sum;
    _Atomic int calls;
    int *count;   // per index; each written by one chunk only
    int64_t lo[64], hi[64];   // the chunks, in the order they were recorded
} Cover;

static void cover_fn(void *ctx, int64_t lo, int64_t hi) {
    Cover *c = ctx;
    int64_t s = 0;
    for (int64_t i = lo; i < hi; i++) {
        c->count[i]++;
        s += i;
    }
    atomic_fetch_add(&c->sum, s);
    int k = atomic_fetch_add(&c->calls, 1);
    if (k < 64)
        c->lo[k] = lo, c->hi[k] = hi;
}

// Run one parallel_for and check coverage, the sum and the static partition.
static int cover_ok(KRt *rt, int64_t n, int64_t grain) {
    Cover c = {0};
    c.count = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    rt_parallel_for(rt, cover_fn, &c, n, grain);
    int ok = atomic_load(&c.sum) == (n > 0 ? n * (n - 1) / 2 : 0);
    for (int64_t i = 0; i < n; i++)
        ok &= c.count[i] == 1;
    // Expected chunks: min(threads, n / grain), inline when n <= grain.
    int64_t g = grain < 1 ? 1 : grain;
    int64_t want = n <= 0 ? 0 : n <= g ? 1 : n / g < rt_threads(rt) ? n / g : rt_threads(rt);
    if (want < 1 && n > 0)
        want = 1;
    int calls = atomic_load(&c.calls);
    ok &= calls == want;
    for (int k = 0; k < calls && k < 64; k++) {
        int64_t len = c.hi[k] - c.lo[k];
        ok &= len >= (want > 1 ? g : 1) && len <= n / (want ? want : 1) + 1;
    }
    free(c.count);
    return ok;
}

static void test_pool_cover(void) {
    static const int64_t ns[] = {0, 1, 2, 3, 7, 8, 63, 64, 65, 1000, 4097, 100003};
    static const int64_t grains[] = {0, 1, 2, 7, 64, 1000};
    static const int threads[] = {1, 2, 3, 4, 8};
    for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
        KRt *rt = rt_new(threads[ti]);
        int ok = rt_threads(rt) == threads[ti];
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t gi = 0; gi < sizeof grains / sizeof *grains; gi++)
                ok &= cover_ok(rt, ns[ni], grains[gi]);
        check(ok, "pool %d threads: every index once, sums, static chunks >= grain", threads[ti]);
        rt_free_ctx(rt);
    }
}

typedef struct {
    KRt *rt;
    _Atomic int64_t sum;
    _Atomic int inner_calls;
} Nest;

static void nest_inner(void *ctx, int64_t lo, int64_t hi) {
    Nest *c = ctx;
    atomic_fetch_add(&c->inner_calls, 1);
    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add(&c->sum, 1);
}

static void nest_outer(void *ctx, int64_t lo, int64_t hi) {
    Nest *c = ctx;
    for (int64_t i = lo; i < hi; i++)
        rt_parallel_for(c->rt, nest_inner, c, 100, 1);   // inline: one call of [0, 100)
}

static void test_pool_nested(void) {
    KRt *rt = rt_new(4);
    Nest c = {.rt = rt};
    rt_parallel_for(rt, nest_outer, &c, 16, 1);
    check(atomic_load(&c.sum) == 1600 && atomic_load(&c.inner_calls) == 16,
          "pool: nested calls run inline (16 outer x 100 inner)");
    rt_free_ctx(rt);
}

static void test_pool_resize(void) {
    KRt *rt = rt_new(2);
    static const int sizes[] = {1, 3, 8, 2, 5, 1, 4};
    int ok = 1;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        rt_set_threads(rt, sizes[i]);
        ok &= rt_threads(rt) == sizes[i] && cover_ok(rt, 10007, 3) && cover_ok(rt, 5, 1);
    }
    check(ok, "pool: resize 2 -> 1 3 8 2 5 1 4, correct after each");
    rt_free_ctx(rt);

    setenv("KILN_THREADS", "3", 1);
    rt = rt_new(0);
    check(rt_threads(rt) == 3, "pool: KILN_THREADS=3 with nthreads 0 gives %d", rt_threads(rt));
    rt_set_threads(rt, 0);
    check(rt_threads(rt) == 3, "pool: rt_set_threads(0) follows KILN_THREADS");
    rt_free_ctx(rt);
    setenv("KILN_THREADS", "junk", 1);
    rt = rt_new(-1);
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
    check(rt_threads(rt) == cpus, "pool: default is the usable CPUs (%d; KILN_THREADS invalid)",
          rt_threads(rt));
    rt_free_ctx(rt);
    unsetenv("KILN_THREADS");
    check(rt_threads(NULL) == 1, "pool: NULL context counts 1 thread");
    Cover c = {0};
    int cnt[10] = {0};
    c.count = cnt;
    rt_parallel_for(NULL, cover_fn, &c, 10, 1);
    check(atomic_load(&c.calls) == 1 && atomic_load(&c.sum) == 45,
          "pool: NULL context runs inline");
}

// Chunks that sleep: the caller (chunk 0) or a worker finishes long after the others, so
// both the worker sleep path and the caller's done-wait path are taken.
static void slow_fn(void *ctx, int64_t lo, int64_t hi) {
    int64_t slow = *(int64_t *)ctx;
    if (lo <= slow && slow < hi)
        sleep_us(3000);
}

static void test_pool_sleep(void) {
    KRt *rt = rt_new(3);
    int ok = 1;
    for (int round = 0; round < 5; round++) {
        sleep_us(2000);   // longer than the spin: workers are asleep
        ok &= cover_ok(rt, 999, 1);
        int64_t slow = round % 3 * 333;   // chunk 0, 1 or 2 is the slow one
        rt_parallel_for(rt, slow_fn, &slow, 999, 1);
        ok &= cover_ok(rt, 999, 1);
    }
    check(ok, "pool: correct after workers sleep and with a slow caller or worker");
    rt_free_ctx(rt);
}

// Chunk 1 of a two-chunk job records the thread that ran it.
typedef struct {
    pthread_t caller;
    _Atomic int on_caller, runs;
} Who;

static void who_fn(void *ctx, int64_t lo, int64_t hi) {
    Who *w = ctx;
    (void)hi;
    if (lo == 1) {
        atomic_fetch_add(&w->runs, 1);
        if (pthread_equal(pthread_self(), w->caller))
            atomic_fetch_add(&w->on_caller, 1);
    }
}

// Chunks are claimed: with its worker asleep (a wake-up takes microseconds), the
// caller, done with chunk 0 at once, runs chunk 1 itself instead of waiting. The
// worker then wakes for a job that has ended, or during the next one: it must run
// nothing of either twice (cover_ok right after, and its sums).
static void test_pool_claims(void) {
    KRt *rt = rt_new(2);
    Who w = {.caller = pthread_self()};
    int ok = 1;
    for (int round = 0; round < 40; round++) {
        sleep_us(1000);   // longer than the spin: the worker is asleep
        rt_parallel_for(rt, who_fn, &w, 2, 1);
        ok &= cover_ok(rt, 2 + round, 1);
    }
    check(ok && atomic_load(&w.runs) == 40, "pool: each chunk runs once while a late worker wakes");
    check(atomic_load(&w.on_caller) > 0,
          "pool: the caller ran a sleeping worker's chunk itself (%d of 40 times)", atomic_load(&w.on_caller));
    rt_free_ctx(rt);
}

typedef struct {
    KRt *rt;
    int ok;
} Caller;

static void *caller_main(void *arg) {
    Caller *c = arg;
    for (int i = 0; i < 300; i++)
        c->ok &= cover_ok(c->rt, 1000 + i, 1 + i % 5);
    return NULL;
}

static void test_pool_callers(void) {
    KRt *rt = rt_new(3);
    Caller c[3] = {{rt, 1}, {rt, 1}, {rt, 1}};
    pthread_t tid[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&tid[i], NULL, caller_main, &c[i]);
    for (int i = 0; i < 3; i++)
        pthread_join(tid[i], NULL);
    check(c[0].ok && c[1].ok && c[2].ok, "pool: three outside threads share one context");
    rt_free_ctx(rt);
}

static void test_pool_workspace(void) {
    KRt *rt = rt_new(1);
    char *a = rt_workspace(rt, 100);
    memset(a, 1, 100);
    char *b = rt_workspace(rt, 50);
    char *c = rt_workspace(rt, 1 << 20);
    memset(c, 2, 1 << 20);
    char *d = rt_workspace(rt, 1000);
    check(a && a == b && c && c == d && (uintptr_t)a % 64 == 0 && (uintptr_t)c % 64 == 0,
          "workspace: aligned, reused when smaller, grows");
    rt_free_ctx(rt);
    rt_free_ctx(NULL);
}

// Each item halves a small normal float into the subnormal range: with FTZ it is 0.
static void halve_fn(void *ctx, int64_t lo, int64_t hi) {
    volatile float *v = ctx;
    for (int64_t i = lo; i < hi; i++) v[i] = v[i] * 0.25f;
}

static int denormals_flushed(int threads) {
    KRt *rt = rt_new(threads);
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = 1e-38f;   // normal; a quarter of it is not
    rt_parallel_for(rt, halve_fn, v, 64, 1);
    int flushed = 1;
    for (int i = 0; i < 64; i++) flushed &= v[i] == 0;
    rt_free_ctx(rt);
    return flushed;
}

static void test_pool_denormals(void) {
#if defined(__x86_64__) || defined(__i386__)
    volatile float before = 1e-38f, q = before * 0.25f;
    check(q != 0, "this thread keeps gradual underflow before Kiln runs");
    check(denormals_flushed(1) && denormals_flushed(3), "kernels flush denormals to zero, inline and on workers");
    q = before * 0.25f;
    check(q != 0, "the caller's floating-point environment is restored afterwards");
    setenv("KILN_DENORMALS", "keep", 1);
    check(!denormals_flushed(1) && !denormals_flushed(3), "KILN_DENORMALS=keep keeps them");
    unsetenv("KILN_DENORMALS");
#endif
}

static void empty_fn(void *ctx, int64_t lo, int64_t hi) {}

static void test_pool_overhead(void) {
    int threads[] = {2, 4, 0};
    for (int k = 0; k < 3; k++) {
        KRt *rt = rt_new(threads[k]);
        int n = rt_threads(rt);
        int iters = 20000;
        for (int i = 0; i < 1000; i++)
            rt_parallel_for(rt, empty_fn, NULL, n, 1);
        double t0 = now_s();
        for (int i = 0; i < iters; i++)
            rt_parallel_for(rt, empty_fn, NULL, n, 1);
        double hot = (now_s() - t0) / iters * 1e6;
        // Cold: workers asleep, so each call pays a wake-up.
        double cold = 0;
        for (int i = 0; i < 20; i++) {
            sleep_us(1000);
            double t1 = now_s();
            rt_parallel_for(rt, empty_fn, NULL, n, 1);
            cold += now_s() - t1;
        }
        printf(
            "info pool dispatch, %d threads: %.2f us per call back-to-back, %.1f us after idle\n",
            n, hot, cold / 20 * 1e6);
        rt_free_ctx(rt);
    }
}

//
// GEMM
//

// One strided, batched product checked against a naive loop in double: each
// element within a few ulps of the sum of |a||b| (f32: 1e-5 relative, f64:
// 1e-13), and every element of C outside the product untouched.
typedef struct {
    int64_t batch, m, n, k;
    int64_t a_batch, a_rs, a_cs, b_batch, b_rs, b_cs, c_batch, c_rs, c_cs;
    double beta;
} GemmCase;

static int64_t span(int64_t batch, int64_t rows, int64_t cols, int64_t bs, int64_t rs, int64_t cs) {
    int64_t hi = 0, lo = 0;   // furthest element either way from the origin
    int64_t st[3] = {bs, rs, cs}, len[3] = {batch, rows, cols};
    for (int i = 0; i < 3; i++) {
        int64_t r = st[i] * (len[i] - 1);
        if (r > 0) hi += r; else lo += r;
    }
    return hi - lo + 1;
}

static int64_t origin(int64_t batch, int64_t rows, int64_t cols, int64_t bs, int64_t rs, int64_t cs) {
    int64_t lo = 0, st[3] = {bs, rs, cs}, len[3] = {batch, rows, cols};
    for (int i = 0; i < 3; i++)
        if (st[i] < 0) lo -= st[i] * (len[i] - 1);
    return lo;
}

static double gemm_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 40) / (double)(1 << 24) * 2 - 1;
}

// With gemm_epi set, gemm_case calls rt_gemm_*_epi with a hook that checks its
// contract: every element of every product is passed exactly once, already
// final, and nothing outside the products is.
static int gemm_epi;
static int64_t gemm_epi_cols;   // the narrowest piece of a row the last case's hook was given
typedef struct {
    int f64;
    const void *C;
    const double *want, *tol;
    int64_t oc;
    int *visits, *early;
} EpiCheck;

static void epi_check(void *ctx, int64_t off, int64_t rs, int64_t rows, int64_t cols) {
    EpiCheck *e = ctx;
    if (cols < gemm_epi_cols) gemm_epi_cols = cols;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            int64_t at = e->oc + off + r * rs + q;
            double got = e->f64 ? ((const double *)e->C)[at] : ((const float *)e->C)[at];
            e->visits[at]++;
            if (!(fabs(got - e->want[at]) <= e->tol[at])) e->early[at] = 1;
        }
}

static int gemm_case(KRt *rt, int f64, const GemmCase *g) {
    int64_t na = span(g->batch, g->m, g->k, g->a_batch, g->a_rs, g->a_cs);
    int64_t nb = span(g->batch, g->k, g->n, g->b_batch, g->b_rs, g->b_cs);
    int64_t nc = span(g->batch, g->m, g->n, g->c_batch, g->c_rs, g->c_cs);
    int64_t oa = origin(g->batch, g->m, g->k, g->a_batch, g->a_rs, g->a_cs);
    int64_t ob = origin(g->batch, g->k, g->n, g->b_batch, g->b_rs, g->b_cs);
    int64_t oc = origin(g->batch, g->m, g->n, g->c_batch, g->c_rs, g->c_cs);
    double *a = malloc(sizeof(double) * na), *b = malloc(sizeof(double) * nb), *c0 = malloc(sizeof(double) * nc);
    double *want = malloc(sizeof(double) * nc), *tol = calloc(nc, sizeof(double));
    // B on a cache line, as compiled graphs' buffers are (rt_alloc): a B whose
    // rows are one micro-panel is then read in place.
    void *A = malloc(8 * na), *B = rt_alloc(8 * nb), *C = malloc(8 * nc);
    uint64_t seed = 7;
    for (int64_t i = 0; i < na; i++) a[i] = gemm_rand(&seed);
    for (int64_t i = 0; i < nb; i++) b[i] = gemm_rand(&seed);
    // C starts as NaN when beta is 0: it must not be read.
    for (int64_t i = 0; i < nc; i++) c0[i] = g->beta == 0 ? NAN : gemm_rand(&seed);
    if (!f64) {   // the reference sees the values the product sees
        for (int64_t i = 0; i < na; i++) ((float *)A)[i] = (float)a[i], a[i] = ((float *)A)[i];
        for (int64_t i = 0; i < nb; i++) ((float *)B)[i] = (float)b[i], b[i] = ((float *)B)[i];
        for (int64_t i = 0; i < nc; i++) ((float *)C)[i] = (float)c0[i], c0[i] = ((float *)C)[i];
    } else {
        memcpy(A, a, 8 * na); memcpy(B, b, 8 * nb); memcpy(C, c0, 8 * nc);
    }
    memcpy(want, c0, sizeof(double) * nc);
    for (int64_t p = 0; p < g->batch; p++)
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) {
                double s = 0, t = 0;
                for (int64_t q = 0; q < g->k; q++) {
                    double x = a[oa + p * g->a_batch + i * g->a_rs + q * g->a_cs];
                    double y = b[ob + p * g->b_batch + q * g->b_rs + j * g->b_cs];
                    s += x * y;
                    t += fabs(x * y);
                }
                int64_t at = oc + p * g->c_batch + i * g->c_rs + j * g->c_cs;
                want[at] = s + (g->beta == 0 ? 0 : g->beta * c0[at]);
                // f32: the worst-case bound of a k-term sum (k ulps) on top of 1e-5.
                tol[at] = (t + fabs(g->beta * (g->beta == 0 ? 0 : c0[at])) + 1) * (f64 ? 1e-13 : 1e-5 + 6e-8 * g->k);
            }
    int *visits = calloc(nc, sizeof(int)), *early = calloc(nc, sizeof(int));
    EpiCheck ec = {f64, C, want, tol, oc, visits, early};
    RtGemmEpilogue hook = gemm_epi ? epi_check : NULL;
    gemm_epi_cols = INT64_MAX;
    if (f64)
        rt_gemm_f64_epi(rt, g->batch, g->m, g->n, g->k, (double *)A + oa, g->a_batch, g->a_rs, g->a_cs,
                        (double *)B + ob, g->b_batch, g->b_rs, g->b_cs, (double *)C + oc, g->c_batch, g->c_rs,
                        g->c_cs, g->beta, hook, &ec);
    else
        rt_gemm_f32_epi(rt, g->batch, g->m, g->n, g->k, (float *)A + oa, g->a_batch, g->a_rs, g->a_cs,
                        (float *)B + ob, g->b_batch, g->b_rs, g->b_cs, (float *)C + oc, g->c_batch, g->c_rs,
                        g->c_cs, (float)g->beta, hook, &ec);
    int ok = 1;
    // Every element of a product (those with a tolerance; a product with no
    // elements past its own: tol > 0 always there) is passed once, final.
    for (int64_t i = 0; i < nc && ok && gemm_epi; i++) {
        ok = tol[i] ? visits[i] == 1 && !early[i] : visits[i] == 0;
        if (!ok) printf("epilogue: element %lld visited %d times%s\n", (long long)i, visits[i], early[i] ? ", early" : "");
    }
    free(visits), free(early);
    for (int64_t i = 0; i < nc && ok; i++) {
        double got = f64 ? ((double *)C)[i] : ((float *)C)[i];
        ok = tol[i] ? fabs(got - want[i]) <= tol[i] : (got == want[i] || (isnan(got) && isnan(want[i])));
    }
    free(a); free(b); free(c0); free(want); free(tol); free(A); rt_free(B); free(C);
    return ok;
}

static void test_gemm(void) {
    check(rt_have_blis() == 0 || rt_have_blis() == 1, "rt_have_blis: %d", rt_have_blis());
    // Row-major contiguous m x k, k x n, m x n.
#define RM(bt, m, n, k) bt, m, n, k, (m) * (k), k, 1, (k) * (n), n, 1, (m) * (n), n, 1
    const struct { const char *what; GemmCase g; } cases[] = {
        {"1x1x1", {RM(1, 1, 1, 1), 0}},
        {"row-major 37x29x41", {RM(1, 37, 29, 41), 0}},
        {"row-major 130x70x300", {RM(1, 130, 70, 300), 0}},
        {"vector times matrix (m = 1)", {RM(1, 1, 50, 60), 0}},
        {"matrix times vector (n = 1)", {RM(1, 50, 1, 60), 0}},
        // Operands of 6 MB: streamed from memory, so cut over the threads though small in multiply-adds.
        {"vector times a large matrix (m = 1)", {RM(1, 1, 1500, 1000), 0}},
        {"large matrix times vector (n = 1)", {RM(1, 1500, 1, 1000), 0.5}},
        {"k = 0 gives beta * C", {RM(1, 5, 6, 0), 0.5}},
        {"k = 0, beta 0 gives zeros", {RM(1, 5, 6, 0), 0}},
        {"beta 0.5 accumulates", {RM(1, 33, 31, 70), 0.5}},
        {"beta 1 on a batch", {RM(4, 20, 30, 40), 1}},
        {"batch of 7 (tiled on 3 threads)", {RM(7, 64, 48, 80), 0}},
        // B's rows one micro-panel (32 columns with AVX-512, 16 with AVX2), deeper than a KC block.
        {"row-major 100x32x700 (B read in place)", {RM(1, 100, 32, 700), 0}},
        {"row-major 100x16x700 (B read in place)", {RM(1, 100, 16, 700), 0.5}},
        {"transpose(a) @ b, 25x32x3000", {1, 25, 32, 3000, 0, 1, 25, 0, 32, 1, 0, 32, 1, 0}},
        // A transposed: element (i, q) at q*m + i.
        {"transpose(a) @ b", {1, 40, 50, 60, 0, 1, 40, 0, 50, 1, 0, 50, 1, 0}},
        {"a @ transpose(b)", {1, 40, 50, 60, 0, 60, 1, 0, 1, 60, 0, 50, 1, 0}},
        {"transpose(a) @ transpose(b)", {1, 40, 50, 60, 0, 1, 40, 0, 1, 60, 0, 50, 1, 0}},
        {"column-major C", {1, 40, 50, 60, 0, 60, 1, 0, 50, 1, 0, 1, 40, 0}},
        // Broadcast weight, rows follow on: folded into one 6*32-row product.
        {"[6,32,48] @ broadcast [48,40] (folded)", {6, 32, 40, 48, 32 * 48, 48, 1, 0, 40, 1, 32 * 40, 40, 1, 0}},
        {"[6,32,48] transposed @ broadcast [48,40]", {6, 32, 40, 48, 32 * 48, 1, 32, 0, 40, 1, 32 * 40, 40, 1, 0}},
        // Broadcast left operand, columns of b and c follow on: folded into 5*24 columns.
        {"broadcast [30,40] @ [5,40,24] (columns follow on)", {5, 30, 24, 40, 0, 40, 1, 24, 120, 1, 24, 120, 1, 0}},
        {"broadcast [30,40] @ [5,40,24] contiguous", {5, 30, 24, 40, 0, 40, 1, 40 * 24, 24, 1, 30 * 24, 24, 1, 0}},
        // Strides BLIS refuses: a broadcast row (stride 0) and reversed rows go to the loops.
        {"broadcast rows of a (stride 0)", {1, 30, 20, 25, 0, 0, 1, 0, 20, 1, 0, 20, 1, 0}},
        {"reversed rows of b (negative stride)", {1, 30, 20, 25, 0, 25, 1, 0, -20, 1, 0, 20, 1, 0}},
        // Small products go whole to the kernel's small() (AVX-512): row tails of 8, 4, 2, 1,
        // one or two masked vectors of columns, B stored by columns, C by columns.
        {"small: batch 64 of 28x16x28", {RM(64, 28, 16, 28), 0}},
        {"small: batch 3 of 15x32x128, beta 1", {RM(3, 15, 32, 128), 1}},
        {"small: batch 5 of 13x17x5, a @ transpose(b)", {5, 13, 17, 5, 13 * 5, 5, 1, 17 * 5, 1, 5, 13 * 17, 17, 1, 0}},
        {"small: batch 4 of 7x20x9, column-major C", {4, 7, 20, 9, 63, 9, 1, 180, 20, 1, 140, 1, 7, 0}},
        {"small: batch 4 of 9x20x7 against one transposed B", {4, 9, 20, 7, 66, 7, 1, 0, 1, 7, 180, 20, 1, 0}},
        {"general strides (every other element)", {2, 21, 17, 19, 2 * 21 * 19 * 2, 2 * 19 * 2, 2, 0, 17 * 2, 2, 21 * 17 * 3, 17 * 3, 3, 0.5}},
    };
#undef RM
    for (int threads = 1; threads <= 3; threads += 2) {
        KRt *rt = rt_new(threads);
        for (gemm_epi = 0; gemm_epi < 2; gemm_epi++)
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
                for (int f64 = 0; f64 < 2; f64++)
                    check(gemm_case(rt, f64, &cases[i].g), "gemm %s %s, %d thread%s%s", f64 ? "f64" : "f32",
                          cases[i].what, threads, threads > 1 ? "s" : "", gemm_epi ? ", with an epilogue" : "");
        gemm_epi = 0;
        rt_free_ctx(rt);
    }
    check(gemm_case(NULL, 0, &cases[2].g), "gemm with no runtime context runs inline");
    // Two threads keep C's rows whole where that costs little more than cutting
    // its columns (plan_tiles' WHOLE_LINES): the MLP's 512x512 weight gradient
    // x^T @ dy, whose epilogue (Adam) then walks whole rows of the weights.
    {
        KRt *rt2 = rt_new(2);
        GemmCase wg = {1, 512, 512, 16, 0, 1, 512, 0, 512, 1, 0, 512, 1, 0};
        gemm_epi = 1;
        int ok = gemm_case(rt2, 0, &wg);
        gemm_epi = 0;
        check(ok && gemm_epi_cols == 512, "gemm 512x512 transpose(a) @ b on 2 threads: the epilogue gets whole rows "
              "(narrowest piece %lld)", (long long)gemm_epi_cols);
        rt_free_ctx(rt2);
    }
    // A matrix-vector product is cut over the threads where its matrix is read
    // from L3 or memory each call (plan_tiles' tile_work: half of L2 or more),
    // though its multiply-adds alone are fewer than 2 x 2^18.
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 < (128 << 10) || l2 > (64 << 20)) l2 = 1 << 20;   // gemm.c's default
    int64_t mv_k = (l2 / 2 / 4 + 511) / 512;
    if (mv_k * 512 < 2 << 18) {
        KRt *rt2 = rt_new(2);
        GemmCase mv = {1, 1, 512, mv_k, 0, mv_k, 1, 0, 512, 1, 0, 512, 1, 0};
        gemm_epi = 1;
        int ok = gemm_case(rt2, 0, &mv);
        gemm_epi = 0;
        check(ok && gemm_epi_cols == 256, "gemm 1x512x%lld (a %ld KiB matrix) on 2 threads: cut in halves (narrowest "
              "piece %lld)", (long long)mv_k, (long)(mv_k * 2), (long long)gemm_epi_cols);
        rt_free_ctx(rt2);
    }
    KRt *rt = rt_new(2);   // the tile grid follows the pool's size as it changes
    rt_set_threads(rt, 4);
    check(rt_threads(rt) == 4 && gemm_case(rt, 0, &cases[2].g) && gemm_case(rt, 1, &cases[9].g),
          "gemm after rt_set_threads(4)");
    rt_free_ctx(rt);
}


// Operand layouts for the packed GEMM's sweep: A (m x k), B (k x n), C (m x n).
enum { L_ROW, L_TRANS, L_BCAST, L_STRIDED, L_NLAYOUTS };
static const char *layout_name[] = {"row-major", "transposed", "broadcast", "strided/reversed"};

// One product of the given layouts. A broadcast A repeats one row (row stride
// 0), a broadcast B one column; strided A skips every other element, strided B
// has reversed rows, strided C is neither row- nor column-major.
static GemmCase layout_case(int64_t m, int64_t n, int64_t k, int la, int lb, int lc, double beta) {
    GemmCase g = {1, m, n, k, 0, 0, 0, 0, 0, 0, 0, 0, 0, beta};
    switch (la) {
    case L_ROW: g.a_rs = k, g.a_cs = 1; break;
    case L_TRANS: g.a_rs = 1, g.a_cs = m; break;
    case L_BCAST: g.a_rs = 0, g.a_cs = 1; break;
    default: g.a_rs = 2 * k, g.a_cs = 2; break;
    }
    switch (lb) {
    case L_ROW: g.b_rs = n, g.b_cs = 1; break;
    case L_TRANS: g.b_rs = 1, g.b_cs = k; break;
    case L_BCAST: g.b_rs = 1, g.b_cs = 0; break;
    default: g.b_rs = -n, g.b_cs = 1; break;
    }
    switch (lc) {
    case L_ROW: g.c_rs = n, g.c_cs = 1; break;
    case L_TRANS: g.c_rs = 1, g.c_cs = m; break;
    default: g.c_rs = 2 * n + 1, g.c_cs = 2; break;   // L_BCAST is not a C layout
    }
    return g;
}

// rt_gemm from inside a parallel region: each chunk's call runs inline and must
// not share the context's packing buffers with the others.
typedef struct {
    KRt *rt;
    int ok[4];
} NestedGemm;

static void nested_gemm(void *ctx, int64_t lo, int64_t hi) {
    NestedGemm *ng = ctx;
    enum { M = 40, N = 40, K = 300 };
    for (int64_t i = lo; i < hi; i++) {
        GemmCase g = layout_case(30 + i, 40 + i, K, L_ROW, L_TRANS, L_ROW, 0);
        ng->ok[i] = gemm_case(ng->rt, 0, &g);
        // Then many calls, so that they overlap with the other chunks': each must
        // give the first one's bits.
        float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
        float *c0 = malloc(sizeof(float) * M * N), *c = malloc(sizeof(float) * M * N);
        uint64_t seed = (uint64_t)i + 1;
        for (int j = 0; j < M * K; j++) a[j] = (float)gemm_rand(&seed);
        for (int j = 0; j < K * N; j++) b[j] = (float)gemm_rand(&seed);
        rt_gemm_f32(ng->rt, 1, M, N, K, a, 0, K, 1, b, 0, 1, K, c0, 0, N, 1, 0);
        for (int r = 0; r < 300 && ng->ok[i]; r++) {
            rt_gemm_f32(ng->rt, 1, M, N, K, a, 0, K, 1, b, 0, 1, K, c, 0, N, 1, 0);
            ng->ok[i] = !memcmp(c, c0, sizeof(float) * M * N);
        }
        free(a), free(b), free(c0), free(c);
    }
}

// The micro-kernels KILN_GEMM can force, and KILN_GEMM saved before a test
// sets it and put back after.
typedef struct { const char *env; int kind; } KilnKind;
static const KilnKind kiln_kinds[] = {
    {"kiln-avx512", GEMM_KILN_AVX512}, {"kiln-avx2", GEMM_KILN_AVX2}, {"kiln-c", GEMM_KILN_C}};

static char *gemm_env_save(void) {
    const char *saved = getenv("KILN_GEMM");
    return saved ? strdup(saved) : NULL;
}

static void gemm_env_restore(char *keep) {
    if (keep) setenv("KILN_GEMM", keep, 1);
    else unsetenv("KILN_GEMM");
    free(keep);
}

// Tiles are claimed, not dealt: a product cut finer than the threads (the
// CNN's second convolution, 25088 x 64 x 800, at 2 threads) holds the thread
// that runs the first epilogue (on the first block of its first tile) until
// three quarters of the rows are done, which only the other thread can do,
// and only if it may take more than its half (dealt out, it would stop at
// half, and the wait would end 5 s after its last block).
typedef struct { _Atomic int64_t rows, held; int64_t m; int first_seen, waited_out; } Claim;
static void claim_epi(void *ctx, int64_t off, int64_t rs, int64_t rows, int64_t cols) {
    Claim *c = ctx;
    (void)off, (void)rs, (void)cols;
    if (atomic_fetch_add(&c->held, 1) == 0) {   // the first epilogue: wait for the other thread
        c->first_seen = 1;
        struct timespec t0, t;   // since the other thread's last progress
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int64_t seen = 0, now; (now = atomic_load(&c->rows)) < c->m * 3 / 4; sched_yield()) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (now != seen) seen = now, t0 = t;
            else if (t.tv_sec - t0.tv_sec > 5) { c->waited_out = 1; break; }   // it has stopped
        }
        return;
    }
    atomic_fetch_add(&c->rows, rows);
}

static void test_gemm_claimed(void) {
    int64_t m = 25088, n = 64, k = 800;
    float *a = calloc(m * k, sizeof(float)), *b = calloc(k * n, sizeof(float)), *c = calloc(m * n, sizeof(float));
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)((i * 7) % 13) - 6;
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)((i * 5) % 11) - 5;
    static const char *kinds[] = {"kiln", "kiln-avx2", "kiln-c"};
    char *keep = gemm_env_save();
    for (size_t q = 0; q < sizeof kinds / sizeof *kinds; q++) {
        setenv("KILN_GEMM", kinds[q], 1);
        if (q && !gemm_kern_pick(rt_gemm_kind_env())) continue;
        KRt *rt = rt_new(2);
        Claim cl = {.m = m};
        rt_gemm_f32_epi(rt, 1, m, n, k, a, 0, k, 1, b, 0, n, 1, c, 0, n, 1, 0, claim_epi, &cl);
        int ok = 1;
        for (int64_t i = 0; i < m && ok; i += 997)   // small integers: exact sums
            for (int64_t j = 0; j < n; j++) {
                double r = 0;
                for (int64_t p = 0; p < k; p++) r += (double)a[i * k + p] * b[p * n + j];
                ok &= c[i * n + j] == (float)r;
            }
        check(ok && cl.first_seen && !cl.waited_out && atomic_load(&cl.held) > 2,
              "gemm 25088x64x800 on 2 threads, KILN_GEMM=%s: one thread held in its first tile, the other did "
              "three quarters of the rows (tiles claimed)", kinds[q]);
        rt_free_ctx(rt);
    }
    gemm_env_restore(keep);
    free(a), free(b), free(c);
}

// The packed GEMM with each micro-kernel this CPU has (forced through
// KILN_GEMM), on 1, 3 and 4 threads: every edge of the micro-tile and of the
// KC, MC and NC blocks, every operand layout, batches with and without a shared
// weight, beta 0 over NaN and beta 1.
static void test_gemm_kernels(void) {
    char *keep = gemm_env_save();
    for (size_t q = 0; q < sizeof kiln_kinds / sizeof *kiln_kinds; q++) {
        const GemmKern *kn = gemm_kern_pick(kiln_kinds[q].kind);
        if (!kn) {
            printf("skip gemm kernel %s: not on this CPU\n", kiln_kinds[q].env);
            continue;
        }
        int64_t mr = kn->mr, nr = kn->nr, mc, kc, nc;
        gemm_blocks(kn, &mc, &kc, &nc);
        setenv("KILN_GEMM", kiln_kinds[q].env, 1);
        for (int threads = 1; threads <= 4; threads += threads == 1 ? 2 : 1) {
            KRt *rt = rt_new(threads);
            check(rt_gemm_kind(rt) == kiln_kinds[q].kind, "KILN_GEMM=%s is read by rt_new", kiln_kinds[q].env);
            int bad = 0, cases = 0;
            // Every case runs twice: plain, and with the epilogue hook checked.
            for (gemm_epi = 0; gemm_epi < 2; gemm_epi++) {
            // Edges of the micro-tile and of a KC panel, row-major.
            int64_t dims[] = {1, mr - 1, mr + 1, nr - 1, nr + 1}, ks[] = {1, kc - 1, kc + 1};
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 5; j++)
                    for (int l = 0; l < 3; l++) {
                        GemmCase g = layout_case(dims[i], dims[j], ks[l], L_ROW, L_ROW, L_ROW, (i + j + l) % 2);
                        cases++;
                        if (!gemm_case(rt, 0, &g)) {
                            bad++;
                            printf("FAIL  %s %d threads: %lldx%lldx%lld\n", kiln_kinds[q].env, threads, (long long)g.m,
                                   (long long)g.n, (long long)g.k);
                        }
                    }
            // Every layout of A, B and C, with edges in all three dimensions.
            for (int la = 0; la < L_NLAYOUTS; la++)
                for (int lb = 0; lb < L_NLAYOUTS; lb++)
                    for (int lc = 0; lc < 3; lc++) {
                        int lcv = lc == 2 ? L_STRIDED : lc;
                        GemmCase g = layout_case(mr + 1, nr + 3, kc + 1, la, lb, lcv, (la + lb + lc) % 2);
                        cases++;
                        if (!gemm_case(rt, 0, &g)) {
                            bad++;
                            printf("FAIL  %s %d threads: A %s, B %s, C %s\n", kiln_kinds[q].env, threads,
                                   layout_name[la], layout_name[lb], layout_name[lcv]);
                        }
                    }
            // Big primes, and blocks past MC and NC.
            GemmCase big[] = {
                layout_case(257, 257, 257, L_ROW, L_ROW, L_ROW, 0),
                layout_case(257, 2 * nr + 1, 2 * kc + 3, L_ROW, L_TRANS, L_TRANS, 1),
                layout_case(2 * mr + 1, 257, 257, L_TRANS, L_ROW, L_ROW, 0),
                layout_case(mc + 1, 7, 5, L_ROW, L_ROW, L_ROW, 0),
                layout_case(3, nc + 1, 5, L_ROW, L_ROW, L_ROW, 1),
                layout_case(mc + mr + 1, 3, 3, L_STRIDED, L_ROW, L_TRANS, 0),
                layout_case(mc + 1, nr + 1, kc + 1, L_TRANS, L_ROW, L_ROW, 1),
                // A narrow B: A read in place, one deep KC panel, then more
                layout_case(2 * mr + 1, nr, 5003, L_ROW, L_ROW, L_ROW, 1),
                layout_case(2 * mr + 1, nr - 1, 5003, L_BCAST, L_TRANS, L_STRIDED, 0),
                // Few columns, A stored transposed: computed as C^T = B^T A^T
                layout_case(3 * nr + 2, 10, 77, L_TRANS, L_ROW, L_ROW, 0),
                layout_case(5 * nr + 1, 3, kc + 1, L_TRANS, L_TRANS, L_ROW, 1),
                // ... and a small row-major A, transposed 8 x 8 by the B packer
                layout_case(2 * nr + 5, 10, 77, L_ROW, L_ROW, L_ROW, 0),
                layout_case(2 * nr, 3, kc + 9, L_ROW, L_TRANS, L_ROW, 1),
                // A batch of one against a row-major B read in place: whole groups
                // of panels (row_panels), a lone panel and a partial one, over KC panels
                layout_case(1, 9 * nr + 5, 2 * kc + 3, L_ROW, L_ROW, L_ROW, 1),
                layout_case(1, 4 * nr, kc - 1, L_ROW, L_ROW, L_ROW, 0),
                // ... and fewer columns than a panel (masked, row_cols), A strided or
                // stored transposed, beta kept or scaled
                layout_case(1, 10, 2 * kc + 3, L_STRIDED, L_ROW, L_ROW, 0.5),
                layout_case(1, nr - 1, 77, L_TRANS, L_ROW, L_ROW, 1),
                layout_case(1, 2 * nr + 3, kc + 1, L_ROW, L_ROW, L_ROW, 0),
                // Wide and deep: the AVX2 kernel's B micro-panel stays in L1 (BLIS's order)
                layout_case(mc + 5, 1100, kc + 13, L_ROW, L_ROW, L_ROW, 1),
                layout_case(2 * mc + 3, 1700, 2 * kc + 1, L_TRANS, L_TRANS, L_STRIDED, 0),
                // Deep with few outputs: the depth cut into one part per thread
                layout_case(25, 2 * nr, 9001, L_TRANS, L_ROW, L_STRIDED, 1),
                layout_case(mr + 1, nr + 1, 9001, L_ROW, L_TRANS, L_ROW, 0),
            };
            for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
                cases++;
                if (!gemm_case(rt, 0, &big[i])) {
                    bad++;
                    printf("FAIL  %s %d threads: %lldx%lldx%lld\n", kiln_kinds[q].env, threads, (long long)big[i].m,
                           (long long)big[i].n, (long long)big[i].k);
                }
            }
            // Batches: separate operands; a shared weight (folded into one tall
            // product); a shared left operand; a shared weight whose rows do
            // not follow on (C column-major per item, so not folded).
            int64_t m = mr + 1, n = nr + 1, k = 37;
            GemmCase bt[] = {
                {3, m, n, k, m * k, k, 1, k * n, n, 1, m * n, n, 1, 1},
                {5, m, n, k, m * k, k, 1, 0, n, 1, m * n, n, 1, 0},
                {4, m, n, k, 0, k, 1, k * n, 1, k, m * n, n, 1, 0},
                {3, m, n, k, m * k, 1, m, 0, n, 1, m * n, 1, m, 1},
            };
            for (size_t i = 0; i < sizeof bt / sizeof *bt; i++) {
                cases++;
                if (!gemm_case(rt, 0, &bt[i])) {
                    bad++;
                    printf("FAIL  %s %d threads: batch case %zu\n", kiln_kinds[q].env, threads, i);
                }
            }
            }
            gemm_epi = 0;
            check(!bad, "gemm kernel %s (%dx%d, kc %lld), %d thread%s: %d cases", kn->name, kn->mr, kn->nr,
                  (long long)kc, threads, threads > 1 ? "s" : "", cases);
            rt_free_ctx(rt);
        }
    }
    gemm_env_restore(keep);
    NestedGemm ng = {rt_new(4), {0}};
    rt_parallel_for(ng.rt, nested_gemm, &ng, 4, 1);
    check(ng.ok[0] && ng.ok[1] && ng.ok[2] && ng.ok[3], "gemm inside a parallel region, 4 threads at once");
    rt_free_ctx(ng.rt);
}

//
// Philox
//

static void gemm_rows_independent(int M, int K, int N, int b_trans) {
    char *keep = gemm_env_save();
    float *a = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * K * N);
    float *one = malloc(sizeof(float) * M * N), *all = malloc(sizeof(float) * M * N);
    uint64_t seed = 7;
    for (int i = 0; i < M * K; i++) a[i] = (float)gemm_rand(&seed);
    for (int i = 0; i < K * N; i++) w[i] = (float)gemm_rand(&seed);
    for (size_t q = 0; q < sizeof kiln_kinds / sizeof *kiln_kinds; q++) {
        if (!gemm_kern_pick(kiln_kinds[q].kind)) continue;
        setenv("KILN_GEMM", kiln_kinds[q].env, 1);
        int64_t brs = b_trans ? 1 : N, bcs = b_trans ? K : 1;   // B stored N x K, or K x N
        for (int threads = 1; threads <= 3; threads++) {
            KRt *rt = rt_new(threads);
            for (int i = 0; i < M; i++) rt_gemm_f32(rt, 1, 1, N, K, a + i * K, 0, K, 1, w, 0, brs, bcs, one + i * N, 0, N, 1, 0);
            const int ms[] = {15, 64, M};
            for (size_t j = 0; j < sizeof ms / sizeof *ms; j++) {
                rt_gemm_f32(rt, 1, ms[j], N, K, a, 0, K, 1, w, 0, brs, bcs, all, 0, N, 1, 0);
                check(!memcmp(all, one, sizeof(float) * ms[j] * N),
                      "gemm %s, %d threads: the rows of a %dx%dx%d product%s are the 1-row products', bit for bit",
                      kiln_kinds[q].env, threads, ms[j], N, K, b_trans ? " (B^T)" : "");
            }
            rt_free_ctx(rt);
        }
    }
    gemm_env_restore(keep);
    free(a), free(w), free(one), free(all);
}

// A row's product never depends on how many rows share its batch: a narrow
// product with a small row-major A runs transposed (C^T = B^T A^T) and one
// row does not, with the same KC panels, so each row of x @ W (logreg's
// 784 x 10) is the same to the bit at batch 1, 15, 64 and 100, on every kernel
// and thread count. Likewise a wide and deep one, which the AVX2 kernel (and
// the AVX-512 one where L2 is small) runs in BLIS's order (B's micro-panel in
// L1) from MC rows, or 512 where MC is more, and one row does not (KC is the
// problem's: wide_kc in gemm.c). And rows 4 KiB apart, which a batch packs
// (14 of them would crowd one L1 set) and one row reads in place. And a deep
// product into few columns, whose tiles at three threads are narrower than
// the product when it has many rows and not when it has one: its KC follows
// the product's columns.
static void test_gemm_rows_independent(void) {
    int64_t rows = 100;
    for (size_t q = 0; q < sizeof kiln_kinds / sizeof *kiln_kinds; q++) {
        const GemmKern *kn = gemm_kern_pick(kiln_kinds[q].kind);
        if (kn && gemm_b_stays_rows(kn) > rows) rows = gemm_b_stays_rows(kn);
    }
    gemm_rows_independent(100, 784, 10, 0);
    gemm_rows_independent((int)rows + 7, 700, 600, 0);
    gemm_rows_independent(70, 1024, 200, 0);   // rows 4 KiB apart: packed, but not one
    gemm_rows_independent(125, 2113, 95, 1);   // at 3 threads, tiles narrower than the product
}

static void test_philox(void) {
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int k = 0; k < 3; k++) {
        uint32_t o[4];
        rt_philox4x32(kat[k].ctr, kat[k].key, o);
        check(!memcmp(o, kat[k].out, sizeof o),
              "philox4x32-10 known answer %d: %08x %08x %08x %08x", k, o[0], o[1], o[2], o[3]);
    }
}

static void test_uniform(void) {
    // The definitions in rt.h, recomputed here.
    int ok = 1;
    uint64_t seeds[] = {0, 1, 0x123456789abcdefull};
    uint64_t idx[] = {0, 1, 5, 0xffffffffull, 0x100000000ull, ~0ull};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 6; i++) {
            uint32_t ctr[4] = {(uint32_t)idx[i], (uint32_t)(idx[i] >> 32), 0, 0};
            uint32_t key[2] = {(uint32_t)seeds[s], (uint32_t)(seeds[s] >> 32)}, o[4];
            rt_philox4x32(ctr, key, o);
            ok &= rt_rand_uniform_f32(seeds[s], idx[i]) == (float)(o[0] >> 8) / 16777216.0f;
            uint64_t x = ((uint64_t)o[0] << 32 | o[1]) >> 11;
            ok &= rt_rand_uniform_f64(seeds[s], idx[i]) == (double)x / 9007199254740992.0;
        }
    check(ok, "uniform f32/f64 follow the header's definition bit for bit");

    int n = 1000000, inrange = 1;
    double s32 = 0, q32 = 0, s64 = 0, q64 = 0;
    for (int i = 0; i < n; i++) {
        float u = rt_rand_uniform_f32(7, (uint64_t)i);
        double v = rt_rand_uniform_f64(7, (uint64_t)i);
        inrange &= u >= 0.0f && u < 1.0f && v >= 0.0 && v < 1.0;
        s32 += u, q32 += (double)u * u, s64 += v, q64 += v * v;
    }
    double m32 = s32 / n, v32 = q32 / n - m32 * m32, m64 = s64 / n, v64 = q64 / n - m64 * m64;
    check(inrange, "uniform: 1e6 draws in [0, 1)");
    check(fabs(m32 - 0.5) < 0.002 && fabs(v32 - 1.0 / 12) < 0.001,
          "uniform f32: mean %.5f var %.5f (0.5, 0.08333)", m32, v32);
    check(fabs(m64 - 0.5) < 0.002 && fabs(v64 - 1.0 / 12) < 0.001,
          "uniform f64: mean %.5f var %.5f (0.5, 0.08333)", m64, v64);
    check(rt_rand_uniform_f32(1, 0) != rt_rand_uniform_f32(2, 0) &&
              rt_rand_uniform_f32(1, 0) != rt_rand_uniform_f32(1, 1),
          "uniform: seeds and indices give different streams");
}

static uint32_t f32_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static void test_normal(void) {
    int n = 1000000;
    double s32 = 0, q32 = 0, s64 = 0, q64 = 0, maxerr = 0, maxerr64 = 0;
    int finite = 1;
    for (int i = 0; i < n; i++) {
        float z = rt_rand_normal_f32(11, (uint64_t)i);
        double w = rt_rand_normal_f64(11, (uint64_t)i);
        finite &= isfinite(z) && isfinite(w);
        s32 += z, q32 += (double)z * z, s64 += w, q64 += w * w;
        // The exact Box-Muller value for the same 24-bit inputs, in double.
        uint32_t ctr[4] = {(uint32_t)i, 0, 1, 0}, key[2] = {11, 0}, o[4];
        rt_philox4x32(ctr, key, o);
        double u1 = ((o[0] >> 8) + 1) / 16777216.0, u2 = (o[1] >> 8) / 16777216.0;
        double ref = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        double e = fabs(z - ref);
        maxerr = e > maxerr ? e : maxerr;
        // f64: the exact value for its 53-bit inputs, in long double, relative to max(1, |z|).
        uint64_t h1 = (((uint64_t)o[0] << 32) | o[1]) >> 11, h2 = (((uint64_t)o[2] << 32) | o[3]) >> 11;
        long double v1 = (long double)(h1 + 1) * 0x1p-53L, v2 = (long double)h2 * 0x1p-53L;
        long double ref64 = sqrtl(-2 * logl(v1)) * cosl(6.283185307179586476925286766559L * v2);
        double e64 = (double)(fabsl((long double)w - ref64) / (fabsl(ref64) > 1 ? fabsl(ref64) : 1));
        maxerr64 = e64 > maxerr64 ? e64 : maxerr64;
    }
    double m32 = s32 / n, v32 = q32 / n - m32 * m32, m64 = s64 / n, v64 = q64 / n - m64 * m64;
    check(finite, "normal: 1e6 draws finite");
    check(fabs(m32) < 0.005 && fabs(v32 - 1) < 0.01, "normal f32: mean %.5f var %.5f", m32, v32);
    check(fabs(m64) < 0.005 && fabs(v64 - 1) < 0.01, "normal f64: mean %.5f var %.5f", m64, v64);
    check(maxerr < 1e-6, "normal f32 vs exact Box-Muller in double: max error %.2g", maxerr);
    check(maxerr64 < 1e-15, "normal f64 vs exact Box-Muller in long double: max error %.2g (relative past 1)", maxerr64);
    // Pinned values: generated C and CUDA must give these bits (see rt.h).
    static const struct {
        uint64_t seed, index;
        uint32_t bits;
    } pin[] = {
        {0, 0, 0x3f88a6ca},
        {1, 1, 0x3fcad0b2},
        {42, 1000, 0xbf7a0ea9},
        {0xdeadbeefcafeull, 123456789, 0xbeb00b9d},
    };
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        uint32_t b = f32_bits(rt_rand_normal_f32(pin[i].seed, pin[i].index));
        printf("info normal_f32(%llu, %llu) = %a (0x%08x)\n", (unsigned long long)pin[i].seed,
               (unsigned long long)pin[i].index, rt_rand_normal_f32(pin[i].seed, pin[i].index), b);
        ok &= b == pin[i].bits;
    }
    check(ok, "normal f32: pinned bit patterns");
    static const uint64_t pin64[] = {0x3ff1238695223c92ull, 0x3fe6bf1a24fef2e6ull, 0xbff1cee614e2261aull,
                                     0x3faec1bd6bc1ea59ull};
    ok = 1;
    for (int i = 0; i < 4; i++) {
        double z = rt_rand_normal_f64(pin[i].seed, pin[i].index);
        uint64_t b;
        memcpy(&b, &z, 8);
        ok &= b == pin64[i];
    }
    check(ok, "normal f64: pinned bit patterns (its own log and cos, not libm's)");
}

//
// Tensors and printing
//

static int str_is(const RtTensor *t, const char *want) {
    char *s = rt_tensor_to_string(t);
    int ok = s && !strcmp(s, want);
    if (!ok)
        printf("     got  %s\n     want %s\n", s ? s : "(null)", want);
    free(s);
    return ok;
}

static void test_print(void) {
    int64_t s23[] = {2, 3};
    RtTensor t = rt_tensor_new(RT_I32, 2, s23);
    for (int i = 0; i < 6; i++)
        ((int32_t *)t.data)[i] = i + 1;
    check(str_is(&t, "[[1, 2, 3], [4, 5, 6]]"), "print i32 2x3");
    rt_tensor_free(&t);
    check(t.data == NULL, "rt_tensor_free clears data");

    t = rt_tensor_new(RT_F32, 0, NULL);
    ((float *)t.data)[0] = 5;
    check(rt_tensor_numel(&t) == 1 && str_is(&t, "5"), "print 0-d f32");
    rt_tensor_free(&t);

    int64_t s2[] = {2};
    t = rt_tensor_new(RT_F64, 1, s2);
    ((double *)t.data)[0] = 0.5, ((double *)t.data)[1] = -1.25;
    check(str_is(&t, "[0.5, -1.25]"), "print f64 1-d");
    rt_tensor_free(&t);

    t = rt_tensor_new(RT_BOOL, 1, s2);
    ((uint8_t *)t.data)[0] = 1;
    check(str_is(&t, "[true, false]"), "print bool");
    rt_tensor_free(&t);

    int64_t s0[] = {0}, s20[] = {2, 0}, s03[] = {0, 3};
    t = rt_tensor_new(RT_F32, 1, s0);
    check(t.data && str_is(&t, "[]"), "print empty tensor");
    rt_tensor_free(&t);
    t = rt_tensor_new(RT_F32, 2, s20);
    check(str_is(&t, "[[], []]"), "print empty 2x0");
    rt_tensor_free(&t);
    t = rt_tensor_new(RT_F32, 2, s03);
    check(str_is(&t, "[]"), "print empty 0x3");
    rt_tensor_free(&t);

    int64_t s6[] = {6};
    t = rt_tensor_new(RT_F32, 1, s6);
    float fv[] = {1e10f, 1.5e-7f, NAN, INFINITY, -INFINITY, 0.1f};
    memcpy(t.data, fv, sizeof fv);
    check(str_is(&t, "[1e+10, 1.5e-07, nan, inf, -inf, 0.1]"), "print %%g, nan, inf");
    ((float *)t.data)[2] = -NAN;
    check(str_is(&t, "[1e+10, 1.5e-07, nan, inf, -inf, 0.1]"), "print -nan as nan");
    rt_tensor_free(&t);

    int64_t s3[] = {3};
    t = rt_tensor_new(RT_I64, 1, s3);
    int64_t iv3[] = {INT64_MIN, 123456789012345, -7};
    memcpy(t.data, iv3, sizeof iv3);
    check(str_is(&t, "[-9223372036854775808, 123456789012345, -7]"), "print i64");
    rt_tensor_free(&t);

    int64_t s222[] = {2, 2, 2};
    t = rt_tensor_new(RT_F32, 3, s222);
    for (int i = 0; i < 8; i++)
        ((float *)t.data)[i] = (float)i / 2;
    check(str_is(&t, "[[[0, 0.5], [1, 1.5]], [[2, 2.5], [3, 3.5]]]"), "print f32 2x2x2");
    rt_tensor_free(&t);

    int64_t s1000[] = {1000}, s1001[] = {1001}, sbig[] = {40, 30};
    t = rt_tensor_new(RT_I32, 1, s1000);
    char *s = rt_tensor_to_string(&t);
    check(s && strlen(s) == 2 + 1000 + 999 * 2 && !strstr(s, "..."), "1000 elements print in full");
    free(s);
    rt_tensor_free(&t);
    t = rt_tensor_new(RT_I32, 1, s1001);
    for (int i = 0; i < 1001; i++)
        ((int32_t *)t.data)[i] = i;
    check(str_is(&t, "[0, 1, 2, ..., 998, 999, 1000]"), "1001 elements are summarized");
    rt_tensor_free(&t);
    t = rt_tensor_new(RT_I32, 2, sbig);
    for (int i = 0; i < 1200; i++)
        ((int32_t *)t.data)[i] = i;
    check(str_is(&t,
                 "[[0, 1, 2, ..., 27, 28, 29], [30, 31, 32, ..., 57, 58, 59], "
                 "[60, 61, 62, ..., 87, 88, 89], ..., [1110, 1111, 1112, ..., 1137, 1138, 1139], "
                 "[1140, 1141, 1142, ..., 1167, 1168, 1169], [1170, 1171, 1172, ..., 1197, 1198, "
                 "1199]]"),
          "40x30 summarized on both axes");
    rt_tensor_free(&t);

    // The worked example at the top of rt.h.
    t = rt_tensor_new(RT_F32, 2, s23);
    for (int i = 0; i < 6; i++)
        ((float *)t.data)[i] = 2.0f * rt_rand_uniform_f32(42, (uint64_t)i);
    check(str_is(&t, "[[1.22592, 1.97544, 1.65173], [1.4592, 0.652836, 0.629695]]"),
          "rt.h worked example prints as documented");
    rt_tensor_free(&t);

    FILE *f = tmpfile();
    t = rt_tensor_new(RT_I32, 1, s2);
    rt_tensor_print(f, &t);
    rewind(f);
    char buf[32] = {0};
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    check(got == 6 && !strcmp(buf, "[0, 0]"), "rt_tensor_print writes to a FILE, no newline");
    rt_tensor_free(&t);

    int64_t neg[] = {2, -1};
    t = rt_tensor_new(RT_F32, 2, neg);
    RtTensor u = rt_tensor_new(RT_F32, 9, s222);
    RtTensor v = rt_tensor_new((RtDType)7, 1, s2);
    int64_t huge[] = {INT64_MAX / 2, 4};
    RtTensor w = rt_tensor_new(RT_F64, 2, huge);
    check(!t.data && !u.data && !v.data && !w.data,
          "rt_tensor_new rejects bad shapes, ndim, dtype, overflow");
}

//
// libffi
//

static void ffi_add3(void *a, void *b, void *out) { *(int *)out = *(int *)a + *(int *)b; }

static int ffi_zero_called;
static void ffi_zero(void) { ffi_zero_called = 1; }

static void ffi_many(void *a0, void *a1, void *a2, void *a3, void *a4, void *a5, void *a6, void *a7,
                     void *a8, void *a9, void *a10, void *a11, void *a12, void *a13, void *a14,
                     void *a15, void *a16, void *a17, void *a18, void *out) {
    void *a[] = {a0,  a1,  a2,  a3,  a4,  a5,  a6,  a7,  a8, a9,
                 a10, a11, a12, a13, a14, a15, a16, a17, a18};
    long s = 0;
    for (int i = 0; i < 19; i++)
        s += *(long *)a[i];
    *(long *)out = s;
}

// dlsym's convention: a function as void *. POSIX allows it; ISO C only through memcpy.
typedef void (*AnyFn)(void);
static void *fnptr(AnyFn f) {
    void *p;
    memcpy(&p, &f, sizeof p);
    return p;
}

static void test_ffi(void) {
    int x = 20, y = 22, r = 0;
    void *args[] = {&x, &y, &r};
    int rc = rt_ffi_call_ptrs(fnptr((AnyFn)ffi_add3), 3, args);
    check(rc == 0 && r == 42, "ffi: void f(a, b, out) computes 42");
    rc = rt_ffi_call_ptrs(fnptr(ffi_zero), 0, NULL);
    check(rc == 0 && ffi_zero_called, "ffi: zero arguments");
    long v[19], out = 0;
    void *many[20];
    for (int i = 0; i < 19; i++)
        v[i] = i + 1, many[i] = &v[i];
    many[19] = &out;
    rc = rt_ffi_call_ptrs(fnptr((AnyFn)ffi_many), 20, many);
    check(rc == 0 && out == 190, "ffi: 20 arguments (heap path)");
    check(rt_ffi_call_ptrs(fnptr(ffi_zero), -1, NULL) == -1 &&
              rt_ffi_call_ptrs(NULL, 0, NULL) == -1,
          "ffi: bad arguments give -1");
}

//
// .npy
//

static char tmpdir[64];

static const char *tpath(const char *name) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

static void write_file(const char *name, const void *data, size_t n) {
    FILE *f = fopen(tpath(name), "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

// A hand-made v1.0 file: preamble, header text padded to 64, then data.
static void write_npy(const char *name, const char *dict, const void *data, size_t n) {
    char buf[4096];
    size_t hl = strlen(dict) + 1;
    size_t pad = 64 - (10 + hl) % 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)((hl + pad) & 0xff), buf[9] = (char)((hl + pad) >> 8);
    memcpy(buf + 10, dict, hl - 1);
    memset(buf + 10 + hl - 1, ' ', pad);
    buf[10 + hl + pad - 1] = '\n';
    memcpy(buf + 10 + hl + pad, data, n);
    write_file(name, buf, 10 + hl + pad + n);
}

static int load_fails(const char *name, const char *want) {
    char err[256] = "";
    RtTensor t;
    int rc = rt_npy_load(tpath(name), &t, err, sizeof err);
    int ok = rc == -1 && t.data == NULL && strstr(err, want) && strstr(err, name);
    printf("     %s\n", err);
    return ok;
}

static int round_trip(RtDType dt, int ndim, const int64_t *shape) {
    RtTensor t = rt_tensor_new(dt, ndim, shape);
    size_t nb = rt_tensor_nbytes(&t);
    for (size_t i = 0; i < nb; i++)
        ((uint8_t *)t.data)[i] = dt == RT_BOOL ? (uint8_t)(i % 3 == 0) : (uint8_t)(i * 7 + 3);
    char err[256];
    RtTensor u;
    int ok = rt_npy_save(tpath("rt.npy"), &t, err, sizeof err) == 0 &&
             rt_npy_load(tpath("rt.npy"), &u, err, sizeof err) == 0;
    ok = ok && u.dtype == dt && u.ndim == ndim && u.owns &&
         !memcmp(u.shape, t.shape, sizeof t.shape) && !memcmp(u.data, t.data, nb);
    rt_tensor_free(&t);
    rt_tensor_free(&u);
    return ok;
}

// rt_convert and rt_first_inexact: what a file of another dtype becomes in an input.
static void test_convert(void) {
    const double d[5] = {1.0, -2.0, 2147483647.0, 2.5, NAN};
    int32_t i32[3];
    rt_convert(i32, RT_I32, d, RT_F64, 3);
    check(i32[0] == 1 && i32[1] == -2 && i32[2] == INT32_MAX, "convert: whole f64 -> i32 exactly");
    check(rt_first_inexact(d, RT_F64, RT_I32, 3) == -1 && rt_first_inexact(d, RT_F64, RT_I32, 5) == 3 &&
              rt_first_inexact(d + 4, RT_F64, RT_I64, 1) == 0,
          "convert: the first value that would not survive (a fraction, NaN)");
    const float f[2] = {2147483648.0f, -2147483648.0f};
    check(rt_first_inexact(f, RT_F32, RT_I32, 2) == 0 && rt_first_inexact(f + 1, RT_F32, RT_I32, 1) == -1 &&
              rt_first_inexact(f, RT_F32, RT_I64, 2) == -1 && rt_first_inexact(d, RT_F64, RT_F32, 5) == -1,
          "convert: i32's range exactly; float to float is never inexact here");
}

static void test_npy(void) {
    strcpy(tmpdir, "/tmp/kiln_rt_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        check(0, "npy: mkdtemp");
        return;
    }
    int64_t s23[] = {2, 3}, s5[] = {5}, s0[] = {0}, s4d[] = {2, 1, 3, 2}, s20[] = {2, 0};
    int ok = 1;
    for (int dt = 0; dt < RT_NDTYPES; dt++)
        ok &= round_trip((RtDType)dt, 2, s23) && round_trip((RtDType)dt, 1, s5) &&
              round_trip((RtDType)dt, 0, NULL) && round_trip((RtDType)dt, 1, s0) &&
              round_trip((RtDType)dt, 4, s4d) && round_trip((RtDType)dt, 2, s20);
    check(ok, "npy: round trip, every dtype, 0-d to 4-d and empty");

    // NumPy's exact header for float32 (2, 3): data at byte 128.
    RtTensor t = rt_tensor_new(RT_F32, 2, s23);
    char err[256];
    rt_npy_save(tpath("h.npy"), &t, err, sizeof err);
    rt_tensor_free(&t);
    FILE *f = fopen(tpath("h.npy"), "rb");
    char buf[256] = {0};
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    check(n == 128 + 24 && !memcmp(buf, "\x93NUMPY\x01\x00\x76\x00", 10) &&
              !memcmp(buf + 10, want, strlen(want)) && buf[127] == '\n' && buf[126] == ' ',
          "npy: header is NumPy's, data 64-byte aligned");
    int64_t one[] = {1};
    t = rt_tensor_new(RT_BOOL, 1, one);
    rt_npy_save(tpath("b.npy"), &t, err, sizeof err);
    rt_tensor_free(&t);
    f = fopen(tpath("b.npy"), "rb");
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    want = "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }";
    check(n == 129 && !memcmp(buf + 10, want, strlen(want)), "npy: bool header, 1-d shape (1,)");

    // Hand-made files NumPy could write.
    uint8_t be[8] = {0x3f, 0x80, 0, 0, 0xc0, 0x20, 0, 0};   // 1.0, -2.5 big-endian
    write_npy("be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be, 8);
    RtTensor u;
    ok = rt_npy_load(tpath("be.npy"), &u, err, sizeof err) == 0 && u.dtype == RT_F32 &&
         ((float *)u.data)[0] == 1.0f && ((float *)u.data)[1] == -2.5f;
    check(ok, "npy: big-endian >f4 is byte-swapped");
    rt_tensor_free(&u);
    int32_t iv[4] = {1, 2, 3, 4};
    write_npy("keys.npy", "{'shape': (2L, 2L), 'fortran_order': False, 'descr': '<i4'}", iv, 16);
    ok = rt_npy_load(tpath("keys.npy"), &u, err, sizeof err) == 0 && u.ndim == 2 &&
         u.shape[0] == 2 && u.dtype == RT_I32 && ((int32_t *)u.data)[3] == 4;
    check(ok, "npy: keys in any order, Python 2 longs");
    rt_tensor_free(&u);
    write_npy("f1.npy", "{'descr': '<i4', 'fortran_order': True, 'shape': (4, 1), }", iv, 16);
    ok = rt_npy_load(tpath("f1.npy"), &u, err, sizeof err) == 0 && u.shape[0] == 4;
    check(ok, "npy: fortran_order with one long axis is C order");
    rt_tensor_free(&u);
    {
        // Fortran order, as np.save writes x.T: element [i, j, k] at i + 2 * (j + 3 * k); u1 widened too
        int32_t fv[24];
        uint8_t fb[24];
        for (int i = 0; i < 24; i++) fv[i] = i, fb[i] = (uint8_t)(i + 100);
        write_npy("f3.npy", "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", fv, sizeof fv);
        write_npy("f3b.npy", "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3, 4), }", fb, sizeof fb);
        for (int file = 0; file < 2; file++) {
            ok = rt_npy_load(tpath(file ? "f3b.npy" : "f3.npy"), &u, err, sizeof err) == 0 && u.ndim == 3 &&
                 u.shape[0] == 2 && u.shape[1] == 3 && u.shape[2] == 4 && u.dtype == RT_I32;
            for (int i = 0; ok && i < 2; i++)
                for (int j = 0; j < 3; j++)
                    for (int k = 0; k < 4; k++)
                        ok &= ((int32_t *)u.data)[(i * 3 + j) * 4 + k] == i + 2 * (j + 3 * k) + (file ? 100 : 0);
            check(ok, "npy: fortran_order %s reordered to C order %s", file ? "|u1" : "<i4", err);
            rt_tensor_free(&u);
        }
    }
    // Narrow types NumPy writes (uint8 images, int16, float16) are read widened, exactly.
    uint8_t u1[4] = {0, 1, 200, 255};
    write_npy("u1.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", u1, 4);
    ok = rt_npy_load(tpath("u1.npy"), &u, err, sizeof err) == 0 && u.dtype == RT_I32 && u.ndim == 2 &&
         ((int32_t *)u.data)[2] == 200 && ((int32_t *)u.data)[3] == 255;
    check(ok, "npy: |u1 read as i32 (0..255) %s", err);
    rt_tensor_free(&u);
    int8_t i1[2] = {-128, 127};
    write_npy("i1.npy", "{'descr': '|i1', 'fortran_order': False, 'shape': (2,), }", i1, 2);
    ok = rt_npy_load(tpath("i1.npy"), &u, err, sizeof err) == 0 && u.dtype == RT_I32 && ((int32_t *)u.data)[0] == -128;
    check(ok, "npy: |i1 read as i32, signed");
    rt_tensor_free(&u);
    uint8_t i2be[4] = {0x80, 0x00, 0x7f, 0xff};   // -32768, 32767 big-endian
    write_npy("i2.npy", "{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }", i2be, 4);
    ok = rt_npy_load(tpath("i2.npy"), &u, err, sizeof err) == 0 && u.dtype == RT_I32 &&
         ((int32_t *)u.data)[0] == -32768 && ((int32_t *)u.data)[1] == 32767;
    check(ok, "npy: >i2 byte-swapped and read as i32");
    rt_tensor_free(&u);
    uint16_t u2[2] = {65535, 7};
    write_npy("u2.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", u2, 4);
    ok = rt_npy_load(tpath("u2.npy"), &u, err, sizeof err) == 0 && ((int32_t *)u.data)[0] == 65535;
    check(ok, "npy: <u2 read as i32");
    rt_tensor_free(&u);
    uint32_t u4[2] = {4294967295u, 1};
    write_npy("u4.npy", "{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }", u4, 8);
    ok = rt_npy_load(tpath("u4.npy"), &u, err, sizeof err) == 0 && u.dtype == RT_I64 &&
         ((int64_t *)u.data)[0] == 4294967295LL;
    check(ok, "npy: <u4 read as i64");
    rt_tensor_free(&u);
    // float16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), 2^-14 (smallest normal), inf, NaN, -0
    uint16_t f2[8] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00, 0x7e00, 0x8000};
    write_npy("f2.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (8,), }", f2, 16);
    ok = rt_npy_load(tpath("f2.npy"), &u, err, sizeof err) == 0 && u.dtype == RT_F32;
    if (ok) {
        const float *v = u.data;
        ok = v[0] == 1 && v[1] == -2 && v[2] == 65504 && v[3] == 0x1p-24f && v[4] == 0x1p-14f && isinf(v[5]) &&
             v[5] > 0 && isnan(v[6]) && v[7] == 0 && signbit(v[7]);
    }
    check(ok, "npy: <f2 read as f32, exactly (subnormals, inf, NaN, -0)");
    rt_tensor_free(&u);
    uint8_t b2[3] = {0, 1, 7};
    write_npy("b2.npy", "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", b2, 3);
    ok = rt_npy_load(tpath("b2.npy"), &u, err, sizeof err) == 0 && ((uint8_t *)u.data)[2] == 1;
    check(ok, "npy: bool bytes normalized to 0/1");
    rt_tensor_free(&u);
    {
        // Version 2.0: a 4-byte header length.
        char v2[128 + 8];
        const char *d = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
        memset(v2, ' ', 128);
        memcpy(v2, "\x93NUMPY\x02\x00\x74\x00\x00\x00", 12);
        memcpy(v2 + 12, d, strlen(d));
        v2[127] = '\n';
        memcpy(v2 + 128, iv, 8);
        write_file("v2.npy", v2, sizeof v2);
        ok = rt_npy_load(tpath("v2.npy"), &u, err, sizeof err) == 0 && ((int32_t *)u.data)[1] == 2;
        check(ok, "npy: version 2.0 header");
        rt_tensor_free(&u);
    }

    // Malformed files.
    write_file("magic.npy", "\x93NUMPX\x01\x00\x10\x00{}", 12);
    check(load_fails("magic.npy", "bad magic"), "npy: bad magic");
    write_file("short.npy", "\x93NU", 3);
    check(load_fails("short.npy", "bad magic"), "npy: 3-byte file");
    write_npy("trunc.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", iv, 16);
    check(load_fails("trunc.npy", "truncated data: expected 24 bytes, found 16"),
          "npy: truncated data");
    write_file("trunch.npy", "\x93NUMPY\x01\x00\x76\x00{'descr'", 17);
    check(load_fails("trunch.npy", "truncated header"), "npy: truncated header");
    write_npy("u8.npy", "{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", iv, 16);
    check(load_fails("u8.npy", "unsupported dtype '<u8'"), "npy: u8 rejected (no exact Kiln dtype)");
    write_npy("c8.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", iv, 16);
    check(load_fails("c8.npy", "unsupported dtype '<c8'"), "npy: complex rejected");
    write_npy("u1t.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", b2, 3);
    check(load_fails("u1t.npy", "truncated data: expected 5 bytes, found 3"), "npy: a narrow type's size is its own");
    write_npy("rec.npy", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", iv,
              4);
    check(load_fails("rec.npy", "structured"), "npy: structured dtype rejected");
    write_npy("fort.npy", "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 4), }", iv, 16);
    check(load_fails("fort.npy", "truncated data"), "npy: fortran order, truncated");
    write_npy("nokey.npy", "{'descr': '<i4', 'fortran_order': False, }", iv, 4);
    check(load_fails("nokey.npy", "missing 'shape'"), "npy: missing key");
    write_npy("dims.npy",
              "{'descr': '<i4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", iv, 4);
    check(load_fails("dims.npy", "more than 8 dimensions"), "npy: 9 dimensions rejected");
    write_npy("huge.npy",
              "{'descr': '<f8', 'fortran_order': False, 'shape': (10000000000, 10000000000), }", iv,
              4);
    check(load_fails("huge.npy", "shape too large"),
          "npy: absurd shape rejected before allocating");
    write_npy("big.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000,), }", iv,
              4);
    check(load_fails("big.npy", "truncated data"),
          "npy: large shape checked against the file size");
    write_npy("junk.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (2, x), }", iv, 4);
    check(load_fails("junk.npy", "bad shape"), "npy: malformed shape");
    write_file("ver.npy", "\x93NUMPY\x09\x00\x10\x00", 10);
    check(load_fails("ver.npy", "unsupported .npy version 9.0"), "npy: unknown version");
    check(load_fails("missing.npy", "No such file"), "npy: missing file");
    t = rt_tensor_new(RT_F32, 1, s5);
    check(rt_npy_save("/nonexistent-dir/x.npy", &t, err, sizeof err) == -1 &&
              strstr(err, "cannot create"),
          "npy: save to a missing directory fails: %s", err);
    rt_tensor_free(&t);

    const char *names[] = {"rt.npy",    "h.npy",      "b.npy",    "be.npy",    "keys.npy",
                           "f1.npy",    "b2.npy",     "v2.npy",   "magic.npy", "short.npy",
                           "trunc.npy", "trunch.npy", "u1.npy",   "f2.npy",    "rec.npy",
                           "fort.npy",  "nokey.npy",  "dims.npy", "huge.npy",  "big.npy",
                           "junk.npy",  "ver.npy",    "i1.npy",   "i2.npy",    "u2.npy",
                           "u4.npy",    "u8.npy",     "c8.npy",   "u1t.npy",   "f3.npy",   "f3b.npy"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        unlink(tpath(names[i]));
    check(rmdir(tmpdir) == 0, "npy: scratch directory left clean");
}

//
// Implicit im2col (rt_gemm_*_win): against the same product of the materialized
// window matrix (built here, independently of gemm_win.c), bit for bit, on every
// GEMM path, orientation and thread count, with odd windows and image strides.
// Kiln's f32 kernels may take a window's taps kernel rows first ((i, c, j), so
// that a panel skips the rows in the padding): the product then sums in that
// order, and equals, bit for bit, the materialized matrix's with its columns
// and B's rows in that order (the skipped terms are exact zeros). The weights'
// gradient with a row of ones (RT_WIN_TAPS_ONES) equals the materialized matrix's
// with a column of ones.
//

// xsw: the image's column stride; cl: channels last (x's channels adjacent, a
// product's [pixels, channels] layout seen as NCHW), columns xsw pixels apart.
typedef struct { int64_t n, c, h, w, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, cols, xsw, cl; } WinCase;

static int *win_visits;
static int win_rows_first_seen;   // cases summed kernel rows first (and not also in the caller's order)
static void win_count(void *ctx, int64_t off, int64_t rs, int64_t rows, int64_t cols) {
    (void)ctx;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) win_visits[off + r * rs + q]++;
}

static int win_case(KRt *rt, int f64, const WinCase *t, int taps_rows, int epi) {
    int64_t oh = (t->h + t->pt + t->pb - t->dh * (t->kh - 1) - 1) / t->sh + 1;
    int64_t ow = (t->w + t->pl + t->pr - t->dw * (t->kw - 1) - 1) / t->sw + 1;
    int64_t sw = t->xsw, sh = t->w * sw + 3, sc = t->h * sh + 1, sn = t->c * sc + 2;   // gaps between rows etc.
    if (t->cl) sc = 1, sw = t->c * t->xsw, sh = t->w * sw + 3, sn = t->h * sh + 2;
    int64_t pixels = t->n * oh * ow, taps = t->c * t->kh * t->kw, nx = t->n * sn;
    int64_t tc = taps + (taps_rows == RT_WIN_TAPS_ONES);   // the materialized matrix's columns (and the ones)
    int64_t m = taps_rows ? tc : pixels, k = taps_rows ? pixels : taps, n = t->cols;
    int64_t geom[RT_WIN_NGEOM] = {t->n, t->c, t->h, t->w, sn, sc, sh, sw, t->kh, t->kw, t->sh, t->sw, t->pt, t->pl,
                                  t->dh, t->dw, oh, ow};
    size_t es = f64 ? sizeof(double) : sizeof(float);
    char *x = calloc(nx, es), *cols = calloc(pixels * tc, es), *b = calloc(k * n, es);
    char *c0 = calloc(m * n, es), *c1 = calloc(m * n, es), *c2 = calloc(m * n, es);
    float *cols2 = calloc(pixels * taps, sizeof(float)), *b2 = calloc(k * n, sizeof(float));   // rows first
    uint64_t seed = 7;
    for (int64_t i = 0; i < nx; i++)
        if (f64) ((double *)x)[i] = gemm_rand(&seed);
        else ((float *)x)[i] = (float)gemm_rand(&seed);
    for (int64_t i = 0; i < k * n; i++)
        if (f64) ((double *)b)[i] = gemm_rand(&seed);
        else ((float *)b)[i] = (float)gemm_rand(&seed);
    for (int64_t nn = 0; nn < t->n; nn++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t xo = 0; xo < ow; xo++)
                for (int64_t ch = 0; ch < t->c; ch++)
                    for (int64_t i = 0; i < t->kh; i++)
                        for (int64_t j = 0; j < t->kw; j++) {
                            int64_t r = (nn * oh + y) * ow + xo, q = (ch * t->kh + i) * t->kw + j;
                            int64_t iy = y * t->sh - t->pt + i * t->dh, ix = xo * t->sw - t->pl + j * t->dw;
                            int in = iy >= 0 && iy < t->h && ix >= 0 && ix < t->w;
                            int64_t at = nn * sn + ch * sc + iy * sh + ix * sw;
                            if (f64) ((double *)cols)[r * tc + q] = in ? ((double *)x)[at] : 0;
                            else ((float *)cols)[r * tc + q] = in ? ((float *)x)[at] : 0;
                            if (tc > taps && f64) ((double *)cols)[r * tc + taps] = 1;
                            else if (tc > taps) ((float *)cols)[r * tc + taps] = 1;
                            int64_t q2 = (i * t->c + ch) * t->kw + j;
                            if (!f64 && !taps_rows) cols2[r * taps + q2] = ((float *)cols)[r * tc + q];
                            if (!f64 && !taps_rows && r == 0)
                                for (int64_t jn = 0; jn < n; jn++) b2[q2 * n + jn] = ((float *)b)[q * n + jn];
                        }
    int64_t ars = taps_rows ? 1 : taps, acs = taps_rows ? tc : 1;
    int *visits = calloc(m * n, sizeof(int));
    win_visits = visits;
    if (f64) {
        rt_gemm_f64(rt, 1, m, n, k, (double *)cols, 0, ars, acs, (double *)b, 0, n, 1, (double *)c0, 0, n, 1, 0);
        rt_gemm_f64_win(rt, m, n, k, (double *)x, geom, taps_rows, (double *)b, n, 1, (double *)c1, n, 1, 0,
                        epi ? win_count : NULL, NULL);
    } else {
        rt_gemm_f32(rt, 1, m, n, k, (float *)cols, 0, ars, acs, (float *)b, 0, n, 1, (float *)c0, 0, n, 1, 0);
        rt_gemm_f32_win(rt, m, n, k, (float *)x, geom, taps_rows, (float *)b, n, 1, (float *)c1, n, 1, 0,
                        epi ? win_count : NULL, NULL);
        if (!taps_rows) rt_gemm_f32(rt, 1, m, n, k, cols2, 0, taps, 1, b2, 0, n, 1, (float *)c2, 0, n, 1, 0);
    }
    int ok = !memcmp(c0, c1, m * n * es) || (!f64 && !taps_rows && !memcmp(c2, c1, m * n * es));
    win_rows_first_seen += ok && memcmp(c0, c1, m * n * es);
    for (int64_t i = 0; i < m * n && epi; i++) ok &= visits[i] == 1;
    free(x), free(cols), free(b), free(c0), free(c1), free(c2), free(cols2), free(b2), free(visits);
    return ok;
}

static void test_gemm_windows(void) {
    static const WinCase cases[] = {
        {2, 3, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, 1},       // same padding, odd sizes
        {1, 1, 5, 5, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 33, 1},      // one channel, rows shorter than a micro-panel
        {3, 2, 8, 8, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 17, 1},      // stride 2, padding at the start only
        {2, 4, 10, 11, 2, 3, 1, 2, 0, 1, 1, 0, 2, 1, 9, 1},     // dilation, uneven strides and padding
        {4, 8, 14, 14, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 64, 1},    // the CNN's shape, smaller batch
        {2, 5, 6, 6, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 70, 2},      // 1x1, image columns 2 apart
        {2, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 40, 1},   // deeper than a KC panel
        {1, 3, 4, 4, 3, 3, 1, 1, 4, 4, 4, 4, 1, 1, 3, 1},       // windows wholly in the padding
        {3, 32, 14, 14, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 64, 1, 1}, // channels last: the CNN's pooled image
        {2, 3, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, 2, 1},     // channels last, pixels apart, odd sizes
        {2, 4, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 8, 1, 1},     // channels last, no padding (read in place)
        {2, 3, 32, 32, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 32, 1},    // 32-pixel rows: equal panels, tail kernels
        {1, 2, 9, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 17, 1, 1},  // 28-pixel rows, channels last
        {8, 1, 28, 28, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 32, 1},    // the CNN's first layer: its weight gradient's depth cut per thread
        {2, 32, 6, 6, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 96, 1},     // 800 taps over several KC panels: a top row's first ones all padding
        {2, 7, 6, 6, 2, 2, 1, 1, 0, 0, 1, 1, 1, 1, 10, 1, 1},   // 28 taps: the row of ones begins a 14-row panel
        {2, 9, 9, 11, 3, 3, 1, 2, 2, 2, 2, 2, 1, 2, 20, 1, 1},  // channels last, dilated columns: taps adjacent per pixel only
        {3, 3, 12, 12, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 33, 1, 1}, // channels last, CIFAR's 3 channels, stride 2
        {32, 4, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 48, 1, 1}, // 6272 pixels into 48 columns: the kernel gradient's shorter KC
        {2, 3, 11, 13, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, 9, 1},     // stride 2, no padding, odd sizes: a copy for phases
        {2, 4, 12, 17, 3, 5, 3, 3, 1, 2, 1, 2, 1, 2, 7, 1},     // stride 3, dilated columns, uneven phases
        {3, 16, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 32, 1},   // stride 2 over 7-pixel output rows
        {2, 5, 9, 21, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1, 6, 1, 1},   // channels last, stride 2 along the rows only
        {3, 16, 9, 9, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 24, 1, 1},  // channels last, no padding: the copy read in place
        {3, 24, 7, 5, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 20, 1, 1},   // 1x1, channels last: the image is the matrix
        {1, 6, 5, 7, 1, 1, 1, 1, 0, 0, 0, 0, 2, 3, 9, 1},        // 1x1 (dilated), one planar image: the matrix too
        {2, 6, 5, 7, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 9, 1},        // 1x1, two planar images: not one matrix
        {2, 20, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 520, 1},    // 180 taps into 520 columns: wide_kc's KC (AVX-512, small L1)
    };
    static const char *kinds[] = {"kiln", "kiln-avx512", "kiln-avx2", "kiln-c", "blis", "loops"};
    char *keep = gemm_env_save();
    for (size_t q = 0; q < sizeof kinds / sizeof *kinds; q++) {
        setenv("KILN_GEMM", kinds[q], 1);
        if (q && q < 4 && !gemm_kern_pick(rt_gemm_kind_env())) continue;   // not on this CPU
        for (int threads = 1; threads <= 3; threads += 2) {
            KRt *rt = rt_new(threads);
            int bad = 0, total = 0;
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
                for (int f64 = 0; f64 < 2; f64++)
                    for (int taps_rows = 0; taps_rows <= RT_WIN_TAPS_ONES; taps_rows++)
                        for (int epi = 0; epi < 2; epi++, total++)
                            if (!win_case(rt, f64, &cases[i], taps_rows, epi)) {
                                if (!bad++)
                                    printf("# window case %zu %s %s%s differs\n", i, f64 ? "f64" : "f32",
                                           taps_rows == RT_WIN_TAPS_ONES ? "taps and ones x pixels"
                                           : taps_rows                   ? "taps x pixels"
                                                                         : "pixels x taps",
                                           epi ? " with epilogue" : "");
                            }
            check(!bad, "gemm of windows = gemm of the materialized windows, bit for bit: KILN_GEMM=%s, %d thread%s, %d cases",
                  kinds[q], threads, threads > 1 ? "s" : "", total);
            if (q == 1 || q == 2)   // the vector kernels skip the padding's kernel rows
                check(win_rows_first_seen > 0, "KILN_GEMM=%s, %d thread%s: %d cases summed kernel rows first", kinds[q],
                      threads, threads > 1 ? "s" : "", win_rows_first_seen);
            win_rows_first_seen = 0;
            rt_free_ctx(rt);
        }
    }
    gemm_env_restore(keep);
}

// rt_gemm_f32_wino (wino.c): Winograd's F(m, r) against a direct f64 sum. The
// largest error is measured against the largest sum of an output's terms'
// magnitudes (the scale of a float sum's rounding; a tile's rounding spreads
// over its outputs, so an output whose window is all padding is not exactly 0);
// the window product it replaces comes within about 1e-7 in that measure. Every kernel size 2..5 on both axes, uneven
// padding, tiles that overhang the output, channels and outputs that are not
// whole vectors, planar and channels-last images, beta, the epilogue.
typedef struct { int64_t n, c, h, w, kh, kw, pt, pl, pb, pr, o; int cl; float beta; } WinoCase;

// Forward (taps_rows 0): y = windows @ w^T; the weights' gradient (taps_rows 1,
// or RT_WIN_TAPS_ONES with the bias's row): windows^T @ dY.
static double wino_case(KRt *rt, const WinoCase *t, int taps_rows, int epi) {
    int64_t oh = t->h + t->pt + t->pb - t->kh + 1, ow = t->w + t->pl + t->pr - t->kw + 1;
    int64_t sw = 1, sh = t->w + 2, sc = t->h * sh + 3, sn = t->c * sc + 1;
    if (t->cl) sc = 1, sw = t->c + 1, sh = t->w * sw + 2, sn = t->h * sh + 5;
    int64_t pixels = t->n * oh * ow, taps = t->c * t->kh * t->kw, n = t->o, nx = t->n * sn;
    int64_t m = taps_rows ? taps + (taps_rows == RT_WIN_TAPS_ONES) : pixels, k = taps_rows ? pixels : taps;
    int64_t geom[RT_WIN_NGEOM] = {t->n, t->c, t->h, t->w, sn, sc, sh, sw, t->kh, t->kw, 1, 1, t->pt, t->pl, 1, 1, oh, ow};
    float *x = calloc(nx, sizeof(float)), *b = calloc(k * n, sizeof(float)), *y = calloc(m * n, sizeof(float));
    double *old = calloc(m * n, sizeof(double)), *want = calloc(m * n, sizeof(double)), *mag = calloc(m * n, sizeof(double));
    int *visits = calloc(m * n, sizeof(int));
    uint64_t seed = 11;
    for (int64_t i = 0; i < nx; i++) x[i] = (float)gemm_rand(&seed);
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)gemm_rand(&seed);
    for (int64_t i = 0; i < m * n; i++) y[i] = (float)(old[i] = gemm_rand(&seed)), want[i] = t->beta * old[i], mag[i] = fabs(want[i]);
    win_visits = visits;
    // The forward product's B as the weights' transpose, [C*KH*KW, O] read with
    // strides (1, k), as a graph passes it; the gradient's dY row-major.
    float *bt = calloc(k * n, sizeof(float));
    for (int64_t r = 0; r < k; r++)
        for (int64_t q = 0; q < n; q++) bt[q * k + r] = b[r * n + q];
    if (taps_rows) rt_gemm_f32_wino(rt, m, n, k, x, geom, taps_rows, b, n, 1, y, n, 1, t->beta, epi ? win_count : NULL, NULL);
    else rt_gemm_f32_wino(rt, m, n, k, x, geom, 0, bt, 1, k, y, n, 1, t->beta, epi ? win_count : NULL, NULL);
    for (int64_t p = 0; p < pixels; p++) {
        int64_t nn = p / (oh * ow), oy = p / ow % oh, ox = p % ow;
        for (int64_t ch = 0; ch < t->c; ch++)
            for (int64_t i = 0; i < t->kh; i++)
                for (int64_t j = 0; j < t->kw; j++) {
                    int64_t iy = oy - t->pt + i, ix = ox - t->pl + j, q = (ch * t->kh + i) * t->kw + j;
                    if (iy < 0 || iy >= t->h || ix < 0 || ix >= t->w) continue;
                    double xv = x[nn * sn + ch * sc + iy * sh + ix * sw];
                    for (int64_t o = 0; o < n; o++) {
                        int64_t at = taps_rows ? q * n + o : p * n + o;
                        double v = xv * b[(taps_rows ? p : q) * n + o];
                        want[at] += v, mag[at] += fabs(v);
                    }
                }
        for (int64_t o = 0; o < n && taps_rows == RT_WIN_TAPS_ONES; o++)
            want[taps * n + o] += b[p * n + o], mag[taps * n + o] += fabs(b[p * n + o]);
    }
    double worst = 0, scale = 1e-30;
    for (int64_t i = 0; i < m * n; i++) {
        double e = fabs(y[i] - want[i]);
        if (e > worst || e != e) worst = e != e ? INFINITY : e;
        if (mag[i] > scale) scale = mag[i];
        if (epi && visits[i] != 1) worst = INFINITY;
    }
    free(x), free(b), free(bt), free(y), free(old), free(want), free(mag), free(visits);
    return worst / scale;
}

static void test_gemm_winograd(void) {
    static const WinoCase cases[] = {
        {4, 32, 14, 14, 5, 5, 2, 2, 2, 2, 64, 1, 0},    // the CNN's second layer, a smaller batch: F(4, 5)
        {3, 64, 14, 14, 5, 5, 2, 2, 2, 2, 32, 1, 0},    // its input gradient (a transposed convolution)
        {2, 16, 16, 16, 3, 3, 1, 1, 1, 1, 16, 0, 0},    // 3x3 "same", planar: F(4, 3)
        {2, 19, 9, 11, 4, 4, 1, 2, 2, 1, 21, 1, 0},     // 4x4: F(3, 4), odd channels and outputs
        {1, 24, 7, 8, 2, 2, 0, 0, 1, 1, 40, 0, 0.5f},   // 2x2: F(5, 2), beta
        {2, 17, 10, 13, 5, 3, 2, 0, 2, 0, 33, 1, 0},    // 5x3 on 8x8 tiles: F(4, 5) x F(6, 3)
        {2, 20, 6, 9, 2, 5, 0, 2, 0, 2, 18, 0, 1.0f},   // 2x5, beta 1
        {1, 16, 5, 5, 3, 4, 3, 0, 3, 2, 17, 1, 0},      // windows wholly in the padding (8x8 tiles)
        {5, 9, 12, 12, 3, 3, 0, 0, 0, 0, 12, 1, 0},     // "valid", channels short of a vector: F(6, 3)
        {3, 48, 8, 8, 5, 5, 2, 2, 2, 2, 16, 0, 0},      // 64 -> 16 at 8x8, as the cost model's case
        {2, 19, 13, 11, 4, 4, 1, 2, 2, 1, 21, 0, 0.5f}, // 4x4 planar, beta: F(5, 4)
        {2, 16, 18, 18, 3, 3, 1, 1, 1, 1, 16, 0, 1.0f}, // 3x3 on 18x18, planar, beta 1: F(6, 3)
    };
    static const char *kinds[] = {"kiln", "kiln-avx512", "kiln-avx2", "kiln-c", "blis"};
    char *keep = gemm_env_save();
    for (size_t q = 0; q < sizeof kinds / sizeof *kinds; q++) {
        setenv("KILN_GEMM", kinds[q], 1);
        if (q && q < 4 && !gemm_kern_pick(rt_gemm_kind_env())) continue;   // not on this CPU
        if (q == 4 && !rt_have_blis()) continue;
        for (int threads = 1; threads <= 3; threads += 2) {
            KRt *rt = rt_new(threads);
            for (int taps_rows = 0; taps_rows <= RT_WIN_TAPS_ONES; taps_rows++) {
                double worst = 0;
                size_t at = 0;
                for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
                    for (int epi = 0; epi < 2; epi++) {
                        double e = wino_case(rt, &cases[i], taps_rows, epi);
                        if (e > worst || e != e) worst = e, at = i;
                    }
                check(worst < 1e-5, "winograd %s within 1e-5 of the largest sum of terms' magnitudes, each output once to "
                      "the epilogue: KILN_GEMM=%s, %d thread%s, %zu cases (worst %.1e, case %zu)",
                      taps_rows == RT_WIN_TAPS_ONES ? "weights' and bias's gradient" : taps_rows ? "weights' gradient" : "conv",
                      kinds[q], threads, threads > 1 ? "s" : "", sizeof cases / sizeof *cases, worst, at);
            }
            if (threads > 1) {   // the weights' gradient sums its blocks per thread: the same bits on a rerun
                static const WinoCase t = {8, 32, 14, 14, 5, 5, 2, 2, 2, 2, 64, 1, 0};
                int64_t pixels = t.n * 14 * 14, taps = 32 * 25 + 1, sn = 14 * 14 * 32;
                int64_t geom[RT_WIN_NGEOM] = {t.n, 32, 14, 14, sn, 1, 14 * 32, 32, 5, 5, 1, 1, 2, 2, 1, 1, 14, 14};
                float *x = calloc(t.n * sn, sizeof(float)), *dy = calloc(pixels * 64, sizeof(float));
                float *c1 = calloc(taps * 64, sizeof(float)), *c2 = calloc(taps * 64, sizeof(float));
                uint64_t seed = 5;
                for (int64_t i = 0; i < t.n * sn; i++) x[i] = (float)gemm_rand(&seed);
                for (int64_t i = 0; i < pixels * 64; i++) dy[i] = (float)gemm_rand(&seed);
                rt_gemm_f32_wino(rt, taps, 64, pixels, x, geom, RT_WIN_TAPS_ONES, dy, 64, 1, c1, 64, 1, 0, NULL, NULL);
                rt_gemm_f32_wino(rt, taps, 64, pixels, x, geom, RT_WIN_TAPS_ONES, dy, 64, 1, c2, 64, 1, 0, NULL, NULL);
                check(!memcmp(c1, c2, sizeof(float) * (size_t)(taps * 64)),
                      "winograd weights' gradient: KILN_GEMM=%s, %d threads: a rerun repeats its bits", kinds[q], threads);
                free(x), free(dy), free(c1), free(c2);
            }
            rt_free_ctx(rt);
        }
    }
    gemm_env_restore(keep);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_mem();
    test_pool_cover();
    test_pool_nested();
    test_pool_resize();
    test_pool_sleep();
    test_pool_claims();
    test_pool_callers();
    test_pool_workspace();
    test_pool_denormals();
    test_pool_overhead();
    test_gemm();
    test_gemm_kernels();
    test_gemm_windows();
    test_gemm_winograd();
    test_gemm_claimed();
    test_gemm_rows_independent();
    test_philox();
    test_uniform();
    test_normal();
    test_convert();
    test_print();
    test_ffi();
    test_npy();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
