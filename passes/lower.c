// Lowering choice: picks how each kernel that has several implementations is
// lowered, and records why. Needs: a fused schedule. Keeps: everything else.
// A float matrix product large enough that a library call pays goes to the
// runtime's rt_gemm_* (its packed GEMM or BLIS, MM_GEMM); smaller ones, and all of them when
// LowerOpts.gemm is off, are generated loops (MM_LOOPS). A product whose
// size is symbolic and may fall either side gets both, chosen per run
// (MM_BY_SIZE). Operands are read through their views' strides either way:
// fuse.c gives a transposed or broadcast operand no buffer of its own.
#include "passes.h"
#include <inttypes.h>
#include <stdio.h>

// When the runtime's GEMM pays (gemm.c's packed f32 path), measured with
// kiln_run on this project's machine (Xeon, AVX-512, one thread, a busy
// machine; f32 microseconds, loops / gemm, best of 7 alternating; NT is
// a @ transpose(b)):
//   m*n*k    shape          loops    gemm
//     512    8x8x8           0.15    0.28
//    1728    12x12x12        0.39    0.37
//    2048    128x4x4         0.48    0.89
//    4096    16x16x16        0.77    0.62    (NT 0.80 / 0.62)
//    8000    20x20x20        1.66    0.89
//    8192    16x32x16        1.76    0.49    (128x8x8 NT 1.50 / 1.37)
//   32768    32x32x32        6.64    0.99
//    2^18    256x256x4       18.9    15.0    (NT 41.9 / 15.3)
//    2^21    128x128x128      311      44    (NT)
// Loops win below about 2048 multiply-adds, where the call's fixed cost
// (about 0.3 us) is most of the work; they tie around 1728 and from 4096 on
// the GEMM wins by 1.25x, then 2-7x. (With BLIS the crossover was 8192, and
// an inner dimension under 8 with b transposed stayed loops, BLIS being 2x
// slower there; the packed GEMM folds the transpose into packing and wins.)
#define GEMM_MIN_WORK 4096

// The size as text ("B*128*10") and its constant part (symbols count as 1).
static double work_text(const IrCtx *c, const Node *mm, char *buf, size_t len, int *symbolic) {
  Dim f[IR_MAXDIM + 3];
  int nf = sched_mm_work(mm, f);
  double work = 1;
  size_t n = 0;
  *symbolic = 0;
  for (int i = 0; i < nf; i++) {
    const char *sep = i ? "*" : "";
    work *= (double)f[i].k;
    if (!f[i].sym || !f[i].k) n += snprintf(buf + n, len - n, "%s%" PRId64, sep, f[i].k);
    else if (f[i].k == 1) n += snprintf(buf + n, len - n, "%s%s", sep, c->symnames[f[i].sym - 1]);
    else n += snprintf(buf + n, len - n, "%s%" PRId64 "*%s", sep, f[i].k, c->symnames[f[i].sym - 1]);
    *symbolic |= f[i].sym && f[i].k;
    if (n >= len) break;
  }
  return work;
}

// Winograd's F(m, r) for a convolution's window products, forward and the
// weights' gradient (runtime/wino.c: alpha x alpha tiles, alpha 6 or 8, of
// m = alpha - r + 1 outputs a side, r = 2..5 taps, stride 1, no dilation):
// alpha^2 products per tile over the channels, where the windows take KH*KW
// per output. It pays where that saves a third or more of the multiplies,
// counting the tiles' overhang past the image's edge, and the channels are
// enough (16 in and out) for the tile transforms, which cost per tile and
// channel, to stay a small share. Alone (one thread, batch 128, 14x14 images,
// 32 -> 64 channels), against the window product, with 6x6 tiles: 5x5 1.6x
// faster with AVX2 and 1.43x with AVX-512; 3x3 1.55x and 1.35-1.43x; the
// weights' gradient 1.57x and 1.49x, 3x3 1.64x (AVX-512); 16 -> 16 channels
// 3x3 at 16x16, 1.8x with AVX-512 (8 lanes). 8x8 tiles, F(4, 5), take 5x5's
// to 1.7-1.95x and its weights' gradient to 1.9x with AVX-512, 2.1x and 2.4x
// with AVX2.
//
// The tile's side, as wino.c's wino_alpha chooses it (the same rule, so that
// the reason names the F(m, r) that runs): 8 where its tiles take at most 0.8
// of 6's products, counting the overhang, for kernels of 3 taps a side or
// more (F(7, 2) errs the most).
static int winograd_alpha(int64_t kh, int64_t kw, int64_t oh, int64_t ow) {
  if (kh < 3 || kw < 3 || kh > 5 || kw > 5) return 6;
  double t6 = 36.0 * ((oh + 6 - kh) / (7 - kh)) * ((ow + 6 - kw) / (7 - kw));
  double t8 = 64.0 * ((oh + 8 - kh) / (9 - kh)) * ((ow + 8 - kw) / (9 - kw));
  return t8 <= 0.8 * t6 ? 8 : 6;
}

double winograd_gain(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t oh, int64_t ow,
                     int64_t c, int64_t o) {
  if (kh < 2 || kh > 5 || kw < 2 || kw > 5 || sh != 1 || sw != 1 || dh != 1 || dw != 1 || c < 16 || o < 16) return 0;
  int64_t wa = winograd_alpha(kh, kw, oh, ow), mh = wa + 1 - kh, mw = wa + 1 - kw;
  int64_t tiles = (oh + mh - 1) / mh * ((ow + mw - 1) / mw);
  double gain = (double)(oh * ow * kh * kw) / (double)(tiles * wa * wa);
  return gain >= 1.5 ? gain : 0;
}

static double product_winograd_gain(const Node *win, const Node *mm) {
  const int64_t *a = win->a.i;
  Dim o = mm->shape[1];
  if (mm->dtype != DT_F32 || win->shape[1].sym || win->shape[2].sym || win->shape[3].sym || o.sym) return 0;
  return winograd_gain(a[0], a[1], a[2], a[3], a[6], a[7], win->shape[1].k, win->shape[2].k, win->shape[3].k, o.k);
}

static void lower_matmul(const Schedule *s, Kernel *K, const LowerOpts *o) {
  const IrCtx *c = s->ctx;
  Node *n = K->node, *base;
  char w[80];
  int symbolic, taps_rows;
  double work = work_text(c, n, w, sizeof w, &symbolic);
  const char *fold = sched_mm_shared_rhs(n) ? ", batch as one product" : "";
  Node *win = sched_mm_windows(s, n, &taps_rows);
  K->strategy = MM_LOOPS;
  double gain = win && o->winograd ? product_winograd_gain(win, n) : 0;
  K->winograd = gain > 0;
  if (win) {   // fuse.c left the windows unmaterialized: only rt_gemm_*_win (or _wino) reads them
    K->strategy = MM_GEMM;
    int img = sched_view_base(s, win->src[0], &base) ? sched_buf(s, base) : -1;
    int64_t kh = win->a.i[0], kw = win->a.i[1];
    int64_t wa = K->winograd ? winograd_alpha(kh, kw, win->shape[1].k, win->shape[2].k) : 6;
    if (K->winograd)   // rt_gemm_f32_wino's fallback is the window product
      snprintf(K->why, sizeof K->why, "winograd F(%" PRId64 "x%" PRId64 ", %" PRId64 "x%" PRId64 ")%s: m*n*k = %s, %.1fx "
               "fewer multiplies, the tiles read from the image buf%d", wa + 1 - kh, wa + 1 - kw, kh, kw,
               taps_rows == SCHED_WIN_TAPS_ONES ? " (weights' and bias's gradient)" : taps_rows ? " (weights' gradient)" : "",
               w, gain, img);
    else
      snprintf(K->why, sizeof K->why, "gemm: m*n*k = %s, %s packed from the image buf%d (implicit im2col)", w,
               taps_rows == SCHED_WIN_TAPS_ONES ? "A^T and a row of ones (the bias's gradient): the windows"
               : taps_rows == SCHED_WIN_TAPS    ? "A^T: the windows"
                                                : "A: the windows",
               img);
  } else if (!o->gemm) snprintf(K->why, sizeof K->why, "loops: rt_gemm turned off");
  else if (n->dtype != DT_F32 && n->dtype != DT_F64)
    snprintf(K->why, sizeof K->why, "loops: %s has no BLIS product", ir_dtype_name(n->dtype));
  else if ((!symbolic || work == 0) && work < GEMM_MIN_WORK)
    snprintf(K->why, sizeof K->why, "loops: m*n*k = %s = %.0f < %d", w, work, GEMM_MIN_WORK);
  else if (work >= GEMM_MIN_WORK) {
    K->strategy = MM_GEMM;
    if (symbolic) snprintf(K->why, sizeof K->why, "gemm: m*n*k = %s >= %d at any size%s", w, GEMM_MIN_WORK, fold);
    else snprintf(K->why, sizeof K->why, "gemm: m*n*k = %s = %.0f >= %d%s", w, work, GEMM_MIN_WORK, fold);
  } else {
    K->strategy = MM_BY_SIZE;
    K->gemm_from = GEMM_MIN_WORK;
    snprintf(K->why, sizeof K->why, "by size: gemm when m*n*k = %s >= %d, else loops%s", w, GEMM_MIN_WORK, fold);
  }
}

void pass_lower(Schedule *s, const LowerOpts *o) {
  for (int k = 0; k < s->nk; k++)
    if (s->ks[k].kind == KS_MATMUL) lower_matmul(s, &s->ks[k], o);
}
