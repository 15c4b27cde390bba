// The C API: a graph with a symbolic batch dimension compiled once and run for
// several bindings; gradients through it; matrix products whose lowering
// depends on the batch size; errors reported, never fatal.
#include "kiln.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond, ...) do { if (cond) { passed++; printf("ok   " __VA_ARGS__); } \
  else { failed++; printf("FAIL " __VA_ARGS__); } printf("\n"); } while (0)

// Full reductions of a large operand read at its linear index run in chunks
// on every thread (cgen.c, reduce_flat_kernel): the values against sums in
// double here, and the same bits on 1 and 3 threads, for sizes below one
// chunk, one chunk and a tail, and many chunks.
static void full_reductions(void) {
  static const char *src = "input V : f32[N]\n"
                           "input D : f64[N]\n"
                           "s = sum(V * V)\nhi = max(V)\nlo = min(V)\nm = mean(D)\np = prod(1 + D * 1e-6)\n"
                           "c = sum(cast(V > 0, i64))\n";
  const char *outs[] = {"s", "hi", "lo", "m", "p", "c"}, *ins[] = {"V", "D"};
  static const int64_t sizes[] = {5, 16384, 16384 * 2 + 3, 300001};
  for (int z = 0; z < 4; z++) {
    int64_t n = sizes[z];
    float *v = malloc(n * sizeof *v);
    double *d = malloc(n * sizeof *d), want[6] = {0, -INFINITY, INFINITY, 0, 1, 0};
    for (int64_t i = 0; i < n; i++) {
      v[i] = (float)sin(i * 0.37 + 0.1);
      d[i] = cos(i * 0.11);
      want[0] += (double)v[i] * v[i];
      want[1] = fmax(want[1], v[i]);
      want[2] = fmin(want[2], v[i]);
      want[3] += d[i] / n;
      want[4] *= 1 + d[i] * 1e-6;
      want[5] += v[i] > 0;
    }
    v[n / 3] = 7.5f;   // the extremes away from the first chunk
    v[n - 1] = -8.25f;
    want[0] += 7.5 * 7.5 + 8.25 * 8.25 - pow(sin(n / 3 * 0.37 + 0.1), 2) - pow(sin((n - 1) * 0.37 + 0.1), 2);
    want[1] = 7.5, want[2] = -8.25;
    want[5] += 1 - (sin(n / 3 * 0.37 + 0.1) > 0) - (sin((n - 1) * 0.37 + 0.1) > 0);
    float got[2][3];
    double gd[2][2];
    int64_t cnt[2];
    int ok = 1;
    for (int t = 0; t < 2; t++) {
      kiln_options opt = {.threads = t ? 3 : 1};
      kiln_ctx *k = kiln_new(&opt);
      kiln_graph *g = k && kiln_exec(k, "full", src) == 0 ? kiln_compile(k, outs, 6, ins, 2) : NULL;
      kiln_tensor in[2] = {{KILN_F32, 1, {n}, v}, {KILN_F64, 1, {n}, d}};
      kiln_tensor out[6] = {{KILN_F32, 0, {0}, &got[t][0]}, {KILN_F32, 0, {0}, &got[t][1]}, {KILN_F32, 0, {0}, &got[t][2]},
                            {KILN_F64, 0, {0}, &gd[t][0]}, {KILN_F64, 0, {0}, &gd[t][1]}, {KILN_I64, 0, {0}, &cnt[t]}};
      ok &= g && kiln_run(g, in, out) == 0;
      if (!ok) printf("  %s\n", k ? kiln_error(k) : "no context");
      if (g && z == 0 && t == 0) {
        char *c = kiln_graph_dump(g, "c");
        int parts = 0;
        for (const char *p = c; p && (p = strstr(p, "_part(void")); p++) parts++;
        CHECK(parts == 6, "the six full reductions run in chunks (%d kernels with a _part step)", parts);
        free(c);
      }
      kiln_graph_free(g);
      kiln_free(k);
    }
    double err = fabs(got[0][0] - want[0]) / want[0] + fabs(gd[0][0] - want[3]) + fabs(gd[0][1] - want[4]);
    CHECK(ok && err < 1e-6 && got[0][1] == want[1] && got[0][2] == want[2] && cnt[0] == (int64_t)want[5],
          "full reductions of %lld elements (error %g; sum %g max %g min %g count %lld)", (long long)n, err, got[0][0],
          got[0][1], got[0][2], (long long)cnt[0]);
    CHECK(ok && !memcmp(got[0], got[1], sizeof got[0]) && !memcmp(gd[0], gd[1], sizeof gd[0]) && cnt[0] == cnt[1],
          "full reductions of %lld elements: the same bits on 1 and 3 threads", (long long)n);
    free(v);
    free(d);
  }
}

// Row ops over rows of at most 128 go in blocks of rows (cgen.c,
// row_kernel_short): softmax, log_softmax, logsumexp and cross-entropy
// against double here, for row counts that leave partial blocks and lengths
// on both sides of 128, and the same bits on 1 and 3 threads.
static void short_rows(void) {
  static const char *fmt = "input X : f32[N, %lld]\ninput Y : i32[N]\n"
                           "s = softmax(X)\nls = log_softmax(X)\nz = logsumexp(X)\nce = softmax_cross_entropy(X, Y)\n";
  char src[256];
  const char *outs[] = {"s", "ls", "z", "ce"}, *ins[] = {"X", "Y"};
  static const int64_t shapes[][2] = {{1, 5}, {13, 28}, {1001, 28}, {37, 64}, {9, 128}, {9, 129}};
  for (int z = 0; z < 6; z++) {
    int64_t n = shapes[z][0], len = shapes[z][1];
    snprintf(src, sizeof src, fmt, (long long)len);   // a constant length (a symbolic one goes a row at a time)
    float *x = malloc(n * len * sizeof *x), *got[2][4];
    int32_t *y = malloc(n * sizeof *y);
    for (int64_t i = 0; i < n * len; i++) x[i] = (float)(4 * sin(i * 0.731 + 0.2));
    for (int64_t r = 0; r < n; r++) y[r] = (int32_t)(r * 7 % len);
    int ok = 1, blocked = -1;
    for (int t = 0; t < 2; t++) {
      for (int o = 0; o < 4; o++) got[t][o] = calloc(n * len, sizeof(float));
      kiln_options opt = {.threads = t ? 3 : 1};
      kiln_ctx *k = kiln_new(&opt);
      kiln_graph *g = k && kiln_exec(k, "rows", src) == 0 ? kiln_compile(k, outs, 4, ins, 2) : NULL;
      kiln_tensor in[2] = {{KILN_F32, 2, {n, len}, x}, {KILN_I32, 1, {n}, y}};
      kiln_tensor out[4] = {{KILN_F32, 2, {n, len}, got[t][0]}, {KILN_F32, 2, {n, len}, got[t][1]},
                            {KILN_F32, 1, {n}, got[t][2]}, {KILN_F32, 1, {n}, got[t][3]}};
      ok &= g && kiln_run(g, in, out) == 0;
      if (!ok) printf("  %s\n", k ? kiln_error(k) : "no context");
      if (g && t == 0) {
        char *c = kiln_graph_dump(g, "c");
        blocked = c && strstr(c, "row0 = lo") != NULL;
        free(c);
      }
      kiln_graph_free(g);
      kiln_free(k);
    }
    double err = 0;
    for (int64_t r = 0; ok && r < n; r++) {
      const float *xr = x + r * len;
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; j++) m = fmax(m, xr[j]);
      for (int64_t j = 0; j < len; j++) sum += exp(xr[j] - m);
      double lse = m + log(sum);
      for (int64_t j = 0; j < len; j++) {
        err = fmax(err, fabs(got[0][0][r * len + j] - exp(xr[j] - lse)));
        err = fmax(err, fabs(got[0][1][r * len + j] - (xr[j] - lse)));
      }
      err = fmax(err, fabs(got[0][2][r] - lse));
      err = fmax(err, fabs(got[0][3][r] - (lse - xr[y[r]])));
    }
    int same = ok;
    for (int o = 0; o < 4; o++) same &= !memcmp(got[0][o], got[1][o], (o < 2 ? n * len : n) * sizeof(float));
    CHECK(ok && err < 2e-6 && blocked == (len <= 128),
          "row ops over %lld rows of %lld (%s; error %g)", (long long)n, (long long)len,
          blocked == 1 ? "in blocks of rows" : "a row at a time", err);
    CHECK(same, "row ops over %lld rows of %lld: the same bits on 1 and 3 threads", (long long)n, (long long)len);
    for (int t = 0; t < 2; t++)
      for (int o = 0; o < 4; o++) free(got[t][o]);
    free(x);
    free(y);
  }
}

// The forms cgen.c picks, and their values: a sum along rows of 64 that its
// reads run along goes in lanes along the rows (not output-stationary taps);
// one along rows of 28 stays taps; a product's epilogue that reads no index
// (a scaling) runs each block of whole rows as one loop.
static void kernel_forms(void) {
  static const char *src = "input X : f32[N, 6, 64]\ninput W : f32[N, 6, 28]\ninput A : f32[N, 28, 16]\n"
                           "m = mean(X, axis=-1)\nv = sum(W, axis=-1)\ns = (A @ transpose(A, [0, 2, 1])) * 0.25\n"
                           "d = W - max(W, axis=-1, keepdims=true)\n";
  const char *outs[] = {"m", "v", "s", "d"}, *ins[] = {"X", "W", "A"};
  int64_t n = 3;
  float *x = malloc(n * 6 * 64 * sizeof *x), *w = malloc(n * 6 * 28 * sizeof *w), *a = malloc(n * 28 * 16 * sizeof *a);
  float *m = malloc(n * 6 * sizeof *m), *v = malloc(n * 6 * sizeof *v), *sc = malloc(n * 28 * 28 * sizeof *sc);
  float *dw = malloc(n * 6 * 28 * sizeof *dw);
  for (int64_t i = 0; i < n * 6 * 64; i++) x[i] = (float)sin(i * 0.3);
  for (int64_t i = 0; i < n * 6 * 28; i++) w[i] = (float)cos(i * 0.7);
  for (int64_t i = 0; i < n * 28 * 16; i++) a[i] = (float)sin(i * 0.11 + 1);
  kiln_options opt = {.threads = 1};
  kiln_ctx *k = kiln_new(&opt);
  kiln_graph *g = k && kiln_exec(k, "forms", src) == 0 ? kiln_compile(k, outs, 4, ins, 3) : NULL;
  kiln_tensor in[3] = {{KILN_F32, 3, {n, 6, 64}, x}, {KILN_F32, 3, {n, 6, 28}, w}, {KILN_F32, 3, {n, 28, 16}, a}};
  kiln_tensor out[4] = {{KILN_F32, 2, {n, 6}, m}, {KILN_F32, 2, {n, 6}, v}, {KILN_F32, 3, {n, 28, 28}, sc},
                        {KILN_F32, 3, {n, 6, 28}, dw}};
  int ok = g && kiln_run(g, in, out) == 0;
  if (!ok) printf("  %s\n", k ? kiln_error(k) : "no context");
  char *c = g ? kiln_graph_dump(g, "c") : NULL;
  double err = 0;
  for (int64_t r = 0; ok && r < n * 6; r++) {
    double sm = 0, sv = 0, mx = -INFINITY;
    for (int j = 0; j < 64; j++) sm += x[r * 64 + j];
    for (int j = 0; j < 28; j++) sv += w[r * 28 + j], mx = fmax(mx, w[r * 28 + j]);
    err = fmax(err, fabs(m[r] - sm / 64) + fabs(v[r] - sv));
    for (int j = 0; j < 28; j++) err = fmax(err, fabs(dw[r * 28 + j] - (w[r * 28 + j] - mx)));
  }
  for (int64_t b = 0; ok && b < n; b++)
    for (int i = 0; i < 28; i++)
      for (int j = 0; j < 28; j++) {
        double d = 0;
        for (int q = 0; q < 16; q++) d += (double)a[(b * 28 + i) * 16 + q] * a[(b * 28 + j) * 16 + q];
        err = fmax(err, fabs(sc[(b * 28 + i) * 28 + j] - d * 0.25));
      }
  CHECK(ok && err < 1e-5, "rows summed in lanes and as taps, a scaled product, rows less their max (error %g)", err);
  CHECK(c && strstr(c, "lane[") && strstr(c, "acc[6]"), "a sum along rows of 64 in lanes, along rows of 28 as taps");
  CHECK(c && strstr(c, "if (rs == cols)"), "a scaling epilogue runs whole blocks as one loop");
  CHECK(c && strstr(c, "  KILN_SHORT_LOOP\n"), "rows of 28 less their max: a loop vectorized with its tail masked (KILN_SHORT_LOOP)");
  free(c);
  kiln_graph_free(g);
  kiln_free(k);
  free(x), free(w), free(a), free(m), free(v), free(sc), free(dw);
}

int main(void) {
  kiln_options opt = {.threads = 2, .seed = 7};
  kiln_ctx *k = kiln_new(&opt);
  CHECK(k != NULL, "kiln_new");
  int rc = kiln_exec(k, "model",
                     "input X : f32[B, 3]\n"
                     "param W : f32[3, 2] = [[1, 0], [0, 1], [1, 1]]\n"
                     "y = sum(X @ W, axis=1)\n"
                     "loss = sum(y * y)\n"
                     "dW = grad(loss, W)\n"
                     "dX = grad(loss, X)\n");
  CHECK(rc == 0, "exec model %s", kiln_error(k));
  const char *outs[] = {"y", "dW", "dX"}, *ins[] = {"X"};
  kiln_graph *g = kiln_compile(k, outs, 3, ins, 1);
  CHECK(g != NULL, "compile once %s", g ? "" : kiln_error(k));
  if (!g) return 1;
  for (int B = 1; B <= 5; B += 2) {
    float x[5 * 3], y[5], dw[6], dx[15];
    for (int i = 0; i < B * 3; i++) x[i] = (float)(i % 7) - 2.5f;
    kiln_tensor in = {KILN_F32, 2, {B, 3}, x};
    kiln_tensor out[3] = {{KILN_F32, 1, {B}, y}, {KILN_F32, 2, {3, 2}, dw}, {KILN_F32, 2, {B, 3}, dx}};
    kiln_tensor shape;
    CHECK(kiln_output_shape(g, &in, 2, &shape) == 0 && shape.ndim == 2 && shape.shape[0] == B, "output shape for B=%d", B);
    rc = kiln_run(g, &in, out);
    CHECK(rc == 0, "run B=%d %s", B, kiln_error(k));
    // y[b] = x0 + x1 + 2*x2 ; dloss/dW[i][j] = sum_b 2*y[b]*x[b][i]; dX[b][i] = 2*y[b]*(W[i][0]+W[i][1])
    double err = 0;
    for (int b = 0; b < B; b++) {
      double yb = x[b * 3] + x[b * 3 + 1] + 2 * x[b * 3 + 2];
      err = fmax(err, fabs(y[b] - yb));
      const double rowsum[3] = {1, 1, 2};
      for (int i = 0; i < 3; i++) err = fmax(err, fabs(dx[b * 3 + i] - 2 * yb * rowsum[i]));
    }
    for (int i = 0; i < 3; i++) {
      double s = 0;
      for (int b = 0; b < B; b++) s += 2 * (x[b * 3] + x[b * 3 + 1] + 2 * x[b * 3 + 2]) * x[b * 3 + i];
      err = fmax(err, fabs(dw[i * 2] - s) + fabs(dw[i * 2 + 1] - s));
    }
    CHECK(err < 1e-4, "values for B=%d (max error %g)", B, err);
  }
  // Shape errors at run time are reported, not fatal.
  float x[8];
  kiln_tensor bad = {KILN_F32, 2, {2, 4}, x};
  float y[2], dw[6], dx[8];
  kiln_tensor out[3] = {{KILN_F32, 1, {2}, y}, {KILN_F32, 2, {3, 2}, dw}, {KILN_F32, 2, {2, 4}, dx}};
  CHECK(kiln_run(g, &bad, out) == -1 && strstr(kiln_error(k), "input X"), "wrong input shape: %s", kiln_error(k));
  bad.dtype = KILN_F64;
  CHECK(kiln_run(g, &bad, out) == -1 && strstr(kiln_error(k), "dtype"), "wrong dtype: %s", kiln_error(k));
  char *ir = kiln_graph_dump(g, "dce"), *c = kiln_graph_dump(g, "c");
  CHECK(ir && strstr(ir, "matmul"), "IR dump");
  CHECK(c && strstr(c, "_entry(void **args)"), "C dump");
  free(ir); free(c);
  kiln_graph_free(g);
  // Matrix products of a symbolic size: below lower.c's GEMM threshold for a small
  // batch (loops), above it for a large one (rt_gemm); the weight gradient's inner
  // dimension is the batch, and a 3-D batch against one weight is one product.
  rc = kiln_exec(k, "mm",
                 "input Xm : f32[B, 64]\n"
                 "input Y3 : f32[N, 16, 64]\n"
                 "param Wm : f32[64, 10] = glorot\n"
                 "zm = Xm @ Wm\n"
                 "gm = grad(sum(zm * zm), Wm)\n"
                 "y3 = Y3 @ Wm\n");
  CHECK(rc == 0, "exec products %s", kiln_error(k));
  const char *mouts[] = {"zm", "gm", "y3"}, *mins[] = {"Xm", "Y3"};
  g = kiln_compile(k, mouts, 3, mins, 2);
  CHECK(g != NULL, "compile products %s", g ? "" : kiln_error(k));
  if (!g) return 1;
  ir = kiln_graph_dump(g, "lower");
  int by_size = ir && (strstr(ir, "by size: gemm when m*n*k = B*10*64 >= ") || strstr(ir, "rt_gemm turned off"));
  CHECK(by_size, "lowering by size%s%s", by_size ? "" : ":\n", by_size ? "" : ir ? ir : "(no dump)");
  free(ir);
  kiln_tensor wt;
  CHECK(kiln_eval(k, "Wm", &wt) == 0, "eval Wm");
  const float *w = wt.data;
  for (int B = 3; B <= 300; B += 297) {
    int N = B / 3 + 1;
    float *xm = malloc(sizeof(float) * B * 64), *y3 = malloc(sizeof(float) * N * 16 * 64);
    float *zm = malloc(sizeof(float) * B * 10), *gm = malloc(sizeof(float) * 640), *o3 = malloc(sizeof(float) * N * 160);
    for (int i = 0; i < B * 64; i++) xm[i] = (float)((i * 7) % 13) / 13 - 0.5f;
    for (int i = 0; i < N * 16 * 64; i++) y3[i] = (float)((i * 5) % 11) / 11 - 0.5f;
    kiln_tensor min[2] = {{KILN_F32, 2, {B, 64}, xm}, {KILN_F32, 3, {N, 16, 64}, y3}};
    kiln_tensor mout[3] = {{KILN_F32, 2, {B, 10}, zm}, {KILN_F32, 2, {64, 10}, gm}, {KILN_F32, 3, {N, 16, 10}, o3}};
    rc = kiln_run(g, min, mout);
    CHECK(rc == 0, "run products B=%d %s", B, kiln_error(k));
    double err = 0, z[300 * 10];
    for (int b = 0; b < B; b++)   // zm = Xm @ Wm; gm = transpose(Xm) @ (2 zm); y3 = Y3 @ Wm
      for (int j = 0; j < 10; j++) {
        double s = 0;
        for (int i = 0; i < 64; i++) s += (double)xm[b * 64 + i] * w[i * 10 + j];
        z[b * 10 + j] = s;
        err = fmax(err, fabs(zm[b * 10 + j] - s));
      }
    for (int i = 0; i < 64; i++)
      for (int j = 0; j < 10; j++) {
        double s = 0;
        for (int b = 0; b < B; b++) s += 2 * (double)xm[b * 64 + i] * z[b * 10 + j];
        err = fmax(err, fabs(gm[i * 10 + j] - s) / (1 + fabs(s)));
      }
    for (int r = 0; r < N * 16; r++)
      for (int j = 0; j < 10; j++) {
        double s = 0;
        for (int i = 0; i < 64; i++) s += (double)y3[r * 64 + i] * w[i * 10 + j];
        err = fmax(err, fabs(o3[r * 10 + j] - s));
      }
    CHECK(err < 1e-4, "product values for B=%d, N=%d (max error %g)", B, N, err);
    free(xm); free(y3); free(zm); free(gm); free(o3);
  }
  kiln_tensor_free(&wt);
  kiln_graph_free(g);
  // Language errors come back located.
  rc = kiln_exec(k, "bad", "z = [1, 2] + [1, 2, 3]\n");
  CHECK(rc == -1 && strstr(kiln_error(k), "bad:1:"), "located error: %s", kiln_error(k));
  kiln_tensor t;
  CHECK(kiln_eval(k, "sum(W)", &t) == 0 && t.ndim == 0 && *(float *)t.data == 4, "eval sum(W)");
  kiln_tensor_free(&t);
  // A parameter declared twice in one call is an error; a later call rebinds it.
  rc = kiln_exec(k, "twice", "param P : f32[2] = 1\nparam P : f32[2] = 2\n");
  CHECK(rc == -1 && strstr(kiln_error(k), "twice:2:7: error: parameter P is declared twice") &&
        strstr(kiln_error(k), "twice:1:7: note: first declared here"), "param twice in one call: %s", kiln_error(k));
  rc = kiln_exec(k, "again", "param P : f32[3] = 5\n");
  CHECK(rc == 0 && kiln_eval(k, "sum(P)", &t) == 0 && *(float *)t.data == 15, "param declared again later %s", kiln_error(k));
  if (!rc) kiln_tensor_free(&t);
  kiln_free(k);
  full_reductions();
  short_rows();
  kernel_forms();
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
