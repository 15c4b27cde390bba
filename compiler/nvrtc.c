// nvrtc.c - CUDA C to CUBIN/PTX with NVRTC (nvrtc.h), cached on disk like CPU objects.
#include "nvrtc.h"
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NVRTC_FILE "kiln.cu"   // the name NVRTC's log gives the source

void nvrtc_describe(const RtCuda *cu, char *buf, size_t len) {
  snprintf(buf, len, "NVRTC %d.%d (%s)", cu->nvrtc_major, cu->nvrtc_minor, cu->nvrtc_name);
}

// The image to build for compute capability sm: a CUBIN when this NVRTC lists sm
// and can write CUBINs, else PTX for the newest architecture it lists at or
// below sm. 0, or -1 if it knows none that old.
static int pick_arch(RtCuda *cu, int sm, int *cubin, int *arch, char *err, size_t errlen) {
  int n = 0, *archs = NULL;
  *cubin = 0;
  *arch = sm;
  if (!cu->nvrtcGetNumSupportedArchs || !cu->nvrtcGetSupportedArchs) return 0;   // NVRTC < 11.2: try PTX
  if (cu->nvrtcGetNumSupportedArchs(&n) || n <= 0 || !(archs = malloc(sizeof(int) * n))) return 0;
  if (cu->nvrtcGetSupportedArchs(archs)) { free(archs); return 0; }
  int best = -1, oldest = archs[0];
  for (int i = 0; i < n; i++) {
    if (archs[i] == sm && cu->nvrtcGetCUBIN) *cubin = 1;
    if (archs[i] <= sm && archs[i] > best) best = archs[i];
    if (archs[i] < oldest) oldest = archs[i];
  }
  free(archs);
  if (best < 0) {
    snprintf(err, errlen, "NVRTC %d.%d cannot compile for sm_%d: the oldest architecture it supports is sm_%d",
             cu->nvrtc_major, cu->nvrtc_minor, sm, oldest);
    return -1;
  }
  *arch = best;
  return 0;
}

// Line `line` (1-based) of src into buf, without its newline; "" past the end.
static void source_line(const char *src, long line, char *buf, size_t len) {
  const char *p = src;
  for (long i = 1; i < line && p; i++) {
    p = strchr(p, '\n');
    if (p) p++;
  }
  buf[0] = 0;
  if (!p || line < 1) return;
  size_t n = strcspn(p, "\n");
  if (n >= len) n = len - 1;
  memcpy(buf, p, n);
  buf[n] = 0;
}

// NVRTC's log, each "kiln.cu(LINE): error" followed by that line of the source.
static void report_log(const char *src, const char *log, char *err, size_t errlen) {
  size_t k = snprintf(err, errlen, "NVRTC could not compile the generated CUDA:\n");
  for (const char *p = log; *p && k < errlen;) {
    size_t n = strcspn(p, "\n");
    k += snprintf(err + k, errlen - k, "%.*s\n", (int)n, p);
    long line;
    char tail[16], text[512];
    if (k < errlen && sscanf(p, NVRTC_FILE "(%ld): %15[a-z]", &line, tail) == 2 && !strcmp(tail, "error")) {
      source_line(src, line, text, sizeof text);
      k += snprintf(err + k, errlen - k, "  %5ld | %s\n", line, text);
    }
    p += n;
    if (*p) p++;
  }
  if (k && k < errlen && err[k - 1] == '\n') err[k - 1] = 0;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// One NVRTC run: the image into out. 0 or -1.
static int run_nvrtc(RtCuda *cu, const char *src, const char *const *opts, int nopts, NvrtcImage *out, char *err,
                     size_t errlen) {
  nvrtcProgram prog;
  nvrtcResult r = cu->nvrtcCreateProgram(&prog, src, NVRTC_FILE, 0, NULL, NULL);
  if (r) { snprintf(err, errlen, "nvrtcCreateProgram: %s", cu->nvrtcGetErrorString(r)); return -1; }
  double t0 = now_ms();
  r = cu->nvrtcCompileProgram(prog, nopts, opts);
  out->compile_ms = now_ms() - t0;
  if (r) {
    size_t n = 0;
    char *log = NULL;
    if (!cu->nvrtcGetProgramLogSize(prog, &n) && (log = malloc(n + 1)) && !cu->nvrtcGetProgramLog(prog, log)) {
      log[n] = 0;
      report_log(src, log, err, errlen);
    } else {
      snprintf(err, errlen, "nvrtcCompileProgram: %s (no log)", cu->nvrtcGetErrorString(r));
    }
    free(log);
    cu->nvrtcDestroyProgram(&prog);
    return -1;
  }
  size_t n = 0;
  r = out->cubin ? cu->nvrtcGetCUBINSize(prog, &n) : cu->nvrtcGetPTXSize(prog, &n);
  if (!r && !(out->image = malloc(n ? n : 1))) abort();
  if (!r) r = out->cubin ? cu->nvrtcGetCUBIN(prog, out->image) : cu->nvrtcGetPTX(prog, out->image);
  cu->nvrtcDestroyProgram(&prog);
  if (r) {
    snprintf(err, errlen, "NVRTC: cannot read the %s: %s", out->cubin ? "CUBIN" : "PTX", cu->nvrtcGetErrorString(r));
    free(out->image);
    out->image = NULL;
    return -1;
  }
  out->len = n;
  return 0;
}

static int compile_image(RtCuda *cu, const char *src, int sm, int ptx, const char *cache_dir, NvrtcImage *out,
                         char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (!cu->nvrtc_lib && rt_cuda_nvrtc(cu, err, errlen)) return -1;
  if (pick_arch(cu, sm, &out->cubin, &out->arch, err, errlen)) return -1;
  if (ptx) out->cubin = 0;
  // --fmad=false: a*b+c as two roundings, as the C the CPU runs is compiled
  // (-ffp-contract=off), and as the Philox normals' arithmetic requires (rt.h).
  char archopt[48];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s_%d", out->cubin ? "sm" : "compute", out->arch);
  // -w: warnings about generated code (unused temporaries) would bury the errors.
  const char *opts[] = {archopt, "--fmad=false", "--std=c++17", "-w"};
  int nopts = sizeof opts / sizeof *opts;
  CacheHash h;
  cache_hash_init(&h);
  cache_hash_str(&h, "kiln-nvrtc-1");
  cache_hash_str(&h, src);
  for (int i = 0; i < nopts; i++) cache_hash_str(&h, opts[i]);
  int ver[2] = {cu->nvrtc_major, cu->nvrtc_minor};
  cache_hash_add(&h, ver, sizeof ver);
  cache_hash_hex(&h, out->key);
  char *dir = cache_dir ? (*cache_dir ? strdup(cache_dir) : NULL) : cache_default_dir();
  if (dir && cache_prepare(dir)) { free(dir); dir = NULL; }
  if (dir) {
    char why[256];
    if (cache_get(dir, out->key, &out->image, &out->len, why, sizeof why) == CACHE_HIT) {
      out->cache_hit = 1;
      free(dir);
      return 0;
    }
  }
  int rc = run_nvrtc(cu, src, opts, nopts, out, err, errlen);
  if (!rc && dir) cache_put(dir, out->key, out->image, out->len);   // best effort, as the JIT's
  free(dir);
  return rc;
}

int nvrtc_compile(RtCuda *cu, const char *src, int sm, const char *cache_dir, NvrtcImage *out, char *err,
                  size_t errlen) {
  return compile_image(cu, src, sm, 0, cache_dir, out, err, errlen);
}

int nvrtc_compile_ptx(RtCuda *cu, const char *src, int sm, const char *cache_dir, NvrtcImage *out, char *err,
                      size_t errlen) {
  return compile_image(cu, src, sm, 1, cache_dir, out, err, errlen);
}

void nvrtc_image_free(NvrtcImage *im) {
  free(im->image);
  im->image = NULL;
}
