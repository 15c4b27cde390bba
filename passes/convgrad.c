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
#include "passes.h"

static Node *transposed_conv(IrCtx *c, Node *n, void *ud) {
  (void)ud;
  if (n->op != OP_COL2IM) return NULL;
  const int64_t *win = n->a.i;
  Node *cols = n->src[0];
  if (win[2] != 1 || win[3] != 1 || cols->op != OP_RESHAPE || cols->src[0]->op != OP_MATMUL) return NULL;
  Node *mm = cols->src[0];
  Node *a = mm->src[0], *b = mm->src[1];
  if (mm->ndim != 2 || a->ndim != 2 || b->ndim != 2 || !ir_is_float(mm->dtype)) return NULL;
  int64_t kh = win[0], kw = win[1], pt = win[4], pl = win[5], dh = win[6], dw = win[7];
  int64_t ch = cols->shape[3].k, oh = cols->shape[1].k, ow = cols->shape[2].k, h = n->shape[2].k, w = n->shape[3].k;
  Dim o = a->shape[1];
  if (o.sym || !dim_is(mm->shape[1], ch * kh * kw) || ch < CONVGRAD_MIN_CHANNELS) return NULL;
  // dY's windows: padding (KH-1)*dh - pt before, what gives back H after.
  int64_t pad[2] = {(kh - 1) * dh - pt, (kw - 1) * dw - pl}, pad_end[2] = {h - oh + pt, w - ow + pl};
  if (pad[0] < 0 || pad[1] < 0 || pad_end[0] < 0 || pad_end[1] < 0) return NULL;
  // dY [N*OH*OW, O] as the image [N, O, OH, OW] and its windows.
  Dim n4[4] = {cols->shape[0], cols->shape[1], cols->shape[2], o};
  int to_nchw[4] = {0, 3, 1, 2}, taps_c[4] = {0, 2, 3, 1};
  int64_t win2[9] = {kh, kw, 1, 1, pad[0], pad[1], dh, dw, 0};
  Node *t = ir_reshape(c, a, 4, n4);
  if (t) t = ir_transpose(c, t, to_nchw);
  Node *wins = t ? ir_im2col(c, t, win2, pad_end) : NULL;
  // The kernel [O, C*KH*KW] as [O*KH*KW, C], its taps reversed.
  Dim k4[4] = {o, dim_c(ch), dim_c(kh), dim_c(kw)}, k2[2] = {dim_c(o.k * kh * kw), dim_c(ch)};
  int64_t start[4] = {0, 0, kh - 1, kw - 1}, count[4] = {-1, -1, kh, kw}, back[4] = {1, 1, -1, -1};
  Node *k = ir_reshape(c, b, 4, k4);
  if (k) k = ir_slice(c, k, start, count, back);
  if (k) k = ir_transpose(c, k, taps_c);
  if (k) k = ir_reshape(c, k, 2, k2);
  if (!wins || !k) return NULL;
  Dim rows = cols->shape[0];
  rows.k *= h * w;
  Dim w2[2] = {rows, dim_c(o.k * kh * kw)}, nhwc[4] = {cols->shape[0], dim_c(h), dim_c(w), dim_c(ch)};
  Node *y = ir_reshape(c, wins, 2, w2);
  if (y) y = ir_matmul(c, y, k);
  if (y) y = ir_reshape(c, y, 4, nhwc);
  return y ? ir_transpose(c, y, to_nchw) : NULL;
}

IrGraph *pass_convgrad(IrCtx *c, IrGraph *g) { return pass_rewrite(c, g, transposed_conv, NULL); }
