// A C program with Kiln's MLP (examples/mlp.kiln) inside it, through the library that
// `kiln build --lib` makes: no Kiln, LLVM or Clang needed to build or run it.
//
//     build/kiln build examples/mlp.kiln --lib -o build/libmlp      # libmlp.a, libmlp.so, mlp.h
//     cc -O2 -I build examples/embed/main.c build/libmlp.a \
//        -lblis -lz -lm -lmvec -lpthread -fopenmp -o build/embed
//     build/embed mlp.safetensors [IMAGES.f32]
//
// It loads trained weights, predicts the class of each example in IMAGES.f32 (raw
// little-endian f32 values, MLP_INPUT_SIZE per example: 28x28 pixels scaled to [0, 1];
// without the file, one all-zero image), prints each example's outputs, then takes one
// training step on those examples with the predicted classes as labels and prints the loss.
#include "mlp.h"
#include <stdio.h>
#include <stdlib.h>

// The examples of a raw f32 file, or one zero image; *n gets their number.
static float *read_examples(const char *path, int64_t *n) {
  if (!path) {
    *n = 1;
    return calloc(MLP_INPUT_SIZE, sizeof(float));
  }
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  rewind(f);
  *n = bytes / (long)(MLP_INPUT_SIZE * sizeof(float));
  float *x = *n ? malloc((size_t)*n * MLP_INPUT_SIZE * sizeof(float)) : NULL;
  if (x && fread(x, sizeof(float) * MLP_INPUT_SIZE, (size_t)*n, f) != (size_t)*n) { free(x); x = NULL; }
  fclose(f);
  return x;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s WEIGHTS.safetensors [IMAGES.f32]\n", argv[0]);
    return 2;
  }
  char err[512];
  mlp_model *m = mlp_create(1, err, sizeof err);   // one thread: results as kiln run --threads 1
  if (!m || mlp_load(m, argv[1], err, sizeof err)) {
    fprintf(stderr, "error: %s\n", err);
    mlp_free(m);
    return 1;
  }
  int64_t n;
  float *x = read_examples(argc > 2 ? argv[2] : NULL, &n);
  float *y = x ? malloc((size_t)n * MLP_OUTPUT_SIZE * sizeof(float)) : NULL;
  int32_t *labels = x ? malloc((size_t)n * sizeof(int32_t)) : NULL;
  if (!x || !y || !labels) {
    fprintf(stderr, "error: cannot read %s\n", argc > 2 ? argv[2] : "the input");
    return 1;
  }
  if (mlp_forward(m, x, n, y, err, sizeof err)) {
    fprintf(stderr, "error: %s\n", err);
    return 1;
  }
  for (int64_t i = 0; i < n; i++) {
    const float *row = y + i * MLP_OUTPUT_SIZE;
    labels[i] = 0;
    for (int k = 1; k < MLP_OUTPUT_SIZE; k++) if (row[k] > row[labels[i]]) labels[i] = k;
    printf("example %lld: class %d:", (long long)i, labels[i]);
    for (int k = 0; k < MLP_OUTPUT_SIZE; k++) printf(" %.9g", row[k]);   // %.9g: every f32 bit
    printf("\n");
  }
  double loss;
  if (mlp_train_step(m, x, labels, n, -1, &loss, err, sizeof err)) {
    fprintf(stderr, "error: %s\n", err);
    return 1;
  }
  printf("one training step on them: loss %.6g\n", loss);
  free(x); free(y); free(labels);
  mlp_free(m);
  return 0;
}
