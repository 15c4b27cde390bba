// fuzz_files.c: a libFuzzer target over the runtime's file readers: .npy, .npz,
// CSV, IDX and safetensors. The first byte picks the reader, the rest is the
// file. Any file must end in a tensor, a data set or a message, never in a
// crash, a sanitizer's report or a hang. scripts/fuzz.sh files SECONDS runs it.
#include "runtime/ckpt.h"
#include "runtime/data.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must_say_why(int rc, const char *err, const char *what) {
  if (rc && !err[0]) {
    fprintf(stderr, "fuzz_files: %s failed without a message\n", what);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[64];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/kiln-fuzz-files-%d", (int)getpid());
  if (size < 1) return 0;
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f)) abort();
  char err[1024] = "";
  RtTensor t;
  RtDataset ds;
  int rc;
  switch (data[0] % 5) {
  case 0:
    rc = rt_npy_load(path, &t, err, sizeof err);
    must_say_why(rc, err, "npy");
    if (!rc) rt_tensor_free(&t);
    break;
  case 1: {
    char(*names)[256];
    int n;
    rc = rt_npz_list(path, &names, &n, err, sizeof err);
    must_say_why(rc, err, "npz list");
    for (int i = 0; !rc && i < n && i < 4; i++) {
      err[0] = '\0';
      int r = rt_npz_load(path, names[i], &t, err, sizeof err);
      must_say_why(r, err, "npz load");
      if (!r) rt_tensor_free(&t);
    }
    if (!rc) free(names);
    break;
  }
  case 2:
    rc = rt_data_csv(path, -1, -1, &ds, err, sizeof err);
    must_say_why(rc, err, "csv");
    if (!rc) rt_dataset_free(&ds);
    break;
  case 3:
    rc = rt_data_idx(path, NULL, 1, &ds, err, sizeof err);
    must_say_why(rc, err, "idx");
    if (!rc) rt_dataset_free(&ds);
    break;
  default: {
    RtTensorFile tf;
    rc = rt_safetensors_load(path, &tf, err, sizeof err);
    must_say_why(rc, err, "safetensors");
    if (!rc) rt_tensorfile_free(&tf);
  }
  }
  return 0;
}
