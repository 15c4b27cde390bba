// gemm_kernels: fp32 GFLOP/s of Kiln's rt_gemm_f32 (KILN_GEMM=kiln, the packed
// GEMM) against bli_sgemm called directly, one thread, same shapes and strides.
//   gemm_kernels [SHAPE...]  ->  "m n k trans kiln blis ratio" per shape, best of 5
// A SHAPE is N (square) or MxNxK, with a suffix a (A stored transposed) or b (B).
// With no arguments: square 256..2048 and the products of the CNN/MLP steps.
// One thread only: with more, BLIS's OpenMP team spins after each of its calls
// on the cores Kiln's interleaved calls then need (on the Xeon VM, n = 1024 at
// 2 threads measured 232-244 GFLOP/s that way, against 291 with Kiln alone).
#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../bench_clock.h"

void *rt_new(int nthreads);
void rt_free_ctx(void *rt);
void rt_gemm_f32(void *rt, int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, int64_t a_batch,
                 int64_t a_rs, int64_t a_cs, const float *b, int64_t b_batch, int64_t b_rs, int64_t b_cs, float *c,
                 int64_t c_batch, int64_t c_rs, int64_t c_cs, float beta);

typedef struct { long m, n, k; int ta, tb; } Shape;   // ta: A stored k x m; tb: B stored n x k

static float *lines(long n) { return aligned_alloc(64, (4 * n + 63) / 64 * 64); }

static void run(void *rt, const Shape *s, const float *A, const float *B, float *C, int blis) {
  long ars = s->ta ? 1 : s->k, acs = s->ta ? s->m : 1, brs = s->tb ? 1 : s->n, bcs = s->tb ? s->k : 1;
  float one = 1, zero = 0;
  if (blis)
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, s->m, s->n, s->k, &one, (float *)A, ars, acs, (float *)B, brs, bcs,
              &zero, C, s->n, 1);
  else
    rt_gemm_f32(rt, 1, s->m, s->n, s->k, A, 0, ars, acs, B, 0, brs, bcs, C, 0, s->n, 1, 0);
}

// Best of 5 runs each (after a warm-up), each run about 0.05 s of repetitions,
// Kiln and BLIS alternating so that a busy machine slows both alike.
static void gflops(void *rt, const Shape *s, const float *A, const float *B, float *C, double out[2]) {
  double flop = 2.0 * s->m * s->n * s->k;
  int reps = flop > 5e9 ? 1 : (int)(5e9 / flop);
  out[0] = out[1] = 0;
  for (int r = 0; r < 6; r++)
    for (int blis = 0; blis < 2; blis++) {
      double t0 = now();
      for (int i = 0; i < reps; i++) run(rt, s, A, B, C, blis);
      double g = flop * reps / (now() - t0) / 1e9;
      if (r && g > out[blis]) out[blis] = g;
    }
}

int main(int argc, char **argv) {
  static const Shape train[] = {
      {25088, 64, 800, 0, 0}, {800, 64, 25088, 1, 0}, {25088, 800, 64, 0, 0}, {3136, 1024, 128, 1, 0},
      {128, 1024, 3136, 0, 0}, {128, 3136, 1024, 0, 1}, {100352, 32, 25, 0, 0}, {25, 32, 100352, 0, 0},
      {128, 512, 784, 0, 0}, {784, 512, 128, 0, 0}, {128, 512, 512, 0, 0},
  };
  Shape shapes[64];
  int ns = 0;
  if (argc > 1)
    for (int i = 1; i < argc && ns < 64; i++) {
      Shape *s = &shapes[ns++];
      char *e;
      s->m = s->n = s->k = strtol(argv[i], &e, 10);
      if (*e == 'x') s->n = strtol(e + 1, &e, 10);
      if (*e == 'x') s->k = strtol(e + 1, &e, 10);
      s->ta = *e == 'a', s->tb = *e == 'b';
    }
  else {
    for (long n = 256; n <= 2048; n *= 2) shapes[ns++] = (Shape){n, n, n, 0, 0};
    for (size_t i = 0; i < sizeof train / sizeof *train; i++) shapes[ns++] = train[i];
  }
  setenv("KILN_GEMM", "kiln", 0);   // an explicit KILN_GEMM (e.g. kiln-avx2) wins
  bli_thread_set_num_threads(1);
  void *rt = rt_new(1);
  printf("%7s %6s %6s %-5s %8s %8s %6s\n", "m", "n", "k", "trans", "kiln", "blis", "ratio");
  for (int i = 0; i < ns; i++) {
    Shape *s = &shapes[i];
    // On cache lines, as compiled graphs' buffers are (rt_alloc).
    float *A = lines(s->m * s->k), *B = lines(s->k * s->n), *C = lines(s->m * s->n);
    for (long j = 0; j < s->m * s->k; j++) A[j] = (float)(j % 7) * 0.1f;
    for (long j = 0; j < s->k * s->n; j++) B[j] = (float)(j % 5) * 0.1f;
    double g[2];
    gflops(rt, s, A, B, C, g);
    double kn = g[0], bl = g[1];
    printf("%7ld %6ld %6ld %-5s %8.1f %8.1f %6.2f\n", s->m, s->n, s->k, s->ta ? "A^T" : s->tb ? "B^T" : "", kn, bl,
           kn / bl);
    fflush(stdout);
    free(A), free(B), free(C);
  }
  rt_free_ctx(rt);
  return 0;
}
