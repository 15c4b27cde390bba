// nvrtc.h - CUDA C to a CUBIN or PTX image with NVRTC, through the disk compile cache.
//
//   RtCuda cu = {0};
//   if (rt_cuda_nvrtc(&cu, err, sizeof err)) fail(err);   // runtime/cuda.h: dlopen'd
//   NvrtcImage im;
//   if (nvrtc_compile(&cu, src, 90, NULL, &im, err, sizeof err)) fail(err);
//   ... cu.cuModuleLoadData(&mod, im.image) ...
//   nvrtc_image_free(&im);
//
// NVRTC needs no driver and no GPU, so this runs (and is tested) anywhere the
// toolkit's libnvrtc is. For an architecture the NVRTC knows, the image is a CUBIN
// for sm_XX; for a newer one, PTX for the newest compute_YY it knows at or below
// it, which the driver compiles at load time.
#ifndef KILN_COMPILER_NVRTC_H
#define KILN_COMPILER_NVRTC_H

#include "runtime/cuda.h"

typedef struct {
  char *image;        // CUBIN, or PTX text with its NUL (malloc'd)
  size_t len;
  int cubin;          // 1: a CUBIN for sm_<arch>; 0: PTX for compute_<arch>
  int arch;           // 80 for sm_80
  int cache_hit;      // 1: read from the disk cache, NVRTC did not run
  double compile_ms;  // time in NVRTC
  char key[33];       // the cache key: source, options, NVRTC version, architecture
} NvrtcImage;

// Compiles src for compute capability sm (80 for sm_80). cache_dir: NULL for the
// JIT's default ($KILN_CACHE_DIR, ...), "" for none. 0, or -1 with NVRTC's log in
// err, each error followed by the generated source line it points at.
int nvrtc_compile(RtCuda *cu, const char *src, int sm, const char *cache_dir, NvrtcImage *out, char *err,
                  size_t errlen);
// The same as PTX for compute_<sm> (or the newest architecture NVRTC knows below
// it), which the driver compiles for the GPU it loads on: the fallback a built
// binary carries for GPUs newer than its CUBINs.
int nvrtc_compile_ptx(RtCuda *cu, const char *src, int sm, const char *cache_dir, NvrtcImage *out, char *err,
                      size_t errlen);
void nvrtc_image_free(NvrtcImage *im);
// "NVRTC 13.0 (libnvrtc.so.13)" of a loaded NVRTC.
void nvrtc_describe(const RtCuda *cu, char *buf, size_t len);

#endif
