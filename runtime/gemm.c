// gemm.c: strided, batched matrix products for compiled graphs, through BLIS
// when Kiln is built with it and through plain C loops when it is not.
//
// Threading. Kiln's pool is the only set of threads: a product is cut into
// tiles (batch items times a grid of row and column blocks, the same number
// for every pool thread), the tiles run under rt_parallel_for, and each tile
// is one single-threaded BLIS call (a rntm_t asking for one thread, so that
// neither BLIS_NUM_THREADS nor OMP_NUM_THREADS can start threads of its own).
// So the threads doing a GEMM are exactly the pool's, --threads and
// rt_set_threads set their number, and nothing oversubscribes. The
// alternatives lose:
//   * openmp (Debian's default variant) with BLIS threads: after each GEMM,
//     libgomp's team spins (GOMP_SPINCOUNT) while the pool runs the next
//     kernels, and the pool's workers spin while BLIS runs: two sets of busy
//     threads on the same cores at every switch. Measured here: 10 GEMMs of
//     64x64x64 (5 us each) with 2 threads, 20 ms apart, cost 50 ms of CPU
//     (0.8 ms with one thread): 5 ms of spinning after every call.
//   * pthreads with BLIS threads: BLIS 0.9 creates and joins its threads in
//     every call, about 15 us per thread (232 us for 15 here), more than a
//     whole mid-sized GEMM takes on 16 cores; the pool's threads are already
//     running and cost well under a microsecond to hand a tile to.
// Since every call asks for one thread, any of Debian's three variants
// (whichever the libblis.so.4 alternative points to) behaves the same, and
// Kiln links plain -lblis: no variant-specific path or rpath to keep right.
// The cost is BLIS's shared packing across threads: each tile packs its own
// panels, which the 2-D tile grid keeps to a small fraction of the work.
#include "rt.h"

#include <math.h>
#ifdef KILN_HAVE_BLIS
#include <blis.h>
#endif

int rt_have_blis(void) {
#ifdef KILN_HAVE_BLIS
    return 1;
#else
    return 0;
#endif
}

// A tile smaller than this many multiply-adds is not worth another thread.
#define TILE_MIN_WORK (1 << 16)

// One call: batch products of m x k by k x n, strides in elements.
typedef struct {
    int f64;
    int blis;   // every operand's strides are ones BLIS accepts
    int64_t m, n, k;
    const void *a, *b;
    void *c;
    int64_t a_batch, a_rs, a_cs, b_batch, b_rs, b_cs, c_batch, c_rs, c_cs;
    double beta;
    int64_t tm, tn;   // tiles per product: tm row blocks times tn column blocks
    int64_t mb, nb;   // rows and columns per tile (the last ones may be shorter)
} Gemm;

// c = beta*c + a @ b over one tile, as plain loops: blocked over k and the
// columns so a block of b stays in cache while the tile's rows stream past,
// with the innermost loop along a row of b and c (contiguous in the common
// layout). beta == 0 never reads c, as BLAS promises.
#define KB 128
#define NB 512
// One definition for both float types (T: float or double).
#define DEFINE_LOOPS(NAME, T)                                                                            \
    static void NAME(int64_t m, int64_t n, int64_t k, const T *a, int64_t ars, int64_t acs, const T *b,      \
                     int64_t brs, int64_t bcs, T *c, int64_t crs, int64_t ccs, T beta) {                   \
        for (int64_t i = 0; i < m; i++)                                                                    \
            for (int64_t j = 0; j < n; j++)                                                                \
                c[i * crs + j * ccs] = beta == 0 ? 0 : beta * c[i * crs + j * ccs];                        \
        for (int64_t j0 = 0; j0 < n; j0 += NB) {                                                           \
            int64_t nj = n - j0 < NB ? n - j0 : NB;                                                        \
            for (int64_t k0 = 0; k0 < k; k0 += KB) {                                                       \
                int64_t k1 = k - k0 < KB ? k : k0 + KB;                                                    \
                for (int64_t i = 0; i < m; i++) {                                                          \
                    T *ci = c + i * crs + j0 * ccs;                                                        \
                    for (int64_t p = k0; p < k1; p++) {                                                    \
                        const T av = a[i * ars + p * acs], *bp = b + p * brs + j0 * bcs;                   \
                        if (bcs == 1 && ccs == 1)                                                          \
                            for (int64_t j = 0; j < nj; j++) ci[j] += av * bp[j];                          \
                        else                                                                               \
                            for (int64_t j = 0; j < nj; j++) ci[j * ccs] += av * bp[j * bcs];              \
                    }                                                                                      \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }
DEFINE_LOOPS(loops_f32, float)
DEFINE_LOOPS(loops_f64, double)
#undef DEFINE_LOOPS

// One tile: rows [i0, i0+mt) and columns [j0, j0+nt) of product p.
static void tile(const Gemm *g, int64_t p, int64_t i0, int64_t mt, int64_t j0, int64_t nt) {
    int64_t ao = p * g->a_batch + i0 * g->a_rs, bo = p * g->b_batch + j0 * g->b_cs;
    int64_t co = p * g->c_batch + i0 * g->c_rs + j0 * g->c_cs;
#ifdef KILN_HAVE_BLIS
    if (g->blis) {
        rntm_t rntm = BLIS_RNTM_INITIALIZER;
        bli_rntm_set_num_threads(1, &rntm);   // the pool is the parallelism (see the top)
        if (g->f64) {
            double one = 1, beta = g->beta;
            bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, mt, nt, g->k, &one, (double *)g->a + ao, g->a_rs,
                         g->a_cs, (double *)g->b + bo, g->b_rs, g->b_cs, &beta, (double *)g->c + co, g->c_rs, g->c_cs,
                         NULL, &rntm);
        } else {
            float one = 1, beta = (float)g->beta;
            bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, mt, nt, g->k, &one, (float *)g->a + ao, g->a_rs,
                         g->a_cs, (float *)g->b + bo, g->b_rs, g->b_cs, &beta, (float *)g->c + co, g->c_rs, g->c_cs,
                         NULL, &rntm);
        }
        return;
    }
#endif
    if (g->f64)
        loops_f64(mt, nt, g->k, (const double *)g->a + ao, g->a_rs, g->a_cs, (const double *)g->b + bo, g->b_rs,
                  g->b_cs, (double *)g->c + co, g->c_rs, g->c_cs, g->beta);
    else
        loops_f32(mt, nt, g->k, (const float *)g->a + ao, g->a_rs, g->a_cs, (const float *)g->b + bo, g->b_rs,
                  g->b_cs, (float *)g->c + co, g->c_rs, g->c_cs, (float)g->beta);
}

// Items [lo, hi) of batch * tm * tn tiles, product-major.
static void run_tiles(void *ctx, int64_t lo, int64_t hi) {
    const Gemm *g = ctx;
    for (int64_t it = lo; it < hi; it++) {
        int64_t p = it / (g->tm * g->tn), t = it % (g->tm * g->tn);
        int64_t i0 = t / g->tn * g->mb, j0 = t % g->tn * g->nb;
        int64_t mt = g->m - i0 < g->mb ? g->m - i0 : g->mb, nt = g->n - j0 < g->nb ? g->n - j0 : g->nb;
        tile(g, p, i0, mt, j0, nt);
    }
}

// The stride of a length-1 axis is never used; give it the value that makes
// the layout plainly row- or column-major, so BLIS's checks accept it.
static void unit_axes(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs) {
    if (rows == 1) *rs = cols * *cs;
    if (cols == 1) *cs = rows * *rs;
}

// BLIS's rules for the strides of a rows x cols operand (bli_check_matrix_strides,
// which aborts the process when they fail), plus positive strides: a broadcast
// axis (stride 0) or a reversed one goes to the loops instead.
static int blis_strides_ok(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    if (rs <= 0 || cs <= 0) return 0;
    if (rs == cs) return rows == 1 || cols == 1;
    if (rs == 1) return cs >= rows;
    if (cs == 1) return rs >= cols;
    return rs < cs ? cs >= rows * rs : rs >= cols * cs;
}

static int64_t gcd(int64_t a, int64_t b) {
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

// The tile grid: enough tiles that every pool thread gets the same number
// (batch * tiles a multiple of the thread count), none below TILE_MIN_WORK,
// and each product cut into tm x tn blocks as near square as the divisors of
// the count allow (a square block packs the least per multiply-add).
static void plan_tiles(Gemm *g, int64_t batch, int threads) {
    int64_t per = threads / gcd(batch, threads);   // tiles per product
    double most = (double)g->m * g->n * (g->k ? g->k : 1) / TILE_MIN_WORK;
    if (per > most) per = most > 1 ? (int64_t)most : 1;
    int64_t tm = 1;
    double best = INFINITY;
    for (int64_t d = 1; d <= per; d++) {
        if (per % d || d > g->m || per / d > g->n) continue;
        double skew = fabs(log((double)g->m * per / ((double)g->n * d * d)));   // log(mb / nb)
        if (skew < best) { best = skew; tm = d; }
    }
    int64_t tn = per / tm < g->n ? per / tm : g->n;
    g->mb = (g->m + tm - 1) / tm;
    g->nb = (g->n + tn - 1) / tn;
    g->tm = (g->m + g->mb - 1) / g->mb;
    g->tn = (g->n + g->nb - 1) / g->nb;
}

static void gemm(KRt *rt, Gemm *g, int64_t batch) {
    if (batch <= 0 || g->m <= 0 || g->n <= 0) return;
    // A mini-batch against a shared (stride 0) weight whose rows follow on
    // from one product to the next is one tall product, not batch small ones;
    // likewise columns against a shared left operand.
    if (batch > 1 && g->b_batch == 0 && g->a_batch == g->m * g->a_rs && g->c_batch == g->m * g->c_rs) {
        g->m *= batch;
        batch = 1;
    } else if (batch > 1 && g->a_batch == 0 && g->b_batch == g->n * g->b_cs && g->c_batch == g->n * g->c_cs) {
        g->n *= batch;
        batch = 1;
    }
    unit_axes(g->m, g->k, &g->a_rs, &g->a_cs);
    unit_axes(g->k, g->n, &g->b_rs, &g->b_cs);
    unit_axes(g->m, g->n, &g->c_rs, &g->c_cs);
    g->blis = rt_have_blis() && g->k > 0 && blis_strides_ok(g->m, g->k, g->a_rs, g->a_cs) &&
              blis_strides_ok(g->k, g->n, g->b_rs, g->b_cs) && blis_strides_ok(g->m, g->n, g->c_rs, g->c_cs);
    plan_tiles(g, batch, rt_threads(rt));
    rt_parallel_for(rt, run_tiles, g, batch * g->tm * g->tn, 1);
}

void rt_gemm_f32(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, int64_t a_batch,
                 int64_t a_rs, int64_t a_cs, const float *b, int64_t b_batch, int64_t b_rs, int64_t b_cs, float *c,
                 int64_t c_batch, int64_t c_rs, int64_t c_cs, float beta) {
    Gemm g = {.f64 = 0, .m = m, .n = n, .k = k, .a = a, .b = b, .c = c, .a_batch = a_batch, .a_rs = a_rs,
              .a_cs = a_cs, .b_batch = b_batch, .b_rs = b_rs, .b_cs = b_cs, .c_batch = c_batch, .c_rs = c_rs,
              .c_cs = c_cs, .beta = beta};
    gemm(rt, &g, batch);
}

void rt_gemm_f64(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k, const double *a, int64_t a_batch,
                 int64_t a_rs, int64_t a_cs, const double *b, int64_t b_batch, int64_t b_rs, int64_t b_cs, double *c,
                 int64_t c_batch, int64_t c_rs, int64_t c_cs, double beta) {
    Gemm g = {.f64 = 1, .m = m, .n = n, .k = k, .a = a, .b = b, .c = c, .a_batch = a_batch, .a_rs = a_rs,
              .a_cs = a_cs, .b_batch = b_batch, .b_rs = b_rs, .b_cs = b_cs, .c_batch = c_batch, .c_rs = c_rs,
              .c_cs = c_cs, .beta = beta};
    gemm(rt, &g, batch);
}
