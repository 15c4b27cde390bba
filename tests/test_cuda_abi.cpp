// test_cuda_abi.cpp - runtime/cuda.h against the CUDA toolkit's own headers.
// Kiln declares the driver, NVRTC, cuBLAS, cuBLASLt and NCCL functions it loads
// with dlopen itself (no CUDA header is needed to build it), so nothing but a
// real GPU would notice a parameter of the wrong width or a constant with the
// wrong value: the fake CUDA of tests/fakecuda shares Kiln's reading of the API.
// This test compiles both declarations in one translation unit and compares, for
// each entry of the X-macro tables:
//   - the symbol dlsym looks up with the one cuda.h's macros pick (cuMemAlloc is
//     cuMemAlloc_v2), but for the few kept older on purpose (kept_older below);
//   - the signature, parameter by parameter, by what decides the calling
//     convention: integer width, floating type, pointer, and what a pointer points
//     at. A CUdeviceptr may stand for a typed device pointer (cuBLAS's
//     `const float *A`): both are 8-byte integers to the ABI;
// and the constants cuda.h copies as numbers (attributes, errors, cuBLASLt's
// descriptor attributes and epilogues, NCCL's types and operations).
// Built only where the toolkit's headers are (tests/meson.build).
#include <cuda.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <nccl.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln {
#include "runtime/cuda.h"
}

static int npass, nfail;
static void check(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  ok ? npass++ : nfail++;
}

// One parameter (or the result) as the ABI sees it: "i4", "f8", "v" (void), "d"
// (a device address: unsigned long long), "p" (a pointer to a struct or void: a
// handle), "*" followed by the pointee's code.
template <class T> std::string abi() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_void_v<U>) return "v";
  else if constexpr (std::is_same_v<U, unsigned long long>) return "d";
  else if constexpr (std::is_pointer_v<U>) {
    using P = std::remove_cv_t<std::remove_pointer_t<U>>;
    if constexpr (std::is_class_v<P> || std::is_void_v<P>) return "p";
    else return "*" + abi<P>();
  } else if constexpr (std::is_enum_v<U> || std::is_integral_v<U>) return "i" + std::to_string(sizeof(U));
  else if constexpr (std::is_floating_point_v<U>) return "f" + std::to_string(sizeof(U));
  else return "?";
}
template <class F> struct Sig;
template <class R, class... A> struct Sig<R (*)(A...)> {
  static std::vector<std::string> codes() { return {abi<R>(), abi<A>()...}; }
};

// Kiln's code k against the header's h: equal, or Kiln's device address for a
// pointer the header names by its element type.
static bool same_abi(const std::string &k, const std::string &h) {
  return k == h || (k == "d" && (h[0] == '*' || h == "p"));
}
static std::string join(const std::vector<std::string> &v) {
  std::string s = v[0] + "(";
  for (size_t i = 1; i < v.size(); i++) s += (i > 1 ? "," : "") + v[i];
  return s + ")";
}

// Symbols Kiln loads by an older name than the toolkit's header picks, and why.
static const char *const kept_older[][2] = {
  // Same signature; the unversioned symbol is in every driver from CUDA 11 on, and
  // CUDA 13's still exports it (its stub library has both).
  {"cuEventElapsedTime", "_v2 is recent; older drivers have only cuEventElapsedTime"},
};
static const char *why_older(const char *sym) {
  for (auto &k : kept_older)
    if (!std::strcmp(k[0], sym)) return k[1];
  return nullptr;
}

template <class K, class H> static void compare(const char *what, const char *sym, const char *header_sym) {
  if (std::strcmp(sym, header_sym)) {
    const char *why = why_older(sym);
    check(why != nullptr, std::string(what) + ": Kiln loads " + sym + ", the toolkit's header calls " + header_sym +
                              (why ? std::string(" (kept: ") + why + ")" : std::string("")));
  }
  std::vector<std::string> k = Sig<K>::codes(), h = Sig<H>::codes();
  bool ok = k.size() == h.size();
  for (size_t i = 0; ok && i < k.size(); i++) ok = same_abi(k[i], h[i]);
  check(ok, std::string(what) + " " + join(k) + (ok ? " matches the header's " : " differs from the header's ") + join(h));
}

#define STR2(x) #x
#define STR(x) STR2(x)
// name expands to the header's versioned symbol where cuda.h defines a macro for it.
#define COMPARE(ret, name, sym, params) compare<ret(*) params, decltype(&::name)>(#name, sym, STR(name));

namespace kiln {
static void tables() {
  RT_CUDA_DRIVER(COMPARE)
  RT_CUDA_NVRTC(COMPARE)
  RT_CUDA_NVRTC_OPTIONAL(COMPARE)
  RT_CUDA_CUBLAS(COMPARE)
  RT_CUDA_CUBLASLT(COMPARE)
  RT_CUDA_NCCL(COMPARE)
}

#define SAME(kiln_value, header_value) \
  check((long long)(kiln_value) == (long long)(header_value), \
        std::string(#kiln_value " = ") + std::to_string((long long)(kiln_value)) + ", " #header_value " = " + \
            std::to_string((long long)(header_value)))
static void constants() {
  SAME(kiln::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  SAME(kiln::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  SAME(kiln::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  SAME(kiln::CUDA_ERROR_NO_DEVICE, ::CUDA_ERROR_NO_DEVICE);
  SAME(kiln::CUDA_ERROR_STUB_LIBRARY, ::CUDA_ERROR_STUB_LIBRARY);
  SAME(0, ::CUDA_SUCCESS);
  SAME(0, ::NVRTC_SUCCESS);
  SAME(0, ::CUBLAS_STATUS_SUCCESS);
  // rt_cuda_gemm's ta and tb go to cuBLAS as its operations: 0 plain, 1 transposed.
  SAME(0, ::CUBLAS_OP_N);
  SAME(1, ::CUBLAS_OP_T);
  SAME(kiln::RT_LT_COMPUTE_32F, ::CUBLAS_COMPUTE_32F);
  SAME(kiln::RT_LT_R_32F, ::CUDA_R_32F);
  SAME(kiln::RT_LT_TRANSA, ::CUBLASLT_MATMUL_DESC_TRANSA);
  SAME(kiln::RT_LT_TRANSB, ::CUBLASLT_MATMUL_DESC_TRANSB);
  SAME(kiln::RT_LT_EPILOGUE, ::CUBLASLT_MATMUL_DESC_EPILOGUE);
  SAME(kiln::RT_LT_BIAS_POINTER, ::CUBLASLT_MATMUL_DESC_BIAS_POINTER);
  SAME(kiln::RT_LT_EPI_BIAS, ::CUBLASLT_EPILOGUE_BIAS);
  SAME(kiln::RT_LT_EPI_RELU_BIAS, ::CUBLASLT_EPILOGUE_RELU_BIAS);
  SAME(kiln::RT_LT_NOT_SUPPORTED, ::CUBLAS_STATUS_NOT_SUPPORTED);
  // The attributes' values are passed by address with their size: the header's types' sizes.
  SAME(sizeof(int32_t), sizeof(cublasOperation_t));
  SAME(sizeof(int32_t), sizeof(cublasLtEpilogue_t));
  SAME(sizeof(kiln::CUdeviceptr), sizeof(void *));
  SAME(kiln::RT_NCCL_SUM, ::ncclSum);
  SAME(kiln::RT_NCCL_F32, ::ncclFloat32);
  SAME(kiln::RT_NCCL_F64, ::ncclFloat64);
  SAME(0, ::ncclSuccess);
}
}  // namespace kiln

int main() {
  std::printf("# runtime/cuda.h against the headers of CUDA %d.%d, NVRTC, cuBLAS %d, NCCL %d.%d\n", CUDA_VERSION / 1000,
              CUDA_VERSION % 1000 / 10, CUBLAS_VER_MAJOR, NCCL_MAJOR, NCCL_MINOR);
  kiln::tables();
  kiln::constants();
  std::printf("%d passed, %d failed\n", npass, nfail);
  return nfail != 0;
}
