// gemm_win.c: a convolution's window matrix as a GEMM operand, packed from the
// image instead of materialized (implicit im2col; rt.h's rt_gemm_*_win).
//
// The im2col lowering multiplies the matrix of windows, [N*OH*OW, C*KH*KW], by
// the weights (forward) and its transpose by the output's gradient (the
// weights' gradient). Materialized, that matrix is KH*KW times the image: the
// CNN's second layer writes and reads 80 MB of it per product, where its image
// is 3.2 MB. Packing reads the image directly: a micro-panel of A holds, for
// each column of the product's depth, mr consecutive rows of the window
// matrix, which are mr neighbouring output pixels of one tap (forward: runs
// of one image row, contiguous in x when the stride is 1) or mr taps of one
// pixel (the weights' gradient: read along the pixels, a row of x at a time).
// The packed panels hold exactly what packing the materialized matrix would,
// so the products are the same bit for bit.
#include "private.h"
#include "rt.h"

#include <string.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WIN_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2")))
#endif

static void win_read(Win *w, const int64_t *geom) {
    w->n = geom[RT_WIN_N], w->c = geom[RT_WIN_C], w->h = geom[RT_WIN_H], w->w = geom[RT_WIN_W];
    w->sn = geom[RT_WIN_SN], w->sc = geom[RT_WIN_SC], w->sh = geom[RT_WIN_SH], w->sw = geom[RT_WIN_SW];
    w->kh = geom[RT_WIN_KH], w->kw = geom[RT_WIN_KW], w->strh = geom[RT_WIN_STRIDE_H], w->strw = geom[RT_WIN_STRIDE_W];
    w->pt = geom[RT_WIN_PAD_T], w->pl = geom[RT_WIN_PAD_L], w->dh = geom[RT_WIN_DIL_H], w->dw = geom[RT_WIN_DIL_W];
    w->oh = geom[RT_WIN_OH], w->ow = geom[RT_WIN_OW];
    w->pixels = w->n * w->oh * w->ow, w->taps = w->c * w->kh * w->kw;
}

void win_init(Win *w, const void *x, const int64_t *geom, int taps_rows) {
    win_read(w, geom);
    w->x = x;
    w->taps_rows = taps_rows != 0;
    w->ones = taps_rows == RT_WIN_TAPS_ONES;
    w->toff = NULL, w->vec = 0, w->hwc = 0, w->rows_first = 0, w->taps_in_place = 0, w->phases = 1;
    w->pt0 = w->pt, w->h0 = w->h;
    // Rows and columns the windows reach past the image's end.
    w->pb = (w->oh - 1) * w->strh + (w->kh - 1) * w->dh + 1 - w->pt - w->h;
    w->pr = (w->ow - 1) * w->strw + (w->kw - 1) * w->dw + 1 - w->pl - w->w;
    if (w->pb < 0) w->pb = 0;
    if (w->pr < 0) w->pr = 0;
    w->inside = !w->pt && !w->pl && !w->pb && !w->pr;
}

// With padding, the packers would test every run against the image's edges:
// a zero-padded copy (the CNN's 3.2 MB image: 5.3 MB, about a millisecond to
// write) makes each run a plain copy. An image whose columns are not adjacent
// (channels last: a conv's input after another conv) is copied even with no
// padding, so that its panels are read in place, not packed a value at a time
// (a "valid" 3x3 layer, 64 channels of 14x14 into 64, batch 128: 77 -> 151
// GFLOP/s with AVX-512, 57 -> 97 with AVX2).
static int64_t padded_floats(const Win *w) {
    if (w->inside && !w->hwc && w->phases == 1 && (w->sw == 1 || w->taps_rows)) return 0;
    return w->n * w->c * (w->pt + w->h + w->pb) * (w->pl + w->w + w->pr);
}

typedef struct { const Win *w; float *p; } Pad;

// Column x of a padded row of wp columns in the copy: with phases s, the
// row's columns x % s == 0 first, then those with 1, ... (see win_phases).
static int64_t phase_col(int64_t x, int64_t s, int64_t wp) {
    if (s == 1) return x;
    int64_t ph = x % s;
    return ph * (wp / s) + (ph < wp % s ? ph : wp % s) + x / s;
}

// One row of the copy in phases: the image row's n values (sw apart) at
// padded columns [pl, pl+n), zeros elsewhere; phase by phase, each a strided
// read of the row and a run of stores. (Each value to its phase's column in
// one pass over the row measured 1.2x as long; the row copied as it is first,
// then split from L1, 1.1-1.2x.)
static void phase_row(float *restrict r, const float *restrict src, int64_t sw, int64_t pl, int64_t n, int64_t wp,
                      int64_t s) {
    for (int64_t ph = 0; ph < s; ph++)
        for (int64_t q = ph - pl; q < wp - pl; q += s) *r++ = q >= 0 && q < n ? src[q * sw] : 0;
}

// Planes (image, channel) [lo, hi) of the padded copy.
static void pad_planes(void *ctx, int64_t lo, int64_t hi) {
    const Pad *pd = ctx;
    const Win *w = pd->w;
    int64_t hp = w->pt + w->h + w->pb, wp = w->pl + w->w + w->pr;
    for (int64_t i = lo; i < hi; i++) {
        float *d = pd->p + i * hp * wp;
        const float *s = (const float *)w->x + i / w->c * w->sn + i % w->c * w->sc;
        memset(d, 0, sizeof(float) * w->pt * wp);
        for (int64_t y = 0; y < w->h; y++) {
            float *r = d + (w->pt + y) * wp;
            if (w->phases > 1) {
                phase_row(r, s + y * w->sh, w->sw, w->pl, w->w, wp, w->phases);
                continue;
            }
            for (int64_t q = 0; q < w->pl; q++) r[q] = 0;
            if (w->sw == 1) memcpy(r + w->pl, s + y * w->sh, sizeof(float) * w->w);
            else for (int64_t q = 0; q < w->w; q++) r[w->pl + q] = s[y * w->sh + q * w->sw];
            for (int64_t q = w->pl + w->w; q < wp; q++) r[q] = 0;
        }
        memset(d + (w->pt + w->h) * wp, 0, sizeof(float) * w->pb * wp);
    }
}

// Images [lo, hi) a pixel at a time, into the padded copy's layout: NCHW (the
// copy's planes) from a channels-last x (its channels the fastest axis: a
// product's [pixels, channels] layout seen as NCHW), each pixel's channels read
// together and spread over the image's planes, which stay in cache, instead of
// one channel at a time a stride apart; or channels last (hwc), a pixel's
// channels one run (one copy when x is channels last itself).
static void pad_images(void *ctx, int64_t lo, int64_t hi) {
    const Pad *pd = ctx;
    const Win *w = pd->w;
    int64_t hp = w->pt + w->h + w->pb, wp = w->pl + w->w + w->pr, plane = hp * wp;
    int64_t dc = w->hwc ? 1 : plane, dx = w->hwc ? w->c : 1;   // the copy's channel and column strides
    for (int64_t i = lo; i < hi; i++) {
        float *d = pd->p + i * w->c * plane;
        const float *s = (const float *)w->x + i * w->sn;
        memset(d, 0, sizeof(float) * w->c * plane);
        for (int64_t y = 0; y < w->h; y++)
            for (int64_t q = 0; q < w->w; q++) {
                const float *px = s + y * w->sh + q * w->sw;
                float *o = d + ((w->pt + y) * wp + phase_col(w->pl + q, w->phases, wp)) * dx;
                if (dc == 1 && w->sc == 1) memcpy(o, px, sizeof(float) * w->c);
                else for (int64_t c = 0; c < w->c; c++) o[c * dc] = px[c * w->sc];
            }
    }
}

static void pad_into(Win *w, float *p, KRt *rt) {
    int64_t hp = w->pt + w->h + w->pb, wp = w->pl + w->w + w->pr;
    Pad pd = {w, p};
    if (w->hwc || w->sc < w->sw)
        rt_parallel_for(rt, pad_images, &pd, w->n, 1 + 65536 / (w->c * hp * wp));
    else
        rt_parallel_for(rt, pad_planes, &pd, w->n * w->c, 1 + 65536 / (hp * wp));
    w->x = p;
    w->h = hp, w->w = wp, w->pt = w->pl = w->pb = w->pr = 0;
    if (w->hwc) w->sc = 1, w->sw = w->c, w->sh = wp * w->c, w->sn = hp * wp * w->c;
    else w->sw = 1, w->sh = wp, w->sc = hp * wp, w->sn = w->c * hp * wp;
    if (w->phases > 1) w->strw = 1;   // the copy's pixels along a row are adjacent
    w->inside = 1;
}

// Tap q of the channels-last (i, j, c) order.
static void hwc_tap(const Win *w, int64_t q, int64_t *c, int64_t *i, int64_t *j) {
    *c = q % w->c, *j = q / w->c % w->kw, *i = q / (w->c * w->kw);
}

// Tap q of the rows-first (i, c, j) order.
static void rows_first_tap(const Win *w, int64_t q, int64_t *c, int64_t *i, int64_t *j) {
    *j = q % w->kw, *c = q / w->kw % w->c, *i = q / (w->kw * w->c);
}

// Tap q of the product's order when it is not the caller's (c, i, j).
static void reordered_tap(const Win *w, int64_t q, int64_t *c, int64_t *i, int64_t *j) {
    if (w->rows_first) rows_first_tap(w, q, c, i, j);
    else hwc_tap(w, q, c, i, j);
}

int64_t win_row_of(const Win *w, int64_t q) {
    if (q >= w->taps) return q;   // the row of ones stays last
    int64_t c, i, j;
    reordered_tap(w, q, &c, &i, &j);
    return (c * w->kh + i) * w->kw + j;
}

// A tap (c, i, j): its channel's offset into an image, its row and column
// shifts. Taps are visited in order, so the next one is an increment, not
// three divisions (which cost more than copying the tap's mr values).
typedef struct { int64_t coff, dy, dx, i, j; } Tap;

static Tap tap_of(const Win *w, int64_t q) {
    int64_t j = q % w->kw, i = q / w->kw % w->kh, c = q / (w->kw * w->kh);
    return (Tap){c * w->sc, i * w->dh, j * w->dw, i, j};
}

static void tap_next(const Win *w, Tap *t) {
    t->dx += w->dw;
    if (++t->j < w->kw) return;
    t->j = 0, t->dx = 0, t->dy += w->dh;
    if (++t->i < w->kh) return;
    t->i = 0, t->dy = 0, t->coff += w->sc;
}

WinPixel win_pixel(const Win *w, int64_t r) {
    int64_t row = r / w->ow, n = row / w->oh;
    return (WinPixel){n, row - n * w->oh, r - row * w->ow};
}

// The pixels from r on, each one's offset into the image (its window's first
// tap): the next one is an addition, pixel_of's divisions only at the end of
// an output row.
typedef struct { int64_t at, ow, r; } PixelWalk;

// Pixel px's offset into the image: its window's first tap.
static inline int64_t pixel_at(const Win *w, WinPixel px) {
    return px.n * w->sn + px.oh * w->strh * w->sh + px.ow0 * w->strw * w->sw;
}

static inline PixelWalk walk_from(const Win *w, int64_t r) {
    WinPixel px = win_pixel(w, r);
    return (PixelWalk){pixel_at(w, px), px.ow0, r};
}

static inline void walk_next(const Win *w, PixelWalk *pw) {
    if (++pw->ow == w->ow) *pw = walk_from(w, pw->r + 1);
    else pw->at += w->strw * w->sw, pw->r++;
}

// n contiguous floats: four at a time through a fixed-size memcpy (one
// 16-byte move), since the baseline -O2 build copies a variable-length loop
// one float at a time and a call to memcpy costs more than a run's 14 floats.
static inline void copy_floats(float *d, const float *s, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) memcpy(d + i, s + i, 4 * sizeof(float));
    for (; i < n; i++) d[i] = s[i];
}

// Tap t at the len pixels (n, oh, ow0 ... ow0+len-1) of one output row into
// d[0], d[1], ...: image row y, columns x0 + i*stride (win_setup has padded
// the image, so every window is inside it).
static inline void tap_run(const Win *w, Tap t, WinPixel px, int64_t len, float *d) {
    int64_t y = px.oh * w->strh + t.dy, x0 = px.ow0 * w->strw + phase_col(t.dx, w->phases, w->w);
    const float *s = (const float *)w->x + px.n * w->sn + t.coff + y * w->sh + x0 * w->sw;
    int64_t step = w->strw * w->sw;
    if (step == 1)
        copy_floats(d, s, len);
    else
        for (int64_t i = 0; i < len; i++) d[i] = s[i * step];
}

int64_t win_scratch_floats(const Win *w) {
    return padded_floats(w) + 2 * w->taps + 16;   // taps' offsets are int64_t
}

// The vector packers for kn's panels: its instruction set's, if its mr fits
// their vectors.
static int vec_kind(const GemmKern *kn) {
    if (kn->vec == WIN_VEC_AVX512 && kn->mr <= 16) return WIN_VEC_AVX512;
    if (kn->vec == WIN_VEC_AVX2 && kn->mr <= 8) return WIN_VEC_AVX2;
    return WIN_VEC_NONE;
}

int win_is_matrix(const Win *w, int64_t *pixel_stride) {
    int one_tap = w->kh == 1 && w->kw == 1 && w->strh == 1 && w->strw == 1 && w->inside && !w->ones;
    if (!one_tap || w->sh != w->w * w->sw || (w->n > 1 && w->sn != w->h * w->sh)) return 0;
    *pixel_stride = w->sw;
    return 1;
}

// Skipping the padding's taps needs the in-place panels (a vector kernel with
// taps tails or a pixels entry) and windows that reach past the top or
// bottom; KH 1 has nothing to skip. Not with a stride along the rows (read in
// place too): its layers keep the caller's (c, i, j) order, the order of the
// materialized matrix's sums (test_train trains both ways, bit for bit), for
// a skip that is small there (a 3x3 stride-2 layer: a third of the first
// output row's taps). The CNN's 5x5 "same" layers on 14x14
// images: 8.6% of the products' depth, forward and the input's gradient.
int win_rows_first(Win *w, const GemmKern *kn) {
    w->rows_first = !w->taps_rows && w->kh > 1 && w->strw == 1 && (w->pt > 0 || w->pb > 0) &&
                    vec_kind(kn) != WIN_VEC_NONE && (kn->pixels || (kn->taps && kn->taps_tail));
    return w->rows_first;
}

// A stride along the rows: the padded copy's columns de-interleaved by it
// (each row's even columns, then its odd ones, for stride 2). A tap's values
// at neighbouring output pixels are then adjacent, as with stride 1, and the
// kernels read the panels in place instead of packing them (a 3x3 stride-2
// layer, 32 channels of 32x32 into 32, with AVX-512: 43 GFLOP/s packed). Not
// for a kernel with a pixels entry (AVX2's), which reads strided pixels where
// they are: with the copy in phases it measured 13-45% slower there.
int win_phases(Win *w, const GemmKern *kn) {
    w->phases = !w->taps_rows && w->strw > 1 && !kn->pixels && vec_kind(kn) != WIN_VEC_NONE && kn->taps &&
                kn->taps_tail ? w->strw : 1;
    return w->phases > 1;
}

// The taps adjacent in the channels-last copy from tap q on: a window row's
// KW*C (one pixel's C channels, then the next pixel's), or C with a dilation.
static int64_t taps_run(const Win *w, int64_t q) {
    int64_t row = w->dw == 1 ? w->kw * w->c : w->c;
    return row - q % row;
}

// Cut into panels of the kernel's taps tails, a run of fewer than half of mr
// rows would have few multiply-adds for its loads.
static int taps_in_place_pays(const Win *w, const GemmKern *kn) {
    int64_t run = taps_run(w, 0), panels = (run + kn->mr - 1) / kn->mr;
    return kn->taps && kn->taps_tail && run / panels * 2 >= kn->mr;
}

// One channel is laid out the same either way: channels last only to read
// the taps in place (a window row's KW taps; with AVX2's 6 rows, not
// AVX-512's 14), where packing them measured a quarter of the CNN's first
// kernel gradient with AVX2.
int win_channels_last(Win *w, const GemmKern *kn) {
    w->hwc = w->taps_rows && vec_kind(kn) != WIN_VEC_NONE && (w->c > 1 || taps_in_place_pays(w, kn));
    return w->hwc;
}

int win_taps_in_place(Win *w, const GemmKern *kn) {
    w->taps_in_place = w->hwc && taps_in_place_pays(w, kn);
    return w->taps_in_place;
}

int64_t win_taps_panel_rows(const Win *w, int mr, int64_t q, int64_t left) {
    if (q >= w->taps) return 0;
    int64_t run = taps_run(w, q);
    if (run > left) run = left;
    int64_t panels = (run + mr - 1) / mr;
    return (run + panels - 1) / panels;
}

void win_pixel_offsets(const Win *w, int64_t p0, int64_t kb, int64_t *off) {
    PixelWalk pw = walk_from(w, p0);
    for (int64_t p = 0; p < kb; p++, walk_next(w, &pw)) off[p] = pw.at;
}

void win_setup(Win *w, float *scratch, const GemmKern *kn, KRt *rt) {
    int64_t pf = padded_floats(w);
    if (pf) pad_into(w, scratch, rt);
    if (w->sw != 1 && !w->hwc) return;
    int64_t *toff = (int64_t *)(scratch + (pf + 1) / 2 * 2);
    if (w->hwc || w->rows_first) {   // (i, j, c): a pixel's channels, tap by tap; or (i, c, j)
        for (int64_t q = 0; q < w->taps; q++) {
            int64_t c, i, j;
            reordered_tap(w, q, &c, &i, &j);
            toff[q] = c * w->sc + i * w->dh * w->sh + phase_col(j * w->dw, w->phases, w->w) * w->sw;
        }
    } else {
        Tap t = tap_of(w, 0);
        for (int64_t q = 0; q < w->taps; q++, tap_next(w, &t))
            toff[q] = t.coff + t.dy * w->sh + phase_col(t.dx, w->phases, w->w);
    }
    w->toff = toff;
    w->vec = vec_kind(kn);
}

#ifdef WIN_X86
// The vector packers: a micro-panel's line of mr values (one tap's pixels, or
// one pixel's taps) is a few runs contiguous in the image, each gathered into
// its lanes by one masked load, and the line is one store (its lanes past the
// panel's rows zero). A run's load is addressed so that its first lane reads
// its first value; the lanes outside its mask are not read. The line is stored
// as a whole vector: its lanes past mr land on the next line, written next
// (gemm.c leaves 16 floats of room past a panel for the last one); a masked
// store of a line that crosses a cache line costs several times more. One
// definition for AVX-512 (16 lanes, mask registers) and AVX2 (8 lanes, vector
// masks): MASK(len, at) has lanes [at, at+len) set, FIRST loads a run into a
// zeroed vector, NEXT adds one to it.
static inline const float *lane_base(const float *x, int64_t off) {
    return (const float *)((uintptr_t)x + (uintptr_t)off * sizeof(float));
}

#define DEFINE_PACKERS(SFX, TARGET, VEC, MASK_T, MASK, FIRST, NEXT, STORE)                                     \
    TARGET static void pack_pixels_##SFX(const Win *w, int mr, int64_t r0, int64_t rows, int64_t q0, int64_t kb, \
                                         float *dst) {                                                          \
        int64_t base[MAX_WIN_MR + 1];                                                                           \
        MASK_T mask[MAX_WIN_MR + 1];                                                                            \
        int nrun = 0;                                                                                           \
        for (int64_t i = 0; i < rows; nrun++) {                                                                 \
            WinPixel px = win_pixel(w, r0 + i);                                                                     \
            int64_t len = w->ow - px.ow0 < rows - i ? w->ow - px.ow0 : rows - i;                                \
            base[nrun] = pixel_at(w, px) - i; /* stride 1 along the row */                                      \
            mask[nrun] = MASK(len, i);                                                                          \
            i += len;                                                                                           \
        }                                                                                                       \
        const float *x = w->x;                                                                                  \
        const int64_t *toff = w->toff + q0;                                                                     \
        for (int64_t p = 0; p < kb; p++) {                                                                      \
            VEC v = FIRST(mask[0], lane_base(x, base[0] + toff[p]));                                            \
            for (int r = 1; r < nrun; r++) v = NEXT(v, mask[r], lane_base(x, base[r] + toff[p]));               \
            STORE(dst + p * mr, v);                                                                             \
        }                                                                                                       \
    }                                                                                                           \
    TARGET static void pack_taps_##SFX(const Win *w, int mr, int64_t q0, int64_t mb, int64_t p0, int64_t kb,     \
                                       float *dst) {                                                            \
        const float *x = w->x;                                                                                  \
        for (int64_t ir = 0; ir < mb; ir += mr) {                                                               \
            int64_t rows = mb - ir < mr ? mb - ir : mr, off[MAX_WIN_MR];                                        \
            MASK_T mask[MAX_WIN_MR];                                                                            \
            int nseg = 0, start = 0;                                                                            \
            const int64_t *toff = w->toff + q0 + ir;                                                            \
            for (int64_t i = 1; i <= rows; i++) /* runs of taps adjacent in the image */                        \
                if (i == rows || toff[i] != toff[i - 1] + 1) {                                                  \
                    off[nseg] = toff[start] - start;                                                            \
                    mask[nseg++] = MASK(i - start, start);                                                      \
                    start = (int)i;                                                                             \
                }                                                                                               \
            float *d = dst + ir * kb;                                                                           \
            PixelWalk pw = walk_from(w, p0);                                                                    \
            for (int64_t p = 0; p < kb; p++, d += mr, walk_next(w, &pw)) {                                      \
                VEC v = FIRST(mask[0], lane_base(x, pw.at + off[0]));                                           \
                for (int g = 1; g < nseg; g++) v = NEXT(v, mask[g], lane_base(x, pw.at + off[g]));              \
                STORE(d, v);                                                                                    \
            }                                                                                                   \
        }                                                                                                       \
    }

#define Z_MASK(len, at) ((__mmask16)(((1u << (len)) - 1) << (at)))
#define Z_FIRST(m, p) _mm512_maskz_loadu_ps((m), (p))
#define Z_NEXT(v, m, p) _mm512_mask_loadu_ps((v), (m), (p))
DEFINE_PACKERS(avx512, AVX512, __m512, __mmask16, Z_MASK, Z_FIRST, Z_NEXT, _mm512_storeu_ps)

AVX2 static inline __m256i y_mask(int64_t len, int64_t at) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int)at - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(at + len)), lane));
}
#define Y_FIRST(m, p) _mm256_maskload_ps((p), (m))
#define Y_NEXT(v, m, p) _mm256_or_ps((v), _mm256_maskload_ps((p), (m)))
DEFINE_PACKERS(avx2, AVX2, __m256, __m256i, y_mask, Y_FIRST, Y_NEXT, _mm256_storeu_ps)
#undef DEFINE_PACKERS
#endif

// Past a panel of rows pixels without dividing the pixel's index: the panel's
// three questions asked apart divided it seven times per panel, 18% of the
// conv1 forward product's time with AVX2 (a panel is only 2 x 25 kernel steps).
static void pixel_skip(const Win *w, WinPixel *px, int64_t rows) {
    for (px->ow0 += rows; px->ow0 >= w->ow; px->ow0 -= w->ow)
        if (++px->oh == w->oh) px->oh = 0, px->n++;
}

// Rows first: the kernel rows [*i0, *i1) of output row oh's windows that are
// inside the image, the rest in the top or bottom padding.
static void inside_rows(const Win *w, int64_t oh, int64_t *i0, int64_t *i1) {
    int64_t y0 = oh * w->strh - w->pt0;   // the windows' top row in the image
    *i0 = 0, *i1 = w->kh;
    while (*i0 < *i1 && y0 + *i0 * w->dh < 0) ++*i0;
    while (*i1 > *i0 && y0 + (*i1 - 1) * w->dh >= w->h0) --*i1;
}

// A panel for the kernel's pixels entry: mr pixels wherever they lie (a
// 14-pixel row is no longer cut 5 + 5 + 4 for the tails), each row's window
// by its own pointer (past rows, the first's: computed, not stored), its
// depth the union of its output rows'.
static WinPanel pixels_panel(const Win *w, int mr, WinPixel *px, int64_t rows, const float **rowp) {
    WinPanel wp = {rows, NULL, w->taps, 0};
    for (int64_t i = 0; i < rows; i++, pixel_skip(w, px, 1)) {
        rowp[i] = (const float *)w->x + pixel_at(w, *px);
        if (i && px->ow0) continue;   // the same output row as the pixel before
        int64_t i0 = 0, i1 = w->kh;
        if (w->rows_first) inside_rows(w, px->oh, &i0, &i1);
        if (i0 * w->c * w->kw < wp.lo) wp.lo = i0 * w->c * w->kw;
        if (i1 * w->c * w->kw > wp.hi) wp.hi = i1 * w->c * w->kw;
    }
    for (int64_t i = rows; i < mr; i++) rowp[i] = rowp[0];
    wp.in_place = rowp[0];
    return wp;
}

WinPanel win_pixel_panel(const Win *w, const GemmKern *kn, WinPixel *px, int64_t left, const float **rowp) {
    int mr = kn->mr;
    if (w->toff && kn->pixels) return pixels_panel(w, mr, px, left < mr ? left : mr, rowp);
    WinPanel wp = {left < mr ? left : mr, NULL, 0, w->taps};
    WinPixel at = *px;
    int readable = w->toff && w->strw == 1 && kn->taps;   // panels the kernel could read in place
    if (readable && kn->taps_tail) {
        int run = (int)(w->ow - at.ow0 < left ? w->ow - at.ow0 : left);   // to the end of the image row
        int panels = (run + mr - 1) / mr;
        wp.rows = (run + panels - 1) / panels;
    }
    pixel_skip(w, px, wp.rows);
    if (!readable || (wp.rows < mr && !kn->taps_tail) || at.ow0 + wp.rows > w->ow) return wp;
    wp.in_place = (const float *)w->x + pixel_at(w, at);
    if (!w->rows_first) return wp;
    int64_t i0, i1;
    inside_rows(w, at.oh, &i0, &i1);
    wp.lo = i0 * w->c * w->kw, wp.hi = i1 * w->c * w->kw;
    return wp;
}

void win_pack_pixels(const Win *w, int mr, int64_t r0, int64_t rows, int64_t q0, int64_t kb, float *dst) {
#ifdef WIN_X86
    if (w->vec != WIN_VEC_NONE && w->strw == 1) {
        if (w->vec == WIN_VEC_AVX512) pack_pixels_avx512(w, mr, r0, rows, q0, kb, dst);
        else pack_pixels_avx2(w, mr, r0, rows, q0, kb, dst);
        return;
    }
#endif
    // The panel's rows as runs of one output row each (at most mr + 1 of them).
    int64_t at[MAX_WIN_MR + 1], len[MAX_WIN_MR + 1];
    WinPixel px[MAX_WIN_MR + 1];
    int nrun = 0;
    for (int64_t i = 0; i < rows; nrun++) {
        px[nrun] = win_pixel(w, r0 + i);
        at[nrun] = i;
        len[nrun] = w->ow - px[nrun].ow0 < rows - i ? w->ow - px[nrun].ow0 : rows - i;
        i += len[nrun];
    }
    Tap t = tap_of(w, q0);
    for (int64_t p = 0; p < kb; p++, tap_next(w, &t)) {
        float *d = dst + p * mr;
        for (int r = 0; r < nrun; r++) tap_run(w, t, px[r], len[r], d + at[r]);
        for (int64_t i = rows; i < mr; i++) d[i] = 0;
    }
}

// A panel's mr taps, for one pixel, are a few runs contiguous in the image (a
// window row's KW taps), so each pixel's row of the panel is a few short
// copies from the image, written in order. (Tap by tap along the pixels instead, a
// transposing copy with stride-mr stores, measured 1.2x slower than packing
// the materialized matrix.)
static void pack_taps(const Win *w, int mr, int64_t q0, int64_t mb, int64_t p0, int64_t kb, float *dst) {
    const float *x = w->x;
    Tap t = tap_of(w, q0);
    for (int64_t ir = 0; ir < mb; ir += mr) {
        int64_t rows = mb - ir < mr ? mb - ir : mr, off[MAX_WIN_MR], at[MAX_WIN_MR], len[MAX_WIN_MR];
        int nseg = 0;
        for (int64_t i = 0; i < rows; i++, tap_next(w, &t)) {
            int64_t o = t.coff + t.dy * w->sh + t.dx * w->sw;
            if (nseg && w->sw == 1 && o == off[nseg - 1] + len[nseg - 1]) len[nseg - 1]++;
            else off[nseg] = o, at[nseg] = i, len[nseg] = 1, nseg++;
        }
        float *d = dst + ir * kb;
        PixelWalk pw = walk_from(w, p0);
        for (int64_t p = 0; p < kb; p++, d += mr, walk_next(w, &pw)) {
            for (int g = 0; g < nseg; g++) copy_floats(d + at[g], x + pw.at + off[g], len[g]);
            for (int64_t i = rows; i < mr; i++) d[i] = 0;
        }
    }
}

// The taps' rows by the packers above; the row of ones after them (w->ones) is
// one lane set to 1 in its panel: the packers zero the lanes past their rows,
// and a panel of its own (or a block of only that row: q0 == taps) is cleared here.
void win_pack_taps(const Win *w, int mr, int64_t q0, int64_t mb, int64_t p0, int64_t kb, float *dst) {
    int64_t taps = w->taps - q0 < mb ? w->taps - q0 : mb;
    if (taps > 0) {
#ifdef WIN_X86
        if (w->vec == WIN_VEC_AVX512) pack_taps_avx512(w, mr, q0, taps, p0, kb, dst);
        else if (w->vec == WIN_VEC_AVX2) pack_taps_avx2(w, mr, q0, taps, p0, kb, dst);
        else
#endif
            pack_taps(w, mr, q0, taps, p0, kb, dst);
    }
    if (taps >= mb) return;
    float *d = dst + taps / mr * mr * kb;
    int lane = (int)(taps % mr);
    if (!lane) memset(d, 0, sizeof(float) * (size_t)(mr * kb));
    for (int64_t p = 0; p < kb; p++) d[p * mr + lane] = 1;
}

// The whole window matrix, [pixels, taps] row-major (and the column of ones),
// for the paths that take strided operands (f64, BLIS, the loops). T: float or double.
#define DEFINE_MATERIALIZE(NAME, T)                                                             \
    void NAME(const Win *w, T *dst) {                                                           \
        const T *x = w->x;                                                                      \
        int64_t cols = w->taps + w->ones;                                                       \
        for (int64_t r = 0; r < w->pixels; r++) {                                              \
            WinPixel px = win_pixel(w, r);                                                          \
            if (w->ones) dst[r * cols + w->taps] = 1;                                           \
            for (int64_t q = 0; q < w->taps; q++) {                                             \
                Tap t = tap_of(w, q);                                                           \
                int64_t y = px.oh * w->strh - w->pt + t.dy, xx = px.ow0 * w->strw - w->pl + t.dx; \
                T v = 0;                                                                        \
                if (y >= 0 && y < w->h && xx >= 0 && xx < w->w)                                 \
                    v = x[px.n * w->sn + t.coff + y * w->sh + xx * w->sw];                      \
                dst[r * cols + q] = v;                                                          \
            }                                                                                   \
        }                                                                                       \
    }
DEFINE_MATERIALIZE(win_materialize_f32, float)
DEFINE_MATERIALIZE(win_materialize_f64, double)
#undef DEFINE_MATERIALIZE
