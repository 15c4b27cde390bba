// kiln_harness: Kiln's side of the GEMM, elementwise-chain, inference-latency
// and per-conv-layer rows, through the C API (include/kiln.h): compile once,
// then time kiln_run on caller buffers. Prints one "KEY value..." line per number.
//
//   kiln_harness THREADS gemm N...          GEMM N GFLOPS
//   kiln_harness THREADS ew                  EW GBS SECONDS
//   kiln_harness THREADS infer MODEL.kiln    INFER B MILLISECONDS  (B = 1, 128)
//   kiln_harness THREADS conv [MODEL/LAYER...]  CONV MODEL LAYER LOWERING fwd|train MILLISECONDS
//
// Timings are medians over repetitions after one warm-up run.
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../bench_clock.h"

static void check(kiln_ctx *k, int bad, const char *what) {
  if (bad) { fprintf(stderr, "kiln_harness: %s: %s\n", what, kiln_error(k)); exit(1); }
}
static float *filled(size_t n) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  return p;
}
// The median seconds of kiln_run over enough repetitions to fill ~min_s.
static double time_run(kiln_ctx *k, kiln_graph *g, kiln_tensor *in, kiln_tensor *out, double min_s) {
  double t0 = now();
  check(k, kiln_run(g, in, out), "run");          // warm-up
  double one = now() - t0;
  int reps = one > 0 ? (int)(min_s / one) : 50;
  if (reps < 5) reps = 5;
  if (reps > 200) reps = 200;
  double *ts = malloc(reps * sizeof *ts);
  for (int r = 0; r < reps; r++) {
    t0 = now();
    check(k, kiln_run(g, in, out), "run");
    ts[r] = now() - t0;
  }
  qsort(ts, reps, sizeof *ts, cmp);
  double m = ts[reps / 2];
  free(ts);
  return m;
}

static void gemm(kiln_ctx *k, int argc, char **argv) {
  check(k, kiln_exec(k, "gemm", "input A : f32[M, K]\ninput Bm : f32[K, N]\nC = A @ Bm\n"), "exec");
  const char *outs[] = {"C"}, *ins[] = {"A", "Bm"};
  kiln_graph *g = kiln_compile(k, outs, 1, ins, 2);
  check(k, !g, "compile");
  for (int i = 0; i < argc; i++) {
    long n = atol(argv[i]);
    float *a = filled(n * n), *b = filled(n * n), *c = malloc(n * n * 4);
    kiln_tensor in[2] = {{KILN_F32, 2, {n, n}, a}, {KILN_F32, 2, {n, n}, b}};
    kiln_tensor out = {KILN_F32, 2, {n, n}, c};
    double t = time_run(k, g, in, &out, 1.0);
    printf("GEMM %ld %.2f\n", n, 2.0 * n * n * n / t / 1e9);
    free(a), free(b), free(c);
  }
  kiln_graph_free(g);
}

// The chain: z = relu(a * b + 1) * a - b * 0.5, five ops over two 16M-float
// inputs; fused, it reads a and b once and writes z once (12 bytes/element,
// as triad counts).
static void ew(kiln_ctx *k) {
  check(k, kiln_exec(k, "ew", "input a : f32[N]\ninput b : f32[N]\nz = relu(a * b + 1) * a - b * 0.5\n"), "exec");
  const char *outs[] = {"z"}, *ins[] = {"a", "b"};
  kiln_graph *g = kiln_compile(k, outs, 1, ins, 2);
  check(k, !g, "compile");
  long n = 16L << 20;
  float *a = filled(n), *b = filled(n), *z = malloc(n * 4);
  kiln_tensor in[2] = {{KILN_F32, 1, {n}, a}, {KILN_F32, 1, {n}, b}};
  kiln_tensor out = {KILN_F32, 1, {n}, z};
  double t = time_run(k, g, in, &out, 2.0);
  printf("EW %.2f %.6f\n", 12.0 * n / t / 1e9, t);
  free(a), free(b), free(z);
  kiln_graph_free(g);
}

// The model file without its data, train, evaluate and save statements: what
// is left defines `logits` from the input x and the initialized parameters.
static void infer(kiln_ctx *k, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) { perror(path); exit(1); }
  char line[4096], *text = calloc(1, 1 << 16);
  int is_cnn = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "data ", 5) || !strncmp(line, "train ", 6) || !strncmp(line, "evaluate ", 9) ||
        !strncmp(line, "save ", 5) || !strncmp(line, "input y", 7) || !strncmp(line, "loss", 4))
      continue;
    if (strstr(line, "conv(")) is_cnn = 1;
    strcat(text, line);
  }
  fclose(f);
  check(k, kiln_exec(k, path, text), "exec");
  const char *outs[] = {"logits"}, *ins[] = {"x"};
  kiln_graph *g = kiln_compile(k, outs, 1, ins, 1);
  check(k, !g, "compile");
  long bs[] = {1, 128};
  for (int i = 0; i < 2; i++) {
    long B = bs[i];
    float *x = filled(B * 784), *y = malloc(B * 10 * 4);
    kiln_tensor in = is_cnn ? (kiln_tensor){KILN_F32, 4, {B, 1, 28, 28}, x} : (kiln_tensor){KILN_F32, 2, {B, 784}, x};
    kiln_tensor out = {KILN_F32, 2, {B, 10}, y};
    printf("INFER %ld %.4f\n", B, 1e3 * time_run(k, g, &in, &out, 1.0));
    free(x), free(y);
  }
  kiln_graph_free(g);
  free(text);
}

// Each conv layer of examples/cnn.kiln and of a CIFAR-shaped variant alone,
// batch 128, in every lowering (forced with lowering=): the forward pass, and
// the layer's share of a training step (forward, weight and bias gradients,
// and the input's gradient unless the layer is its model's first, whose input
// is the data). A lowering whose first run takes over 2 s is timed once.
// The layers are printed first so bench.py can ask `kiln ir` which lowering
// the cost model picks for each (FIRST: 1 for a first layer):
//   CONVLAYER MODEL LAYER C HW O K STRIDE FIRST
//   CONV MODEL LAYER LOWERING fwd|train MILLISECONDS
static const struct { const char *model, *name; long c, hw, o, k, stride; int first; } conv_layers[] = {
  {"cnn", "conv1", 1, 28, 32, 5, 1, 1},     {"cnn", "conv2", 32, 14, 64, 5, 1, 0},
  {"cifar", "conv1", 3, 32, 32, 5, 1, 1},   {"cifar", "conv2", 32, 16, 64, 5, 1, 0},
  {"cifar", "conv1_3x3", 3, 32, 32, 3, 1, 1}, {"cifar", "conv2_3x3", 32, 16, 64, 3, 1, 0},
  {"cifar", "conv3_64to8", 64, 8, 8, 3, 1, 0}, {"cifar", "conv4_64to16_5x5", 64, 8, 16, 5, 1, 0},
};

static double conv_time(const char *low, int threads, int train, long c, long hw, long o, long k, long stride, int first) {
  long B = 128, ohw = (hw + stride - 1) / stride;
  char prog[1024];
  snprintf(prog, sizeof prog,
           "input x : f32[B, %ld, %ld, %ld]\ninput r : f32[B, %ld, %ld, %ld]\n"
           "param K : f32[%ld, %ld, %ld, %ld] = he\nparam b : f32[%ld, 1, 1] = glorot\n"
           "y = conv2d(x, K, stride=%ld, pad=\"same\", lowering=\"%s\") + b\n"
           "loss = sum(y * r)\ndK = grad(loss, K)\ndb = grad(loss, b)\ndx = grad(loss, x)\n",
           c, hw, hw, o, ohw, ohw, o, c, k, k, o, stride, low);
  kiln_options opt = {.threads = threads, .seed = 1};
  kiln_ctx *kc = kiln_new(&opt);
  if (!kc) exit(1);
  check(kc, kiln_exec(kc, "conv", prog), "exec");
  const char *outs[] = {"y", "dK", "db", "dx"}, *ins[] = {"x", "r"};
  int nout = train ? 4 - first : 1;
  kiln_graph *g = kiln_compile(kc, outs, nout, ins, 2);
  check(kc, !g, "compile");
  float *x = filled(B * c * hw * hw), *r = filled(B * o * ohw * ohw);
  kiln_tensor in[2] = {{KILN_F32, 4, {B, c, hw, hw}, x}, {KILN_F32, 4, {B, o, ohw, ohw}, r}}, out[4];
  for (int i = 0; i < nout; i++) {
    check(kc, kiln_output_shape(g, in, i, &out[i]), "output shape");
    long n = 1;
    for (int d = 0; d < out[i].ndim; d++) n *= out[i].shape[d];
    out[i].data = malloc(n * sizeof(float));
  }
  double t0 = now();
  check(kc, kiln_run(g, in, out), "run");
  double ms = now() - t0 > 2 ? 1e3 * (now() - t0) : 1e3 * time_run(kc, g, in, out, 1.0);
  for (int i = 0; i < nout; i++) free(out[i].data);
  free(x), free(r);
  kiln_graph_free(g);
  kiln_free(kc);
  return ms;
}

// Optional arguments: MODEL/LAYER names and lowerings to time (all by default).
static void conv(int threads, int argc, char **argv) {
  static const char *lows[] = {"im2col", "kernel", "direct"};
  int some_layer = 0, some_low = 0;
  for (int a = 0; a < argc; a++) {
    int low = 0;
    for (int l = 0; l < 3; l++) low |= !strcmp(argv[a], lows[l]);
    some_low |= low;
    some_layer |= !low;
  }
  for (size_t i = 0; i < sizeof conv_layers / sizeof *conv_layers; i++) {
    char id[64];
    snprintf(id, sizeof id, "%s/%s", conv_layers[i].model, conv_layers[i].name);
    int want = !some_layer;
    for (int a = 0; a < argc; a++) want |= !strcmp(argv[a], id);
    if (!want) continue;
    long c = conv_layers[i].c, hw = conv_layers[i].hw, o = conv_layers[i].o, k = conv_layers[i].k, s = conv_layers[i].stride;
    printf("CONVLAYER %s %s %ld %ld %ld %ld %ld %d\n", conv_layers[i].model, conv_layers[i].name, c, hw, o, k, s,
           conv_layers[i].first);
    for (int l = 0; l < 3; l++)
      for (int train = 0; train < 2; train++) {
        int on = !some_low;
        for (int a = 0; a < argc; a++) on |= !strcmp(argv[a], lows[l]);
        if (!on) continue;
        printf("CONV %s %s %s %s %.4f\n", conv_layers[i].model, conv_layers[i].name, lows[l], train ? "train" : "fwd",
               conv_time(lows[l], threads, train, c, hw, o, k, s, conv_layers[i].first));
        fflush(stdout);
      }
  }
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: kiln_harness THREADS gemm|ew|infer|conv [ARGS]\n"); return 2; }
  kiln_options opt = {.threads = atoi(argv[1]), .seed = 1};
  kiln_ctx *k = kiln_new(&opt);
  if (!k) return 1;
  const char *mode = argv[2];
  if (!strcmp(mode, "gemm")) gemm(k, argc - 3, argv + 3);
  else if (!strcmp(mode, "ew")) ew(k);
  else if (!strcmp(mode, "infer") && argc > 3) infer(k, argv[3]);
  else if (!strcmp(mode, "conv")) conv(opt.threads, argc - 3, argv + 3);
  else { fprintf(stderr, "kiln_harness: unknown mode %s\n", mode); return 2; }
  kiln_free(k);
  return 0;
}
