// triad: the machine's memory bandwidth, STREAM's triad a = b + s*c over
// 16M-float arrays (64 MiB each, far beyond the caches), counted as STREAM
// counts it: 12 bytes per element (two reads, one write).
//   triad THREADS  ->  prints "GBS <best of 10>"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define N (16L << 20)

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  float *a = aligned_alloc(64, N * 4), *b = aligned_alloc(64, N * 4), *c = aligned_alloc(64, N * 4);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < N; i++) { a[i] = 0; b[i] = 1; c[i] = 2; }
  double best = 0;
  for (int r = 0; r < 10; r++) {
    double t0 = omp_get_wtime();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < N; i++) a[i] = b[i] + 3.0f * c[i];
    double g = 12.0 * N / (omp_get_wtime() - t0) / 1e9;
    if (g > best) best = g;
  }
  printf("GBS %.2f\n", best);
  if (a[N / 2] != 7.0f) { fprintf(stderr, "triad: wrong result\n"); return 1; }
  return 0;
}
