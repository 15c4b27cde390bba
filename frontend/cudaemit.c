// `kiln emit-cuda`: each graph's CUDA C (codegen/cuda.c) instead of its C, and with
// --arch, each compiled by NVRTC for those architectures (a check that needs no GPU).
#include "pipeline.h"
#include "compiler/nvrtc.h"
#include <stdlib.h>
#include <string.h>

// "sm_80,sm_90" (or "80,90") into archs; the count, or -1 if malformed.
int pipe_cuda_archs(const char *s, int *archs, int max) {
  int n = 0;
  while (s && *s) {
    if (!strncmp(s, "sm_", 3)) s += 3;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 10 || v > 1000 || n == max || (*end && *end != ',')) return -1;
    archs[n++] = (int)v;
    s = *end ? end + 1 : end;
  }
  return n ? n : -1;
}

int pipe_emit_cuda(Pipe *p, const Schedule *s, char *err, size_t errlen) {
  CudaSource cs;
  if (cg_emit_cuda(s, &cs, err, errlen)) return -1;
  fputs(cs.src, p->dump);
  int archs[16], n = p->cuda_archs ? pipe_cuda_archs(p->cuda_archs, archs, 16) : 0, rc = 0;
  if (n < 0) { snprintf(err, errlen, "--arch takes architectures like sm_80,sm_90, not '%s'", p->cuda_archs); rc = -1; }
  if (n > 0 && !p->cuda && !(p->cuda = calloc(1, sizeof *p->cuda))) abort();
  for (int i = 0; i < n && !rc; i++) {
    NvrtcImage im;
    if (nvrtc_compile(p->cuda, cs.src, archs[i], NULL, &im, err, errlen)) { rc = -1; break; }
    char who[320];
    nvrtc_describe(p->cuda, who, sizeof who);
    fprintf(p->dump, "// %s: sm_%d: %s for %s_%d, %zu bytes, ", who, archs[i], im.cubin ? "CUBIN" : "PTX",
            im.cubin ? "sm" : "compute", im.arch, im.len);
    if (im.cache_hit) fprintf(p->dump, "from the cache\n");
    else fprintf(p->dump, "compiled in %.1f ms\n", im.compile_ms);
    nvrtc_image_free(&im);
  }
  cg_cuda_free(&cs);
  return rc;
}

void pipe_cuda_free(Pipe *p) {
  if (!p->cuda) return;
  rt_cuda_close(p->cuda);
  free(p->cuda);
  p->cuda = NULL;
}
