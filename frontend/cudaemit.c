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
  free(c->ms);
  cg_cuda_free(&c->cs);
  free(c);
}

// ---- state kept on the device (pipe_cuda_keep) ----
static int is_kept(const Pipe *p, const void *host) {
  for (int i = 0; host && i < p->nkept; i++) if (p->kept[i]->data == host) return 1;
  return 0;
}

// A copy whose host storage no kept tensor holds any more (its storage was
// swapped for the next values, or freed) is stale or spare: let it go.
static void forget_unkept(Pipe *p) {
  for (int m = 0; m < p->nmirrors;) {
    if (is_kept(p, p->mirrors[m].host)) { m++; continue; }
    rt_cuda_sync(p->cx);
    rt_cuda_free(p->cx, p->mirrors[m].dev);
    p->mirrors[m] = p->mirrors[--p->nmirrors];
  }
}

// host's device copy, made (and, for an input, filled) at its first use. Its index, or -2 on failure.
static int mirror_of(Pipe *p, void *host, size_t bytes, int input) {
  for (int m = 0; m < p->nmirrors; m++) if (p->mirrors[m].host == host) return m;
  CUdeviceptr d = rt_cuda_alloc(p->cx, bytes);
  if (!d || (input && rt_cuda_upload(p->cx, d, host, bytes))) { rt_cuda_free(p->cx, d); return -2; }
  if (!(p->mirrors = realloc(p->mirrors, sizeof *p->mirrors * (p->nmirrors + 1)))) abort();
  p->mirrors[p->nmirrors] = (PipeMirror){host, bytes, d, 0};
  return p->nmirrors++;
}

void pipe_cuda_keep(Pipe *p, RtTensor *t) {
  for (int i = 0; i < p->nkept; i++) if (p->kept[i] == t) return;
  if (!p->cx) return;
  if (!(p->kept = realloc(p->kept, sizeof *p->kept * (p->nkept + 1)))) abort();
  p->kept[p->nkept++] = t;
}

int pipe_cuda_sync(Pipe *p, char *err, size_t errlen) {
  int rc = 0;
  if (!p->cx) return 0;
  p->cx->err[0] = 0;
  for (int m = 0; m < p->nmirrors && !rc; m++) {
    PipeMirror *mi = &p->mirrors[m];
    if (mi->host_stale && is_kept(p, mi->host)) rc = rt_cuda_download(p->cx, mi->host, mi->dev, mi->bytes);
  }
  if (!rc) rc = rt_cuda_sync(p->cx);
  for (int m = 0; m < p->nmirrors && !rc; m++) p->mirrors[m].host_stale = 0;
  if (rc) snprintf(err, errlen, "%s", p->cx->err);
  return rc;
}

int pipe_cuda_release(Pipe *p, char *err, size_t errlen) {
  int rc = pipe_cuda_sync(p, err, errlen);
  if (p->cx) rt_cuda_drop_prefetched(p->cx);   // a batch copied for a step that never came
  p->nkept = 0;
  if (p->cx) forget_unkept(p);
  free(p->kept);
  free(p->mirrors);
  p->kept = NULL;
  p->mirrors = NULL;
  p->nmirrors = 0;
  return rc;
}

static size_t bytes_of(const RtTensor *t) { return (size_t)rt_tensor_numel(t) * rt_dtype_size(t->dtype); }

int pipe_cuda_prefetch(Pipe *p, const RtTensor *t, int n) {
  void *host[RT_CUDA_MAXAHEAD];
  size_t bytes[RT_CUDA_MAXAHEAD];
  if (n > RT_CUDA_MAXAHEAD) n = 0;   // each run copies its own
  for (int i = 0; i < n; i++) host[i] = t[i].data, bytes[i] = bytes_of(&t[i]);
  return rt_cuda_prefetch(p->cx, host, bytes, n);
}

// The profile's milliseconds per launch step wait in c->ms between start and wait.
static int prog_start_cuda(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs) {
  const Schedule *s = pr->s;
  ProgCuda *c = pr->cuda;
  int nin = pr->g->nin, nc = s->nconst, nout = pr->g->nout, n = nin + nc + nout;
  void **host = malloc(sizeof *host * (n ? n : 1));
  size_t *bytes = malloc(sizeof *bytes * (n ? n : 1));
  if (pr->prof_ns && !c->ms && !(c->ms = calloc(c->cs.nsteps ? c->cs.nsteps : 1, sizeof *c->ms))) abort();
  if (!host || !bytes) abort();
  for (int i = 0; i < nin; i++) host[i] = ins[i].data, bytes[i] = bytes_of(&ins[i]);
  for (int i = 0; i < nc; i++) host[nin + i] = (void *)s->consts[i]->a.data, bytes[nin + i] = s->consts[i]->a.nbytes;
  for (int i = 0; i < nout; i++) host[nin + nc + i] = outs[i].data, bytes[nin + nc + i] = bytes_of(&outs[i]);
  CUdeviceptr *kept = p->nkept ? calloc(n ? n : 1, sizeof *kept) : NULL;
  int rc = 0;
  p->cx->err[0] = 0;   // mirror_of may fail before rt_cuda_run_start clears it
  if (kept) {
    forget_unkept(p);
    int *wrote = calloc(p->nmirrors + n + 1, sizeof *wrote);
    if (!wrote) abort();
    for (int i = 0; i < n && !rc; i++) {
      int m = is_kept(p, host[i]) ? mirror_of(p, host[i], bytes[i], i < nin + nc) : -1;
      if (m == -2) rc = -1;
      else if (m >= 0) kept[i] = p->mirrors[m].dev, wrote[m] |= i >= nin + nc;
    }
    if (!rc) rc = rt_cuda_run_start(p->cx, &c->run, D, host, bytes, nin, nc, nout, kept, c->ms != NULL);
    for (int m = 0; m < p->nmirrors && !rc; m++) if (wrote[m]) p->mirrors[m].host_stale = 1;
    free(wrote);
  } else {
    rc = rt_cuda_run_start(p->cx, &c->run, D, host, bytes, nin, nc, nout, NULL, c->ms != NULL);
  }
  if (rc) p->cx->profiling = 0;
  free(kept);
  free(host);
  free(bytes);
  return rc ? PROG_DEVICE_ERROR : 0;
}

static int prog_wait_cuda(const Program *pr) {
  const Schedule *s = pr->s;
  ProgCuda *c = pr->cuda;
  if (c->ms) memset(c->ms, 0, sizeof *c->ms * c->cs.nsteps);
  if (rt_cuda_run_wait(c->cx, &c->run, c->ms)) return PROG_DEVICE_ERROR;
  if (c->ms) {   // --profile: an epilogue's kernels count as their product's, as on the CPU
    for (int i = 0; i < c->cs.nsteps; i++) {
      const Kernel *K = &s->ks[c->cs.steps[i].k];
      pr->prof_ns[K->epi_of ? K->epi_of - 1 : c->cs.steps[i].k] += (uint64_t)(c->ms[i] * 1e6);
    }
    pr->prof_ns[s->nk]++;
  }
  return 0;
}

int prog_start(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs) {
  return pr->cuda ? prog_start_cuda(p, pr, D, ins, outs) : prog_run(p, pr, D, ins, outs, 0);
}

int prog_wait(Pipe *p, const Program *pr) {
  (void)p;
  return pr->cuda ? prog_wait_cuda(pr) : 0;
}

int prog_run_cuda(Pipe *p, const Program *pr, const int64_t *D, const RtTensor *ins, RtTensor *outs) {
  int rc = prog_start_cuda(p, pr, D, ins, outs);
  return rc ? rc : prog_wait_cuda(pr);
}

CUdeviceptr pipe_cuda_mirror(const Pipe *p, const RtTensor *t) {
  for (int m = 0; m < p->nmirrors; m++) if (p->mirrors[m].host == t->data) return p->mirrors[m].dev;
  return 0;
}

// ---- several devices (--device cuda:0,1, cuda+cpu) ----
int pipe_set_devices(Pipe *p, const char *spec, char *err, size_t errlen) {
  int dev[PIPE_MAXPEERS + 1], n = rt_cuda_parse_devices(spec, dev, PIPE_MAXPEERS + 1);
  if (n < 0) {
    snprintf(err, errlen, "a device is cpu, cuda, cuda:N, cuda:0,1 (several GPUs) or cuda+cpu (GPU and CPU threads), "
             "not '%s'", spec);
    return -1;
  }
  if (dev[0] >= 0 && p->cx && p->cx->dev.ordinal != dev[0]) {
    snprintf(err, errlen, "this session runs on cuda:%d; a session's graphs use one GPU (start another for cuda:%d)",
             p->cx->dev.ordinal, dev[0]);
    return -1;
  }
  int was = p->device;
  p->device = dev[0];
  if (dev[0] >= 0 && pipe_open_device(p, err, errlen)) { p->device = was; return -1; }
  for (int i = 1; i < n; i++)
    if (dev[i] >= p->cuda->ndevices) {
      snprintf(err, errlen, "no CUDA device %d: this machine has %d", dev[i], p->cuda->ndevices);
      p->device = was;
      return -1;
    }
  p->npeers = n - 1;
  memcpy(p->peers, dev + 1, sizeof *dev * (n - 1));
  return 0;
}

void pipe_describe(const Pipe *p, char *buf, size_t len) {
  size_t k = 0;
  if (p->device < 0) k = snprintf(buf, len, "cpu (%d threads)", rt_threads(p->rt));
  else rt_cuda_describe(p->cx, buf, len), k = strlen(buf);
  for (int i = 0; i < p->npeers && k < len; i++) {
    k += snprintf(buf + k, len - k, "%s", !i ? "; each training batch split with " : i + 1 < p->npeers ? ", " : " and ");
    if (k >= len) break;
    if (p->peers[i] < 0) k += snprintf(buf + k, len - k, "the CPU (%d threads)", rt_threads(p->rt));
    else k += snprintf(buf + k, len - k, "cuda:%d", p->peers[i]);
  }
}

void pipe_cuda_free(Pipe *p) {
  char err[8];
  pipe_cuda_release(p, err, sizeof err);   // nothing reads the host copies any more: only the memory matters
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
