// cuda.c: the CUDA driver, NVRTC, cuBLAS, cuBLASLt and NCCL through dlopen (cuda.h). Nothing here
// links against CUDA; a missing piece is an error message, never a crash.
#include "cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Where the toolkit's libraries are when they are not on the loader's path.
static const char *const toolkit_dirs[] = {"", "/usr/local/cuda/lib64/", "/usr/local/cuda/lib/"};
// Newest first: the CUDA 13, 12 and 11 sonames (11.0 and 11.1 had their own).
static const char *const nvrtc_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11.1",
                                          "libnvrtc.so.11.0", "libnvrtc.so"};
static const char *const cublas_names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"};
static const char *const cublaslt_names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"};
static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so"};

// The first of names (in each of dirs) that loads; its path in loaded. tried: the
// last loader error, for the message when none does.
static void *load_any(const char *const *names, int n, char *loaded, size_t len, char *tried, size_t tlen) {
  for (size_t d = 0; d < sizeof toolkit_dirs / sizeof *toolkit_dirs; d++)
    for (int i = 0; i < n; i++) {
      char path[512];
      snprintf(path, sizeof path, "%s%s", toolkit_dirs[d], names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) { snprintf(loaded, len, "%s", path); return h; }
      const char *e = dlerror();
      if (!d && !i) snprintf(tried, tlen, "%s", e ? e : "dlopen failed");
    }
  return NULL;
}

// Resolves one table of symbols; the first missing one names the culprit.
#define RT_CUDA_RESOLVE(ret, name, sym, params) \
  if (!missing && !(*(void **)&t->name = dlsym(lib, sym))) missing = sym;
#define RT_CUDA_RESOLVE_OPT(ret, name, sym, params) *(void **)&t->name = dlsym(lib, sym);

static const char *resolve_driver(RtCuda *t, void *lib) {
  const char *missing = NULL;
  RT_CUDA_DRIVER(RT_CUDA_RESOLVE)
  return missing;
}

static const char *resolve_nvrtc(RtCuda *t, void *lib) {
  const char *missing = NULL;
  RT_CUDA_NVRTC(RT_CUDA_RESOLVE)
  RT_CUDA_NVRTC_OPTIONAL(RT_CUDA_RESOLVE_OPT)
  return missing;
}

void rt_cuda_strerror(const RtCuda *cu, CUresult r, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (cu->cuGetErrorName) cu->cuGetErrorName(r, &name);
  if (cu->cuGetErrorString) cu->cuGetErrorString(r, &text);
  if (name) snprintf(buf, len, "%s (%s)", name, text ? text : "no description");
  else snprintf(buf, len, "CUDA error %d", r);
}

// After a failed start (cuInit may have started threads: the library stays loaded).
static void unload_driver(RtCuda *cu) {
  cu->lib = NULL;
#define RT_CUDA_CLEAR(ret, name, sym, params) cu->name = NULL;
  RT_CUDA_DRIVER(RT_CUDA_CLEAR)
}

int rt_cuda_open(RtCuda *cu, char *err, size_t errlen) {
  if (cu->lib) return 0;
  const char *want = getenv("KILN_LIBCUDA");
  if (!want || !*want) want = "libcuda.so.1";   // never libcuda.so: that may be the toolkit's stub
  void *lib = dlopen(want, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(err, errlen, "no NVIDIA driver: %s not found (%s); --device cuda needs the NVIDIA driver", want,
             e ? e : "dlopen failed");
    return -1;
  }
  cu->lib = lib;
  snprintf(cu->lib_name, sizeof cu->lib_name, "%s", want);
  const char *missing = resolve_driver(cu, lib);
  if (missing) {
    snprintf(err, errlen, "the NVIDIA driver in %s is too old: it has no %s", want, missing);
    unload_driver(cu);
    return -1;
  }
  char why[256];
  CUresult r = cu->cuInit(0);
  if (r) {
    rt_cuda_strerror(cu, r, why, sizeof why);
    if (r == CUDA_ERROR_NO_DEVICE) snprintf(err, errlen, "no CUDA device: cuInit: %s", why);
    else if (r == CUDA_ERROR_STUB_LIBRARY)
      snprintf(err, errlen, "no NVIDIA driver: %s is the CUDA toolkit's stub library, not a driver (%s)", want, why);
    else snprintf(err, errlen, "the NVIDIA driver failed to start: cuInit: %s", why);
    unload_driver(cu);
    return -1;
  }
  cu->cuDriverGetVersion(&cu->version);
  if ((r = cu->cuDeviceGetCount(&cu->ndevices)) || cu->ndevices < 1) {
    if (r) rt_cuda_strerror(cu, r, why, sizeof why);
    snprintf(err, errlen, "no CUDA device: %s", r ? why : "the driver found none");
    unload_driver(cu);
    return -1;
  }
  return 0;
}

int rt_cuda_device(RtCuda *cu, int ordinal, RtCudaDevice *d, char *err, size_t errlen) {
  char why[256];
  memset(d, 0, sizeof *d);
  if (ordinal < 0 || ordinal >= cu->ndevices) {
    snprintf(err, errlen, "no CUDA device %d: this machine has %d (cuda:0%s)", ordinal, cu->ndevices,
             cu->ndevices > 1 ? " and up" : " only");
    return -1;
  }
  d->ordinal = ordinal;
  CUresult r = cu->cuDeviceGet(&d->dev, ordinal);
  if (!r) r = cu->cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (!r) r = cu->cuCtxSetCurrent(d->ctx);
  if (r) {
    rt_cuda_strerror(cu, r, why, sizeof why);
    snprintf(err, errlen, "CUDA device %d: cannot create a context: %s", ordinal, why);
    if (d->ctx) cu->cuDevicePrimaryCtxRelease(d->dev);
    d->ctx = NULL;
    return -1;
  }
  int major = 0, minor = 0;
  cu->cuDeviceGetName(d->name, sizeof d->name, d->dev);
  cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
  cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
  cu->cuDeviceGetAttribute(&d->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
  cu->cuDeviceTotalMem(&d->total_mem, d->dev);
  d->sm = 10 * major + minor;
  return 0;
}

void rt_cuda_device_release(RtCuda *cu, RtCudaDevice *d) {
  if (!d->ctx) return;
  cu->cuCtxSetCurrent(NULL);
  cu->cuDevicePrimaryCtxRelease(d->dev);
  d->ctx = NULL;
}

int rt_cuda_nvrtc(RtCuda *cu, char *err, size_t errlen) {
  if (cu->nvrtc_lib) return 0;
  const char *want = getenv("KILN_NVRTC");
  char tried[512] = "";
  void *lib;
  if (want && *want) {   // exactly this one
    lib = dlopen(want, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *e = dlerror();
      snprintf(err, errlen, "NVRTC not found: KILN_NVRTC=%s does not load (%s)", want, e ? e : "dlopen failed");
      return -1;
    }
    snprintf(cu->nvrtc_name, sizeof cu->nvrtc_name, "%s", want);
  } else {
    int n = sizeof nvrtc_names / sizeof *nvrtc_names;
    lib = load_any(nvrtc_names, n, cu->nvrtc_name, sizeof cu->nvrtc_name, tried, sizeof tried);
    if (!lib) {
      snprintf(err, errlen, "NVRTC not found: tried libnvrtc.so.13 down to .so.11.0 on the loader's path and in "
               "/usr/local/cuda/lib64 (%s); install the CUDA toolkit's NVRTC or set KILN_NVRTC", tried);
      return -1;
    }
  }
  const char *missing = resolve_nvrtc(cu, lib);
  if (missing) {
    snprintf(err, errlen, "NVRTC in %s is unusable: it has no %s", cu->nvrtc_name, missing);
    dlclose(lib);
    return -1;
  }
  cu->nvrtc_lib = lib;
  cu->nvrtcVersion(&cu->nvrtc_major, &cu->nvrtc_minor);
  return 0;
}

// An optional library: exactly $env when set, else the first of names that loads.
// Its handle (its path in name), or NULL with the reason in err.
static void *load_optional(const char *env, const char *what, const char *const *names, int n, char *name, size_t len,
                           char *err, size_t errlen) {
  const char *want = getenv(env);
  char tried[512] = "";
  void *lib;
  if (want && *want) {
    if (!(lib = dlopen(want, RTLD_NOW | RTLD_LOCAL))) {
      const char *e = dlerror();
      snprintf(err, errlen, "%s not found: %s=%s does not load (%s)", what, env, want, e ? e : "dlopen failed");
      return NULL;
    }
    snprintf(name, len, "%s", want);
  } else if (!(lib = load_any(names, n, name, len, tried, sizeof tried))) {
    snprintf(err, errlen, "%s not found: tried %s%s (%s)", what, names[0], n > 2 ? " and older" : "", tried);
    return NULL;
  }
  return lib;
}

// A library missing an entry point Kiln calls: said, and let go. 0 if none is missing.
static int unusable(void *lib, const char *missing, const char *what, const char *name, char *err, size_t errlen) {
  if (!missing) return 0;
  snprintf(err, errlen, "%s in %s is unusable: it has no %s", what, name, missing);
  dlclose(lib);
  return -1;
}

int rt_cuda_cublas(RtCuda *cu, char *err, size_t errlen) {
  if (cu->cublas_lib) return 0;
  void *lib = load_optional("KILN_CUBLAS", "cuBLAS", cublas_names, sizeof cublas_names / sizeof *cublas_names,
                            cu->cublas_name, sizeof cu->cublas_name, err, errlen);
  if (!lib) return -1;
  const char *missing = NULL;
  RtCuda *t = cu;
  RT_CUDA_CUBLAS(RT_CUDA_RESOLVE)
  if (unusable(lib, missing, "cuBLAS", cu->cublas_name, err, errlen)) return -1;
  cu->cublas_lib = lib;
  return 0;
}

int rt_cuda_cublaslt(RtCuda *cu, char *err, size_t errlen) {
  if (cu->cublaslt_lib) return 0;
  void *lib = load_optional("KILN_CUBLASLT", "cuBLASLt", cublaslt_names, sizeof cublaslt_names / sizeof *cublaslt_names,
                            cu->cublaslt_name, sizeof cu->cublaslt_name, err, errlen);
  if (!lib) return -1;
  const char *missing = NULL;
  RtCuda *t = cu;
  RT_CUDA_CUBLASLT(RT_CUDA_RESOLVE)
  if (unusable(lib, missing, "cuBLASLt", cu->cublaslt_name, err, errlen)) return -1;
  cu->cublaslt_lib = lib;
  return 0;
}

int rt_cuda_nccl(RtCuda *cu, char *err, size_t errlen) {
  if (cu->nccl_lib) return 0;
  void *lib = load_optional("KILN_NCCL", "NCCL", nccl_names, sizeof nccl_names / sizeof *nccl_names, cu->nccl_name,
                            sizeof cu->nccl_name, err, errlen);
  if (!lib) return -1;
  const char *missing = NULL;
  RtCuda *t = cu;
  RT_CUDA_NCCL(RT_CUDA_RESOLVE)
  if (unusable(lib, missing, "NCCL", cu->nccl_name, err, errlen)) return -1;
  cu->nccl_lib = lib;
  cu->ncclGetVersion(&cu->nccl_version);
  return 0;
}

// The libraries stay loaded: the driver's threads and the libraries' exit
// handlers outlive a dlclose, and NVRTC keeps its compiler's tables for the
// process (LeakSanitizer can only name, and so suppress, a library still loaded).
// A later rt_cuda_open finds them already there.
void rt_cuda_close(RtCuda *cu) {
  memset(cu, 0, sizeof *cu);
}

int rt_cuda_parse_device(const char *s) {
  if (!strcmp(s, "cpu")) return -1;
  if (!strcmp(s, "cuda")) return 0;
  if (strncmp(s, "cuda:", 5) || !s[5]) return -2;
  char *end;
  long n = strtol(s + 5, &end, 10);
  if (*end || n < 0 || n > 1024 || s[5] < '0' || s[5] > '9') return -2;
  return (int)n;
}

int rt_cuda_parse_devices(const char *s, int *dev, int max) {
  if (!strcmp(s, "cpu")) return dev[0] = -1, 1;
  size_t len = strlen(s);
  int cpu = len > 4 && !strcmp(s + len - 4, "+cpu"), n = 0;
  if (cpu) len -= 4;
  if (len == 4 && !strncmp(s, "cuda", 4)) dev[n++] = 0;
  else if (len < 6 || strncmp(s, "cuda:", 5)) return -1;
  for (const char *q = s + 5, *stop = s + len; !n || q < stop;) {
    char *end;
    if (q >= stop || *q < '0' || *q > '9' || n == max) return -1;
    long v = strtol(q, &end, 10);
    if (v > 1024 || (end < stop && (*end != ',' || end + 1 == stop))) return -1;
    for (int i = 0; i < n; i++) if (dev[i] == v) return -1;
    dev[n++] = (int)v;
    q = end < stop ? end + 1 : end;
  }
  if (cpu && n == max) return -1;
  if (cpu) dev[n++] = -1;
  return n;
}
