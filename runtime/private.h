// private.h: what the runtime's files share with each other and nothing outside uses.
#ifndef KILN_RT_PRIVATE_H
#define KILN_RT_PRIVATE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "rt.h"

//
// file.c: error messages about files, and files written atomically
//

// Writes "path: <fmt ...>" into err (which may be NULL) and returns -1.
int rt_errf(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// A file written beside its final path and renamed over it only when complete, so a
// reader sees the old file or the new one, never a part. Usage:
//     RtSaveFile s;
//     if (rt_save_begin(&s, path, err, errlen) || rt_save_write(&s, buf, n, err, errlen))
//         return -1;   // the temporary file is already gone
//     return rt_save_commit(&s, err, errlen);
// Any failure removes the temporary file and leaves an existing file at path untouched;
// after it, later calls on s fail quietly.
typedef struct {
    int fd;   // -1 once committed or aborted
    char *tmp;   // path ".tmp." pid "." tid
    const char *path;
} RtSaveFile;

int rt_save_begin(RtSaveFile *s, const char *path, char *err, size_t errlen);
int rt_save_write(RtSaveFile *s, const void *buf, size_t n, char *err, size_t errlen);
// fsync, close, rename over path, fsync the directory.
int rt_save_commit(RtSaveFile *s, char *err, size_t errlen);
void rt_save_abort(RtSaveFile *s);

//
// npy.c: a .npy file's contents from an open stream (a file, or an .npz member in
// memory); path names it in messages. As rt_npy_load (rt.h) otherwise.
//

int rt_npy_read(FILE *f, const char *path, RtTensor *out, char *err, size_t errlen);
// npz.c: whether the first len bytes of s end in ".npz".
int rt_npz_suffix(const char *s, size_t len);

//
// plot.c: line charts as PNG (PLplot), or an error when built without it
//

typedef enum {
    PLOT_FAINT,    // thin and light: raw per-step values
    PLOT_LINE,     // a solid line
    PLOT_MARKED,   // a solid line with a marker on each point
} PlotStyle;

typedef struct {
    const char *name;   // legend text
    PlotStyle style;
    int n;
    const double *x, *y;   // non-finite points are skipped
} PlotSeries;

#define PLOT_MAXSERIES 24   // per panel; more are left out

typedef struct {
    const char *xlabel, *ylabel;
    int xwhole;   // x values are whole numbers (epochs): no ticks at 1.5
    int n;
    const PlotSeries *s;
} PlotPanel;

// Panels stacked top to bottom, the title above the first. Writes png_path atomically.
int rt_plot_png(const char *png_path, const char *title, const PlotPanel *panels, int npanels,
                char *err, size_t errlen);

// data.c, shared with csv.c: a formatted message in err, returning -1 (the loaders'
// failure value); appending a column to a data set.
#include "data.h"
int rt_data_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void rt_data_add_col(RtDataset *ds, const char *name, RtTensor t);

//
// gemm.c, gemm_kern.c, pool.c: the f32 GEMM's kernels and per-context state
//

// How rt_gemm_f32 computes, from KILN_GEMM when the context is created (gemm.c
// explains the default). The kiln-* kinds force one micro-kernel (for tests).
enum { GEMM_KILN, GEMM_KILN_AVX512, GEMM_KILN_AVX2, GEMM_KILN_C, GEMM_BLIS, GEMM_LOOPS };
int rt_gemm_kind_env(void);   // parses KILN_GEMM (unset, empty or unknown: the default)
int rt_gemm_kind(const KRt *rt);   // what rt_new read; rt_gemm_kind_env() for a NULL rt

// A micro-kernel: C[0:mr, 0:nr] (row stride ldc) = (acc ? C : 0) + A_panel @ B_panel,
typedef void (*GemmTail)(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c, int64_t ldc,
                         int acc);
typedef void (*GemmTapsTail)(int64_t k, const float *a, const int64_t *off, const float *b, int64_t ldb, float *c,
                             int64_t ldc, int acc);
// where the B panel holds b[p*ldb + j] for p < k, j < nr (packed: ldb = nr; or nr
// columns of a row-major B in place), and fn reads A as a[p*ak + i] (a packed
// panel: ak = mr; or a column-major A in place).
enum { WIN_VEC_NONE, WIN_VEC_AVX2, WIN_VEC_AVX512 };   // vector packers for window operands (gemm_win.c)
typedef struct {
    const char *name;
    int mr, nr;
    int vec;   // the window packers' instruction set that goes with this kernel: WIN_VEC_*
    // Large deep products keep a B micro-panel in L1 and stream A (gemm.c,
    // block_sizes) on CPUs whose L2 per core is under this many bytes (0: never).
    int64_t b_stays_l2;
    void (*fn)(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c, int64_t ldc, int acc);
    // The same with mr whole rows of a row-major A read in place, a[i*lda + p].
    void (*rows)(int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int acc);
    // The same with A's column p at a + off[p], its mr values contiguous: a window
    // matrix's panel of mr pixels of one image row read in place (NULL: none).
    void (*taps)(int64_t k, const float *a, const int64_t *off, const float *b, int64_t ldb, float *c, int64_t ldc,
                 int acc);
    // fn and taps for a panel of r < mr rows, tail[r] and taps_tail[r], writing
    // only those rows of C (NULL: none).
    const GemmTail *tail;
    const GemmTapsTail *taps_tail;
    // Packs np whole B panels, b(p, j) at b[p*rs + j*cs] for p < k, j < np*nr, panel
    // r into dst[r*nr*k + p*nr + j % nr], with this instruction set's moves when B
    // is row-major (cs == 1, walked along its rows) or column-major (rs == 1,
    // along its columns); 0 (nothing written) otherwise. NULL: none.
    int (*pack_b)(int64_t k, int64_t np, const float *b, int64_t rs, int64_t cs, float *dst);
    // One row of A (a[p*ak]) against ROW_PANELS whole panels of a B read in place,
    // into ROW_PANELS * nr contiguous values of C: tail[1]'s sums, each still in k
    // order, with ROW_PANELS times its independent chains (NULL: none).
    void (*row_panels)(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c, int acc);
    // The same as taps with A's row i at rowp[i] + off[p], for all mr rows: a
    // window matrix's panel of any mr pixels (across image rows, any stride),
    // each row at its own pixel's window in the image (NULL: none).
    void (*pixels)(int64_t k, const float *const *rowp, const int64_t *off, const float *b, int64_t ldb, float *c,
                   int64_t ldc, int acc);
    // One row of A (a[p*ak]) against the first cols < nr columns of a B read
    // in place, into cols values of C, with masked loads and stores: tail[1]'s
    // sums, in k order, for the columns a whole panel would overrun (NULL: none).
    void (*row_cols)(int64_t k, const float *a, int64_t ak, const float *b, int64_t ldb, float *c, int cols, int acc);
    // A whole small product, m x cols (cols <= GEMM_SMALL_N) by k, nothing
    // packed: A's element (i, p) at a[i*ars + p*acs], B row-major
    // (b[p*ldb + j]), C row-major; each sum in k order (NULL: none).
    void (*small)(int64_t m, int64_t k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                  float *c, int64_t ldc, int cols, int acc);
} GemmKern;
#define GEMM_SMALL_N 32
#define ROW_PANELS 4
// The kernel for a kiln kind on this CPU; NULL if the CPU lacks it.
const GemmKern *gemm_kern_pick(int kind);
// The block sizes gemm.c uses with kn (rows of A, depth, columns of B per block),
// from this machine's cache sizes.
void gemm_blocks(const GemmKern *kn, int64_t *mc, int64_t *kc, int64_t *nc);
// The rows from which a tile of kn takes BLIS's loop order (gemm.c, with its
// other conditions) on this machine; 0: never.
int64_t gemm_b_stays_rows(const GemmKern *kn);
int64_t gemm_l2_bytes(void);   // this machine's L2 per core (1 MiB where unknown)
static inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// gemm_win.c: the window matrix of rt_gemm_*_win (rt.h), read from the image.
// Rows of the matrix are pixels (n, oh, ow), columns taps (c, i, j); with
// taps_rows the operand is its transpose.
typedef struct {
    const void *x;
    int64_t n, c, h, w, sn, sc, sh, sw;    // the image and its strides
    int64_t kh, kw, strh, strw, pt, pl, dh, dw, oh, ow;
    int64_t pb, pr;                        // how far the windows reach past the bottom, right
    int64_t pixels, taps;                  // n*oh*ow and c*kh*kw
    int taps_rows;
    int ones;                              // taps_rows and a last row of ones (RT_WIN_TAPS_ONES)
    int inside;                            // no padding: every window is inside the image
    const int64_t *toff;                   // each tap's offset into an image (unit column stride), or NULL
    int vec;                               // the packers' masked moves: WIN_VEC_*
    // Channels last (win_channels_last, with taps_rows, on the vector packers'
    // path): the image copied padded as [N, H, W, C] and the taps taken in
    // (i, j, c) order, so a panel's taps for one pixel are one run of channels;
    // the product's rows (taps) are then in that order, and win_row_of maps them
    // back to the caller's (c, i, j) rows.
    int hwc;
    // Kernel rows first (win_rows_first, without taps_rows, on the in-place
    // panels' path): the depth's taps taken in (i, c, j) order, so the taps of
    // an output row that fall in the top or bottom padding are a run at either
    // end of the depth, which its panels skip (win_pixel_panel); the caller's B
    // rows are permuted to match (win_row_of).
    int rows_first;
    int64_t pt0, h0;                       // the padding above and rows of the image before win_setup's copy
    // Taps in place (win_taps_in_place, channels last): the weights' gradient's
    // panels are runs of one pixel's channels, read from the padded copy by the
    // kernel's taps entry at each pixel's offset (win_pixel_offsets), not packed.
    int taps_in_place;
    // Phases (win_phases, without taps_rows): the stride along the rows, by
    // which the padded copy's columns are de-interleaved; after win_setup the copy
    // reads as stride 1 (strw 1), a tap's column offset at phase_col (gemm_win.c).
    int64_t phases;
} Win;
// Asks for channels last; 1 if the kernel kn has vector packers for it (then set).
int win_channels_last(Win *w, const GemmKern *kn);
// A 1x1 window at stride 1 with no padding over pixels evenly spaced (a
// channels-last image, or one planar image): the window matrix is the image
// itself, pixel p's channels at p * pixel_stride (a 1x1 layer: a plain GEMM).
int win_is_matrix(const Win *w, int64_t *pixel_stride);
// Asks for kernel rows first; 1 if it pays (some windows reach into the top or
// bottom padding) and the kernel kn reads such panels in place (then set).
int win_rows_first(Win *w, const GemmKern *kn);
// Asks for the padded copy's columns de-interleaved by the stride (before
// win_rows_first); 1 if the kernel kn then reads the panels in place (then set).
int win_phases(Win *w, const GemmKern *kn);
// Tap q (in (i, j, c) order, channels last; or (i, c, j), rows first) as its
// (c, i, j) index: C's row, or B's.
int64_t win_row_of(const Win *w, int64_t q);
#define MAX_WIN_MR 16   // the largest micro-kernel mr (gemm_kern.c)
// Row r of a pixels' window matrix as its image, output row and column.
typedef struct { int64_t n, oh, ow0; } WinPixel;
WinPixel win_pixel(const Win *w, int64_t r);
// The panel of pixels from *px, with left rows left in the block, for the
// kernel kn: its rows (where the kernel reads panels in place, the image row's
// rest cut into equal panels of at most mr: a 32-pixel row is 11 + 11 + 10 for
// mr = 14, where 14 + 14 + 4 would pack the pixels that cross into the next row;
// else mr); if its pixels lie in one row of the padded image, its first
// pixel's address (each tap's values x[toff[q]] on are then contiguous, and
// the kernel's taps entry reads them in place), else NULL (packed); and, rows
// first, the depth [lo, hi) of its windows that is not in the top or bottom
// padding (the other products of its rows of the window matrix are zeros).
// With the kernel's pixels entry a panel is any mr pixels (fewer only at the
// block's end), always in place: rowp[i] is pixel i's window (all mr set),
// and [lo, hi) the union of its rows'. The panel starts at *px, which moves past it.
typedef struct { int64_t rows; const float *in_place; int64_t lo, hi; } WinPanel;
WinPanel win_pixel_panel(const Win *w, const GemmKern *kn, WinPixel *px, int64_t left, const float **rowp);
void win_init(Win *w, const void *x, const int64_t *geom, int taps_rows);
// The scratch floats win_setup needs: a zero-padded copy of the image (if the
// windows reach past it) and each tap's offset into an image.
int64_t win_scratch_floats(const Win *w);
// Before packing for the kernel kn: points w at its padded copy, written into
// scratch (so the packers copy runs without testing the image's edges), fills
// in the taps' offsets and which vector moves the packers use (the kernel's
// instruction set's). The copy runs on rt's threads.
void win_setup(Win *w, float *scratch, const GemmKern *kn, KRt *rt);
// An A micro-panel of rows [r0, r0+rows) (pixels; zero past rows, up to mr) and
// depth [q0, q0+kb) (taps): dst[p*mr + i], as gemm.c's pack_a lays it out.
void win_pack_pixels(const Win *w, int mr, int64_t r0, int64_t rows, int64_t q0, int64_t kb, float *dst);
// Asks for the taps read in place (after win_channels_last); 1 if they pay
// and the kernel kn can (then set).
int win_taps_in_place(Win *w, const GemmKern *kn);
// The taps of the in-place panel from tap q, with left rows left in the block:
// the rest of q's run of channels cut into equal panels of at most mr; 0 for
// the row of ones (packed).
int64_t win_taps_panel_rows(const Win *w, int mr, int64_t q, int64_t left);
// Tap q's value at pixel p: x[toff[q] + off[p]] with off from here, for pixels
// [p0, p0+kb).
void win_pixel_offsets(const Win *w, int64_t p0, int64_t kb, int64_t *off);
// An A block of the transpose: rows [q0, q0+mb) (taps, then the row of ones if
// w->ones) in mr-row micro-panels, depth [p0, p0+kb) (pixels): dst[panel*mr*kb + p*mr + i].
void win_pack_taps(const Win *w, int mr, int64_t q0, int64_t mb, int64_t p0, int64_t kb, float *dst);
// The whole matrix, [pixels, taps] row-major (a last column of ones if w->ones).
void win_materialize_f32(const Win *w, float *dst);
void win_materialize_f64(const Win *w, double *dst);

// The packing buffers of rt's GEMMs, one block for all pool threads: grows, never
// shrinks, freed by rt_free_ctx. Only for the thread that owns rt (not from inside a
// parallel region, see rt_in_parallel). NULL when out of memory.
void *rt_gemm_workspace(KRt *rt, size_t bytes);
// 1 on a thread inside rt_parallel_for (a pool worker or the caller running a chunk).
int rt_in_parallel(void);

#endif
