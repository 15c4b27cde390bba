// gemm_kern.c: the f32 micro-kernels of Kiln's packed GEMM (gemm.c drives them).
//
// A micro-kernel computes one MR x NR block of C from a packed micro-panel of A
// (a[p*MR + i], MR rows interleaved along k; or a[p*ak + i], MR columns of a
// column-major A read in place; the rows variant reads MR rows of a row-major
// A, a[i*lda + p]; the taps variant a[off[p] + i], a convolution's window matrix
// read from its image, MR pixels of an image row per tap; AVX2's pixels variant
// rowp[i][off[p]], MR pixels anywhere) and one of B (b[p*ldb + j]:
// packed, ldb = NR, or a row-major B read in place): for
// each p it loads a row of NR values of B into vector registers, broadcasts
// each of the MR values of A and does MR*NR/W fused multiply-adds into
// accumulators that stay in registers for the whole k loop. C is row-major
// (row i at c + i*ldc, columns contiguous); acc = 0 stores the result without
// reading C (it may hold NaN), acc = 1 adds it to C.
//
// Each kernel is compiled for its instruction set with a target attribute, so
// the runtime still builds with the baseline x86-64 flags and runs anywhere;
// gemm_kern_pick chooses one once per runtime context from cpuid.
#include "private.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_X86 1
#include <immintrin.h>
#endif

// The portable kernel: plain C that any compiler vectorizes a little. Used on
// CPUs without AVX2+FMA and by the tests on every machine.
#define C_MR 4
#define C_NR 16
static void body_c(int64_t k, const float *a, int64_t ak, int64_t ai, const float *b, int64_t ldb, float *c,
                   int64_t ldc, int acc) {
    float t[C_MR][C_NR] = {{0}};
    for (int64_t p = 0; p < k; p++)
        for (int i = 0; i < C_MR; i++)
            for (int j = 0; j < C_NR; j++)
                t[i][j] += a[p * ak + i * ai] * b[p * ldb + j];
    for (int i = 0; i < C_MR; i++)
        for (int j = 0; j < C_NR; j++)
            c[i * ldc + j] = acc ? c[i * ldc + j] + t[i][j] : t[i][j];
}
static void kern_c(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c, int64_t ldc,
                   int acc) {
    body_c(k, a, ak, 1, b, ldb, c, ldc, acc);
}
static void rows_c(int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                   int acc) {
    body_c(k, a, 1, lda, b, ldb, c, ldc, acc);
}

#ifdef KILN_X86
// A B read in place (ldb > nr: the caller's row-major B against a product of
// at most one panel of rows, a batch of a few) gives a line or two of a row
// thousands of floats long per k, a new stretch of memory each time, which
// the prefetchers do not follow: the kernels prefetch the row B_AHEAD on.
// (A B of two whole panels read in place, a kernel gradient's, is prefetched
// too, along its contiguous rows: harmless.)
// Alone (64 MiB swept between calls, one thread), 8x512x784 with AVX-512
// 0.34 -> 0.17 ms (BLIS 0.19), 4x1024x3136 1.85 -> 1.18 ms (BLIS 0.84); with
// AVX2 4x1024x3136 2.17 -> 1.62 ms (BLIS 0.85), 6x512x784 0.44 -> 0.27 ms
// (BLIS 0.16). 16 rows ahead did half as well; 64, the same as 32. A packed
// B (ldb == nr) streams through the panel and is not prefetched.
#define B_AHEAD 32
// The line of b[i], which may lie past B's end: an address, not a pointer
// formed out of bounds; a prefetch never faults.
#define prefetch_at(b, i) _mm_prefetch((const char *)((uintptr_t)(b) + (uintptr_t)(i) * sizeof(float)), _MM_HINT_T0)

// AVX-512: 14 rows x 32 columns, two zmm of B per k and 28 accumulators, 31
// of the 32 registers with the broadcast. Against 12 rows (24 accumulators),
// measured as a ratio to BLIS in the same run (1 thread, noisy machine): n =
// 1024 1.49x vs 1.19x, 784x512x128 1.72x vs 1.63x; fewer padded rows too for
// m = 25 and 784 (28 and 784 rows computed, against 36 and 792).
#define Z_MR 14
#define Z_NR 32
#define AVX512 __attribute__((target("avx512f,avx512vl,fma")))
// mr: Z_MR, or fewer for the last panel of a product whose rows are not a
// multiple of Z_MR (the tails, below).
static inline __attribute__((always_inline)) AVX512 void body_avx512(int64_t k, const float *a, int64_t ak, int64_t ai,
                                                                     const int64_t *off, const int mr, const float *b,
                                                                     int64_t ldb, float *c, int64_t ldc, int acc) {
    __m512 c0[Z_MR], c1[Z_MR];
#pragma GCC unroll 14
    for (int i = 0; i < mr; i++) {   // C's lines arrive while the k loop runs
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
        c0[i] = c1[i] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < k; p++) {
        __m512 b0 = _mm512_loadu_ps(b + p * ldb), b1 = _mm512_loadu_ps(b + p * ldb + 16);
        if (ldb != Z_NR) {
            prefetch_at(b, (p + B_AHEAD) * ldb);
            prefetch_at(b, (p + B_AHEAD) * ldb + 16);
        }
        const float *ap = off ? a + off[p] : a + p * ak;
#pragma GCC unroll 14
        for (int i = 0; i < mr; i++) {
            __m512 x = _mm512_set1_ps(ap[i * ai]);
            c0[i] = _mm512_fmadd_ps(x, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(x, b1, c1[i]);
        }
    }
#pragma GCC unroll 14
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (acc) {
            c0[i] = _mm512_add_ps(c0[i], _mm512_loadu_ps(ci));
            c1[i] = _mm512_add_ps(c1[i], _mm512_loadu_ps(ci + 16));
        }
        _mm512_storeu_ps(ci, c0[i]);
        _mm512_storeu_ps(ci + 16, c1[i]);
    }
}

// The three entries of a kernel (gemm.c's GemmKern: fn, rows, taps), each the
// body with its way of reading A and the full MR rows.
#define DEFINE_ENTRIES(TARGET, BODY, SFX, MR)                                                                   \
    TARGET static void kern_##SFX(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c,  \
                                  int64_t ldc, int acc) {                                                        \
        BODY(k, a, ak, 1, NULL, MR, b, ldb, c, ldc, acc);                                                        \
    }                                                                                                            \
    TARGET static void rows_##SFX(int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, \
                                  int64_t ldc, int acc) {                                                        \
        BODY(k, a, 1, lda, NULL, MR, b, ldb, c, ldc, acc);                                                       \
    }                                                                                                            \
    TARGET static void taps_##SFX(int64_t k, const float *a, const int64_t *off, const float *b, int64_t ldb,     \
                                  float *c, int64_t ldc, int acc) {                                              \
        if (!off) __builtin_unreachable(); /* folds the body's test of off */                                    \
        BODY(k, a, 0, 1, off, MR, b, ldb, c, ldc, acc);                                                          \
    }
DEFINE_ENTRIES(AVX512, body_avx512, avx512, Z_MR)

// The tails: the kernels for a panel of 1..13 rows, straight into C. The
// 14-row kernel would compute a whole panel there: a 128-row product (a
// mini-batch) is 9 panels and 2 rows, 140 rows' work for 128; a window
// matrix's panels end where an image row does (gemm.c), 11 + 11 + 10 pixels
// for a 32-pixel row. One tail per row count and way of reading A.
#define DEFINE_TAILS(TARGET, BODY, SFX, M)                                                                       \
    TARGET static void tail##M##_##SFX(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb,       \
                                       float *c, int64_t ldc, int acc) {                                         \
        BODY(k, a, ak, 1, NULL, M, b, ldb, c, ldc, acc);                                                         \
    }                                                                                                            \
    TARGET static void taps##M##_##SFX(int64_t k, const float *a, const int64_t *off, const float *b,            \
                                       int64_t ldb, float *c, int64_t ldc, int acc) {                            \
        if (!off) __builtin_unreachable(); /* folds the body's test of off */                                    \
        BODY(k, a, 0, 1, off, M, b, ldb, c, ldc, acc);                                                           \
    }
#define Z_TAILS(M) DEFINE_TAILS(AVX512, body_avx512, avx512, M)
Z_TAILS(1) Z_TAILS(2) Z_TAILS(3) Z_TAILS(4) Z_TAILS(5) Z_TAILS(6) Z_TAILS(7)
Z_TAILS(8) Z_TAILS(9) Z_TAILS(10) Z_TAILS(11) Z_TAILS(12) Z_TAILS(13)
#undef Z_TAILS
static const GemmTail tails_avx512[Z_MR] = {NULL, tail1_avx512, tail2_avx512, tail3_avx512, tail4_avx512,
                                            tail5_avx512, tail6_avx512, tail7_avx512, tail8_avx512, tail9_avx512,
                                            tail10_avx512, tail11_avx512, tail12_avx512, tail13_avx512};
static const GemmTapsTail taps_tails_avx512[Z_MR] = {NULL, taps1_avx512, taps2_avx512, taps3_avx512, taps4_avx512,
                                                     taps5_avx512, taps6_avx512, taps7_avx512, taps8_avx512,
                                                     taps9_avx512, taps10_avx512, taps11_avx512, taps12_avx512,
                                                     taps13_avx512};

// AVX2: 6 rows x 16 columns, two ymm of B per k and 12 accumulators (BLIS's
// haswell shape).
#define Y_MR 6
#define Y_NR 16
#define AVX2 __attribute__((target("avx2,fma")))
// rowp (the pixels entry): A's row i at rowp[i] + off[p], six row pointers
// held in registers (AVX-512's 14 would not fit), each broadcast one load as
// the contiguous taps' is. The whole taps entry, which with AVX2 only reads
// the weights' gradient's taps (a pixel's channels, a cache line per k apart),
// prefetches the line TAPS_AHEAD pixels on: the CNN's second kernel gradient
// 28.9 -> 28.2 and 27.9 -> 27.3 ms in its step (medians of 8 and 6). Not
// the tails: the first kernel gradient's 5-tap panels lost 2-3% with it; nor
// the forward products' taps (lines of the image), which lost 10% with it
// before they took the pixels entry.
#define TAPS_AHEAD 8
static inline __attribute__((always_inline)) AVX2 void body_avx2(int64_t k, const float *a, int64_t ak, int64_t ai,
                                                                 const int64_t *off, const float *const *rowp,
                                                                 const int mr, const float *b, int64_t ldb, float *c,
                                                                 int64_t ldc, int acc) {
    __m256 c0[Y_MR], c1[Y_MR];
    const float *row[Y_MR];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 8), _MM_HINT_T0);
        c0[i] = c1[i] = _mm256_setzero_ps();
        row[i] = rowp ? rowp[i] : NULL;
    }
    for (int64_t p = 0; p < k; p++) {
        __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);
        if (ldb != Y_NR) prefetch_at(b, (p + B_AHEAD) * ldb);
        const float *ap = off ? a + off[p] : a + p * ak;
        if (off && !rowp && mr == Y_MR)
            _mm_prefetch((const char *)(a + off[p + TAPS_AHEAD < k ? p + TAPS_AHEAD : p]), _MM_HINT_T0);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            __m256 x = _mm256_broadcast_ss(rowp ? row[i] + off[p] : ap + i * ai);
            c0[i] = _mm256_fmadd_ps(x, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(x, b1, c1[i]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (acc) {
            c0[i] = _mm256_add_ps(c0[i], _mm256_loadu_ps(ci));
            c1[i] = _mm256_add_ps(c1[i], _mm256_loadu_ps(ci + 8));
        }
        _mm256_storeu_ps(ci, c0[i]);
        _mm256_storeu_ps(ci + 8, c1[i]);
    }
}
// Packing a B panel: a row-major B's rows are copied with full-width moves (the
// baseline build's memcpy moves 16 bytes at a time); a column-major B, where a
// panel row is nr floats a column's length apart, goes 8 x 8 blocks at a time,
// 8 columns read along k and transposed in registers (one float at a time, it
// was a quarter of the time of 128x3136x1024 with B = W^T).
static inline __attribute__((always_inline)) AVX2 void transpose8(const float *s, int64_t cs, float *d, int64_t ld) {
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + cs), r2 = _mm256_loadu_ps(s + 2 * cs),
           r3 = _mm256_loadu_ps(s + 3 * cs), r4 = _mm256_loadu_ps(s + 4 * cs), r5 = _mm256_loadu_ps(s + 5 * cs),
           r6 = _mm256_loadu_ps(s + 6 * cs), r7 = _mm256_loadu_ps(s + 7 * cs);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// The column-major case for nr columns (a multiple of 8): eight columns at a
// time, each down its whole length, so that 8 streams run at once rather than
// nr, each line read whole before the next. With AVX-512 (32 columns; 1
// thread, gemm_kernels, three runs alternating) 128x3136x1024 with B^T 91-94
// -> 96-99 GFLOP/s, 128x512x512 105 -> 107; with AVX2 (16) the same.
static inline __attribute__((always_inline)) AVX2 void pack_cols(int nr, int64_t k, const float *b, int64_t cs,
                                                                 float *d) {
    int64_t k8 = k / 8 * 8;
    for (int j = 0; j < nr; j += 8)
        for (int64_t p = 0; p < k8; p += 8) transpose8(b + j * cs + p, cs, d + p * nr + j, nr);
    for (int64_t p = k8; p < k; p++)
        for (int j = 0; j < nr; j++) d[p * nr + j] = b[j * cs + p];
}

// np whole B panels of nr columns. A row-major B is walked along its rows, so
// its reads stream: a panel at a time, each load was a line or two of another
// row thousands of floats on, and packing 3136 x 1024 weights took longer than
// a 32-row product against them (AVX2, 32x1024x3136: 4.6 -> 3.1 ms; the CNN's
// 128x1024x3136, 11.5 -> 9.6 ms), with the target's full-width moves (memcpy's
// were 16 bytes). A column-major B is transposed a panel at a time, down its
// columns.
#define DEFINE_PACK_B(NAME, TARGET, NR, W, P)                                                        \
    TARGET static int NAME(int64_t k, int64_t np, const float *b, int64_t rs, int64_t cs, float *d) { \
        if (cs == 1)                                                                                 \
            for (int64_t p = 0; p < k; p++)                                                          \
                for (int64_t r = 0; r < np; r++)                                                     \
                    for (int j = 0; j < NR; j += W)                                                  \
                        P##_storeu_ps(d + r * NR * k + p * NR + j, P##_loadu_ps(b + p * rs + r * NR + j)); \
        else if (rs == 1)                                                                            \
            for (int64_t r = 0; r < np; r++) pack_cols(NR, k, b + r * NR * cs, cs, d + r * NR * k); \
        return cs == 1 || rs == 1;                                                                   \
    }
DEFINE_PACK_B(pack_b_avx2, AVX2, Y_NR, 8, _mm256)

#define BODY_Y(k, a, ak, ai, off, mr, b, ldb, c, ldc, acc) body_avx2(k, a, ak, ai, off, NULL, mr, b, ldb, c, ldc, acc)
DEFINE_ENTRIES(AVX2, BODY_Y, avx2, Y_MR)
AVX2 static void pixels_avx2(int64_t k, const float *const *rowp, const int64_t *off, const float *b, int64_t ldb,
                             float *c, int64_t ldc, int acc) {
    if (!off || !rowp) __builtin_unreachable();   // folds the body's tests
    body_avx2(k, NULL, 0, 1, off, rowp, Y_MR, b, ldb, c, ldc, acc);
}

// A batch of one (a single row against a B read in place): tail1 has two
// accumulators, so each k waits on the FMA latency, and crosses B's k rows once
// per NR columns. Four panels at once: eight chains, and a quarter of the
// passes. One definition for AVX2 and AVX-512 (W lanes, VEC, P the intrinsics'
// prefix). With AVX-512, against tail1 (gemm_kernels, alternating): 1x512x784
// 34-36 -> 43-60 GFLOP/s, 1x1024x3136 (the CNN's dense layer, 12.8 MB of
// weights) 10 -> 14 (BLIS 13.7); the CNN's inference at batch 1 0.85-0.91 ->
// 0.65 ms.
#define DEFINE_ROW_PANELS(NAME, TARGET, NR, W, VEC, P)                                                     \
    TARGET static void NAME(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c,  \
                            int acc) {                                                                     \
        enum { V = ROW_PANELS * NR / W };                                                                  \
        VEC s[V];                                                                                          \
        _Pragma("GCC unroll 8") for (int j = 0; j < V; j++) s[j] = P##_setzero_ps();                       \
        for (int64_t p = 0; p < k; p++) {                                                                  \
            VEC x = P##_set1_ps(a[p * ak]);                                                                \
            const float *bp = b + p * ldb;                                                                 \
            _Pragma("GCC unroll 8") for (int j = 0; j < V; j++) s[j] =                                     \
                P##_fmadd_ps(x, P##_loadu_ps(bp + W * j), s[j]);                                           \
        }                                                                                                  \
        _Pragma("GCC unroll 8") for (int j = 0; j < V; j++) {                                              \
            if (acc) s[j] = P##_add_ps(s[j], P##_loadu_ps(c + W * j));                                     \
            P##_storeu_ps(c + W * j, s[j]);                                                                \
        }                                                                                                  \
    }
DEFINE_ROW_PANELS(row_panels_avx2, AVX2, Y_NR, 8, __m256, _mm256)

// One row against the last cols < NR columns of a B read in place (a batch of
// one against a narrow B: logreg's 10 logits, an MLP's last layer), two
// vectors of columns, masked, where gemm.c packed those columns into a
// zero-padded panel (see row_tile). The masked lanes are neither read nor
// written.
AVX2 static void row_cols_avx2(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c, int cols,
                               int acc) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane),
            m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), lane);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        __m256 x = _mm256_broadcast_ss(a + p * ak);
        s0 = _mm256_fmadd_ps(x, _mm256_maskload_ps(b + p * ldb, m0), s0);
        s1 = _mm256_fmadd_ps(x, _mm256_maskload_ps(b + p * ldb + 8, m1), s1);
    }
    if (acc) {
        s0 = _mm256_add_ps(s0, _mm256_maskload_ps(c, m0));
        s1 = _mm256_add_ps(s1, _mm256_maskload_ps(c + 8, m1));
    }
    _mm256_maskstore_ps(c, m0, s0);
    _mm256_maskstore_ps(c + 8, m1, s1);
}
#define Y_TAILS(M) DEFINE_TAILS(AVX2, BODY_Y, avx2, M)
Y_TAILS(1) Y_TAILS(2) Y_TAILS(3) Y_TAILS(4) Y_TAILS(5)
#undef Y_TAILS
#undef BODY_Y
static const GemmTail tails_avx2[Y_MR] = {NULL, tail1_avx2, tail2_avx2, tail3_avx2, tail4_avx2, tail5_avx2};
static const GemmTapsTail taps_tails_avx2[Y_MR] = {NULL, taps1_avx2, taps2_avx2, taps3_avx2, taps4_avx2, taps5_avx2};

DEFINE_PACK_B(pack_b_avx512, AVX512, Z_NR, 16, _mm512)

DEFINE_ROW_PANELS(row_panels_avx512, AVX512, Z_NR, 16, __m512, _mm512)

AVX512 static void row_cols_avx512(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c,
                                   int cols, int acc) {
    __mmask16 m0 = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1),
              m1 = (__mmask16)(cols > 16 ? (1u << (cols - 16)) - 1 : 0);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        __m512 x = _mm512_set1_ps(a[p * ak]);
        s0 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m0, b + p * ldb), s0);
        s1 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m1, b + p * ldb + 16), s1);
    }
    if (acc) {
        s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(m0, c));
        s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, s0);
    _mm512_mask_storeu_ps(c + 16, m1, s1);
}

// A small product whole (attention's per-head products, 28 x 28 by 16, 512 of
// them a step): R rows at a time against one or two vectors of B's columns
// (masked: cols <= 32), R*W independent chains of FMAs, nothing packed; A's
// elements broadcast where they are (any strides). Each sum is in k order, as
// the packed kernels add it.
static inline __attribute__((always_inline)) AVX512 void small_rows(int R, int W, int64_t k, const float *a,
                                                                    int64_t ars, int64_t acs, const float *b,
                                                                    int64_t ldb, float *c, int64_t ldc, __mmask16 m0,
                                                                    __mmask16 m1, int acc) {
    __m512 s[8][2];
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) s[r][0] = s[r][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b + p * ldb), b1 = b0;
        if (W == 2) b1 = _mm512_maskz_loadu_ps(m1, b + p * ldb + 16);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(a[r * ars + p * acs]);
            s[r][0] = _mm512_fmadd_ps(x, b0, s[r][0]);
            if (W == 2) s[r][1] = _mm512_fmadd_ps(x, b1, s[r][1]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
        float *cr = c + r * ldc;
        if (acc) s[r][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), s[r][0]);
        _mm512_mask_storeu_ps(cr, m0, s[r][0]);
        if (W == 2) {
            if (acc) s[r][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), s[r][1]);
            _mm512_mask_storeu_ps(cr + 16, m1, s[r][1]);
        }
    }
}

AVX512 static void small_avx512(int64_t m, int64_t k, const float *a, int64_t ars, int64_t acs, const float *b,
                                int64_t ldb, float *c, int64_t ldc, int cols, int acc) {
    __mmask16 m0 = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1),
              m1 = (__mmask16)(cols > 16 ? (cols >= 32 ? 0xFFFF : (1u << (cols - 16)) - 1) : 0);
    int64_t i = 0;
#define SMALL_STEP(R)                                                                                            \
    for (; m - i >= R; i += R) {                                                                                 \
        if (cols > 16) small_rows(R, 2, k, a + i * ars, ars, acs, b, ldb, c + i * ldc, ldc, m0, m1, acc);      \
        else small_rows(R, 1, k, a + i * ars, ars, acs, b, ldb, c + i * ldc, ldc, m0, m1, acc);                \
    }
    SMALL_STEP(8)
    SMALL_STEP(4)
    SMALL_STEP(2)
    SMALL_STEP(1)
#undef SMALL_STEP
}
#undef DEFINE_ROW_PANELS
#endif

static const GemmKern kerns[] = {
    [GEMM_KILN_C] = {"c", C_MR, C_NR, WIN_VEC_NONE, 0, kern_c, rows_c, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
#ifdef KILN_X86
    [GEMM_KILN_AVX2] = {"avx2", Y_MR, Y_NR, WIN_VEC_AVX2, INT64_MAX, kern_avx2, rows_avx2, taps_avx2, tails_avx2, taps_tails_avx2, pack_b_avx2,
                         row_panels_avx2, pixels_avx2, row_cols_avx2, NULL},
    [GEMM_KILN_AVX512] = {"avx512", Z_MR, Z_NR, WIN_VEC_AVX512, 2 << 20, kern_avx512, rows_avx512, taps_avx512, tails_avx512, taps_tails_avx512,
                          pack_b_avx512, row_panels_avx512, NULL, row_cols_avx512, small_avx512},
#endif
};

// What this CPU runs: the best kernel when kind is GEMM_KILN, else the one
// asked for if the CPU has it (NULL if not).
const GemmKern *gemm_kern_pick(int kind) {
#ifdef KILN_X86
    int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (kind == GEMM_KILN) kind = has512 ? GEMM_KILN_AVX512 : has2 ? GEMM_KILN_AVX2 : GEMM_KILN_C;
    if ((kind == GEMM_KILN_AVX512 && !has512) || (kind == GEMM_KILN_AVX2 && !has2)) return NULL;
#else
    if (kind == GEMM_KILN) kind = GEMM_KILN_C;
#endif
    if (kind < 0 || kind >= (int)(sizeof kerns / sizeof *kerns) || !kerns[kind].fn) return NULL;
    return &kerns[kind];
}
