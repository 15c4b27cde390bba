// The input gradient of an im2col convolution as the transposed convolution
// it is. Needs: a well-formed graph. Keeps: shapes, dtypes and values (the
// same products summed in another order).
//
// Autodiff gives an im2col layer's input gradient as col2im(dY @ W): a
// window-shaped matrix KH*KW times the image's size (the CNN's second layer:
// 80 MB), written by a GEMM and summed back into the image by a col2im. With
// stride 1 that is a convolution of dY, zero-padded, with the kernel flipped
// and its channel axes swapped:
//   dx[n,c,h,w] = sum_{o,i,j} dY[n, h + pt - i*dh, w + pl - j*dw, o] W[o,c,i,j]
// so it becomes an im2col of dY times the flipped kernel, one product whose
// windows the GEMM packs from dY (implicit im2col), and no col2im: 17 against
// 30 ms of the CNN's training step at one thread.
//
// With stride s, pixel h = q*s + r takes only the taps i with
// i*dh = r + pt (mod s), and reads dY at q + (r + pt - i*dh)/s: for each
// phase r (one per residue of h and of w) a stride-1 convolution of dY with
// those taps of the kernel, its result placed at every s-th pixel (a PAD with
// a step), the phases summed (each pixel gets one nonzero term, so the sum is
// exact). Same products, no window matrix and no col2im. Where the forward
// padding exceeds the window (a 2x2 kernel at stride 3, padding 1), a phase's
// taps begin or end past dY's edge: its windows would need negative padding,
// so they read dY cropped instead.
#include "passes.h"

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

// Phase r of one axis: image positions r, r+s, ... (q of them), taps
// last, last-step, ... (count of them). Walked that way they read dY, less
// `crop` values at its start and `crop_end` at its end, as a stride-1 window
// of dilation dil, padded `pad` before and `pad_end` after.
typedef struct { int64_t q, last, count, step, dil, pad, pad_end, crop, crop_end; } Phase;

// 1: the phase has pixels and taps that read dY; 0: it has none (its pixels
// get no term).
static int axis_phase(int64_t r, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out, int64_t in, Phase *ph) {
  int64_t first = -1;
  for (int64_t i = 0; i < k && first < 0; i++)
    if ((r + p - i * d) % s == 0) first = i;
  ph->q = r < in ? (in - r + s - 1) / s : 0;
  if (first < 0 || !ph->q) return 0;
  ph->step = s / gcd(d, s);   // i*d mod s repeats with this period
  ph->count = (k - 1 - first) / ph->step + 1;
  ph->last = first + (ph->count - 1) * ph->step;
  ph->dil = d * ph->step / s;
  ph->pad = -(r + p - ph->last * d) / s;
  ph->pad_end = ph->q - out - ph->pad + (ph->count - 1) * ph->dil;
  ph->crop = ph->pad < 0 ? -ph->pad : 0, ph->crop_end = ph->pad_end < 0 ? -ph->pad_end : 0;
  ph->pad += ph->crop, ph->pad_end += ph->crop_end;
  return out - ph->crop - ph->crop_end > 0;   // else every window reads padding only
}

double convgrad_share(const int64_t *win, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  Phase a, b;
  int64_t pairs = 0;
  for (int64_t rh = 0; rh < win[2]; rh++)
    for (int64_t rw = 0; rw < win[3]; rw++) {
      if (axis_phase(rh, win[0], win[2], win[4], win[6], oh, h, &a) && axis_phase(rw, win[1], win[3], win[5], win[7], ow, w, &b))
        pairs += a.q * b.q * a.count * b.count;
    }
  return pairs ? (double)pairs / (double)(h * w * win[0] * win[1]) : -1;
}

// Phase (a, b)'s share of dx, as [N, H, W, C]: dY's windows times its taps of
// the kernel k4 [O, C, KH, KW], flipped, placed at every stride-th pixel.
static Node *phase_product(IrCtx *c, Node *dy, Node *k4, const Phase *a, const Phase *b, int64_t rh, int64_t rw,
                           const int64_t *win, Dim n, int64_t h, int64_t w) {
  int64_t ch = k4->shape[1].k, o = k4->shape[0].k;
  int64_t win2[9] = {a->count, b->count, 1, 1, a->pad, b->pad, a->dil, b->dil, 0}, pad_end[2] = {a->pad_end, b->pad_end};
  int64_t start[4] = {0, 0, a->last, b->last}, count[4] = {-1, -1, a->count, b->count}, back[4] = {1, 1, -a->step, -b->step};
  int taps_c[4] = {0, 2, 3, 1};
  Dim rows = n, k2[2] = {dim_c(o * a->count * b->count), dim_c(ch)};
  rows.k *= a->q * b->q;
  Dim w2[2] = {rows, k2[0]}, part[4] = {n, dim_c(a->q), dim_c(b->q), dim_c(ch)}, whole[4] = {n, dim_c(h), dim_c(w), dim_c(ch)};
  int64_t at[4] = {0, rh, rw, 0}, every[4] = {1, win[2], win[3], 1};
  Node *k = ir_slice(c, k4, start, count, back);
  if (k) k = ir_transpose(c, k, taps_c);
  if (k) k = ir_reshape(c, k, 2, k2);
  // dY less the phase's crops (ir_slice gives dY itself where there are none)
  int64_t from[4] = {0, 0, a->crop, b->crop}, one[4] = {1, 1, 1, 1};
  int64_t keep[4] = {-1, -1, dy->shape[2].k - a->crop - a->crop_end, dy->shape[3].k - b->crop - b->crop_end};
  Node *y = k ? ir_slice(c, dy, from, keep, one) : NULL;
  if (y) y = ir_im2col(c, y, win2, pad_end);
  if (y) y = ir_reshape(c, y, 2, w2);
  if (y) y = ir_matmul(c, y, k);
  if (y) y = ir_reshape(c, y, 4, part);
  return y ? ir_pad(c, y, whole, at, every) : NULL;
}

static Node *transposed_conv(IrCtx *c, Node *n, void *ud) {
  (void)ud;
  if (n->op != OP_COL2IM) return NULL;
  const int64_t *win = n->a.i;
  Node *cols = n->src[0];
  if (cols->op != OP_RESHAPE || cols->src[0]->op != OP_MATMUL) return NULL;
  Node *mm = cols->src[0];
  Node *a = mm->src[0], *b = mm->src[1];
  if (mm->ndim != 2 || a->ndim != 2 || b->ndim != 2 || !ir_is_float(mm->dtype)) return NULL;
  int64_t kh = win[0], kw = win[1];
  int64_t ch = cols->shape[3].k, oh = cols->shape[1].k, ow = cols->shape[2].k, h = n->shape[2].k, w = n->shape[3].k;
  Dim o = a->shape[1];
  if (o.sym || !dim_is(mm->shape[1], ch * kh * kw) || ch < CONVGRAD_MIN_CHANNELS) return NULL;
  // dY [N*OH*OW, O] as the image [N, O, OH, OW]; the kernel [O, C*KH*KW] as [O, C, KH, KW].
  Dim n4[4] = {cols->shape[0], cols->shape[1], cols->shape[2], o}, k4[4] = {o, dim_c(ch), dim_c(kh), dim_c(kw)};
  int to_nchw[4] = {0, 3, 1, 2};
  Node *dy = ir_reshape(c, a, 4, n4);
  if (dy) dy = ir_transpose(c, dy, to_nchw);
  Node *k = ir_reshape(c, b, 4, k4), *sum = NULL;
  if (!dy || !k) return NULL;
  for (int64_t rh = 0; rh < win[2]; rh++)
    for (int64_t rw = 0; rw < win[3]; rw++) {
      Phase pa, pb;
      if (!axis_phase(rh, kh, win[2], win[4], win[6], oh, h, &pa) || !axis_phase(rw, kw, win[3], win[5], win[7], ow, w, &pb))
        continue;
      Node *y = phase_product(c, dy, k, &pa, &pb, rh, rw, win, cols->shape[0], h, w);
      if (!y) return NULL;
      sum = sum ? ir_binary(c, OP_ADD, sum, y) : y;
      if (!sum) return NULL;
    }
  return sum ? ir_transpose(c, sum, to_nchw) : NULL;   // no window reads the image: col2im's zeros
}

IrGraph *pass_convgrad(IrCtx *c, IrGraph *g) { return pass_rewrite(c, g, transposed_conv, NULL); }
