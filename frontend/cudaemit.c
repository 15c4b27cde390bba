// The CUDA side of the pipeline. `kiln emit-cuda`: each graph's CUDA C
// (codegen/cuda.c) instead of its C, and with --arch, each compiled by NVRTC for
// those architectures (a check that needs no GPU). `--device cuda`: programs
// compiled for the device and run there, behind prog_run.
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
  // The host function too, where it does not stop the text being one CUDA translation unit.
  fprintf(p->dump, "\n#if 0\n%s#endif\n", cs.host);
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

int pipe_open_device(Pipe *p, char *err, size_t errlen) {
  if (p->cx) return 0;
  if (!p->cuda && !(p->cuda = calloc(1, sizeof *p->cuda))) abort();
  if (!(p->cx = calloc(1, sizeof *p->cx))) abort();
  if (rt_cuda_exec_open(p->cx, p->cuda, p->device, err, errlen)) {
    free(p->cx);
    p->cx = NULL;
    return -1;
  }
  return 0;
}

void pipe_describe_device(const Pipe *p, char *buf, size_t len) {
  const RtCudaExec *x = p->cx;
  int k = snprintf(buf, len, "CUDA device %d: %s (sm_%d, %zu MiB); products through ", x->dev.ordinal, x->dev.name,
                   x->dev.sm, x->dev.total_mem >> 20);
  if (k < 0 || (size_t)k >= len) return;
  if (x->blas) snprintf(buf + k, len - k, "cuBLAS (%s)", p->cuda->cublas_name);
  else snprintf(buf + k, len - k, "Kiln's tiled kernels (%s)", x->blas_why);
}

int pipe_compile_cuda(Pipe *p, Program *pr, char *err, size_t errlen) {
  if (pipe_open_device(p, err, errlen)) return -1;
  ProgCuda *c = pr->cuda = calloc(1, sizeof *pr->cuda);
  if (!c) abort();
  c->cx = p->cx;
  if (cg_emit_cuda(pr->s, &c->cs, err, errlen)) return -1;
  NvrtcImage im;
  if (nvrtc_compile(p->cuda, c->cs.src, p->cx->dev.sm, NULL, &im, err, errlen)) return -1;
  c->nvrtc_hit = im.cache_hit;
  c->nvrtc_ms = im.compile_ms;
  const char *names[2] = {c->cs.host_entry, c->cs.host_workspace};
  void *addrs[2];
  if (jit_compile(p->jit, c->cs.host, names, 2, addrs, &pr->st, err, errlen)) { nvrtc_image_free(&im); return -1; }
  pr->workspace = (size_t (*)(const int64_t *))addrs[1];
  int n = c->cs.nsteps;
  const char **kernels = calloc(n ? n : 1, sizeof *kernels);
  int *block = calloc(n ? n : 1, sizeof *block);
  if (!kernels || !block) abort();
  for (int i = 0; i < n; i++) kernels[i] = c->cs.steps[i].name, block[i] = c->cs.steps[i].block;
  int rc = rt_cuda_prog_load(p->cx, &c->run, im.image, kernels, block, n, (RtCudaHost)addrs[0], err, errlen);
  free(kernels);
  free(block);
  nvrtc_image_free(&im);
  return rc;
}

void prog_cuda_free(ProgCuda *c) {
  if (c->run.mod || c->run.fns) rt_cuda_prog_free(c->cx, &c->run);
  cg_cuda_free(&c->cs);
  free(c);
}

static size_t aligned_bytes(const Node *n, const int64_t *D) {
  size_t e = ir_dtype_size(n->dtype);
  for (int d = 0; d < n->ndim; d++) e *= (size_t)(n->shape[d].sym ? n->shape[d].k * D[n->shape[d].sym] : n->shape[d].k);
  return ((e ? e : 1) + 255) & ~(size_t)255;
}

void prog_cuda_plan(const Program *pr, const int64_t *D, size_t *workspace, size_t *args) {
  *workspace = pr->workspace(D);
  *args = 0;
  for (int i = 0; i < pr->g->nin; i++) *args += aligned_bytes(pr->g->ins[i], D);
  for (int i = 0; i < pr->s->nconst; i++) *args += (pr->s->consts[i]->a.nbytes + 255) & ~(size_t)255;
  for (int i = 0; i < pr->g->nout; i++) *args += aligned_bytes(pr->g->outs[i], D);
}

static size_t bytes_of(const RtTensor *t) { return (size_t)rt_tensor_numel(t) * rt_dtype_size(t->dtype); }

int prog_run_cuda(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs) {
  const Schedule *s = pr->s;
  ProgCuda *c = pr->cuda;
  int nin = pr->g->nin, nc = s->nconst, nout = pr->g->nout, n = nin + nc + nout;
  void **host = malloc(sizeof *host * (n ? n : 1));
  size_t *bytes = malloc(sizeof *bytes * (n ? n : 1));
  double *ms = pr->prof_ns ? calloc(c->cs.nsteps ? c->cs.nsteps : 1, sizeof *ms) : NULL;
  if (!host || !bytes || (pr->prof_ns && !ms)) abort();
  for (int i = 0; i < nin; i++) host[i] = ins[i].data, bytes[i] = bytes_of(&ins[i]);
  for (int i = 0; i < nc; i++) host[nin + i] = (void *)s->consts[i]->a.data, bytes[nin + i] = s->consts[i]->a.nbytes;
  for (int i = 0; i < nout; i++) host[nin + nc + i] = outs[i].data, bytes[nin + nc + i] = bytes_of(&outs[i]);
  int rc = rt_cuda_run(p->cx, &c->run, D, host, bytes, nin, nc, nout, ms);
  if (!rc && ms) {   // --profile: an epilogue's kernels count as their product's, as on the CPU
    for (int i = 0; i < c->cs.nsteps; i++) {
      const Kernel *K = &s->ks[c->cs.steps[i].k];
      pr->prof_ns[K->epi_of ? K->epi_of - 1 : c->cs.steps[i].k] += (uint64_t)(ms[i] * 1e6);
    }
    pr->prof_ns[s->nk]++;
  }
  free(host);
  free(bytes);
  free(ms);
  return rc ? PROG_DEVICE_ERROR : 0;
}

void pipe_cuda_free(Pipe *p) {
  if (p->cx) {
    rt_cuda_exec_close(p->cx);
    free(p->cx);
    p->cx = NULL;
  }
  if (!p->cuda) return;
  rt_cuda_close(p->cuda);
  free(p->cuda);
  p->cuda = NULL;
}
