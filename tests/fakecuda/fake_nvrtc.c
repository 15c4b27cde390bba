// fake_nvrtc.c - a test-only stand-in for libnvrtc (KILN_NVRTC names it): it
// "compiles" Kiln's CUDA C with the host's C++ compiler into a shared library,
// with shim.h supplying CUDA's keywords and running blocks as fibers, plus one
// exported launcher per __global__ function. The "CUBIN" is that library behind
// a small header, which fake_cuda.c's cuModuleLoadData loads with dlopen. It
// lets CI run every kernel and the whole host side of `--device cuda` on the CPU.
// Version 0.3, so its images never share a cache entry with a real NVRTC's.
// $KILN_FAKE_CXX: the compiler (default g++).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_MAGIC "KILNFAKE"   // then the library's length as 8 bytes, then the library

typedef struct { char *src, *log, *image; size_t loglen, len; } Prog;
typedef Prog *nvrtcProgram;

int nvrtcVersion(int *major, int *minor) { *major = 0; *minor = 3; return 0; }
const char *nvrtcGetErrorString(int r) { return r == 6 ? "NVRTC_ERROR_COMPILATION (fake)" : r ? "NVRTC_ERROR (fake)" : "NVRTC_SUCCESS"; }
int nvrtcGetNumSupportedArchs(int *n) { *n = 2; return 0; }
int nvrtcGetSupportedArchs(int *a) { a[0] = 80; a[1] = 90; return 0; }

int nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int nh, const char *const *h,
                       const char *const *inc) {
  (void)name; (void)nh; (void)h; (void)inc;
  if (!(*p = calloc(1, sizeof **p)) || !((*p)->src = strdup(src))) return 1;
  return 0;
}

int nvrtcDestroyProgram(nvrtcProgram *p) {
  if (*p) { free((*p)->src); free((*p)->log); free((*p)->image); free(*p); *p = NULL; }
  return 0;
}

// The launchers: for each `__global__ void [__launch_bounds__(n)] NAME(`, an
// extern "C" kiln_fake__NAME(grid, block, params) that runs it through the shim,
// and kiln_fake_sizes__NAME(sizes), its parameters' sizes (the fake driver copies
// a launch's arguments, as the real one does, to run it later).
static void launchers(FILE *f, const char *src) {
  for (const char *p = src; (p = strstr(p, "__global__ void ")); ) {
    p += strlen("__global__ void ");
    if (!strncmp(p, "__launch_bounds__(", 18)) p = strchr(p, ')') + 2;
    size_t n = strcspn(p, "( ");
    fprintf(f, "extern \"C\" void kiln_fake__%.*s(unsigned gx, unsigned bx, void **params) {\n"
               "  kiln_fake_run(\"%.*s\", gx, bx, [](void **p) { kiln_fake_apply(%.*s, p); }, params);\n}\n"
               "extern \"C\" int kiln_fake_sizes__%.*s(kiln_size_t *sizes) { return kiln_fake_sizes(%.*s, sizes); }\n",
            (int)n, p, (int)n, p, (int)n, p, (int)n, p, (int)n, p);
  }
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(n + 1);
  if (b && fread(b, 1, n, f) != (size_t)n) { free(b); b = NULL; }
  fclose(f);
  if (b) b[n] = 0, *len = n;
  return b;
}

// g++'s "DIR/kernel.cu.cpp:12:5: error: ..." as NVRTC writes it, "kiln.cu(12): error: ...",
// so Kiln's report of a failed compile (nvrtc.c) is exercised as with the real one.
static char *nvrtc_style(char *log, const char *path, size_t *len) {
  if (!log) return NULL;
  char *out = malloc(*len + 1), *o = out;
  size_t pl = strlen(path);
  if (!out) abort();
  for (char *p = log; *p;) {
    long line, col;
    int used = 0;
    if (!strncmp(p, path, pl) && sscanf(p + pl, ":%ld:%ld:%n", &line, &col, &used) == 2 && used) {
      o += sprintf(o, "kiln.cu(%ld):", line);
      p += pl + used;
    }
    while (*p && *p != '\n') *o++ = *p++;
    if (*p) *o++ = *p++;
  }
  *o = 0;
  *len = o - out;
  free(log);
  return out;
}

int nvrtcCompileProgram(nvrtcProgram p, int nopts, const char *const *opts) {
  (void)nopts; (void)opts;
  char dir[] = "/tmp/kiln-fake-nvrtc-XXXXXX", path[256], so[256], logp[256], cmd[1024];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/kernel.cu.cpp", dir);
  snprintf(so, sizeof so, "%s/kernel.so", dir);
  snprintf(logp, sizeof logp, "%s/log", dir);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fputs(p->src, f);
  fputs("\n", f);
  launchers(f, p->src);
  fclose(f);
  const char *cxx = getenv("KILN_FAKE_CXX");
  snprintf(cmd, sizeof cmd, "%s -std=gnu++17 -O1 -fPIC -shared -w -fno-exceptions -include '%s' -o '%s' '%s' > '%s' 2>&1",
           cxx && *cxx ? cxx : "g++", KILN_FAKE_SHIM, so, path, logp);
  int rc = system(cmd);
  free(p->log);
  p->log = nvrtc_style(slurp(logp, &p->loglen), path, &p->loglen);
  size_t n = 0;
  char *lib = rc ? NULL : slurp(so, &n);
  if (lib) {
    free(p->image);
    p->len = 16 + n;
    if (!(p->image = malloc(p->len))) abort();
    memcpy(p->image, FAKE_MAGIC, 8);
    unsigned long long n64 = n;
    memcpy(p->image + 8, &n64, 8);
    memcpy(p->image + 16, lib, n);
    free(lib);
  }
  unlink(path); unlink(so); unlink(logp); rmdir(dir);
  return lib ? 0 : 6;
}

int nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n) { *n = p->log ? p->loglen + 1 : 1; return 0; }
int nvrtcGetProgramLog(nvrtcProgram p, char *log) {
  if (p->log) memcpy(log, p->log, p->loglen + 1); else log[0] = 0;
  return 0;
}
static int image_size(nvrtcProgram p, size_t *n) { if (!p->image) return 1; *n = p->len; return 0; }
static int image(nvrtcProgram p, char *out) { if (!p->image) return 1; memcpy(out, p->image, p->len); return 0; }
int nvrtcGetCUBINSize(nvrtcProgram p, size_t *n) { return image_size(p, n); }
int nvrtcGetCUBIN(nvrtcProgram p, char *out) { return image(p, out); }
int nvrtcGetPTXSize(nvrtcProgram p, size_t *n) { return image_size(p, n); }
int nvrtcGetPTX(nvrtcProgram p, char *out) { return image(p, out); }
