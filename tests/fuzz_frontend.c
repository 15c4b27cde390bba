// fuzz_frontend.c: a libFuzzer target over the front end, autodiff, every pass
// and the C emitter, as `kiln emit-c` runs them (the emitted C goes to
// /dev/null; parameters' initializers still run, compiled); with KILN_FUZZ_RUN
// set, as `kiln run` runs them (compiled and run, training cut to 3 steps and
// evaluation to 100 examples). Any input, a model file, must end in graphs,
// values or diagnostics, never in a crash, a sanitizer's report or a hang.
// scripts/fuzz.sh builds it with clang's libFuzzer, the whole tree
// instrumented; test_fuzz (KILN_FUZZ_REPLAY, below) runs the seeds and the
// corpus kept in tests/fuzz/ through it once, in ./test.sh.
#include "frontend/eval.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  static int run;
  if (!sink) {
    if (!(sink = fopen("/dev/null", "w"))) abort();
    run = getenv("KILN_FUZZ_RUN") != NULL;
  }
  char *text = malloc(size + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  Diag d;
  diag_init(&d);
  Ev *ev = ev_new(sink, &d);
  ev->pipe.emit_c = !run;
  ev->topts.max_steps = 3, ev->topts.eval_examples = 100, ev->topts.progress = 0;
  char err[1024];
  if (ev_start(ev, 1, err, sizeof err)) {
    fprintf(stderr, "fuzz_frontend: %s\n", err);
    abort();
  }
  ev->pipe.dump = sink;   // the emitted C
  int rc = ev_run(ev, "fuzz.kiln", text);
  // A failed run says why, at a place in the source.
  if (rc && !(d.msg && d.msg[0])) {
    fprintf(stderr, "fuzz_frontend: failed without a diagnostic\n");
    abort();
  }
  ev_free(ev);
  diag_free(&d);
  free(text);
  return 0;
}

#ifdef KILN_FUZZ_REPLAY
// Without libFuzzer (test_fuzz, in ./test.sh): each model file of the examples,
// the language and error tests and tests/fuzz/ (inputs the fuzzer found) once
// through the target, which aborts on what it must never see.
#include <dirent.h>

static int npass, nfail;

static void replay_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    printf("FAIL replay: cannot open %s\n", dir);
    nfail++;
    return;
  }
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len < 6 || strcmp(e->d_name + len - 5, ".kiln")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t size;
    char *text = ev_read_file(path, &size);
    if (!text) {
      printf("FAIL replay: cannot read %s\n", path);
      nfail++;
      continue;
    }
    LLVMFuzzerTestOneInput((const uint8_t *)text, size);
    free(text);
    n++;
  }
  closedir(d);
  printf("ok   replay: %d model files of %s end in graphs or diagnostics\n", n, dir);
  npass++;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  static const char *dirs[] = {"examples", "tests/lang", "tests/errors", "tests/fuzz"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", KILN_SOURCE_ROOT, dirs[i]);
    replay_dir(dir);
  }
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail != 0;
}
#endif
