// The C API: a graph with a symbolic batch dimension compiled once and run for
// several bindings; gradients through it; errors reported, never fatal.
#include "kiln.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond, ...) do { if (cond) { passed++; printf("ok   " __VA_ARGS__); } \
  else { failed++; printf("FAIL " __VA_ARGS__); } printf("\n"); } while (0)

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
  // Language errors come back located.
  rc = kiln_exec(k, "bad", "z = [1, 2] + [1, 2, 3]\n");
  CHECK(rc == -1 && strstr(kiln_error(k), "bad:1:"), "located error: %s", kiln_error(k));
  kiln_tensor t;
  CHECK(kiln_eval(k, "sum(W)", &t) == 0 && t.ndim == 0 && *(float *)t.data == 4, "eval sum(W)");
  kiln_tensor_free(&t);
  kiln_free(k);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
