// blis_gemm: C = A B in fp32 through bli_sgemm called directly, the number
// Kiln's matrix product should come within 10% of.
//   blis_gemm THREADS N...  ->  prints "GEMM N GFLOPS" per size (median of reps)
#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../bench_clock.h"

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  bli_thread_set_num_threads(threads);
  for (int i = 2; i < argc; i++) {
    long n = atol(argv[i]);
    float *A = malloc(n * n * 4), *B = malloc(n * n * 4), *C = malloc(n * n * 4);
    for (long j = 0; j < n * n; j++) { A[j] = (float)(j % 7) * 0.1f; B[j] = (float)(j % 5) * 0.1f; C[j] = 0; }
    float one = 1, zero = 0;
    double flop = 2.0 * n * n * n;
    int reps = flop < 1e9 ? 21 : 7;
    double ts[32];
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, n, n, n, &one, A, n, 1, B, n, 1, &zero, C, n, 1);
    for (int r = 0; r < reps; r++) {
      double t0 = now();
      bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, n, n, n, &one, A, n, 1, B, n, 1, &zero, C, n, 1);
      ts[r] = now() - t0;
    }
    qsort(ts, reps, sizeof ts[0], cmp);
    printf("GEMM %ld %.2f\n", n, flop / ts[reps / 2] / 1e9);
    free(A), free(B), free(C);
  }
  return 0;
}
