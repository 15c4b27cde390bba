// Convolution lowerings (Caffe con Troll's choice per layer). conv2d is built
// at trace time from IR ops in one of three ways, so autodiff's rules give
// each one its own backward pass:
//   im2col  lower the input: the windows of the whole batch are one
//           [N*OH*OW, C*KH*KW] matrix (an IM2COL view) times w^T: one GEMM,
//           which packs the windows from the image (implicit im2col, see
//           runtime/gemm_win.c; so does the weights' gradient), or, at
//           stride 1 with 2..5-tap kernels, runs as Winograd's F(m, r)
//           (passes/lower.c, runtime/wino.c).
//   kernel  lower the kernel and expand the output: w as [O*KH*KW, C] times x
//           as [C, N*H*W] gives every pixel's contribution to every output it
//           touches, then each output sums its KH*KW shifted pixels (with
//           stride 1 a COL2IM of that matrix, whose gradient is an IM2COL
//           copy: im2col's costs with C and O swapped, cheaper when O < C).
//   direct  no matrix: a reduction over C*KH*KW of the windows times w, fused
//           into one kernel (good when C*KH*KW is small, like a first layer).
// conv_choose picks one from the shapes with a cost model, or takes the winner
// `kiln run --tune` measured on this machine and cached on disk.
#include "builtins_int.h"
#include "compiler/cache.h"
#include "passes/passes.h"
#include "pipeline.h"
#include "kiln.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const names[CONV_NLOWER] = {"im2col", "kernel", "direct"};
static const char *const titles[CONV_NLOWER] = {"im2col+GEMM", "kernel lowering+GEMM+aggregate", "direct"};

const char *conv_lowering_name(int l) { return names[l]; }

int conv_lowering_by_name(const char *s) {
  for (int l = 0; l < CONV_NLOWER; l++)
    if (!strcmp(s, names[l])) return l;
  return -1;
}

// ---- the lowerings -----------------------------------------------------------

// The windows as rows: [N*OH*OW, C*KH*KW] (an IM2COL view, packed from the
// image by the GEMM) times w^T, one GEMM over the whole batch, then to NCHW.
// Its input gradient, col2im(dY @ W) from autodiff, becomes a transposed
// convolution in passes/convgrad.c. Caffe
// con Troll's channel-tap-major layout ([C*KH*KW, N*OH*OW], w @ cols) makes
// the window copy, col2im and bias kernels contiguous along OW, but its
// products have 64 rows against 25,088 columns (the CNN's second layer) and
// ran at 37-75 GFLOP/s in Kiln's GEMM against 90-100 for these shapes: 170
// against 85 ms of the CNN's training step, more than the kernels gained.
static Node *conv_im2col(IrCtx *c, const ConvShape *s, Node *x, Node *w, const int64_t *win, const int64_t *pad_end) {
  Node *cols = ir_im2col(c, x, win, pad_end);
  if (!cols) return NULL;
  int64_t kk = s->c * s->kh * s->kw;
  Dim rows = x->shape[0];
  rows.k *= s->oh * s->ow;
  Dim m2[2] = {rows, dim_c(kk)}, w2[2] = {dim_c(s->o), dim_c(kk)};
  int tr[2] = {1, 0}, to_nchw[4] = {0, 3, 1, 2};
  Node *y = ir_matmul(c, ir_reshape(c, cols, 2, m2), ir_transpose(c, ir_reshape(c, w, 2, w2), tr));
  Dim nhwc[4] = {x->shape[0], dim_c(s->oh), dim_c(s->ow), dim_c(s->o)};
  return ir_transpose(c, ir_reshape(c, y, 4, nhwc), to_nchw);
}

// Z[n,h,w,o,i,j] = sum_c x[n,c,h,w] w[o,c,i,j]; then
// y[n,oh,ow,o] = sum_{i,j} Zpadded[n, oh*sh + i*dh, ow*sw + j*dw, o, i, j].
static Node *conv_kernel_slices(IrCtx *c, const ConvShape *s, Node *x, Node *w) {
  int to_nhwc[4] = {0, 2, 3, 1}, cfirst[4] = {1, 0, 2, 3}, to_nchw[4] = {0, 3, 1, 2};
  Dim rows = x->shape[0];
  rows.k *= s->h * s->w;
  int64_t okk = s->o * s->kh * s->kw;
  Dim x2[2] = {rows, dim_c(s->c)}, w2[2] = {dim_c(s->c), dim_c(okk)};
  Node *z = ir_matmul(c, ir_reshape(c, ir_transpose(c, x, to_nhwc), 2, x2), ir_reshape(c, ir_transpose(c, w, cfirst), 2, w2));
  if (!z) return NULL;
  Dim z6[6] = {x->shape[0], dim_c(s->h), dim_c(s->w), dim_c(s->o), dim_c(s->kh), dim_c(s->kw)};
  z = ir_reshape(c, z, 6, z6);
  Dim padded[6] = {x->shape[0], dim_c(s->pt + s->h + s->pb), dim_c(s->pl + s->w + s->pr), z6[3], z6[4], z6[5]};
  int64_t at[6] = {0, s->pt, s->pl, 0, 0, 0}, one[6] = {1, 1, 1, 1, 1, 1};
  z = ir_pad(c, z, padded, at, one);
  if (!z) return NULL;
  Node *y = NULL;
  for (int64_t i = 0; i < s->kh; i++)
    for (int64_t j = 0; j < s->kw; j++) {
      int64_t start[6] = {0, i * s->dh, j * s->dw, 0, i, j}, count[6] = {-1, s->oh, s->ow, -1, 1, 1};
      int64_t step[6] = {1, s->sh, s->sw, 1, 1, 1};
      Node *t = ir_slice(c, z, start, count, step);
      if (!t) return NULL;
      y = y ? ir_binary(c, OP_ADD, y, t) : t;
    }
  Dim nhwc[4] = {x->shape[0], dim_c(s->oh), dim_c(s->ow), dim_c(s->o)};
  return ir_transpose(c, ir_reshape(c, y, 4, nhwc), to_nchw);
}

// With stride 1, the aggregation is a COL2IM: output pixel p sums Z at the
// pixels p - pt + i*dh, which is col2im's gather with the taps flipped
// (i = KH-1-kh) and padding (KH-1)*dh - pt. The flip goes into the kernel (a
// reversed slice of w), and Z is computed channel-tap major,
// Z'[o,kh,kw,n,h,w] = w'[O*KH*KW, C] @ x[C, N*H*W], as the im2col lowering's
// windows are: col2im then reads it along OW, and its gradient is an IM2COL
// view of dy materialized by one copy kernel, so the backward pass is
// im2col's with the roles of C and O swapped (CcT: cheaper when O < C).
static int kernel_by_col2im(const ConvShape *s) {
  int64_t span_h = (s->kh - 1) * s->dh, span_w = (s->kw - 1) * s->dw;
  return s->sh == 1 && s->sw == 1 && s->pt <= span_h && s->pb <= span_h && s->pl <= span_w && s->pr <= span_w;
}

static Node *conv_kernel(IrCtx *c, const ConvShape *s, Node *x, Node *w) {
  if (!kernel_by_col2im(s)) return conv_kernel_slices(c, s, x, w);
  int64_t start[4] = {0, 0, s->kh - 1, s->kw - 1}, count[4] = {-1, -1, s->kh, s->kw}, back[4] = {1, 1, -1, -1};
  Node *wf = ir_slice(c, w, start, count, back);
  if (!wf) return NULL;
  int taps_c[4] = {0, 2, 3, 1}, cfirst[4] = {1, 0, 2, 3}, pixel_major[6] = {3, 4, 5, 0, 1, 2};
  Dim q = x->shape[0];
  q.k *= s->h * s->w;
  int64_t okk = s->o * s->kh * s->kw;
  Dim w2[2] = {dim_c(okk), dim_c(s->c)}, x2[2] = {dim_c(s->c), q};
  Node *z = ir_matmul(c, ir_reshape(c, ir_transpose(c, wf, taps_c), 2, w2), ir_reshape(c, ir_transpose(c, x, cfirst), 2, x2));
  if (!z) return NULL;
  Dim z6[6] = {dim_c(s->o), dim_c(s->kh), dim_c(s->kw), x->shape[0], dim_c(s->h), dim_c(s->w)};
  z = ir_transpose(c, ir_reshape(c, z, 6, z6), pixel_major);
  int64_t win[9] = {s->kh, s->kw, 1, 1, (s->kh - 1) * s->dh - s->pt, (s->kw - 1) * s->dw - s->pl, s->dh, s->dw, 0};
  return ir_col2im(c, z, win, s->oh, s->ow);
}

// y[o,n,oh,ow] = sum_{c,i,j} windows[n,oh,ow,c,i,j] w[o,c,i,j], one fused
// reduction (the windows broadcast over a new leading O axis: a view, where a
// reshape would cost index divisions), then transposed to [N, O, OH, OW].
static Node *conv_direct(IrCtx *c, const ConvShape *s, Node *x, Node *w, const int64_t *win, const int64_t *pad_end) {
  Node *cols = ir_im2col(c, x, win, pad_end);
  if (!cols) return NULL;
  Dim w7[7] = {dim_c(s->o), dim_c(1), dim_c(1), dim_c(1), dim_c(s->c), dim_c(s->kh), dim_c(s->kw)};
  Node *p = ir_binary(c, OP_MUL, cols, ir_reshape(c, w, 7, w7));
  Node *y = p ? ir_reduce(c, OP_SUM, p, 7u << 4, 0) : NULL;
  int to_nchw[4] = {1, 0, 2, 3};
  return y ? ir_transpose(c, y, to_nchw) : NULL;
}

Node *conv_build(IrCtx *c, int lowering, const ConvShape *s, Node *x, Node *w, const int64_t *win, const int64_t *pad_end) {
  switch (lowering) {
  case CONV_KERNEL: return conv_kernel(c, s, x, w);
  case CONV_DIRECT: return conv_direct(c, s, x, w, win, pad_end);
  default: return conv_im2col(c, s, x, w, win, pad_end);
  }
}

// ---- the cost model ------------------------------------------------------------
// Seconds for a training step's share of one layer (forward and both
// gradients). The rates are fitted to timings of each lowering forced on the
// conv layers of examples/cnn.kiln and a CIFAR-shaped variant, batch 128, one
// thread (benchmarks/train_speed's `kiln_harness 1 conv`; Xeon with AVX-512,
// BLIS GEMM; ms of the training share: cnn 1->32 5x5 28x28: im2col 18,
// kernel 390, direct 135; cnn 32->64 5x5 14x14: im2col 300, kernel 340,
// direct 2190; 64->8 3x3 8x8: im2col 12, kernel 5, direct 60). What counts
// is their ratios.
//   GEMM_FLOPS  BLIS when a product's inner dimension reaches GEMM_FULL
//               (proportionally less below: a product with inner dimension 1
//               is bound by writing its result), the weights' rows counted in
//               whole micro-tiles (gemm_s)
//   MOVE_BYTES  the matrices a lowering materializes, written and read: im2col's
//               window gradient (when col2im takes it), kernel's Z and its gradient
//   PACK_BYTES  the windows the GEMM packs from the image (implicit im2col): read
//               from a cached image into cached panels, never to memory (refit
//               on the AMD EPYC VM, AVX2, once the window GEMMs packed in place:
//               at MOVE_BYTES, counted written and read, the model put 64->16
//               5x5 8x8's im2col at 30 ms against kernel's 25, where im2col
//               measured 5.8-7.2 against 10-14 ms forward and 28-31 against
//               29-31 ms training at one thread, 16-22 against 21-23 at two)
//   LOOP_FLOPS  direct's generated loops (a fused reduction over the window
//               view, output-stationary), forward and both gradients
//   AGG_OPS     kernel's aggregation with stride > 1 (KH*KW strided slices of Z
//               summed; the gradient places each one, KH*KW terms per element
//               of Z), and AGG_FIXED seconds per (kh, kw)
#define GEMM_FLOPS 60e9
#define GEMM_FULL 16.0
#define MOVE_BYTES 12.5e9
#define PACK_BYTES 50e9
#define LOOP_FLOPS 3.5e9
#define AGG_OPS 9e8
#define AGG_FIXED 1e-4

// n x k weights against m rows. The kernel computes n in whole micro-tiles of
// cols columns (rt_gemm_f32_cols; GEMM_FULL where that is not known, BLIS's
// and the loops'), so that is the rate's drop for few weight rows. The padding
// is what sets 64->16 5x5 8x8 apart between the machines: its im2col products
// have 16 columns, half of AVX-512's 32 (Xeon, one thread, training share:
// im2col 15.5 ms, kernel 10.9) and all of AVX2's 16 (AMD EPYC: im2col 30.7,
// kernel 32.3).
static double gemm_s(double n, double k, double m, double cols) {
  double tile = cols > 1 ? cols : GEMM_FULL, e = k < GEMM_FULL ? k / GEMM_FULL : 1;
  return 2 * m * (ceil(n / tile) * tile) * k / (GEMM_FLOPS * e);
}

// The share of a window GEMM's depth Kiln's kernel computes: with stride 1
// along the rows, a panel of pixels of one output row skips the kernel rows
// that fall in the top or bottom padding (runtime/gemm_win.c, rows first), so
// only the kernel rows inside the image count (the CNN's 5x5 "same" layers on
// 14x14: 64 of 70). Oh output rows, h image rows, KH, dilation, stride, padding.
static double rows_inside(int64_t oh, int64_t h, int64_t kh, int64_t dh, int64_t sh, int64_t pt, int64_t sw, double cols) {
  if (cols <= 1 || sw != 1) return 1;
  int64_t in = 0;
  for (int64_t y = 0; y < oh; y++)
    for (int64_t i = 0; i < kh; i++) in += y * sh + i * dh - pt >= 0 && y * sh + i * dh - pt < h;
  return (double)in / (double)(oh * kh);
}

// The share of a window product's time left where pass_lower runs it as
// Winograd's F(m, r) with `gain` times fewer multiplies (0: it does not): the
// tile transforms and the shallower products (depth C) take back part of the
// saving. Measured alone on the CNN's second layer (5x5, 32 -> 64 channels,
// 14x14, batch 128, one thread), 2.8x fewer multiplies (6x6 tiles) ran 1.43x
// faster with AVX-512 (32 columns) and 1.6x with AVX2; the same at 3x3 (3.1x
// fewer, the tiles overhanging 14x14) 1.35-1.43x and 1.55x; the weights'
// gradient 1.49x and 1.57x at 5x5. With 8x8 tiles, 4.8x fewer: 1.7-1.95x and
// 2.1x, the weights' gradient 1.9x and 2.4x (this model: 1.76x, 2.14x).
static double winograd_share(double gain, double cols) {
  return gain > 0 ? 1 / (1 + (gain - 1) * (cols >= 32 ? 0.2 : 0.3)) : 0;
}

// Each lowering's estimated seconds.
static void estimate(const ConvShape *s, double t[CONV_NLOWER]) {
  double n = (double)s->n, p = n * s->oh * s->ow, kk = (double)s->kh * s->kw, k = s->c * kk, q = n * s->h * s->w;
  double cols = rt_gemm_f32_cols();
  double fwd_in = rows_inside(s->oh, s->h, s->kh, s->dh, s->sh, s->pt, s->sw, cols);
  double back_in = s->sh * s->sw > 1 ? 1 : rows_inside(s->h, s->oh, s->kh, s->dh, 1, (s->kh - 1) * s->dh - s->pt, 1, cols);
  // Winograd's products compute every tile, padding or not, and their
  // columns padded to a micro-tile cost it little (its time is as much the
  // transforms', by channel): 64 -> 16 5x5 8x8 measured im2col 9.8 ms against
  // kernel 11.9, where counted padded they came to 28 against 26.
  double grad_in = 1, wcols = cols, back_cols = cols;   // the weights' gradient's share
  LowerOpts lo = pipe_lower_opts();
  if (s->dtype == DT_F32 && lo.gemm && lo.windows && lo.winograd) {
    double fwd = winograd_share(winograd_gain(s->kh, s->kw, s->sh, s->sw, s->dh, s->dw, s->oh, s->ow, s->c, s->o), cols);
    double back = winograd_share(winograd_gain(s->kh, s->kw, s->sh, s->sw, s->dh, s->dw, s->h, s->w, s->o, s->c), cols);
    fwd_in = fwd > 0 ? fwd : fwd_in;
    grad_in = fwd > 0 ? fwd : 1;
    wcols = fwd > 0 ? 1 : cols;
    back_in = back > 0 ? back : back_in;
    back_cols = back > 0 ? 1 : cols;
  }
  // im2col: GEMMs of O x C*KK x P for the forward pass and the weights'
  // gradient, each packing the window matrix from the image; the input's
  // gradient a transposed convolution (passes/convgrad.c: C x O*KK x Q,
  // packing dY's windows), or else a third GEMM whose window-matrix gradient
  // is written and read back by col2im.
  // The input's gradient only where a training step computes it (input_grad).
  t[CONV_IM2COL] = (grad_in + fwd_in) * gemm_s(s->o, k, p, wcols) + 2 * p * k * 4 / PACK_BYTES;
  int64_t win[9] = {s->kh, s->kw, s->sh, s->sw, s->pt, s->pl, s->dh, s->dw, 0};
  double share = convgrad_share(win, s->h, s->w, s->oh, s->ow);
  if (s->input_grad) {
    if (share > 0 && s->c >= CONVGRAD_MIN_CHANNELS)   // with a stride, its phases summed: one more pass over dx
      t[CONV_IM2COL] += share * (back_in * gemm_s(s->c, s->o * kk, q, back_cols) + q * s->o * kk * 4 / PACK_BYTES) +
                        (s->sh * s->sw > 1) * 2 * q * s->c * 4 / MOVE_BYTES;
    else
      t[CONV_IM2COL] += gemm_s(s->o, k, p, cols) + 2 * p * k * 4 / MOVE_BYTES;
  }
  // kernel: three GEMMs of O*KK x C x Q (every input pixel), Z and its
  // gradient written and read: im2col's costs with C and O swapped. With a
  // stride, Z's rows no output uses are computed too, and the aggregation is
  // strided slices whose gradient costs KH*KW terms per element of Z.
  int products = 2 + s->input_grad;
  t[CONV_KERNEL] = products * gemm_s(s->o * kk, s->c, q, cols) + 4 * q * s->o * kk * 4 / MOVE_BYTES;
  if (!kernel_by_col2im(s)) t[CONV_KERNEL] += 2 * p * s->o * kk * 4 / MOVE_BYTES + q * s->o * kk * kk / AGG_OPS + kk * AGG_FIXED;
  // direct: im2col's multiply-adds in generated loops, nothing materialized.
  t[CONV_DIRECT] = products * 2 * p * s->o * k / LOOP_FLOPS;
}

// ---- the tuning cache --------------------------------------------------------

static void shape_text(const ConvShape *s, char *out, size_t len) {
  snprintf(out, len, "%s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] stride %lld,%lld pad %lld,%lld,%lld,%lld dilation %lld,%lld",
           ir_dtype_name(s->dtype), (long long)s->n, (long long)s->c, (long long)s->h, (long long)s->w, (long long)s->o,
           (long long)s->c, (long long)s->kh, (long long)s->kw, (long long)s->sh, (long long)s->sw, (long long)s->pt,
           (long long)s->pl, (long long)s->pb, (long long)s->pr, (long long)s->dh, (long long)s->dw);
  if (!s->input_grad) snprintf(out + strlen(out), len - strlen(out), ", no input gradient");
}

// The cache key: the layer's shapes, the CPU and Kiln's version.
static void tune_key(const ConvShape *s, char key[40]) {
  char shp[256], cpu[33];
  shape_text(s, shp, sizeof shp);
  cache_host_id(cpu);
  CacheHash h;
  cache_hash_init(&h);
  cache_hash_str(&h, "conv-tune 8");   // 8: the input's gradient timed only where training computes it
  cache_hash_str(&h, pipe_lower_opts().winograd ? "winograd" : "no winograd");   // KILN_WINOGRAD=0 times others
  cache_hash_str(&h, KILN_VERSION);
  cache_hash_str(&h, cpu);
  cache_hash_str(&h, shp);
  char hex[33];
  cache_hash_hex(&h, hex);
  snprintf(key, 40, "conv-%s", hex);
}

// A cached decision: "LOWERING ms0 ms1 ms2". 1 if found.
static int tune_lookup(const ConvShape *s, int *lowering, double ms[CONV_NLOWER]) {
  char *dir = cache_default_dir(), key[40], *data = NULL, why[128];
  size_t len;
  int found = 0;
  if (!dir) return 0;
  tune_key(s, key);
  if (cache_get(dir, key, &data, &len, why, sizeof why) == CACHE_HIT && data) {
    char name[16], text[128];
    snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1), data);
    if (sscanf(text, "%15s %lf %lf %lf", name, &ms[0], &ms[1], &ms[2]) == 4 && (*lowering = conv_lowering_by_name(name)) >= 0)
      found = 1;
  }
  free(data);
  free(dir);
  return found;
}

static void tune_store(const ConvShape *s, int lowering, const double ms[CONV_NLOWER]) {
  char *dir = cache_default_dir(), key[40], text[128];
  if (!dir) return;
  if (cache_prepare(dir) == 0) {
    tune_key(s, key);
    int n = snprintf(text, sizeof text, "%s %.6f %.6f %.6f\n", names[lowering], ms[0], ms[1], ms[2]);
    cache_put(dir, key, text, (size_t)n);
  }
  free(dir);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// One candidate's forward and backward step on a batch of the layer's shape, in
// milliseconds (the best of a few runs), through a separate Kiln context; -1 on failure.
// The backward step computes the input's gradient only where training does
// (input_grad): a first layer's costs nothing there, and counting it could
// pick the lowering whose input gradient is cheap rather than the fastest.
// The output's gradient R is a buffer, as dY is in training: drawn in the graph
// (normal()), it was drawn again on every run, 2.5 ms of the 2.8 that im2col's
// step took on a 1-channel 28x28 layer at batch 32.
static double measure(const ConvShape *s, int lowering, int threads) {
  char prog[1024];
  const char *t = ir_dtype_name(s->dtype);
  char pad[64];
  snprintf(pad, sizeof pad, s->pt == s->pb && s->pl == s->pr ? "[%lld, %lld]" : "\"same\"", (long long)s->pt, (long long)s->pl);
  snprintf(prog, sizeof prog,
           "param X : %s[%lld, %lld, %lld, %lld] = glorot\n"
           "param K : %s[%lld, %lld, %lld, %lld] = he\n"
           "y = conv2d(X, K, stride=[%lld, %lld], pad=%s, dilation=[%lld, %lld], lowering=\"%s\")\n"
           "param R : %s[%lld, %lld, %lld, %lld] = glorot\n"
           "loss = sum(y * R)\n"
           "dK = grad(loss, K)\n"
           "%s",
           t, (long long)s->n, (long long)s->c, (long long)s->h, (long long)s->w, t, (long long)s->o, (long long)s->c,
           (long long)s->kh, (long long)s->kw, (long long)s->sh, (long long)s->sw, pad, (long long)s->dh, (long long)s->dw,
           names[lowering], t, (long long)s->n, (long long)s->o, (long long)s->oh, (long long)s->ow,
           s->input_grad ? "dX = grad(loss, X)\n" : "");
  kiln_options opt = {.threads = threads, .seed = 1, .out = stderr};
  kiln_ctx *k = kiln_new(&opt);
  if (!k) return -1;
  double best = -1;
  const char *outs[] = {"y", "dK", "dX"};
  int nout = s->input_grad ? 3 : 2;
  kiln_graph *g = NULL;
  kiln_tensor o[3];
  memset(o, 0, sizeof o);
  if (!kiln_exec(k, "tune", prog) && (g = kiln_compile(k, outs, nout, NULL, 0))) {
    int ok = 1;
    for (int i = 0; i < nout && ok; i++) {
      ok = !kiln_output_shape(g, NULL, i, &o[i]);
      int64_t ne = 1;
      for (int d = 0; d < o[i].ndim; d++) ne *= o[i].shape[d];
      o[i].data = ok ? malloc((size_t)ne * ir_dtype_size(s->dtype)) : NULL;
      ok = ok && o[i].data;
    }
    if (ok && !kiln_run(g, NULL, o)) {   // the first run warms caches and the pool
      double start = now_ms();
      for (int r = 0; r < 20; r++) {
        double t0 = now_ms();
        if (kiln_run(g, NULL, o)) break;
        double dt = now_ms() - t0;
        if (best < 0 || dt < best) best = dt;
        if (r >= 2 && now_ms() - start > 300) break;
      }
    }
  }
  if (best < 0) fprintf(stderr, "kiln --tune: could not time the %s lowering: %s\n", names[lowering], kiln_error(k));
  for (int i = 0; i < 3; i++) free(o[i].data);
  if (g) kiln_graph_free(g);
  kiln_free(k);
  return best;
}

// ---- the choice ----------------------------------------------------------------

#define TUNE_SKIP 8

static void times_text(double ms, char *out, size_t len) {
  if (ms < 0) snprintf(out, len, "skipped");
  else snprintf(out, len, "%.3g ms", ms);
}

static void note(Ev *ev, const ConvShape *s, int lowering, const char *why) {
  if (!ev->pipe.dump_after && !ev->pipe.emit_c) return;
  char line[640], n[24];
  snprintf(n, sizeof n, s->batch_assumed ? "B" : "%lld", (long long)s->n);
  snprintf(line, sizeof line, "conv2d [%s, %lld, %lld, %lld] x [%lld, %lld, %lld, %lld]: %s (why: %s)", n, (long long)s->c, (long long)s->h, (long long)s->w, (long long)s->o, (long long)s->c, (long long)s->kh,
           (long long)s->kw, titles[lowering], why);
  for (int i = 0; i < ev->nconv_notes; i++)
    if (!strcmp(ev->conv_notes[i], line)) return;
  ev->conv_notes = realloc(ev->conv_notes, sizeof *ev->conv_notes * (ev->nconv_notes + 1));
  if (!ev->conv_notes) abort();
  ev->conv_notes[ev->nconv_notes++] = arena_strdup(ev->arena, line);
  fprintf(ev->pipe.dump, "%s %s\n", ev->pipe.emit_c ? "//" : "#", line);
}

// A layer whose input reaches no parameter: its times leave out x's gradient.
static const char *grad_note(const ConvShape *s) {
  return s->input_grad ? "" : "; no input gradient (x reaches no parameter)";
}

int conv_choose(Ev *ev, const ConvShape *s, int forced) {
  char why[400];
  double ms[CONV_NLOWER];
  int l;
  if (forced >= 0) {
    note(ev, s, forced, "lowering= asked for it");
    return forced;
  }
  if (tune_lookup(s, &l, ms)) {
    char got[3][32];
    for (int i = 0; i < CONV_NLOWER; i++) times_text(ms[i], got[i], sizeof got[i]);
    snprintf(why, sizeof why, "tuned on this machine: im2col %s, kernel %s, direct %s%s", got[0], got[1], got[2], grad_note(s));
    note(ev, s, l, why);
    return l;
  }
  double t[CONV_NLOWER];
  estimate(s, t);
  int best = 0;
  for (int i = 1; i < CONV_NLOWER; i++)
    if (t[i] < t[best]) best = i;
  if (ev->tune) {
    // Candidates the model puts at over TUNE_SKIP times the best are not run
    // (one of them can take minutes); they count as -1 ms, "skipped".
    char shp[256], got[3][32];
    l = -1;
    for (int i = 0; i < CONV_NLOWER; i++) {
      ms[i] = t[i] > TUNE_SKIP * t[best] ? -1 : measure(s, i, ev->tune_threads);
      if (ms[i] >= 0 && (l < 0 || ms[i] < ms[l])) l = i;
    }
    if (l >= 0) {
      shape_text(s, shp, sizeof shp);
      for (int i = 0; i < CONV_NLOWER; i++) times_text(ms[i], got[i], sizeof got[i]);
      fprintf(stderr, "kiln --tune: conv2d %s: im2col %s, kernel %s, direct %s: %s\n", shp, got[0], got[1], got[2], names[l]);
      tune_store(s, l, ms);
      snprintf(why, sizeof why, "tuned on this machine: im2col %s, kernel %s, direct %s%s", got[0], got[1], got[2], grad_note(s));
      note(ev, s, l, why);
      return l;
    }
  }
  l = best;
  snprintf(why, sizeof why, "cost model%s: im2col %.3g ms, kernel %.3g ms, direct %.3g ms; C*KH*KW = %lld, O = %lld%s%s",
           s->batch_assumed ? " (batch taken as 32)" : "", t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, (long long)(s->c * s->kh * s->kw),
           (long long)s->o, s->sh * s->sw > 1 ? ", stride > 1 wastes kernel's rows" : "",
           grad_note(s));
  note(ev, s, l, why);
  return l;
}
