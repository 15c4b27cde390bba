// wino.c: a convolution's window products, forward and the weights'
// gradient, by Winograd's minimal filtering (rt_gemm_f32_wino, rt.h).
//
// The window product computes each output from its KH*KW taps: KH*KW
// multiply-adds per output, input channel and output channel. F(m, r) (Lavin
// and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
// computes m outputs of an r-tap correlation from alpha = m + r - 1 inputs
// with alpha products, in a transformed domain; nested over both axes, a tile
// of mh x mw outputs is
//   Y = A_h^T [ sum_c (G_h w_oc G_w^T) .* (B^T d_c B) ] A_w
// where d_c is the tile's alpha x alpha window of channel c. Here alpha is
// the same on both axes, for any kernel of 2 to 5 taps a side: 6, with the
// points 0, 1, -1, 2, -2 and infinity (F(2, 5) takes 36 products per 4
// outputs against 100 for a 5x5 kernel, 2.8x fewer; F(4, 3) 36 per 16 against
// 144 for 3x3, 4x), or 8, with +-1/2 as well (F(4, 5): 64 per 16 against 400,
// 6.25x; F(6, 3): 5.1x), where its tiles take fewer products (wino_alpha):
// larger tiles overhang a small image further.
//
// For each of the 36 (or 64) frequencies the sum over channels is a product,
// [tiles, C] @ [C, O], and it runs on the GEMM's own micro-kernels (their
// rows entry: the transformed input read in place, the transformed kernel
// packed as B panels). Unfused, the transformed input and the products are
// 9x the image and 9x the output for F(2, 5) (the CNN's second layer would
// write and read 29 MB and 58 MB of them per product, costing about what the
// multiplies save); here they are made and used a block of tiles at a time,
// sized to stay in L2 between the input transform, the products and the
// output transform, and the blocks are shared out to the pool's threads.
// 8x8 tiles also move less of them: 4 values per output for F(4, 5), not 9.
// The weights' gradient is the adjoint: per block, dU[xi] += V[xi]^T dM[xi]
// with dM = A dY A^T, each thread its own dU, summed, then dK = G^T dU G.
//
// Accuracy: B^T's entries are multiples of 1/4, A^T's powers of 1, 2 and
// 1/2, G's fractions; the result is not the window product's bit for bit but
// agrees to a few f32 ulps of the sum of the terms' magnitudes (test_runtime
// measures it against f64 for every kernel size, on both tile sizes: up to
// 2.3e-6 of it, where 6x6 tiles alone reached 1.4e-6; a simulation in f32
// put F(7, 2) at 5.4e-6, which is why 2-tap axes keep 6x6 tiles).
#include "private.h"
#include "rt.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
// The runtime is built with -ffp-contract=off for philox.c; the transforms
// here may fuse their multiply-adds.
#pragma GCC optimize("fp-contract=fast")
#endif
#if defined(__GNUC__)
// The vector helpers below are static and inlined: no call crosses the ABI.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define MAX_WA 8   // alpha, the transformed tile's side: 6 or 8

typedef float v8 __attribute__((vector_size(8 * sizeof(float))));
typedef float v16 __attribute__((vector_size(16 * sizeof(float))));
// GCC builds (v8){f, f, ...} lane by lane: the constants are vectors already.
#define VEC8(f) {f, f, f, f, f, f, f, f}
#define VEC16(f) {f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f}
static const v8 v_zero = VEC8(0);

// One axis's transforms for an r-tap kernel: m = alpha - r + 1 outputs per tile.
typedef struct {
    int r, m;
    v8 g[MAX_WA][5];   // G, alpha x r: the kernel's transform (each entry in every lane)
} WinoAxis;

// The points, and infinity, the last row: 0, +-1, +-2 for alpha 6, and
// +-1/2 as well for 8 (the tile code's transforms are written for these).
static const double points[MAX_WA - 1] = {0, 1, -1, 2, -2, 0.5, -0.5};

// Toom-Cook (the correlation y_i = sum_k g_k d_{i+k} is the transpose of a
// product of polynomials): A^T[i][j] = p_j^i, G[j][k] = p_j^k / f_j with f_j =
// prod_{l != j} (p_j - p_l), which takes B^T's rows (the coefficients of
// prod_{l != j} (x - p_l)) to integers; infinity picks the highest power.
static void wino_axis(WinoAxis *a, int r, int wa) {
    a->r = r, a->m = wa - r + 1;
    memset(a->g, 0, sizeof a->g);
    for (int j = 0; j < wa - 1; j++) {
        double f = 1, p = 1;
        for (int l = 0; l < wa - 1; l++)
            if (l != j) f *= points[j] - points[l];
        for (int k = 0; k < r; k++, p *= points[j]) a->g[j][k] = v_zero + (float)(p / f);
    }
    a->g[wa - 1][r - 1] = v_zero + 1;
}

typedef struct Wino {
    const float *x;
    int wa, wa2;               // alpha and its square, the frequencies
    int64_t n, c, h, w, sn, sc, sh, sw, pt, pl, oh, ow, o;
    WinoAxis ah, aw;
    int64_t th, tw, tiles;     // tiles down and across one image, in all
    const float *b;
    int64_t b_rs, b_cs;
    float *y;
    int64_t y_rs;
    float beta;
    RtGemmEpilogue epi;
    void *epi_ctx;
    const GemmKern *kn;
    int64_t op, npan;          // O in whole micro-tiles (nr), and their panels
    int64_t bt;                // tiles per block, a multiple of mr
    float *u;                  // the transformed kernel: [wa2][npan][C][nr]
    float *ws;                 // per slot: V [bt][wa2][C], then M [bt][wa2][op]; with taps,
                               // dU [wa2][C][op] and the bias's sums [op] after them
    int64_t slot_floats, nslots;
    _Atomic int64_t next;      // the next block to take (forward)
    int taps, ones;            // the weights' gradient (rt.h's taps_rows), with the bias's row
    // The code for this CPU's kernel (8 lanes, or 16 with AVX-512), chosen once per call.
    void (*kernel_panel)(const struct Wino *q, int64_t jp, int64_t c);
    void (*block)(struct Wino *q, int64_t t0, float *v, float *m);
    void (*taps_block)(struct Wino *q, int64_t t0, float *v, float *g, float *du, float *bsum);
    void (*kernel_grad)(const struct Wino *q, int64_t c);
} Wino;

// The floats at the end of a slot of the weights' gradient: dU and the bias's sums.
static inline int64_t grad_floats(const Wino *q) { return (q->wa2 * q->c + 1) * q->op; }
// Slot s's dU (its bias's sums follow, wa2*C*op floats on).
static inline float *slot_du(const Wino *q, int64_t s) { return q->ws + (s + 1) * q->slot_floats - grad_floats(q); }

// ---- the kernel's transform: U[xi][c][o] = (G_h w_oc G_w^T)[xi] ----------------

// Each frequency's nr values go to U whole, from row (in L1): stored a group
// of 8 at a time, the 36 or 64 frequencies' lines, npan*C*nr floats apart
// (8 KiB on the CNN's second layer: one L1 set), were each written in pieces
// and evicted in between, the rest of the transform's time.
static inline __attribute__((always_inline)) void kernel_panel_body(const Wino *q, int64_t jp, int64_t c) {
    int kh = q->ah.r, kw = q->aw.r, nr = q->kn->nr;
    float row[MAX_WA * MAX_WA * 64];   // [wa2][nr], nr <= 64 (rt_gemm_f32_wino)
    for (int o0 = 0; o0 < nr; o0 += 8) {
        v8 g[5][5], t[MAX_WA][5];
        // A whole group of 8 outputs is built in registers: 8 scalar stores
        // read back as one vector missed store forwarding, half of the
        // transform's time (perf; the CNN's second layer at batch 1).
        int64_t o1 = jp * nr + o0, s = q->b_cs;
        for (int i = 0; i < kh; i++)
            for (int j = 0; j < kw; j++) {
                const float *p = q->b + ((c * kh + i) * kw + j) * q->b_rs + o1 * s;
                if (o1 + 8 <= q->o) {
                    g[i][j] = (v8){p[0], p[s], p[2 * s], p[3 * s], p[4 * s], p[5 * s], p[6 * s], p[7 * s]};
                    continue;
                }
                float l[8];
                for (int v = 0; v < 8; v++) l[v] = o1 + v < q->o ? p[v * s] : 0;
                memcpy(&g[i][j], l, sizeof l);
            }
        // MAX_WA independent sums side by side (G's rows past alpha are
        // zero): one sum at a time was a chain of dependent multiply-adds.
        // Each sum still adds its terms in the same order.
        for (int j = 0; j < kw; j++) {
            v8 acc[MAX_WA];
            _Pragma("GCC unroll 8") for (int a = 0; a < MAX_WA; a++) acc[a] = v_zero;
            for (int i = 0; i < kh; i++) {
                _Pragma("GCC unroll 8") for (int a = 0; a < MAX_WA; a++) acc[a] += q->ah.g[a][i] * g[i][j];
            }
            _Pragma("GCC unroll 8") for (int a = 0; a < MAX_WA; a++) t[a][j] = acc[a];
        }
        for (int a = 0; a < q->wa; a++) {
            v8 acc[MAX_WA];
            _Pragma("GCC unroll 8") for (int e = 0; e < MAX_WA; e++) acc[e] = v_zero;
            for (int j = 0; j < kw; j++) {
                _Pragma("GCC unroll 8") for (int e = 0; e < MAX_WA; e++) acc[e] += q->aw.g[e][j] * t[a][j];
            }
            _Pragma("GCC unroll 8") for (int e = 0; e < MAX_WA; e++)
                if (e < q->wa) memcpy(row + (a * q->wa + e) * nr + o0, &acc[e], sizeof acc[e]);
        }
    }
    for (int xi = 0; xi < q->wa2; xi++)
        for (int o0 = 0; o0 < nr; o0 += 8)   // fixed-size copies: inline moves, not a call each
            memcpy(q->u + ((xi * q->npan + jp) * q->c + c) * nr + o0, row + xi * nr + o0, sizeof(v8));
}

// ---- a block of tiles: input transform, products, output transform ------------

static inline void tile_at(const Wino *q, int64_t t, int64_t *n, int64_t *ty, int64_t *tx) {
    *n = t / (q->th * q->tw);
    *ty = t / q->tw % q->th;
    *tx = t % q->tw;
}

// The epilogue over the block's outputs: per band of tiles (one image's tile
// row), its output rows, one call for the whole band when the block has all
// of it (those rows are contiguous), else one per output row's segment.
static void block_epilogue(const Wino *q, int64_t t0, int64_t nt) {
    for (int64_t t = t0; t < t0 + nt;) {
        int64_t n, ty, tx;
        tile_at(q, t, &n, &ty, &tx);
        int64_t tx1 = tx + (t0 + nt - t) < q->tw ? tx + (t0 + nt - t) : q->tw;
        int64_t oy0 = ty * q->ah.m, oy1 = oy0 + q->ah.m < q->oh ? oy0 + q->ah.m : q->oh;
        int64_t ox0 = tx * q->aw.m, ox1 = tx1 * q->aw.m < q->ow ? tx1 * q->aw.m : q->ow;
        if (ox0 == 0 && ox1 == q->ow)
            q->epi(q->epi_ctx, (n * q->oh + oy0) * q->ow * q->y_rs, q->y_rs, (oy1 - oy0) * q->ow, q->o);
        else
            for (int64_t oy = oy0; oy < oy1; oy++)
                q->epi(q->epi_ctx, ((n * q->oh + oy) * q->ow + ox0) * q->y_rs, q->y_rs, ox1 - ox0, q->o);
        t += tx1 - tx;
    }
}

// The code per tile, 8 channels at a time and 16, on tiles of 6 and of 8 (wino_tile.h).
#define VT v8
#define VEC VEC8
#define VL 8
#define WA 6
#define T(name) name##_6_8
#include "wino_tile.h"
#undef WA
#undef T
#define WA 8
#define T(name) name##_8_8
#include "wino_tile.h"
#undef WA
#undef T
#undef VL
#undef VT
#undef VEC
#define VT v16
#define VEC VEC16
#define VL 16
#define WA 6
#define T(name) name##_6_16
#include "wino_tile.h"
#undef WA
#undef T
#define WA 8
#define T(name) name##_8_16
#include "wino_tile.h"
#undef WA
#undef T
#undef VL
#undef VT
#undef VEC

// Each compiled for its instruction set: AVX2 with 8 lanes; AVX-512 with 16
// (on the CNN's second layer, 8 lanes made the transforms as long as half
// the products).
#define BLOCK_ENTRIES(TARGET, SFX, W)                                                                              \
    TARGET static void block_6_##SFX(Wino *q, int64_t t0, float *v, float *m) { block_body_6_##W(q, t0, v, m); } \
    TARGET static void block_8_##SFX(Wino *q, int64_t t0, float *v, float *m) { block_body_8_##W(q, t0, v, m); } \
    TARGET static void taps_block_6_##SFX(Wino *q, int64_t t0, float *v, float *g, float *du, float *bsum) {     \
        taps_block_body_6_##W(q, t0, v, g, du, bsum);                                                            \
    }                                                                                                            \
    TARGET static void taps_block_8_##SFX(Wino *q, int64_t t0, float *v, float *g, float *du, float *bsum) {     \
        taps_block_body_8_##W(q, t0, v, g, du, bsum);                                                            \
    }
#ifdef __x86_64__
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx512vl,fma")))
AVX2 static void kernel_panel_avx2(const Wino *q, int64_t jp, int64_t c) { kernel_panel_body(q, jp, c); }
BLOCK_ENTRIES(AVX2, avx2, 8)
BLOCK_ENTRIES(AVX512, avx512, 16)
#endif
BLOCK_ENTRIES(, base, 8)
#undef BLOCK_ENTRIES
static void kernel_panel_base(const Wino *q, int64_t jp, int64_t c) { kernel_panel_body(q, jp, c); }

// The weights' gradient from dU (the kernel's transform's adjoint):
// dK[o][c][i][j] = sum over (a, e) of G_h[a][i] G_w[e][j] dU[a*6 + e][c][o],
// into C's row (c*KH + i)*KW + j, then the epilogue on channel c's rows.
static inline __attribute__((always_inline)) void kernel_grad_body(const Wino *q, int64_t c) {
    int kh = q->ah.r, kw = q->aw.r;
    const float *du = slot_du(q, 0);
    for (int64_t o0 = 0; o0 < q->o; o0 += 8) {
        int on = q->o - o0 < 8 ? (int)(q->o - o0) : 8;
        v8 f[MAX_WA * MAX_WA], t[5][MAX_WA];
        for (int xi = 0; xi < q->wa2; xi++) memcpy(&f[xi], du + (xi * q->c + c) * q->op + o0, sizeof f[xi]);
        for (int i = 0; i < kh; i++)
            for (int e = 0; e < q->wa; e++) {
                v8 s = v_zero;
                for (int a = 0; a < q->wa; a++) s += q->ah.g[a][i] * f[a * q->wa + e];
                t[i][e] = s;
            }
        for (int i = 0; i < kh; i++)
            for (int j = 0; j < kw; j++) {
                v8 s = v_zero;
                for (int e = 0; e < q->wa; e++) s += q->aw.g[e][j] * t[i][e];
                float *dst = q->y + ((c * kh + i) * kw + j) * q->y_rs + o0, l[8] = {0};
                if (q->beta != 0) {
                    memcpy(l, dst, sizeof(float) * (size_t)on);
                    for (int v = 0; v < on; v++) s[v] += q->beta * l[v];
                }
                memcpy(dst, &s, sizeof(float) * (size_t)on);
            }
    }
    if (q->epi) q->epi(q->epi_ctx, c * kh * kw * q->y_rs, q->y_rs, kh * kw, q->o);
}

#ifdef __x86_64__
AVX2 static void kernel_grad_avx2(const Wino *q, int64_t c) { kernel_grad_body(q, c); }
#endif
static void kernel_grad_base(const Wino *q, int64_t c) { kernel_grad_body(q, c); }

static void kernel_grad_items(void *ctx, int64_t lo, int64_t hi) {
    const Wino *q = ctx;
    for (int64_t c = lo; c < hi; c++) q->kernel_grad(q, c);
}

// The slots' dU and bias sums added into the first slot's, in order, a range of floats at a time.
static void sum_slots(void *ctx, int64_t lo, int64_t hi) {
    const Wino *q = ctx;
    float *d = slot_du(q, 0);
    for (int64_t s = 1; s < q->nslots; s++) {
        const float *src = slot_du(q, s);
        for (int64_t i = lo; i < hi; i++) d[i] += src[i];
    }
}

static void kernel_items(void *ctx, int64_t lo, int64_t hi) {
    const Wino *q = ctx;
    for (int64_t it = lo; it < hi; it++) q->kernel_panel(q, it / q->c, it % q->c);
}

// Slot s, in its own part of the workspace, takes blocks until none is left.
// The weights' gradient, whose slots sum their blocks, takes its own share of
// them in order instead (blocks [s*nb/nslots, (s+1)*nb/nslots)), so that a
// thread count repeats its bits.
static void run_slots(void *ctx, int64_t lo, int64_t hi) {
    Wino *q = ctx;
    int64_t nblocks = (q->tiles + q->bt - 1) / q->bt;
    for (int64_t s = lo; s < hi; s++) {
        float *v = q->ws + s * q->slot_floats, *m = v + q->wa2 * q->bt * q->c + q->kn->mr;
        if (!q->taps) {
            for (int64_t t0; (t0 = atomic_fetch_add(&q->next, 1) * q->bt) < q->tiles;) q->block(q, t0, v, m);
            continue;
        }
        float *du = slot_du(q, s);
        memset(du, 0, sizeof(float) * (size_t)grad_floats(q));
        for (int64_t b = s * nblocks / q->nslots; b < (s + 1) * nblocks / q->nslots; b++)
            q->taps_block(q, b * q->bt, v, m, du, q->ones ? du + q->wa2 * q->c * q->op : NULL);
    }
}

// A planar image (channels apart) copied channels last, [N, H, W, C], so that
// a tile's channels are one vector load: each pixel is read by 9 to 25 tiles
// (alpha^2 / m^2), and gathered a value at a time, the CNN's second layer at
// batch 128 took 61 ms to train against 45 for the window product.
typedef struct { const Wino *q; float *dst; } ChannelsLast;

static void channels_last_rows(void *ctx, int64_t lo, int64_t hi) {
    const ChannelsLast *cl = ctx;
    const Wino *q = cl->q;
    for (int64_t r = lo; r < hi; r++) {   // image row r = n*H + y
        int64_t n = r / q->h, y = r % q->h;
        const float *src = q->x + n * q->sn + y * q->sh;
        float *d = cl->dst + r * q->w * q->c;
        for (int64_t c = 0; c < q->c; c++)
            for (int64_t x = 0; x < q->w; x++) d[x * q->c + c] = src[c * q->sc + x * q->sw];
    }
}

// The tile's side: 8 where its tiles take at most 0.8 of alpha 6's products,
// counting the tiles that overhang the output, and the kernel is 3 taps a
// side or more (F(7, 2)'s error is the largest, up to 5e-6 of the terms'
// magnitudes). passes/lower.c's winograd_alpha is the same rule: it names the
// F(m, r) a product gets.
static int wino_alpha(int64_t kh, int64_t kw, int64_t oh, int64_t ow) {
    if (kh < 3 || kw < 3 || kh > 5 || kw > 5) return 6;   // (wino_applies has refused larger ones)
    double t6 = 36.0 * ((oh + 6 - kh) / (7 - kh)) * ((ow + 6 - kw) / (7 - kw));
    double t8 = 64.0 * ((oh + 8 - kh) / (9 - kh)) * ((ow + 8 - kw) / (9 - kw));
    return t8 <= 0.8 * t6 ? 8 : 6;
}

// F(m, r) here: 2 to 5 taps a side, at stride 1 and no dilation.
static int wino_applies(int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t dil_h, int64_t dil_w) {
    return kh >= 2 && kh <= 5 && kw >= 2 && kw <= 5 && stride_h == 1 && stride_w == 1 && dil_h == 1 && dil_w == 1;
}

void rt_gemm_f32_wino(KRt *rt, int64_t m, int64_t n, int64_t k, const float *x, const int64_t *geom, int taps_rows,
                      const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t c_rs, int64_t c_cs, float beta,
                      RtGemmEpilogue epi, void *ctx) {
    if (m <= 0 || n <= 0) return;
    int kind = rt_gemm_kind(rt);
    Wino q = {.x = x, .n = geom[RT_WIN_N], .c = geom[RT_WIN_C], .h = geom[RT_WIN_H], .w = geom[RT_WIN_W],
              .sn = geom[RT_WIN_SN], .sc = geom[RT_WIN_SC], .sh = geom[RT_WIN_SH], .sw = geom[RT_WIN_SW],
              .pt = geom[RT_WIN_PAD_T], .pl = geom[RT_WIN_PAD_L], .oh = geom[RT_WIN_OH], .ow = geom[RT_WIN_OW],
              .o = n, .b = b, .b_rs = b_rs, .b_cs = b_cs, .y = c, .y_rs = c_rs, .beta = beta, .epi = epi,
              .epi_ctx = ctx, .taps = taps_rows != 0, .ones = taps_rows == RT_WIN_TAPS_ONES};
    q.kn = kind <= GEMM_KILN_C ? gemm_kern_pick(kind) : NULL;
    int64_t taps = q.c * geom[RT_WIN_KH] * geom[RT_WIN_KW], pixels = q.n * q.oh * q.ow;
    // Anything else is the window product (the fallback is exact, only slower).
    if (!q.kn || c_cs != 1 || q.kn->nr % 8 || q.kn->nr > 64 || m != (q.taps ? taps + q.ones : pixels) ||
        k != (q.taps ? pixels : taps) ||
        !wino_applies(geom[RT_WIN_KH], geom[RT_WIN_KW], geom[RT_WIN_STRIDE_H], geom[RT_WIN_STRIDE_W],
                      geom[RT_WIN_DIL_H], geom[RT_WIN_DIL_W])) {
        rt_gemm_f32_win(rt, m, n, k, x, geom, taps_rows, b, b_rs, b_cs, c, c_rs, c_cs, beta, epi, ctx);
        return;
    }
    q.wa = wino_alpha(geom[RT_WIN_KH], geom[RT_WIN_KW], q.oh, q.ow), q.wa2 = q.wa * q.wa;
    int big = q.wa == 8;
    q.kernel_panel = kernel_panel_base, q.kernel_grad = kernel_grad_base;
    q.block = big ? block_8_base : block_6_base, q.taps_block = big ? taps_block_8_base : taps_block_6_base;
#ifdef __x86_64__
    if (q.kn->vec != WIN_VEC_NONE) {   // the AVX2 and AVX-512 kernels' CPUs
        int wide = q.kn->vec == WIN_VEC_AVX512;
        q.kernel_panel = kernel_panel_avx2, q.kernel_grad = kernel_grad_avx2;
        q.block = wide ? (big ? block_8_avx512 : block_6_avx512) : (big ? block_8_avx2 : block_6_avx2);
        q.taps_block = wide ? (big ? taps_block_8_avx512 : taps_block_6_avx512)
                            : (big ? taps_block_8_avx2 : taps_block_6_avx2);
    }
#endif
    wino_axis(&q.ah, (int)geom[RT_WIN_KH], q.wa);
    wino_axis(&q.aw, (int)geom[RT_WIN_KW], q.wa);
    q.th = (q.oh + q.ah.m - 1) / q.ah.m, q.tw = (q.ow + q.aw.m - 1) / q.aw.m;
    q.tiles = q.n * q.th * q.tw;
    int64_t mr = q.kn->mr, nr = q.kn->nr, threads = rt_threads(rt);
    q.op = round_up(q.o, nr), q.npan = q.op / nr;
    // A block's V and M (or dM) fill half of L2, with a slot's dU; at least
    // four blocks per thread where there are enough tiles, for the pool's
    // threads to share evenly.
    int64_t per_tile = q.wa2 * (q.c + q.op) * (int64_t)sizeof(float), dU = q.taps ? grad_floats(&q) : 0;
    q.bt = (gemm_l2_bytes() / 2 - dU * (int64_t)sizeof(float)) / per_tile / mr * mr;
    int64_t even = round_up((q.tiles + 4 * threads - 1) / (4 * threads), mr);
    if (q.bt > even) q.bt = even;
    if (q.bt < mr) q.bt = mr;
    int64_t nblocks = (q.tiles + q.bt - 1) / q.bt;
    q.nslots = threads < nblocks ? threads : nblocks;
    // (mr floats between V and M: the last panel of channels reads that far past V.)
    q.slot_floats = round_up(q.wa2 * q.bt * q.c + mr + q.wa2 * q.bt * q.op + dU, 16);
    int64_t u_floats = q.taps ? 0 : round_up(q.wa2 * q.op * q.c, 16);
    int64_t cl_floats = q.sc != 1 && q.c > 1 ? round_up(q.n * q.h * q.w * q.c, 16) : 0;
    size_t bytes = sizeof(float) * (size_t)(u_floats + cl_floats + q.nslots * q.slot_floats);
    int own = !rt || rt_in_parallel();
    float *buf = own ? rt_alloc(bytes) : rt_gemm_workspace(rt, bytes);
    if (!buf) abort();   // as any workspace the plan did not size: out of memory
    q.u = buf, q.ws = buf + u_floats + cl_floats;
    if (cl_floats) {
        ChannelsLast cl = {&q, buf + u_floats};
        rt_parallel_for(rt, channels_last_rows, &cl, q.n * q.h, 4);
        q.x = cl.dst, q.sc = 1, q.sw = q.c, q.sh = q.w * q.c, q.sn = q.h * q.w * q.c;
    }
    if (!q.taps) rt_parallel_for(rt, kernel_items, &q, q.npan * q.c, 16);
    atomic_init(&q.next, 0);
    rt_parallel_for(rt, run_slots, &q, q.nslots, 1);
    if (q.taps) {   // the slots' sums, then the kernel's gradient (and the bias's row)
        if (q.nslots > 1) rt_parallel_for(rt, sum_slots, &q, grad_floats(&q), 4096);
        rt_parallel_for(rt, kernel_grad_items, &q, q.c, 1);
        if (q.ones) {
            const float *bsum = slot_du(&q, 0) + q.wa2 * q.c * q.op;
            float *row = q.y + taps * q.y_rs;
            for (int64_t o = 0; o < q.o; o++) row[o] = bsum[o] + (beta != 0 ? beta * row[o] : 0);
            if (epi) epi(ctx, taps * q.y_rs, q.y_rs, 1, q.o);
        }
    }
    if (own) rt_free(buf);
}
