
// fma_peak: the machine's fp32 peak FLOP/s, measured. Each thread runs 12
// independent chains of fused multiply-adds (enough to cover the FMA latency on
// both ports), so the loop is bound by FMA throughput alone; 16-wide (AVX-512)
// where the compiler targets it, else 8-wide (AVX2). The AVX2 number is printed
// too: it is the ceiling for code that uses 256-bit vectors only.
//   fma_peak THREADS  ->  "GFLOPS <best, widest vectors>" and "GFLOPS_AVX2 <best>"
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define CHAINS 12
#define ITERS 20000000L

static double run(int threads) {  // 8-wide
  float sink = 0;
  double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    __m256 acc[CHAINS];
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < ITERS; i++)
      for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    float out[8];
    for (int c = 1; c < CHAINS; c++) acc[0] = _mm256_add_ps(acc[0], acc[c]);
    _mm256_storeu_ps(out, acc[0]);
    sink += out[0];
  }
  double t = omp_get_wtime() - t0;
  if (sink == 12345.f) printf("#");   // keep the result live
  return 2.0 * 8 * CHAINS * ITERS * threads / t / 1e9;
}

#ifdef __AVX512F__
static double run512(int threads) {  // 16-wide
  float sink = 0;
  double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    __m512 acc[CHAINS];
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < ITERS; i++)
      for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    for (int c = 1; c < CHAINS; c++) acc[0] = _mm512_add_ps(acc[0], acc[c]);
    sink += _mm512_reduce_add_ps(acc[0]);
  }
  double t = omp_get_wtime() - t0;
  if (sink == 12345.f) printf("#");
  return 2.0 * 16 * CHAINS * ITERS * threads / t / 1e9;
}
#endif

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  double best = 0, best512 = 0;
  for (int r = 0; r < 5; r++) {
    double g = run(threads);
    if (g > best) best = g;
#ifdef __AVX512F__
    g = run512(threads);
    if (g > best512) best512 = g;
#endif
  }
  printf("GFLOPS %.2f\nGFLOPS_AVX2 %.2f\n", best512 > best ? best512 : best, best);
  return 0;
}
