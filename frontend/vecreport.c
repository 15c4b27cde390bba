// vecreport.c: `kiln emit-c FILE --vectorize`. The generated C goes through the
// same compiler and flags as the JIT, asking the vectorizer to account for each
// loop; the remarks are then told per kernel, innermost loops first in mind:
// those are the ones that must vectorize for a kernel to run at memory speed.
#include "pipeline.h"
#include "compiler/jit.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The kernel a line of the source belongs to: the last "// kN: ..." header at or
// above it (the host function and entry points come after the kernels).
typedef struct { int line; char title[96]; } KernelAt;

static int kernel_headers(const char *src, KernelAt **out) {
  int n = 0, cap = 0, line = 1;
  *out = NULL;
  for (const char *p = src; *p; line++) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int is_kernel = len > 4 && !strncmp(p, "// k", 4) && p[4] >= '0' && p[4] <= '9';
    int is_host = len >= 10 && !strncmp(p, "static size_t layout(", 21 < len ? 21 : len);
    if (is_kernel || is_host) {
      if (n == cap && !(*out = realloc(*out, (cap = cap ? 2 * cap : 32) * sizeof **out))) abort();
      (*out)[n].line = line;
      snprintf((*out)[n].title, sizeof (*out)[n].title, "%.*s", (int)(len > 95 ? 95 : len), is_host ? "// host" : p);
      n++;
    }
    p = e ? e + 1 : p + len;
  }
  return n;
}

// "kernel.c:LINE:COL: remark: TEXT [-Rpass...]" or GCC's "kernel.c:LINE:COL: optimized: TEXT".
static int parse_remark(const char *l, int *line, const char **text) {
  const char *p = strstr(l, "kernel.c:");
  if (!p) return 0;
  *line = atoi(p + 9);
  const char *t = strstr(p, ": remark: ");
  if (t) { *text = t + 10; return 1; }
  if ((t = strstr(p, ": optimized: "))) { *text = t + 13; return 1; }
  if ((t = strstr(p, ": missed: "))) { *text = t + 10; return 1; }
  return 0;
}

void pipe_vector_report(FILE *out, const char *src) {
  char err[4096], *text = NULL;
  if (jit_vector_report(NULL, src, &text, err, sizeof err)) {
    fprintf(out, "// vectorization report unavailable: %s\n", err);
    return;
  }
  KernelAt *ks;
  int nk = kernel_headers(src, &ks), cur = -1, last_line = 0;
  char last[256] = "";
  fprintf(out, "// vectorization, as the JIT's compiler reports each loop (line numbers: this graph's C above):\n");
  for (char *l = text; l && *l;) {
    char *e = strchr(l, '\n');
    if (e) *e = 0;
    int line;
    const char *t;
    // Interleaving is the unroll decision, not whether the loop vectorized.
    if (parse_remark(l, &line, &t) && !strstr(t, "interleaving is not beneficial")) {
      int k = -1;
      for (int i = 0; i < nk && ks[i].line <= line; i++) k = i;
      if (k != cur && k >= 0) fprintf(out, "%s\n", ks[k].title), cur = k;
      char msg[256];
      snprintf(msg, sizeof msg, "%s", t);
      char *br = strstr(msg, " [-R");
      if (br) *br = 0;
      // A loop versioned or emitted more than once reports once per copy.
      if (line != last_line || strcmp(msg, last)) fprintf(out, "//   line %d: %s\n", line, msg);
      last_line = line;
      snprintf(last, sizeof last, "%s", msg);
    }
    l = e ? e + 1 : NULL;
  }
  free(ks);
  free(text);
}
