// kiln_harness: Kiln's side of the GEMM, elementwise-chain, inference-latency
// and per-conv-layer rows, through the C API (include/kiln.h): compile once,
// then time kiln_run on caller buffers. Prints one "KEY value..." line per number.
//
//   kiln_harness THREADS gemm N...          GEMM N GFLOPS
//   kiln_harness THREADS ew                  EW GBS SECONDS
//   kiln_harness THREADS infer MODEL.kiln    INFER B MILLISECONDS  (B = 1, 128)
//   kiln_harness THREADS conv                CONV LAYER LOWERING MILLISECONDS
//
// Timings are medians over repetitions after one warm-up run.
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
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

// Each conv layer of examples/cnn.kiln alone, forward, batch 128. Kiln has one
// lowering (im2col + one GEMM over the batch), so the picked one is the only one.
static void conv(kiln_ctx *k) {
  check(k, kiln_exec(k, "conv", "import \"nn\"\n"
                                "input x1 : f32[B, 1, 28, 28]\ninput x2 : f32[B, 32, 14, 14]\n"
                                "c1 = conv(x1, 32, 5)\nc2 = conv(x2, 64, 5)\n"), "exec");
  long B = 128;
  struct { const char *name, *in, *out; long c, hw, oc; } L[] = {
    {"conv1", "x1", "c1", 1, 28, 32}, {"conv2", "x2", "c2", 32, 14, 64}};
  for (int i = 0; i < 2; i++) {
    const char *outs[] = {L[i].out}, *ins[] = {L[i].in};
    kiln_graph *g = kiln_compile(k, outs, 1, ins, 1);
    check(k, !g, "compile");
    long hw = L[i].hw;
    float *x = filled(B * L[i].c * hw * hw), *y = malloc(B * L[i].oc * hw * hw * 4);
    kiln_tensor in = {KILN_F32, 4, {B, L[i].c, hw, hw}, x};
    kiln_tensor out = {KILN_F32, 4, {B, L[i].oc, hw, hw}, y};
    printf("CONV %s im2col_gemm %.4f\n", L[i].name, 1e3 * time_run(k, g, &in, &out, 1.0));
    free(x), free(y);
    kiln_graph_free(g);
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
  else if (!strcmp(mode, "conv")) conv(k);
  else { fprintf(stderr, "kiln_harness: unknown mode %s\n", mode); return 2; }
  kiln_free(k);
  return 0;
}
