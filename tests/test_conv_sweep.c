// conv2d over random shapes, every lowering, 1 and 2 threads: the output and
// both gradients (input and kernel) against a direct reference in f64, through
// the C API. The shapes come from a fixed seed and cover what the fixed cases
// of test_nn.py pick by hand, mixed: batch 1-3, channels 1-4 or 8-40 (16 and
// up take passes/convgrad.c's transposed convolution), kernels 1-5 a side,
// strides 1-3, dilation 1-2, padding 0-3 (larger than the window, too), images
// from the window's size to 12 more.
//
//   test_conv_sweep [GOLDEN_DIR] [COUNT [SEED]]   (GOLDEN_DIR is ignored)
#include "kiln.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int passed, failed;

static uint64_t state;
static int rnd(int lo, int hi) {   // uniform in [lo, hi] (an LCG's high bits)
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (int)((state >> 33) % (uint64_t)(hi - lo + 1));
}

typedef struct { int n, c, o, kh, kw, sh, sw, dh, dw, ph, pw, h, w, oh, ow; } Shape;

static int pick(Shape *s) {
  s->n = rnd(1, 3);
  s->c = rnd(0, 2) ? rnd(8, 40) : rnd(1, 4);
  s->o = rnd(0, 2) ? rnd(8, 40) : rnd(1, 4);
  s->kh = rnd(1, 5), s->kw = rnd(1, 5), s->sh = rnd(1, 3), s->sw = rnd(1, 3);
  s->dh = rnd(0, 3) ? 1 : 2, s->dw = rnd(0, 3) ? 1 : 2;
  s->ph = rnd(0, 3), s->pw = rnd(0, 3);
  int span_h = s->dh * (s->kh - 1) + 1, span_w = s->dw * (s->kw - 1) + 1;
  s->h = span_h + rnd(0, 12) - 2 * s->ph, s->w = span_w + rnd(0, 12) - 2 * s->pw;
  if (s->h < 1 || s->w < 1 || s->h + 2 * s->ph < span_h || s->w + 2 * s->pw < span_w) return 0;
  s->oh = (s->h + 2 * s->ph - span_h) / s->sh + 1, s->ow = (s->w + 2 * s->pw - span_w) / s->sw + 1;
  return 1;
}

// y, dx = d sum(y*r)/dx, dk = d sum(y*r)/dk from the definition.
static void reference(const Shape *s, const float *x, const float *k, const float *r, double *y, double *dx, double *dk) {
  for (int n = 0; n < s->n; n++)
    for (int o = 0; o < s->o; o++)
      for (int i = 0; i < s->oh; i++)
        for (int j = 0; j < s->ow; j++) {
          long yi = (((long)n * s->o + o) * s->oh + i) * s->ow + j;
          for (int c = 0; c < s->c; c++)
            for (int a = 0; a < s->kh; a++)
              for (int b = 0; b < s->kw; b++) {
                int h = i * s->sh - s->ph + a * s->dh, w = j * s->sw - s->pw + b * s->dw;
                if (h < 0 || h >= s->h || w < 0 || w >= s->w) continue;
                long xi = (((long)n * s->c + c) * s->h + h) * s->w + w, ki = (((long)o * s->c + c) * s->kh + a) * s->kw + b;
                y[yi] += (double)x[xi] * k[ki];
                dx[xi] += (double)r[yi] * k[ki];
                dk[ki] += (double)r[yi] * x[xi];
              }
        }
}

// The largest difference relative to the largest reference value.
static double rel_err(const float *got, const double *want, long count) {
  double scale = 1e-6, worst = 0;
  for (long i = 0; i < count; i++) scale = fmax(scale, fabs(want[i]));
  for (long i = 0; i < count; i++) worst = fmax(worst, fabs(got[i] - want[i]) / scale);
  return worst;
}

static void check_one(const Shape *s, const char *lowering, int threads, const float *x, const float *k,
                      const float *r, const double *ry, const double *rdx, const double *rdk) {
  char prog[1024], what[256];
  snprintf(what, sizeof what, "x [%d,%d,%d,%d] k [%d,%d,%d,%d] stride %dx%d pad %dx%d dilation %dx%d %s threads=%d",
           s->n, s->c, s->h, s->w, s->o, s->c, s->kh, s->kw, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, lowering, threads);
  snprintf(prog, sizeof prog,
           "input x : f32[B, %d, %d, %d]\ninput K : f32[%d, %d, %d, %d]\ninput r : f32[B, %d, %d, %d]\n"
           "y = conv2d(x, K, stride=[%d, %d], pad=[%d, %d], dilation=[%d, %d], lowering=\"%s\")\n"
           "loss = sum(y * r)\ndx = grad(loss, x)\ndK = grad(loss, K)\n",
           s->c, s->h, s->w, s->o, s->c, s->kh, s->kw, s->o, s->oh, s->ow, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw,
           lowering);
  kiln_options opt = {.threads = threads, .seed = 1};
  kiln_ctx *kc = kiln_new(&opt);
  if (!kc) { failed++; printf("FAIL %s: kiln_new\n", what); return; }
  long ny = (long)s->n * s->o * s->oh * s->ow, nx = (long)s->n * s->c * s->h * s->w, nk = (long)s->o * s->c * s->kh * s->kw;
  float *y = malloc(ny * sizeof *y), *dx = malloc(nx * sizeof *dx), *dk = malloc(nk * sizeof *dk);
  const char *outs[] = {"y", "dx", "dK"}, *ins[] = {"x", "K", "r"};
  kiln_graph *g = kiln_exec(kc, "sweep", prog) ? NULL : kiln_compile(kc, outs, 3, ins, 3);
  kiln_tensor in[3] = {{KILN_F32, 4, {s->n, s->c, s->h, s->w}, (float *)x},
                       {KILN_F32, 4, {s->o, s->c, s->kh, s->kw}, (float *)k},
                       {KILN_F32, 4, {s->n, s->o, s->oh, s->ow}, (float *)r}};
  kiln_tensor out[3] = {{KILN_F32, 4, {s->n, s->o, s->oh, s->ow}, y},
                        {KILN_F32, 4, {s->n, s->c, s->h, s->w}, dx},
                        {KILN_F32, 4, {s->o, s->c, s->kh, s->kw}, dk}};
  if (!g || kiln_run(g, in, out)) {
    failed++;
    printf("FAIL %s: %s", what, kiln_error(kc));
  } else {
    double ey = rel_err(y, ry, ny), ex = rel_err(dx, rdx, nx), ek = rel_err(dk, rdk, nk);
    int ok = ey < 1e-5 && ex < 1e-5 && ek < 1e-5;
    ok ? passed++ : failed++;
    printf("%s %s: relative error y %.1e dx %.1e dK %.1e\n", ok ? "ok  " : "FAIL", what, ey, ex, ek);
  }
  kiln_graph_free(g);
  kiln_free(kc);
  free(y), free(dx), free(dk);
}

int main(int argc, char **argv) {
  int count = argc > 2 ? atoi(argv[2]) : 16;
  state = argc > 3 ? strtoull(argv[3], NULL, 10) : 20261206;
  const char *lowerings[] = {"im2col", "kernel", "direct"};
  for (int done = 0; done < count;) {
    Shape s;
    if (!pick(&s)) continue;
    done++;
    long nx = (long)s.n * s.c * s.h * s.w, nk = (long)s.o * s.c * s.kh * s.kw, ny = (long)s.n * s.o * s.oh * s.ow;
    float *x = malloc(nx * sizeof *x), *k = malloc(nk * sizeof *k), *r = malloc(ny * sizeof *r);
    double *ry = calloc(ny, sizeof *ry), *rdx = calloc(nx, sizeof *rdx), *rdk = calloc(nk, sizeof *rdk);
    for (long i = 0; i < nx; i++) x[i] = rnd(-1000, 1000) / 1000.0f;
    for (long i = 0; i < nk; i++) k[i] = rnd(-1000, 1000) / 1000.0f;
    for (long i = 0; i < ny; i++) r[i] = rnd(-1000, 1000) / 1000.0f;
    reference(&s, x, k, r, ry, rdx, rdk);
    for (int l = 0; l < 3; l++)
      for (int t = 1; t <= 2; t++) check_one(&s, lowerings[l], t, x, k, r, ry, rdx, rdk);
    free(x), free(k), free(r), free(ry), free(rdx), free(rdk);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
