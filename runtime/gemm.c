// gemm.c: strided, batched matrix products for compiled graphs. f32 runs on
// Kiln's own packed GEMM (below, micro-kernels in gemm_kern.c); f64, which is
// for gradient checks rather than speed, runs through BLIS when Kiln is built
// with it and through plain C loops when it is not.
//
// Why not BLIS for f32. Debian's BLIS 0.9 cannot tell the FMA unit count of a
// CPU whose brand string is the generic "Intel(R) Xeon(R) Processor" (KVM
// guests), so on the AVX-512 Xeon VM it picks its haswell (AVX2) kernels:
// 100-115 GFLOP/s at one thread, where an FMA loop peaks at 224-247 with zmm.
// Its override (BLIS_ARCH_TYPE) aborts in 0.9.0 and the skx context is not
// exported. The packed GEMM here reaches 155-170 GFLOP/s at one thread for
// square n = 256-2048, 1.45-1.6x BLIS in the same run, and 1.2-2.2x on the
// products of the CNN and MLP training steps (benchmarks/train_speed/csrc/
// gemm_kernels.c times them; 2026-12-04). KILN_GEMM=kiln|blis|loops,
// read when the runtime context is created, picks the path for f32; the
// default is kiln on CPUs with AVX2+FMA, else BLIS when built with it, else
// the loops. kiln-avx512, kiln-avx2 and kiln-c force one micro-kernel.
//
// The algorithm is Goto's, as in BLIS: loops jc (NC columns of C) -> pc (KC of
// k, B's KC x NC block packed once) -> ic (MC rows, A's MC x KC block packed)
// -> ir (MR) -> jr (NR), the micro-kernel. Packing reads A and B through their
// strides, so transposes and broadcasts cost nothing extra, and zero-pads the
// edge panels so the kernel never branches. The two inner loops run the
// other way round from BLIS's (jr outside ir): an A micro-panel (MR x KC)
// stays in L1 while the B block (KC x NC, half of L2) streams past it, and C
// is written along its rows instead of down 32-column strips, one page per
// row: 1.3-1.6x faster at k = 64 (25088x800x64, where writing C is most of
// the work), and no slower on the square sizes with AVX-512. BLIS's order is
// taken by the AVX2 kernel for large deep products, and by every kernel for a
// product with an epilogue whose tiles are wider than NC (B_STAYS_COLS). A
// row-major A is read in place instead of packed (see NARROW_B_PANELS), and so
// is a row-major B against at most MR rows of A or whose rows are one
// micro-panel (block_sizes). A column-major C is computed as C^T = B^T A^T so
// the kernel always writes rows; any other C (and every edge tile) goes
// through a small buffer. beta == 0 never reads C.
//
// A convolution's window matrix (rt_gemm_*_win) is A packed from its image
// by gemm_win.c, a micro-panel at a time as a row-major A is read, or a block
// at a time as a transposed one is; never materialized on this path.
//
// The epilogue (rt_gemm_*_epi, for compiled graphs' fused bias, activation
// and optimizer updates): after a block's last KC panel, each strip of mr
// finished rows goes to the hook while it is in L1; with C computed as C^T a
// strip would be mr columns of the caller's C, so the whole block goes
// instead. The BLIS and loops paths call it after each tile.
//
// Threading. Kiln's pool is the only set of threads: a product is cut into
// tiles (batch items times a grid of row and column blocks, at least as many
// for every pool thread), and each pool thread claims tiles until none is left
// (the BLIS and loops paths: runs its share), each tile a whole
// single-threaded GEMM with that thread's packing buffers
// (one block per context, no malloc per call once it has grown). So the
// threads doing a GEMM are exactly the pool's, --threads and rt_set_threads
// set their number, and nothing oversubscribes. The BLIS path does the same
// with one single-threaded BLIS call per tile (a rntm_t asking for one thread,
// so that neither BLIS_NUM_THREADS nor OMP_NUM_THREADS can start threads of
// its own). The alternatives lose:
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
// Since every BLIS call asks for one thread, any of Debian's three variants
// (whichever the libblis.so.4 alternative points to) behaves the same, and
// Kiln links plain -lblis: no variant-specific path or rpath to keep right.
// The cost is shared packing across threads: each tile packs its own panels,
// which the 2-D tile grid keeps to a small fraction of the work.
#include "private.h"
#include "rt.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

// A tile smaller than this many multiply-adds (~2.5 us) is not worth another
// thread: a worker asleep since the last kernel takes tens of microseconds to
// wake on a VM, and examples/logreg.kiln's 64x10x784 products (0.5M), split
// over 2 threads at 2^16, made its training step slower with 2 threads than
// with 1 (400-470K against 525K examples/s; at 2^18 they run on one).
#define TILE_MIN_WORK (1 << 18)

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
    // The packed path (f32, kind kiln*):
    const GemmKern *kern;
    int64_t mc, kc, nc;   // block sizes, multiples of the kernel's mr, -, nr
    int64_t kc_keep;      // KC as the untransposed problem had it (0: choose)
    int64_t kc_wide;      // KC of a wide, deep product (wide_kc; 0: gemm_blocks')
    int64_t ks, k0;       // parts the depth is cut into (split_depth; 1: none); a part's first k
    float *parts;         // parts 1.. of such a product, m x n each, summed into C afterwards
    float *ws;   // packing buffers, slot_floats per thread slot
    _Atomic int64_t *next;   // the next tile (or depth part) a slot claims
    int64_t a_pack, slot_floats, nslots, nbatch;   // floats per slot, A's first
    int transposed;   // computing C^T = B^T A^T (C was column-major)
    int direct_a;   // A is row-major: its whole micro-panels are read in place
    int direct_b;   // B is row-major and A has few rows: B's whole micro-panels are read in place
    int b_stays;    // BLIS's inner loops: a B micro-panel stays in L1 while the packed A block streams past
    RtGemmEpilogue epi;   // rt.h's hook, NULL if none
    void *epi_ctx;
    int64_t e_rs, e_cs;   // the caller's strides of C (after a batch merge), for the hook
    Win *win;     // A is a window matrix packed from its image (rt_gemm_f32_win), or NULL
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

//
// The packed path (f32)
//

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// n contiguous floats, n one of the micro-tile sizes: a fixed-size memcpy is a
// few vector moves, where a call per row of a panel would cost more than the copy.
static inline __attribute__((always_inline)) void copy_row(float *d, const float *s, int n) {
    switch (n) {
    case 32: memcpy(d, s, 32 * sizeof(float)); break;
    case 16: memcpy(d, s, 16 * sizeof(float)); break;
    case 14: memcpy(d, s, 14 * sizeof(float)); break;
    case 6: memcpy(d, s, 6 * sizeof(float)); break;
    case 4: memcpy(d, s, 4 * sizeof(float)); break;
    default: memcpy(d, s, n * sizeof(float)); break;
    }
}

// pack_a for a transposed A (a(i, p) at a[p*cs + i]): a panel's row is mr
// contiguous floats, but a panel spans kb rows of the storage, each in another
// page when m is large. So it goes 8 rows of the storage at a time, across all
// panels, while those rows are in L1 (panel by panel measured 1.3x slower at
// 800x64x25088).
static void pack_a_trans(int mr, int64_t mb, int64_t kb, const float *a, int64_t cs, float *dst) {
    int64_t full = mb / mr * mr;
    for (int64_t p0 = 0; p0 < kb; p0 += 8)
        for (int64_t ir = 0; ir < full; ir += mr)
            for (int64_t p = p0; p < p0 + 8 && p < kb; p++) copy_row(dst + ir * kb + p * mr, a + p * cs + ir, mr);
    if (full == mb) return;
    float *d = dst + full * kb;
    memset(d, 0, sizeof(float) * mr * kb);
    for (int64_t p = 0; p < kb; p++)
        for (int64_t i = 0; i < mb - full; i++) d[p * mr + i] = a[p * cs + full + i];
}

// Rows [0, mb) x k-range [0, kb) of A into mr-row micro-panels: panel r holds
// a[(r*mr + i)*rs + p*cs] at dst[r*mr*kb + p*mr + i], rows past mb zero.
// Written in order, the reads mr streams along k. (A row-major A is read in
// place, see NARROW_B_PANELS: only its last, partial panel comes here.)
static void pack_a(int mr, int64_t mb, int64_t kb, const float *a, int64_t rs, int64_t cs, float *dst) {
    if (rs == 1 && cs > 0) {
        pack_a_trans(mr, mb, kb, a, cs, dst);
        return;
    }
    for (int64_t ir = 0; ir < mb; ir += mr) {
        int64_t rows = min64(mr, mb - ir);
        const float *s = a + ir * rs;
        float *d = dst + ir * kb;
        if (rows < mr)
            memset(d, 0, sizeof(float) * mr * kb);
        for (int64_t p = 0; p < kb; p++)
            for (int64_t i = 0; i < rows; i++) d[p * mr + i] = s[i * rs + p * cs];
    }
}

// k-range [0, kb) x columns [0, nb) of B into nr-column micro-panels: panel r
// holds b[p*rs + (r*nr + j)*cs] at dst[r*nr*kb + p*nr + j], columns past nb
// zero. Whole panels of a row- or column-major B go through the kernel's own
// packer (gemm_kern.c); the rest written in order.
static void pack_b(const GemmKern *kn, int64_t kb, int64_t nb, const float *b, int64_t rs, int64_t cs, float *dst) {
    int nr = kn->nr;
    int64_t whole = nb / nr * nr;
    if (whole && kn->pack_b && kn->pack_b(kb, whole / nr, b, rs, cs, dst)) {
        if (whole == nb) return;
        b += whole * cs, dst += whole * kb, nb -= whole;
    }
    for (int64_t jr = 0; jr < nb; jr += nr) {
        int64_t cols = min64(nr, nb - jr);
        const float *s = b + jr * cs;
        float *d = dst + jr * kb;
        if (cols < nr)
            memset(d, 0, sizeof(float) * nr * kb);
        if (cs == 1 && cols == nr)   // row-major B: a panel row is contiguous
            for (int64_t p = 0; p < kb; p++) copy_row(d + p * nr, s + p * rs, nr);
        else
            for (int64_t p = 0; p < kb; p++)
                for (int64_t j = 0; j < cols; j++) d[p * nr + j] = s[p * rs + j * cs];
    }
}

#define MAX_MR 16   // bounds on every kernel's mr and nr (gemm_kern.c)
#define MAX_NR 32

// How a micro-kernel reads its A panel.
typedef struct {
    const float *a;
    int64_t ak, ai;        // a(i, p) at a[p*ak + i*ai]: ai == 1 (fn) or ak == 1 (rows)
    const int64_t *off;    // or, if not NULL, at a[off[p] + i] (taps: windows in place)
    const float *const *rowp;   // or, with off, at rowp[i][off[p]] (the kernel's pixels entry)
} Panel;

static inline void put(float *x, float v, int acc) { *x = acc ? *x + v : v; }

// One mv x nv block of C (at most mr x nr): straight into C when its columns
// are whole and contiguous and its rows are the kernel's mr or a tail's, else
// into a buffer and copied out. A tail computes only the panel's mv rows.
// The panel comes by address: by value (32 bytes, on the stack) each call copied
// it with 16-byte loads from the 8-byte stores just made, a store-forwarding
// stall per call, 14% of the conv1 forward product's time with AVX2 (K = 25).
static void micro(const GemmKern *kn, int64_t kb, const Panel *panel, const float *pb, int64_t ldb, float *c, int64_t rs,
                  int64_t cs, int64_t mv, int64_t nv, int acc) {
    _Alignas(64) float t[MAX_MR * MAX_NR];
    Panel ap = *panel;
    int tail = mv < kn->mr && !ap.rowp && (ap.off ? kn->taps_tail != NULL : ap.ai == 1 && kn->tail != NULL);
    int direct = nv == kn->nr && cs == 1 && (mv == kn->mr || tail);
    float *dst = direct ? c : t;
    int64_t ld = direct ? rs : kn->nr;
    if (ap.rowp)
        kn->pixels(kb, ap.rowp, ap.off, pb, ldb, dst, ld, direct && acc);
    else if (tail && ap.off)
        kn->taps_tail[mv](kb, ap.a, ap.off, pb, ldb, dst, ld, direct && acc);
    else if (tail)
        kn->tail[mv](kb, ap.a, ap.ak, pb, ldb, dst, ld, direct && acc);
    else if (ap.off)
        kn->taps(kb, ap.a, ap.off, pb, ldb, dst, ld, direct && acc);
    else if (ap.ai == 1)
        kn->fn(kb, ap.a, ap.ak, pb, ldb, dst, ld, direct && acc);
    else
        kn->rows(kb, ap.a, ap.ai, pb, ldb, dst, ld, direct && acc);
    if (direct) return;
    // Along C's contiguous axis: a transposed product's C^T tile (rs == 1) is mv
    // values in each of nv rows of the caller's C (see block_sizes for the gain).
    if (rs == 1)
        for (int64_t j = 0; j < nv; j++)
            for (int64_t i = 0; i < mv; i++) put(c + i + j * cs, t[i * kn->nr + j], acc);
    else
        for (int64_t i = 0; i < mv; i++)
            for (int64_t j = 0; j < nv; j++) put(c + i * rs + j * cs, t[i * kn->nr + j], acc);
}

// A row-major A is read in place, mr rows at a time, not packed: with the
// inner loops as they are, those rows stay in L1 while they meet the whole B
// block, so packing them only costs a copy. Measured as a ratio to BLIS in the
// same run, packed / in place: n = 512 1.39 / 1.54x, 128x512x784 1.62 /
// 1.76x, 784x512x128 1.62 / 1.87x, 25088x800x64 1.33 / 1.33x. A B of at most
// this many micro-panels is narrow: each value of A then serves only 2*nb
// flops and C is small, so KC grows to take B's whole depth (up to a quarter
// of L2) and C is written once rather than once per KC panel (25088x64x800:
// 1.3x faster).
#define NARROW_B_PANELS 2

static void finish(const Gemm *g, int64_t p, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

// The block [ic, ic+mb) x [jc, jc+nb) of a tile for one KC panel (A at the
// block's first row and the panel's first k, pk, pb packed); (p, ci, cj): the
// block's product and first element, for the epilogue after the last panel
// (last), which runs per strip of mr finished rows while they are in L1.
// Window rows (pixels) are packed a micro-panel at a time, as a row-major A
// is read: that panel meets the whole B block while it is in L1. A panel of mr
// pixels of one image row needs no packing at all: each tap's mr values are
// adjacent in the (padded) image, and the kernel's taps entry reads them there
// (the same values in the same order: the same bits); with a pixels entry, any
// mr pixels, each at its own pointer (rowp, from win_pixel_panel). Nor does a panel of the
// transpose's taps (the weights' gradient, win_taps_in_place): a run of one
// window row's taps, adjacent in the channels-last copy, read at each pixel's
// offset; only the row of ones is packed.
// A block's B panels: panel jr (a multiple of nr) is direct + jr, nr columns of a
// row-major B read in place (row stride ld), while jr < whole; then packed.
typedef struct { const float *packed, *direct; int64_t ld, whole; } BPanels;

// The block the other way round, as BLIS does it (g->b_stays): A's block
// packed (it stays in L2), then each B micro-panel stays in L1 while the A
// micro-panels stream past it.
static void block_b_stays(const Gemm *g, float *pa, const float *pb, const float *a, float *c, int64_t mb, int64_t nb,
                          int64_t kb, int acc) {
    const GemmKern *kn = g->kern;
    pack_a(kn->mr, mb, kb, a, g->a_rs, g->a_cs, pa);
    for (int64_t jr = 0; jr < nb; jr += kn->nr)
        for (int64_t ir = 0; ir < mb; ir += kn->mr)
            micro(kn, kb, &(Panel){pa + ir * kb, kn->mr, 1, NULL}, pb + jr * kb, kn->nr, c + ir * g->c_rs + jr * g->c_cs,
                  g->c_rs, g->c_cs, min64(kn->mr, mb - ir), min64(kn->nr, nb - jr), acc);
}

static void block(const Gemm *g, float *pa, BPanels bp, const float *a, float *c, int64_t mb, int64_t nb,
                  int64_t kb, int64_t pk, int acc, int64_t p, int64_t ci, int64_t cj, int last) {
    const GemmKern *kn = g->kern;
    int64_t crs = g->c_rs, ccs = g->c_cs;
    if (g->b_stays) {
        block_b_stays(g, pa, bp.packed, a, c, mb, nb, kb, acc);
        if (last && !g->transposed) finish(g, p, ci, ci + mb, cj, cj + nb);
        return;
    }
    int64_t whole = g->direct_a ? mb / kn->mr * kn->mr : 0;   // rows read in place
    int win_rows = g->win && !g->win->taps_rows, taps_in_place = g->win && g->win->taps_in_place;
    int64_t *pix_off = NULL;   // the block's pixels' offsets, after the ones' panel
    if (taps_in_place) win_pixel_offsets(g->win, pk, kb, pix_off = (int64_t *)(pa + round_up(kn->mr * kb, 16)));
    else if (g->win && g->win->taps_rows) win_pack_taps(g->win, kn->mr, ci, mb, pk, kb, pa);
    else if (!win_rows && mb > whole) pack_a(kn->mr, mb - whole, kb, a + whole * g->a_rs, g->a_rs, g->a_cs, pa);
    WinPixel px = win_rows ? win_pixel(g->win, ci) : (WinPixel){0, 0, 0};   // panel ir's first pixel
    const float *rowp[MAX_MR];   // an in-place panel's pixels, for the kernel's pixels entry
    for (int64_t ir = 0, mv; ir < mb; ir += mv) {
        const float *in_place = NULL;
        mv = min64(kn->mr, mb - ir);
        if (taps_in_place) {
            int64_t q = ci + ir, rows = win_taps_panel_rows(g->win, kn->mr, q, mb - ir);
            if (rows) mv = rows, in_place = (const float *)g->win->x + g->win->toff[q];
            else win_pack_taps(g->win, kn->mr, q, mv, pk, kb, pa);
        }
        int64_t skip = 0, kv = kb;   // the panel's depth [skip, skip + kv) of the block: the rest reads padding
        if (win_rows) {
            WinPanel wp = win_pixel_panel(g->win, kn, &px, mb - ir, rowp);
            mv = wp.rows, in_place = wp.in_place;
            if (!in_place) win_pack_pixels(g->win, kn->mr, ci + ir, mv, pk, kb, pa);
            else if (g->win->rows_first) {
                skip = min64(kb, wp.lo > pk ? wp.lo - pk : 0);
                kv = (wp.hi < pk + kb ? wp.hi - pk : kb) - skip;
                if (kv < 0) kv = 0;   // all padding: C's rows are zeros in the block's first panel, else unchanged
            }
        }
        Panel ap = {pa, kn->mr, 1, NULL};   // packed (a window's one panel, or the block's panel ir)
        if (ir < whole) ap = (Panel){a + ir * g->a_rs, g->a_cs, g->a_rs, NULL};
        else if (!win_rows && !taps_in_place) ap.a = pa + (ir - whole) * kb;
        if (in_place)
            ap = (Panel){in_place, 0, 1, taps_in_place ? pix_off : g->win->toff + pk + skip,
                         win_rows && kn->pixels ? rowp : NULL};
        for (int64_t jr = 0; jr < nb && (kv || !acc); jr += kn->nr) {
            if (mv == 1 && kn->row_panels && ccs == 1 && ap.ai == 1 && !ap.off && jr + ROW_PANELS * kn->nr <= bp.whole) {
                kn->row_panels(kb, ap.a, ap.ak, bp.direct + jr, bp.ld, c + ir * crs + jr, acc);
                jr += (ROW_PANELS - 1) * kn->nr;
                continue;
            }
            const float *pb = jr < bp.whole ? bp.direct + jr : bp.packed + (jr - bp.whole) * kb;
            int64_t ldb = jr < bp.whole ? bp.ld : kn->nr;
            micro(kn, kv, &ap, pb + skip * ldb, ldb, c + ir * crs + jr * ccs, crs, ccs, mv, min64(kn->nr, nb - jr), acc);
        }
        // A strip of C^T is mr columns of the caller's C: too narrow to sweep, so
        // a transposed problem's epilogue runs per block instead (packed_tile).
        if (last && !g->transposed) finish(g, p, ci + ir, ci + ir + mv, cj, cj + nb);
    }
}

// The epilogue of rows [i0, i1) x columns [j0, j1) of product p, finished (in the
// problem's orientation; the hook gets the caller's).
static void finish(const Gemm *g, int64_t p, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (!g->epi || i1 <= i0 || j1 <= j0) return;
    if (g->transposed) {
        int64_t t0 = i0, t1 = i1;
        i0 = j0, i1 = j1, j0 = t0, j1 = t1;
    }
    int64_t off = p * g->c_batch + i0 * g->e_rs + j0 * g->e_cs;
    if (g->e_cs == 1 || j1 - j0 == 1) {
        g->epi(g->epi_ctx, off, g->e_rs, i1 - i0, j1 - j0);
        return;
    }
    for (int64_t i = 0; i < i1 - i0; i++)
        for (int64_t j = 0; j < j1 - j0; j++) g->epi(g->epi_ctx, off + i * g->e_rs + j * g->e_cs, 1, 1, 1);
}

// A tile of one row against a B read in place (g->direct_b: a batch of one),
// a, b and c at its first element: nothing is packed. B's whole panels go
// ROW_PANELS at a time or one by one (tail[1]), the columns past them through
// row_cols; A's row is read where it is, whatever its stride. These are the
// sums the packed panels would give (tail[1]'s, on the same KC panels): the
// same bits. Packing cost more than the product: x @ W at batch 1 for
// logreg's 784 x 10 took 6.4 us with AVX-512, two thirds of it copying B's
// 10 columns into a zero-padded panel a value at a time, and now 1.1 (AVX2
// 4.2 -> 0.9); 1x512x784, whose panels are whole, 16-19 -> 11-14 us (A no
// longer packed); logreg's inference at batch 1 through the C API, 6.2-6.5
// -> 1.1-1.2 us, the MLP's 79-80 -> 68-69 us (1 thread) and 37-39 -> 30 us
// (2 threads).
static void row_tile(const Gemm *g, const float *a, const float *b, float *c, int64_t nt) {
    const GemmKern *kn = g->kern;
    int64_t nr = kn->nr, whole = nt / nr * nr;
    for (int64_t pc = g->k0; pc < g->k; pc += g->kc) {
        int64_t kb = min64(g->kc, g->k - pc), jr = 0;
        int acc = pc > g->k0 || g->beta != 0;
        const float *ak = a + pc * g->a_cs, *bk = b + pc * g->b_rs;
        for (; kn->row_panels && jr + ROW_PANELS * nr <= whole; jr += ROW_PANELS * nr)
            kn->row_panels(kb, ak, g->a_cs, bk + jr, g->b_rs, c + jr, acc);
        for (; jr < whole; jr += nr) kn->tail[1](kb, ak, g->a_cs, bk + jr, g->b_rs, c + jr, nr, acc);
        if (jr < nt) kn->row_cols(kb, ak, g->a_cs, bk + jr, g->b_rs, c + jr, (int)(nt - jr), acc);
    }
}

// One tile, rows [i0, i0+mt) and columns [j0, j0+nt) of product p, with the
// packing buffers pa (mc x kc) and pb (kc x nc).
static void packed_tile(const Gemm *g, float *pa, float *pb, int64_t p, int64_t i0, int64_t mt, int64_t j0, int64_t nt) {
    const GemmKern *kn = g->kern;
    const float *a = (const float *)g->a + p * g->a_batch + i0 * g->a_rs;
    const float *b = (const float *)g->b + p * g->b_batch + j0 * g->b_cs;
    float *c0 = (float *)g->c + p * g->c_batch, *c = c0 + i0 * g->c_rs + j0 * g->c_cs;
    int64_t crs = g->c_rs, ccs = g->c_cs;
    if (g->beta != 0 && g->beta != 1)   // then every panel accumulates
        for (int64_t i = 0; i < mt; i++)
            for (int64_t j = 0; j < nt; j++) c[i * crs + j * ccs] *= (float)g->beta;
    if (g->k == 0) {
        if (g->beta == 0)
            for (int64_t i = 0; i < mt; i++)
                for (int64_t j = 0; j < nt; j++) c[i * crs + j * ccs] = 0;
        finish(g, p, i0, i0 + mt, j0, j0 + nt);
        return;
    }
    if (mt == 1 && g->direct_b && kn->row_cols && kn->tail && ccs == 1 && !g->win) {
        row_tile(g, a, b, c, nt);
        finish(g, p, i0, i0 + 1, j0, j0 + nt);
        return;
    }
    for (int64_t jc = 0; jc < nt; jc += g->nc) {
        int64_t nb = min64(g->nc, nt - jc);
        for (int64_t pc = g->k0; pc < g->k; pc += g->kc) {
            int64_t kb = min64(g->kc, g->k - pc);
            int acc = pc > g->k0 || g->beta != 0, last = pc + kb == g->k;
            const float *bk = b + pc * g->b_rs + jc * g->b_cs;
            BPanels bp = {pb, NULL, 0, 0};
            if (g->direct_b) bp = (BPanels){pb, bk, g->b_rs, nb / kn->nr * kn->nr};
            if (nb > bp.whole) pack_b(kn, kb, nb - bp.whole, bk + bp.whole * g->b_cs, g->b_rs, g->b_cs, pb);
            for (int64_t ic = 0; ic < mt; ic += g->mc) {
                int64_t mb = min64(g->mc, mt - ic);
                block(g, pa, bp, a + ic * g->a_rs + pc * g->a_cs, c + ic * crs + jc * ccs, mb, nb, kb, pc, acc, p,
                      i0 + ic, j0 + jc, last);
                if (last && g->transposed) finish(g, p, i0 + ic, i0 + ic + mb, j0 + jc, j0 + jc + nb);
            }
        }
    }
}

// Part q of a product whose depth is cut (split_depth): its range of k, into C
// (q = 0, with beta) or into its own m x n buffer, with no epilogue; packed()
// sums the buffers into C once every part is done.
static void depth_part(const Gemm *g, float *pa, float *pb, int64_t q) {
    Gemm part = *g;
    part.k0 = g->k * q / g->ks, part.k = g->k * (q + 1) / g->ks;
    part.epi = NULL;
    if (q > 0) part.c = g->parts + (q - 1) * g->m * g->n, part.c_rs = g->n, part.c_cs = 1, part.beta = 0;
    packed_tile(&part, pa, pb, 0, 0, g->m, 0, g->n);
}

// Thread slots [lo, hi): slot s claims tiles of the batch * tm * tn (or the
// ks depth parts) one at a time until none is left, with its own packing
// buffers. Claimed, not dealt: where plan_tiles cut a product finer than the
// threads, a thread that the machine slows takes fewer tiles instead of the
// others waiting for it. A tile's sums do not depend on which thread runs it.
static void run_slots(void *ctx, int64_t lo, int64_t hi) {
    const Gemm *g = ctx;
    int64_t ntiles = g->tm * g->tn * g->ks, total = ntiles * g->nbatch;
    for (int64_t s = lo; s < hi; s++) {
        float *pa = g->ws + s * g->slot_floats, *pb = pa + g->a_pack;
        for (int64_t it; (it = atomic_fetch_add_explicit(g->next, 1, memory_order_relaxed)) < total;) {
            if (g->ks > 1) {
                depth_part(g, pa, pb, it);
                continue;
            }
            int64_t p = it / ntiles, t = it % ntiles;
            int64_t i0 = t / g->tn * g->mb, j0 = t % g->tn * g->nb;
            packed_tile(g, pa, pb, p, i0, min64(g->mb, g->m - i0), j0, min64(g->nb, g->n - j0));
        }
    }
}

// Cache sizes, read once: a benign one-time detection like the kernel choice.
static int64_t l1_bytes = 32 << 10, l2_bytes = 1 << 20;
static pthread_once_t caches_once = PTHREAD_ONCE_INIT;
static void read_caches(void) {
    long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l1 >= (16 << 10) && l1 <= (1 << 20)) l1_bytes = l1;
    if (l2 >= (128 << 10) && l2 <= (64 << 20)) l2_bytes = l2;
}

int64_t gemm_l2_bytes(void) {
    pthread_once(&caches_once, read_caches);
    return l2_bytes;
}

// KC: a B micro-panel (KC x NR) fills two thirds of L1 (the A micro-panel,
// MR x KC, is half that size). NC: the B block (KC x NC) fills half of L2.
// MC: the A block (MC x KC) fills half of L2 as well; with the inner loops
// as they are it is only packing granularity. Measured as a ratio to BLIS in
// the same run (1 thread, avx512, L1 48 KiB, L2 2 MiB, a busy machine): KC
// 192 / 256 / 384 gave 1.38 / 1.93 / 1.63x at n = 2048 and 1.51 / 1.46 /
// 1.47x at n = 512 (with jr outside ir, before the loops were swapped); NC
// 1024 / 2048 / 4096 were within the noise; on 800x64x25088 KC 128 to 1024
// and MC 112 all came within 1.0-1.25x of BLIS, the noise again.
void gemm_blocks(const GemmKern *kn, int64_t *mc, int64_t *kc, int64_t *nc) {
    pthread_once(&caches_once, read_caches);
    int64_t k = l1_bytes * 2 / 3 / (4 * kn->nr) / 16 * 16;
    *kc = k < 64 ? 64 : k > 384 ? 384 : k;
    int64_t m = l2_bytes / 2 / (4 * *kc) / kn->mr * kn->mr;
    *mc = m < kn->mr ? kn->mr : m;
    int64_t n = l2_bytes / 2 / (4 * *kc) / kn->nr * kn->nr;
    *nc = n < kn->nr ? kn->nr : n;
}

// KC for a narrow B of nb columns read against rows of A in place.
static int64_t deep_kc(const GemmKern *kn, int64_t nb) { return l2_bytes / 4 / (4 * round_up(nb, kn->nr)); }

// KC for a deep product into two micro-panels of columns (a convolution's kernel
// gradient: 800 taps x 64 channels over 25088 pixels) with A packed or read as
// taps: B's whole KC x nb block stays in L1 while A's micro-panels pass, as one
// panel does at gemm_blocks' KC. With AVX-512 (14 x 32, 48 KiB L1: KC 128, not
// 256), alternating: the CNN's taps in place 14.1-14.8 against 15.0-15.6 ms
// (rt_gemm_f32_win, best of 30, three runs), in its step 13.2-14.6 against
// 14.0-15.6 ms at one thread (nine) and the same at two; the product on the
// materialized matrix 109-112 GFLOP/s either way. AVX2's 6 x 16 kernel keeps
// its KC (four panels; KC 112 measured the same as 320). A rule of the shape
// alone: both paths take it, and their sums stay equal to the bit.
static int64_t narrow_kc(int64_t nb, int64_t kc) {
    int64_t k = l1_bytes * 2 / 3 / (4 * nb) / 16 * 16;
    return k < 64 ? 64 : k < kc ? k : kc;
}

// The loop order. With A's micro-panel in L1 (the order above), each k step
// of the micro-kernel loads a row of B's panel from L2: nr floats per mr*nr
// multiply-adds. The other way round (BLIS's), it loads a row of A's, mr
// floats. For AVX2's 6 x 16 kernel that is 64 bytes against 24 per 6 cycles,
// and on the AMD EPYC's (Zen 3) 512 KiB L2 the first order stays at 0.75-0.9x
// BLIS for n >= 1024, where the second reaches 0.95-1.0x (interleaved runs,
// best of 21-31 each: n = 2048 0.79 -> 1.01, 1024 0.89 -> 0.97, 128x1024x3136
// 1.02 -> 1.15). It loses where B is narrow (n = 64 and 128: 0.99 -> 0.62,
// 1.09 -> 0.90), and where k fits one KC panel C is written once either way.
// So a kernel that asks for it (AVX2, on every L2) takes the second for tiles
// of at least this many columns, k of a whole KC and some rows. The A block is
// then packed (it stays in L2 while B's panels pass), and B's block is
// thousands of columns wide, as BLIS's is, kept in L3: a narrow one would
// repack A once per NC columns (2048: 0.92 at NC 480, 1.01 at 4096). KC is the
// same in both orders, so the sums, and the bits, are too.
//
// The AVX-512 kernel's 14 x 32 asks for it where L2 is under 2 MiB (its
// b_stays_l2). On the Xeon (2 MiB L2, 48 KiB L1) it measured no slower in the
// first order. On an AMD EPYC with AVX-512 (Zen 4: 1 MiB L2, 32 KiB L1;
// 2026-12-06, gemm_kernels, best of 5 alternating with BLIS) the first order
// held n = 1024 and 2048 at 0.74-0.78x BLIS, whatever the KC (160 to 512), and
// the second took them to 0.93-0.94x at one thread (most of the first order's
// loss was A's rows read in place 4 and 8 KiB apart, crowding one L1 set:
// packed, rows_crowd_l1, it gives 0.91x; the second order with wide_kc's KC,
// 0.96-0.97x, and 0.96x of BLIS alone at two threads); the products of the
// training steps do not reach the rule (their k is under KC, or their tiles
// are narrower). The rows: at least MC, or B_STAYS_COLS where MC is more (812
// there), so that the two 512-row tiles of n = 1024 at two threads take it:
// 159 -> 200 GFLOP/s (BLIS 187 alone), where 256-row tiles (n = 512) lost,
// 211 -> 196.
//
// An epilogue runs on each block of C once it is final. In the first order a
// block is NC columns wide, and NC is a few hundred where L2 is small (192 on
// the AMD EPYC's 512 KiB): an optimizer update fused into a weight gradient's
// epilogue then walks its weights and state in 768-byte pieces of rows 4 KiB
// apart, 4 such streams per row for Adam, and runs at a fraction of the
// memory's speed (an Adam step over 3136 x 1024 in strips of 192 columns: 2.3x
// the time of one pass over whole rows). So a product whose tiles are wider
// than NC and that has an epilogue takes the second order too, its blocks the
// tile's whole width. Measured with C hooks (interleaved, best of 21): the CNN's
// 3136x1024x128 weight gradient with Adam 35 -> 20 ms, with SGD 19 -> 13 ms;
// the MLP's 784x512x128 with Adam 3.5 -> 2.9 ms; the forward products with a
// bias and ReLU written to new buffers 0.95-1.09x, within the noise.
#define B_STAYS_COLS 512
#define B_STAYS_NC 4096

static int64_t b_stays_rows(const GemmKern *kn, int64_t mc) {
    return l2_bytes < kn->b_stays_l2 ? min64(mc, B_STAYS_COLS) : 0;
}

int64_t gemm_b_stays_rows(const GemmKern *kn) {
    int64_t mc, kc, nc;
    gemm_blocks(kn, &mc, &kc, &nc);
    return b_stays_rows(kn, mc);
}

// KC of a product wide and deep enough for BLIS's order (b_stays_rows' kernels
// and L2s, at least B_STAYS_COLS columns and a KC of depth): at least WIDE_KC,
// up to B's micro-panel filling the whole of L1 (the A micro-panels pass
// through it from L2). The AVX-512 kernel's gemm_blocks KC on a 32 KiB L1 is
// 160, and C was read and written once per 160 of k; BLIS's (its zen3 6 x 16
// kernel on that machine, Zen 4) is 256. There, alternating with BLIS (1
// thread, gemm_kernels, three runs): n = 1024 0.92-0.94 -> 0.96-0.97x, 2048
// 0.92-0.93 -> 0.96-0.98x, 512 +3%; at two threads (rt_gemm_f32 alone, two
// runs) 1024 199 -> 208 and 2048 202 -> 209 GFLOP/s; the training steps'
// products with 512 or more columns (128x512x784, 128x512x512 and with B^T,
// 128x1024x3136, 128x3136x1024 B^T) within 1% either way. A rule of the
// problem's n and k, never of its rows or tiles: a row's bits do not depend
// on its batch (test_runtime). Where gemm_blocks' KC is already 256 or more
// (AVX2; AVX-512 on a 48 KiB L1) nothing changes.
#define WIDE_KC 256

static int64_t wide_kc(const GemmKern *kn, int64_t n, int64_t k) {
    int64_t mc, kc, nc;
    gemm_blocks(kn, &mc, &kc, &nc);
    int64_t wide = min64(WIDE_KC, l1_bytes / (4 * kn->nr) / 16 * 16);
    return b_stays_rows(kn, mc) && n >= B_STAYS_COLS && k >= kc && wide > kc ? wide : 0;
}

// A's rows go a micro-panel at a time (read in place, or a window's pixels).
static int rows_by_panel(const Gemm *g) { return g->direct_a || (g->win && !g->win->taps_rows); }

// A deep product into at most two micro-panels of columns whose A is packed
// (or read as taps): a kernel gradient.
static int narrow_deep(const Gemm *g, int64_t kc) {
    int64_t nr = g->kern->nr;
    return !rows_by_panel(g) && g->n > nr && g->n <= 2 * nr && g->k >= 16 * kc;
}

// Whether the mr rows of a row-major A, a_rs floats apart, read in place, would
// crowd one set of L1 (64 sets of 64-byte lines: addresses 4 KiB apart share
// one) beyond its 8 ways. Each k step reads all mr rows at one column, so
// with AVX-512's 14 rows 4 KiB apart (k = 1024) every step missed L1: on an
// AMD EPYC with AVX-512 (Zen 4, 32 KiB 8-way L1), gemm_kernels, 1 thread:
// 128x3136x1024 80 GFLOP/s, k = 1000, 1008 and 1040 99-102 (BLIS 101-108).
// Packed, those rows are adjacent (block_sizes); the bits are the same.
#define L1_WAYS 8
static int rows_crowd_l1(int mr, int64_t a_rs) {
    int on_set[64] = {0}, most = 0;
    for (int i = 0; i < mr; i++) {
        int set = (int)((uint64_t)i * (uint64_t)a_rs * sizeof(float) % 4096 / 64);
        if (++on_set[set] > most) most = on_set[set];
    }
    return most > L1_WAYS;
}

// No bigger than the tile needs: small products pack small buffers.
static void block_sizes(Gemm *g) {
    const GemmKern *kn = g->kern;
    int64_t mc, kc, nc;
    gemm_blocks(kn, &mc, &kc, &nc);
    g->direct_a = !g->win && g->a_cs == 1;
    // A product of at most one micro-panel of rows (a batch of one) reads each
    // value of B once: packing B would copy all of it to use it once. A narrow
    // product run transposed (narrow_transposed: B is the caller's x in x^T @ dy)
    // reads it twice, the second time from cache. With the copy-out along C's
    // rows (micro), logreg's 784x10x64 weight gradient with AVX2, interleaved
    // in one process: median 41.8 -> 29.1 us in one run, 7-10% in three later.
    // A B whose rows are one whole micro-panel, on cache lines as a packed one is
    // (the CNN's first weight gradient against its 32 channels with AVX-512), is
    // that packed panel already: copying it only costs. 25x32x100352 with A^T
    // (gemm_kernels, 64-byte aligned operands): 72-77 -> 98-101 GFLOP/s; other
    // shapes unchanged. Rows astride cache lines lost 4% (4096x32x1024).
    // So is a B whose rows are whole panels, nb floats on whole cache lines,
    // against a deep product's few rows (a kernel gradient into two panels of
    // columns): each KC block of B meets the rows once and is gone. The CNN's
    // first kernel gradient with AVX2 (its 32 channels are two 16-column
    // panels), alternating: 2.96 -> 2.57 ms, with its taps in place as well
    // (win_channels_last) 2.3 ms; in its step 4.2-4.3 -> 3.7-3.8 ms.
    int whole_lines = g->b_rs == g->nb && g->nb % kn->nr == 0 && g->b_rs % (RT_ALIGN / 4) == 0;
    int packed_already = (g->b_rs == kn->nr || (narrow_deep(g, kc) && whole_lines)) && (uintptr_t)g->b % RT_ALIGN == 0;
    g->direct_b = g->b_cs == 1 && g->b_rs > 0 && (g->m <= kn->mr * (g->transposed ? 2 : 1) || packed_already);
    int strips = g->epi && round_up(g->nb, kn->nr) > nc;   // the hook would get rows cut into NC-wide strips
    int64_t rows = b_stays_rows(kn, mc);
    g->b_stays = !g->win && !g->direct_b &&
                 (strips || (rows && g->k >= kc && g->nb >= B_STAYS_COLS && g->mb >= rows));
    if (g->b_stays) {
        g->direct_a = 0;
        nc = B_STAYS_NC;
    }
    if (g->kc_wide) kc = g->kc_wide;
    // Rows of windows go a micro-panel at a time, as a row-major A does, with
    // the same KC, so the sums are the materialized matrix's to the bit. A
    // narrow B is the product's, not the tile's: at several threads the tiles'
    // columns depend on the rows (plan_tiles), and a row's KC must not (with
    // the tile's, 125 rows of a 95-column product at 3 threads took another
    // KC than each row alone, and other bits).
    int by_panel = rows_by_panel(g);
    int64_t deep = deep_kc(kn, g->n);
    if (by_panel && g->n <= NARROW_B_PANELS * kn->nr && deep > kc) kc = deep;
    if (narrow_deep(g, kc)) kc = narrow_kc(round_up(g->n, kn->nr), kc);
    if (g->kc_keep) kc = g->kc_keep;
    g->kc = min64(kc, g->k > 0 ? g->k : 1);
    // Rows that would crowd L1 are packed; not against a narrow B, whose KC
    // (above) follows from reading them in place.
    if (g->direct_a && g->n > NARROW_B_PANELS * kn->nr && rows_crowd_l1((int)min64(kn->mr, g->mb), g->a_rs)) {
        g->direct_a = 0;
        by_panel = rows_by_panel(g);
    }
    g->mc = min64(mc, round_up(g->mb, kn->mr));
    // Packed A: an MC x KC block, or only one (the last, partial) micro-panel.
    // (16 floats more: the window packers store whole vectors, past the last row.)
    g->a_pack = round_up((by_panel ? kn->mr : g->mc) * g->kc, 16) + 16;
    if (g->win && g->win->taps_in_place)   // the ones' panel and the pixels' offsets (block)
        g->a_pack = round_up(kn->mr * g->kc, 16) + 2 * g->kc + 16;
    g->nc = min64(nc, round_up(g->nb, kn->nr));
}

// C += the depth parts 1.. (in order, so a thread count repeats its bits), then
// the epilogue over the whole (small) product.
static void sum_parts(const Gemm *g) {
    float *c = g->c;
    for (int64_t q = 1; q < g->ks; q++) {
        const float *r = g->parts + (q - 1) * g->m * g->n;
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) c[i * g->c_rs + j * g->c_cs] += r[i * g->n + j];
    }
    finish(g, 0, 0, g->m, 0, g->n);
}

// The packed path after plan_tiles; 0 if the buffers could not be had. With
// a window operand, its scratch (win_setup) goes before the packing buffers.
static int packed(KRt *rt, Gemm *g, int64_t batch) {
    block_sizes(g);
    g->nbatch = batch;
    g->nslots = min64(rt_threads(rt), batch * g->tm * g->tn * g->ks);
    g->slot_floats = g->a_pack + round_up(g->kc * g->nc, 16);
    int64_t pre = g->win ? round_up(win_scratch_floats(g->win), 16) : 0, parts = (g->ks - 1) * g->m * g->n;
    size_t bytes = sizeof(float) * (size_t)(pre + g->slot_floats * g->nslots + parts);
    // Inside a parallel region (or with no context) the context's buffers may be in
    // use by another thread: this call gets its own.
    int own = !rt || rt_in_parallel();
    float *buf = own ? rt_alloc(bytes) : rt_gemm_workspace(rt, bytes);
    if (!buf) return 0;
    if (g->win) {
        win_setup(g->win, buf, g->kern, rt);
        g->a = g->win->x;
    }
    g->ws = buf + pre;
    g->parts = g->ws + g->slot_floats * g->nslots;
    _Atomic int64_t next = 0;
    g->next = &next;
    rt_parallel_for(rt, run_slots, g, g->nslots, 1);
    if (g->ks > 1) sum_parts(g);
    if (own) rt_free(buf);
    return 1;
}

// Swap the roles of A and B: C^T (n x m) = B^T (n x k) @ A^T (k x m).
static void transpose_problem(Gemm *g) {
    int64_t t;
    const void *p = g->a;
    g->a = g->b, g->b = p;
    t = g->m, g->m = g->n, g->n = t;
    t = g->a_batch, g->a_batch = g->b_batch, g->b_batch = t;
    t = g->a_rs, g->a_rs = g->b_cs, g->b_cs = t;
    t = g->a_cs, g->a_cs = g->b_rs, g->b_rs = t;
    t = g->c_rs, g->c_rs = g->c_cs, g->c_cs = t;
    g->transposed = 1;
}

// A product with fewer columns than a micro-tile is wide and whose A is stored
// transposed (a weight gradient x^T @ dy with few outputs) is cheaper as C^T =
// B^T A^T: the kernel's mr rows cover the few columns with less padding than
// its nr columns do, and A^T becomes a row-major B, packed by rows. Measured
// on logreg's 784x10x64 (x^T @ dlogits): 25 -> 17.5 us. A row-major A becomes
// a column-major B, which the kernel's packer transposes 8 x 8 in registers:
// worth it while A is small (logreg's 64x10x784, x @ W: 25.5 -> 17.4 us with
// AVX-512; 28-39 -> 21-26 us with AVX2 and a 512 KiB L2), not for a large one
// that is otherwise read in place (10000x10x784: 0.41 -> 0.51 ms), so only up
// to half of L2. Either way each element of C is the
// same chain of multiply-adds over the same KC panels (the swap keeps the
// problem's KC), so which way a product runs, which depends on its number of
// rows (a batch), never changes a bit of a row's result. 0: keep; else the
// KC the untransposed product runs with, for the swapped one to keep.
static int64_t narrow_transposed(const Gemm *g) {
    const GemmKern *kn = g->kern;
    pthread_once(&caches_once, read_caches);
    int a_trans = g->a_rs == 1 && g->a_cs != 1;
    int a_rows = g->a_cs == 1 && g->a_rs != 1 && kn->pack_b && g->m * g->k * 4 <= l2_bytes / 2;
    if (g->c_cs != 1 || !(a_trans || a_rows) || g->n >= kn->nr) return 0;
    if (round_up(g->n, kn->mr) * round_up(g->m, kn->nr) >= round_up(g->m, kn->mr) * round_up(g->n, kn->nr)) return 0;
    int64_t mc, kc, nc, deep = deep_kc(kn, g->n);
    gemm_blocks(kn, &mc, &kc, &nc);
    return a_rows && deep > kc ? deep : kc;   // block_sizes' KC: rows read in place against a narrow B go deep
}

int rt_gemm_f32_cols(void) {
    int kind = rt_gemm_kind_env();
    const GemmKern *kn = kind <= GEMM_KILN_C ? gemm_kern_pick(kind) : NULL;
    return kn ? kn->nr : 1;
}

// KILN_GEMM: kiln (or kiln-avx512, kiln-avx2, kiln-c), blis or loops; the default
// is kiln where the CPU has AVX2 and FMA, else blis when built with it, else loops.
int rt_gemm_kind_env(void) {
    static const char *names[] = {"kiln", "kiln-avx512", "kiln-avx2", "kiln-c", "blis", "loops"};
    const char *e = getenv("KILN_GEMM");
    for (int i = 0; e && i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(e, names[i])) return i;
    if (gemm_kern_pick(GEMM_KILN_AVX2)) return GEMM_KILN;
    return rt_have_blis() ? GEMM_BLIS : GEMM_LOOPS;
}

// Items [lo, hi) of batch * tm * tn tiles, product-major.
static void run_tiles(void *ctx, int64_t lo, int64_t hi) {
    const Gemm *g = ctx;
    for (int64_t it = lo; it < hi; it++) {
        int64_t p = it / (g->tm * g->tn), t = it % (g->tm * g->tn);
        int64_t i0 = t / g->tn * g->mb, j0 = t % g->tn * g->nb;
        int64_t mt = g->m - i0 < g->mb ? g->m - i0 : g->mb, nt = g->n - j0 < g->nb ? g->n - j0 : g->nb;
        tile(g, p, i0, mt, j0, nt);
        finish(g, p, i0, i0 + mt, j0, j0 + nt);
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

// What one unit of depth of an mb x nb tile costs, in multiply-adds: its
// multiply-adds rounded up to whole micro-tiles (mr x nr; 1 x 1 for BLIS and
// the loops), plus PACK_COST for each value packed (a row of A and a column of
// B per unit of depth). PACK_COST is what the CNN's first weight gradient
// measured (25 x 32 over 100352 pixels, AVX2, 1 thread: 2 ms of its 5 for 96M
// multiply-adds, 3 ms to pack 5.7M values).
#define PACK_COST 24
static double tile_cost(int64_t mb, int64_t nb, int64_t mr, int64_t nr) {
    return (double)round_up(mb, mr) * round_up(nb, nr) + PACK_COST * (double)(mb + nb);
}

// The tile grid: enough tiles that every pool thread gets the same number
// (batch * tiles a multiple of the thread count; for claimed tiles up to
// FINER times that, below), none below TILE_MIN_WORK,
// and each product cut into the tm x tn blocks that cost least (tile_cost),
// the squarest on a tie. Whole micro-tiles: cutting a 25 x 32 product's 32
// columns (one 32-wide AVX-512 micro-tile) in two would leave each thread the
// whole tile's work, where cutting its 25 rows halves it. Packing: a weight
// gradient of 3136 x 1024 (the CNN's dense layer, Adam in its epilogue) is cut
// into rows rather than into columns, which are 0.2% fewer micro-tiles: each
// thread packs half of A instead of all of it, and updates whole rows of the
// weights and their moments. At 2 threads, six runs each, alternating, it
// measured 9.3-11.0 against 10.5-13.2 ms, and the MLP's 784 x 512 one 1.0-1.6
// against 1.6-2.1 ms in five.
//
// Threads that cut C's contiguous lines between them run slower than the cost
// says, though each writes its own cache lines: at 2 threads (Xeon, AVX-512,
// kiln's 14 x 32 kernel, interleaved best of 6) the MLP's 512x512x128 weight
// gradient measured 241 GFLOP/s cut into columns against 284 into rows, and
// its 128x512x10 input gradient 80 against 141, where at one thread each
// half-product ran as fast either way; with Adam in the epilogue, which then
// walks half rows of the weights and both moments, 0.42 against 0.33 ms. So a
// cut that leaves C's lines whole is taken when it costs at most 11% more (the
// 128 x 512 products' whole-row cuts cost 10.2% more); the CNN's 128x3136x1024,
// 14% more, stays cut into columns, which measured 10% faster there.
#define WHOLE_LINES 1.11

// A product's work in multiply-adds, for the thread count it gets: its own,
// plus STREAM_COST for each value of an operand of half of L2 or more, which
// does not stay there from one call to the next and is read from L3 or
// memory every time (a smaller one, logreg's 200 KB x, must not: see above).
// That is what a matrix-vector product waits on: the MLP's inference at batch
// 1 (1 x 512 x 784 and 1 x 512 x 512, 0.4M and 0.26M multiply-adds) reads its
// 1.6 and 1 MB of weights in 0.10 ms on one thread and 0.05 ms on two (Xeon,
// kiln_harness, alternating runs). 25: one core streams about 15 GB/s from L3
// (3.75G floats/s) and does 95G multiply-adds/s.
#define STREAM_COST 25
static double tile_work(const Gemm *g) {
    pthread_once(&caches_once, read_caches);
    double k = g->k ? g->k : 1, work = g->m * g->n * k, big = l2_bytes / 2.0;
    int64_t size = g->f64 ? 8 : 4;
    if (g->m * k * size >= big) work += STREAM_COST * g->m * k;
    if (g->n * k * size >= big) work += STREAM_COST * g->n * k;
    return work;
}

// The tm that leaves C's contiguous lines uncut in a cut into per tiles (0: none).
static int64_t whole_tm(const Gemm *g, int64_t per) { return g->c_cs == 1 ? per : g->c_rs == 1 ? 1 : 0; }

// The cut of a product into per tiles (tm x per / tm): the one that costs
// least, the squarest on a tie, or the one that leaves C's lines whole if it
// costs at most WHOLE_LINES more. Its tm; *cost: one tile's (INFINITY: none).
static int64_t cut_tiles(const Gemm *g, int64_t per, int64_t mr, int64_t nr, double *cost) {
    int64_t tm = 1, whole = whole_tm(g, per);
    double least = INFINITY, best = INFINITY, whole_cost = INFINITY;
    for (int64_t d = 1; d <= per; d++) {
        if (per % d || d > g->m || per / d > g->n) continue;
        double c = tile_cost((g->m + d - 1) / d, (g->n + per / d - 1) / (per / d), mr, nr);
        double skew = fabs(log((double)g->m * per / ((double)g->n * d * d)));   // log(mb / nb)
        if (c < least || (c == least && skew < best)) { least = c; best = skew; tm = d; }
        if (d == whole) whole_cost = c;
    }
    if (whole_cost <= WHOLE_LINES * least) tm = whole, least = whole_cost;
    *cost = least;
    return tm;
}

// Finer tiles than threads, for run_slots' claiming: on a shared machine one
// core's speed comes and goes (the AMD EPYC VM's did, minute to minute), and
// a product dealt out evenly waits for the slowed thread. Up to FINER tiles
// per thread, where their packing (tile_cost) adds at most FINER_COST to the
// product's: the CNN's convolutions (25088 rows of 64 or 32 columns, the
// weights packed once per tile: 0.4% for 4 tiles per thread) are cut finer.
// Not the dense layers' products (128 rows: 11% for column tiles that each
// pack all of A), nor their weight gradients (1.4%), nor 2048^2 (2.3% by the
// cost, which measured 209-214 against 210-229 GFLOP/s at 2 threads: each row
// tile packs all of a B that does not stay in cache), nor a product of one
// micro-panel of rows (a batch of one, B read in place four panels at once).
// The CNN's step at 2 threads (Xeon, alternating, four each): 60.6-64.6
// against 64.7-67.3 ms while the VM was slow, 79-81.5 against 82-85.5 ms with
// another process on one core, 10 ms on and 10 ms off; the same (44 ms) quiet.
#define FINER 4
#define FINER_COST 1.01

static void plan_tiles(Gemm *g, int64_t batch, int threads, int64_t mr, int64_t nr, int claimed) {
    int64_t per = threads / gcd(batch, threads);   // tiles per product
    double most = tile_work(g) / TILE_MIN_WORK, cost;
    if (per > most) per = most > 1 ? (int64_t)most : 1;
    int64_t tm = cut_tiles(g, per, mr, nr, &cost), base = per;
    int whole = tm == whole_tm(g, per);
    claimed &= g->m > mr;   // a batch of one
    for (int64_t f = 2; claimed && threads > 1 && f <= FINER && batch * base * f <= FINER * threads && base * f <= most; f++) {
        double finer;
        int64_t d = cut_tiles(g, base * f, mr, nr, &finer);
        if (f * finer <= FINER_COST * cost && (!whole || d == whole_tm(g, base * f))) tm = d, per = base * f;   // whole lines stay whole
    }
    int64_t tn = per / tm < g->n ? per / tm : g->n;
    g->mb = (g->m + tm - 1) / tm;
    g->nb = (g->n + tn - 1) / tn;
    g->tm = (g->m + g->mb - 1) / g->mb;
    g->tn = (g->n + g->nb - 1) / g->nb;
}

// A deep product with few outputs cut into tiles leaves each thread packing
// all of one operand for its share of the other: the CNN's first weight
// gradient (25 taps x 32 channels over 100352 pixels) is cut into its 32
// columns, and both threads gathered every window of the image. Cutting its
// depth instead gives each thread a part of both, into its own copy of C,
// summed at the end (in order: a thread count still repeats its bits). It is
// taken where the parts cost (tile_cost) a tenth less than the tiles, and
// their copies of C stay in cache; of the examples' products only that one
// does (the next, 800 x 64 over 25088 pixels, comes to 0.98). At 2 threads that
// product measured 3.2-3.8 against 3.9-6.1 ms, four runs each, alternating.
// Tiles cut finer than the threads (plan_tiles' FINER) are compared as the
// share of one thread. The parts' sums differ in their last bits from the
// whole depth's, so a product whose rows may be a batch (rows_batch: a
// row-major A, or windows of pixels) never splits: a row's bits would depend
// on how many rows share it (at two threads, an evaluation's last batch of 96
// through the CNN's 1024 x 10 layer split, and a batch of 128 did not).
static void split_depth(Gemm *g, int64_t batch, int threads, int rows_batch) {
    g->ks = 1;
    pthread_once(&caches_once, read_caches);
    if (rows_batch || batch != 1 || threads < 2 || g->tm * g->tn < threads || g->k < 64 * threads ||
        g->m * g->n * threads * 4 > l2_bytes / 2)
        return;
    const GemmKern *kn = g->kern;
    double tile = tile_cost(g->mb, g->nb, kn->mr, kn->nr) * (double)(g->tm * g->tn) / threads;   // a thread's tiles
    double part = tile_cost(g->m, g->n, kn->mr, kn->nr) / threads + PACK_COST * (double)g->m * g->n * threads / g->k;
    if (part >= 0.9 * tile) return;
    g->ks = threads;
    g->tm = g->tn = 1, g->mb = g->m, g->nb = g->n;
}

// Small products (at most GEMM_SMALL_N columns, SMALL_K deep, SMALL_WORK
// multiply-adds; attention's per-head products) go whole to the kernel's small(): packing
// each one's A and B cost as much as its product (28 x 28 by 16: 35 GFLOP/s on
// a core with a peak of 233). A transposed B (scores = q k^T) is copied into
// rows first, a C stored transposed computes C^T. Products are dealt out
// whole, so a thread count changes no bit.
enum { SMALL_WORK = 32768, SMALL_K = 128, SMALL_GRAIN = 65536 };

typedef struct { const Gemm *g; const GemmKern *kn; } Small;

static void run_small(void *ctx, int64_t lo, int64_t hi) {
    const Small *sm = ctx;
    const Gemm *g = sm->g;
    float bt[SMALL_K * GEMM_SMALL_N];   // a B stored by columns, as rows
    const float *in_bt = NULL;          // the B copied there (a shared B: once)
    for (int64_t p = lo; p < hi; p++) {
        const float *a = (const float *)g->a + p * g->a_batch, *b = (const float *)g->b + p * g->b_batch;
        float *c = (float *)g->c + p * g->c_batch;
        int64_t ldb = g->b_rs;
        if (g->b_cs != 1) {
            if (b != in_bt)
                for (int64_t q = 0; q < g->k; q++)
                    for (int64_t j = 0; j < g->n; j++) bt[q * g->n + j] = b[q * g->b_rs + j * g->b_cs];
            in_bt = b;
            b = bt, ldb = g->n;
        }
        sm->kn->small(g->m, g->k, a, g->a_rs, g->a_cs, b, ldb, c, g->c_rs, (int)g->n, g->beta != 0);
        finish(g, p, 0, g->m, 0, g->n);
    }
}

static int small_product(KRt *rt, Gemm *g, int64_t batch, const GemmKern *kn) {
    // (a long k, a row of a batch-1 inference against many columns, keeps
    // row_tile's several chains per output)
    if (!kn->small || g->win || (g->beta != 0 && g->beta != 1) || g->k > SMALL_K || g->m * g->n * g->k > SMALL_WORK)
        return 0;
    Gemm t = *g;
    if (t.c_cs != 1) {   // C^T = B^T A^T
        if (t.c_rs != 1) return 0;
        transpose_problem(&t);
    }
    if (t.n > GEMM_SMALL_N) return 0;
    Small sm = {&t, kn};
    rt_parallel_for(rt, run_small, &sm, batch, SMALL_GRAIN / (t.m * t.n * t.k + 1) + 1);
    return 1;
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
    g->e_rs = g->c_rs, g->e_cs = g->c_cs;
    int kind = rt_gemm_kind(rt);
    if (!g->f64 && kind <= GEMM_KILN_C && (g->kern = gemm_kern_pick(kind))) {
        if (small_product(rt, g, batch, g->kern)) return;
        Gemm t = *g;
        int rows_batch = g->a_cs == 1;   // a row-major A: its rows may be a batch
        int64_t keep = t.win ? 0 : narrow_transposed(&t);
        if (!t.win && ((t.c_cs != 1 && t.c_rs == 1) || keep)) transpose_problem(&t);
        t.kc_keep = keep;
        t.kc_wide = wide_kc(t.kern, g->n, g->k);   // the untransposed problem's
        plan_tiles(&t, batch, rt_threads(rt), t.kern->mr, t.kern->nr, 1);
        split_depth(&t, batch, rt_threads(rt), rows_batch);
        if (packed(rt, &t, batch)) return;
    }
    g->blis = (g->f64 || kind != GEMM_LOOPS) && rt_have_blis() && g->k > 0 && blis_strides_ok(g->m, g->k, g->a_rs, g->a_cs) &&
              blis_strides_ok(g->k, g->n, g->b_rs, g->b_cs) && blis_strides_ok(g->m, g->n, g->c_rs, g->c_cs);
    plan_tiles(g, batch, rt_threads(rt), 1, 1, 0);   // dealt out (run_tiles): no finer
    rt_parallel_for(rt, run_tiles, g, batch * g->tm * g->tn, 1);
}

void rt_gemm_f32_epi(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, int64_t a_batch,
                     int64_t a_rs, int64_t a_cs, const float *b, int64_t b_batch, int64_t b_rs, int64_t b_cs, float *c,
                     int64_t c_batch, int64_t c_rs, int64_t c_cs, float beta, RtGemmEpilogue epi, void *ctx) {
    Gemm g = {.f64 = 0, .m = m, .n = n, .k = k, .a = a, .b = b, .c = c, .a_batch = a_batch, .a_rs = a_rs,
              .a_cs = a_cs, .b_batch = b_batch, .b_rs = b_rs, .b_cs = b_cs, .c_batch = c_batch, .c_rs = c_rs,
              .c_cs = c_cs, .beta = beta, .epi = epi, .epi_ctx = ctx};
    gemm(rt, &g, batch);
}

void rt_gemm_f64_epi(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k, const double *a, int64_t a_batch,
                     int64_t a_rs, int64_t a_cs, const double *b, int64_t b_batch, int64_t b_rs, int64_t b_cs,
                     double *c, int64_t c_batch, int64_t c_rs, int64_t c_cs, double beta, RtGemmEpilogue epi,
                     void *ctx) {
    Gemm g = {.f64 = 1, .m = m, .n = n, .k = k, .a = a, .b = b, .c = c, .a_batch = a_batch, .a_rs = a_rs,
              .a_cs = a_cs, .b_batch = b_batch, .b_rs = b_rs, .b_cs = b_cs, .c_batch = c_batch, .c_rs = c_rs,
              .c_cs = c_cs, .beta = beta, .epi = epi, .epi_ctx = ctx};
    gemm(rt, &g, batch);
}

void rt_gemm_f32(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, int64_t a_batch,
                 int64_t a_rs, int64_t a_cs, const float *b, int64_t b_batch, int64_t b_rs, int64_t b_cs, float *c,
                 int64_t c_batch, int64_t c_rs, int64_t c_cs, float beta) {
    rt_gemm_f32_epi(rt, batch, m, n, k, a, a_batch, a_rs, a_cs, b, b_batch, b_rs, b_cs, c, c_batch, c_rs, c_cs, beta,
                    NULL, NULL);
}

void rt_gemm_f64(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k, const double *a, int64_t a_batch,
                 int64_t a_rs, int64_t a_cs, const double *b, int64_t b_batch, int64_t b_rs, int64_t b_cs, double *c,
                 int64_t c_batch, int64_t c_rs, int64_t c_cs, double beta) {
    rt_gemm_f64_epi(rt, batch, m, n, k, a, a_batch, a_rs, a_cs, b, b_batch, b_rs, b_cs, c, c_batch, c_rs, c_cs, beta,
                    NULL, NULL);
}

// A window operand: packed from its image on Kiln's f32 path; the other paths
// (f64, BLIS, the loops, or no packing buffers) take the materialized matrix.
static void gemm_win(KRt *rt, Gemm *g, const void *x, const int64_t *geom, int taps_rows) {
    Win w;
    win_init(&w, x, geom, taps_rows);
    if (g->m != (taps_rows ? w.taps + w.ones : w.pixels) || g->k != (taps_rows ? w.pixels : w.taps)) abort();
    g->a = x, g->a_rs = g->a_cs = 0;
    unit_axes(g->k, g->n, &g->b_rs, &g->b_cs);
    unit_axes(g->m, g->n, &g->c_rs, &g->c_cs);
    g->e_rs = g->c_rs, g->e_cs = g->c_cs;
    int64_t px;
    if (win_is_matrix(&w, &px)) {   // [pixels, C] or its transpose, read where it is
        g->a_rs = taps_rows ? w.sc : px, g->a_cs = taps_rows ? px : w.sc;
        gemm(rt, g, 1);
        return;
    }
    int kind = rt_gemm_kind(rt);
    if (!g->f64 && kind <= GEMM_KILN_C && (g->kern = gemm_kern_pick(kind)) && g->kern->mr <= MAX_WIN_MR) {
        Gemm t = *g;
        t.win = &w;
        // The weights' gradient: the taps channels last (win_channels_last:
        // over more than one channel, or one whose taps are read in place), so
        // packing reads a run of channels per pixel instead of a few runs of KW
        // taps; the rows come out in that order, into a buffer, and go to the
        // caller's C by win_row_of.
        float *rows = taps_rows && win_channels_last(&w, g->kern) ? rt_alloc(sizeof(float) * (size_t)(g->m * g->n)) : NULL;
        w.hwc = rows != NULL;
        if (rows) {
            win_taps_in_place(&w, g->kern);
            t.c = rows, t.c_rs = t.e_rs = g->n, t.c_cs = t.e_cs = 1, t.beta = 0, t.epi = NULL;
        }
        if (!taps_rows) win_phases(&w, g->kern);
        // Kernel rows first: B's rows (taps) in the same order as the window's.
        float *b_rows = !taps_rows && win_rows_first(&w, g->kern) ? rt_alloc(sizeof(float) * (size_t)(g->k * g->n)) : NULL;
        w.rows_first = b_rows != NULL;
        if (b_rows) {
            const float *b = g->b;
            for (int64_t q = 0; q < g->k; q++) {
                const float *r = b + win_row_of(&w, q) * g->b_rs;
                for (int64_t j = 0; j < g->n; j++) b_rows[q * g->n + j] = r[j * g->b_cs];
            }
            t.b = b_rows, t.b_rs = g->n, t.b_cs = 1;
        }
        t.kc_wide = wide_kc(t.kern, g->n, g->k);   // as the materialized matrix's product has it
        plan_tiles(&t, 1, rt_threads(rt), t.kern->mr, t.kern->nr, 1);
        split_depth(&t, 1, rt_threads(rt), !taps_rows);   // the forward windows: pixels of a batch
        int done = packed(rt, &t, 1);
        if (done && rows) {
            float *c = g->c;
            for (int64_t q = 0; q < g->m; q++) {
                float *d = c + win_row_of(&w, q) * g->c_rs;
                const float *r = rows + q * g->n;
                for (int64_t j = 0; j < g->n; j++) d[j * g->c_cs] = g->beta == 0 ? r[j] : r[j] + (float)g->beta * d[j * g->c_cs];
            }
            finish(g, 0, 0, g->m, 0, g->n);
        }
        rt_free(rows);
        rt_free(b_rows);
        if (done) return;
        w.hwc = w.rows_first = w.taps_in_place = 0, w.phases = 1;
    }
    size_t esize = g->f64 ? sizeof(double) : sizeof(float);
    void *cols = rt_alloc(esize * (size_t)(w.pixels * (w.taps + w.ones)));
    if (!cols) abort();   // as any workspace the plan did not size: out of memory
    if (g->f64) win_materialize_f64(&w, cols);
    else win_materialize_f32(&w, cols);
    g->a = cols;
    g->a_rs = taps_rows ? 1 : w.taps, g->a_cs = taps_rows ? w.taps + w.ones : 1;
    gemm(rt, g, 1);
    rt_free(cols);
}

void rt_gemm_f32_win(KRt *rt, int64_t m, int64_t n, int64_t k, const float *x, const int64_t *geom, int taps_rows,
                     const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t c_rs, int64_t c_cs, float beta,
                     RtGemmEpilogue epi, void *ctx) {
    if (m <= 0 || n <= 0) return;
    Gemm g = {.f64 = 0, .m = m, .n = n, .k = k, .b = b, .c = c, .b_rs = b_rs, .b_cs = b_cs, .c_rs = c_rs,
              .c_cs = c_cs, .beta = beta, .epi = epi, .epi_ctx = ctx};
    gemm_win(rt, &g, x, geom, taps_rows);
}

void rt_gemm_f64_win(KRt *rt, int64_t m, int64_t n, int64_t k, const double *x, const int64_t *geom, int taps_rows,
                     const double *b, int64_t b_rs, int64_t b_cs, double *c, int64_t c_rs, int64_t c_cs, double beta,
                     RtGemmEpilogue epi, void *ctx) {
    if (m <= 0 || n <= 0) return;
    Gemm g = {.f64 = 1, .m = m, .n = n, .k = k, .b = b, .c = c, .b_rs = b_rs, .b_cs = b_cs, .c_rs = c_rs,
              .c_cs = c_cs, .beta = beta, .epi = epi, .epi_ctx = ctx};
    gemm_win(rt, &g, x, geom, taps_rows);
}
