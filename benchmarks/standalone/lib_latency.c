// lib_latency: the forward latency of examples/mlp.kiln built with `kiln build --lib`
// (mlp_forward on caller buffers), timed as train_speed's kiln_harness times kiln_run on
// the JIT's graph: the median over repetitions filling ~1 s, after one warm-up call.
//
//   lib_latency THREADS WEIGHTS.safetensors     LIB B MILLISECONDS   (B = 1, 128)
#include "mlp.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../bench_clock.h"

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: lib_latency THREADS WEIGHTS\n"); return 2; }
  char err[512];
  mlp_model *m = mlp_create(atoi(argv[1]), err, sizeof err);
  if (!m || mlp_load(m, argv[2], err, sizeof err)) { fprintf(stderr, "lib_latency: %s\n", err); return 1; }
  long bs[] = {1, 128};
  for (int i = 0; i < 2; i++) {
    long B = bs[i];
    float *x = malloc(B * MLP_INPUT_SIZE * sizeof *x), *y = malloc(B * MLP_OUTPUT_SIZE * sizeof *y);
    for (long j = 0; j < B * MLP_INPUT_SIZE; j++) x[j] = (float)((j * 2654435761u) % 1000) / 1000.0f - 0.5f;
    double t0 = now();
    if (mlp_forward(m, x, B, y, err, sizeof err)) { fprintf(stderr, "lib_latency: %s\n", err); return 1; }
    double one = now() - t0;
    int reps = one > 0 ? (int)(1.0 / one) : 50;
    if (reps < 5) reps = 5;
    if (reps > 200) reps = 200;
    double *ts = malloc(reps * sizeof *ts);
    for (int r = 0; r < reps; r++) {
      t0 = now();
      mlp_forward(m, x, B, y, err, sizeof err);
      ts[r] = now() - t0;
    }
    qsort(ts, reps, sizeof *ts, cmp);
    printf("LIB %ld %.4f\n", B, 1e3 * ts[reps / 2]);
    free(ts); free(x); free(y);
  }
  mlp_free(m);
  return 0;
}
