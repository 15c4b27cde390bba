// The CUDA pieces that need no GPU: the loaders' failure messages (with the real
// missing libcuda, the toolkit's stub, and KILN_LIBCUDA / KILN_NVRTC / KILN_CUBLAS
// pointed at nothing), the toolkit's cuBLAS resolved, --device parsing, and NVRTC itself: CUBINs for sm_80 and sm_90, PTX for
// an architecture newer than NVRTC, the disk cache, the log with the source line; and the
// next batch's copy stream (rt_cuda_prefetch) on the fake driver built beside this program, and that
// fake device's own checks: a barrier some threads skip aborts, racy reads see both orders.
// NVRTC must load: a machine without it fails here, loudly, rather than skipping.
//
//   test_cuda                         the checks
//   test_cuda --compile FILE ARCH...  compile FILE (CUDA C) with NVRTC for each ARCH
//                                     (sm_80, ...) through the default disk cache;
//                                     tests/test_cuda.py compiles generated kernels so
//   test_cuda --compile FILE ptx      print the PTX for the newest architecture NVRTC
//                                     knows (test_cuda.py looks for 16-byte accesses)
#include "compiler/nvrtc.h"
#include "check.h"
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static void loader_checks(void) {
  RtCuda cu = {0};
  char err[1024];
  setenv("KILN_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  check(rt_cuda_open(&cu, err, sizeof err) == -1 && has(err, "no NVIDIA driver: /nonexistent/libcuda.so.1 not found ("),
        "KILN_LIBCUDA at a missing file: %s", err);
  unsetenv("KILN_LIBCUDA");
  void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!real) {
    int rc = rt_cuda_open(&cu, err, sizeof err);
    check(rc == -1 && !strncmp(err, "no NVIDIA driver: libcuda.so.1 not found (", 42),
          "no driver on this machine: %s", err);
  } else {   // a GPU machine: the driver loads; a device, or a clear reason why not
    dlclose(real);
    int rc = rt_cuda_open(&cu, err, sizeof err);
    check(rc == 0 || has(err, "no CUDA device"), "the driver loads: %s", rc ? err : "ok");
    if (!rc) {
      RtCudaDevice d;
      check(!rt_cuda_device(&cu, 0, &d, err, sizeof err), "device 0: %s", d.name);
      rt_cuda_device_release(&cu, &d);
      check(rt_cuda_device(&cu, cu.ndevices, &d, err, sizeof err) == -1 && has(err, "no CUDA device"),
            "a device past the last: %s", err);
    }
    rt_cuda_close(&cu);
  }
  // The toolkit's stub has every symbol, and cuInit says it is a stub.
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) == 0) {
    setenv("KILN_LIBCUDA", stub, 1);
    check(rt_cuda_open(&cu, err, sizeof err) == -1 && has(err, "stub"), "the toolkit's stub libcuda: %s", err);
    unsetenv("KILN_LIBCUDA");
  }
  check(rt_cuda_parse_device("cpu") == -1 && rt_cuda_parse_device("cuda") == 0 && rt_cuda_parse_device("cuda:3") == 3,
        "--device cpu, cuda, cuda:3");
  check(rt_cuda_parse_device("cuda:") == -2 && rt_cuda_parse_device("cuda:x") == -2 &&
        rt_cuda_parse_device("cuda:-1") == -2 && rt_cuda_parse_device("gpu") == -2 &&
        rt_cuda_parse_device("cuda:1x") == -2, "malformed --device values");
  setenv("KILN_NVRTC", "/nonexistent/libnvrtc.so", 1);
  check(rt_cuda_nvrtc(&cu, err, sizeof err) == -1 &&
        has(err, "NVRTC not found: KILN_NVRTC=/nonexistent/libnvrtc.so does not load ("), "KILN_NVRTC at a missing file: %s", err);
  unsetenv("KILN_NVRTC");
  setenv("KILN_CUBLAS", "/nonexistent/libcublas.so", 1);
  check(rt_cuda_cublas(&cu, err, sizeof err) == -1 &&
        has(err, "cuBLAS not found: KILN_CUBLAS=/nonexistent/libcublas.so does not load ("), "KILN_CUBLAS at a missing file: %s", err);
  unsetenv("KILN_CUBLAS");
  // The toolkit's cuBLAS (CI machines have it): every entry point Kiln calls resolves.
  int rc = rt_cuda_cublas(&cu, err, sizeof err);
  check(rc == 0 && cu.cublasCreate && cu.cublasSetStream && cu.cublasSgemmStridedBatched && cu.cublasDgemmStridedBatched,
        "cuBLAS loads with the GEMMs Kiln calls: %s", rc ? err : cu.cublas_name);
  setenv("KILN_CUBLASLT", "/nonexistent/libcublasLt.so", 1);
  check(rt_cuda_cublaslt(&cu, err, sizeof err) == -1 && has(err, "cuBLASLt not found: KILN_CUBLASLT=/nonexistent"),
        "KILN_CUBLASLT at a missing file: %s", err);
  unsetenv("KILN_CUBLASLT");
  rc = rt_cuda_cublaslt(&cu, err, sizeof err);
  check(rc == 0 && cu.cublasLtCreate && cu.cublasLtMatmulDescSetAttribute && cu.cublasLtMatrixLayoutCreate && cu.cublasLtMatmul,
        "cuBLASLt loads with the matmul and descriptors Kiln calls: %s", rc ? err : cu.cublaslt_name);
  setenv("KILN_NCCL", "/nonexistent/libnccl.so.2", 1);
  check(rt_cuda_nccl(&cu, err, sizeof err) == -1 && has(err, "NCCL not found: KILN_NCCL=/nonexistent/libnccl.so.2 does not load ("),
        "KILN_NCCL at a missing file: %s", err);
  unsetenv("KILN_NCCL");
  rt_cuda_close(&cu);
}

static const char good[] =
  "typedef long long int64_t;\n"
  "extern \"C\" __global__ void twice(float *o, const float *x, int64_t n) {\n"
  "  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)\n"
  "    o[i] = 2 * expf(x[i]);\n"
  "}\n";
static const char bad[] =
  "extern \"C\" __global__ void broken(float *o) {\n"
  "  float t0 = 1.0f;\n"
  "  float t1 = t0 + undefined_name;\n"
  "  o[0] = t1;\n"
  "}\n";

static void nvrtc_checks(const char *dir) {
  RtCuda cu = {0};
  char err[4096], who[320];
  if (rt_cuda_nvrtc(&cu, err, sizeof err)) {
    check(0, "NVRTC loads (needed for the CUDA tests; the CUDA toolkit is expected here): %s", err);
    return;
  }
  nvrtc_describe(&cu, who, sizeof who);
  check(cu.nvrtc_major >= 11, "%s", who);
  NvrtcImage a, b;
  for (int sm = 80; sm <= 90; sm += 10) {
    int rc = nvrtc_compile(&cu, good, sm, dir, &a, err, sizeof err);
    check(!rc && a.cubin && a.arch == sm && a.len > 4 && !memcmp(a.image, "\177ELF", 4) && !a.cache_hit,
          "sm_%d: a CUBIN (%zu bytes, %.0f ms) %s", sm, a.len, a.compile_ms, rc ? err : "");
    rc = nvrtc_compile(&cu, good, sm, dir, &b, err, sizeof err);
    check(!rc && b.cache_hit && b.len == a.len && !memcmp(a.image, b.image, a.len) && !strcmp(a.key, b.key),
          "sm_%d again: from the disk cache, the same bytes", sm);
    nvrtc_image_free(&a);
    nvrtc_image_free(&b);
  }
  int rc = nvrtc_compile(&cu, good, 80, "", &a, err, sizeof err);
  nvrtc_compile(&cu, good, 80, "", &b, err, sizeof err);
  check(!rc && !a.cache_hit && !b.cache_hit, "cache dir \"\": no cache");
  nvrtc_image_free(&a);
  nvrtc_image_free(&b);
  // An architecture newer than this NVRTC: PTX for the newest it knows.
  rc = nvrtc_compile(&cu, good, 999, dir, &a, err, sizeof err);
  check(!rc && !a.cubin && a.arch < 999 && a.arch >= 90 && has(a.image, ".entry twice"),
        "sm_999: PTX for compute_%d %s", a.arch, rc ? err : "");
  nvrtc_image_free(&a);
  // PTX asked for (a built binary's fallback): for compute_90 itself, not a CUBIN.
  rc = nvrtc_compile_ptx(&cu, good, 90, dir, &a, err, sizeof err);
  check(!rc && !a.cubin && a.arch == 90 && has(a.image, ".target sm_90") && has(a.image, ".entry twice"),
        "PTX for compute_90 when asked %s", rc ? err : "");
  nvrtc_image_free(&a);
  rc = nvrtc_compile(&cu, good, 10, dir, &a, err, sizeof err);
  check(rc == -1 && has(err, "cannot compile for sm_10"), "sm_10: %s", err);
  rc = nvrtc_compile(&cu, bad, 80, dir, &a, err, sizeof err);
  int ok = rc == -1 && has(err, "kiln.cu(3): error") && has(err, "undefined_name") &&
           has(err, "      3 |   float t1 = t0 + undefined_name;");
  for (char *p = err; *p; p++) if (*p == '\n') *p = '|';   // one line in the test's output
  check(ok, "a compile error shows the source line: %s", err);
  rt_cuda_close(&cu);
}

// --compile FILE ARCH...: 0 if every architecture compiles.
static int compile_file(int argc, char **argv) {
  FILE *f = fopen(argv[2], "rb");
  if (!f) { fprintf(stderr, "test_cuda: cannot read %s\n", argv[2]); return 2; }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *src = malloc(n + 1);
  if (!src || fread(src, 1, n, f) != (size_t)n) { fclose(f); free(src); return 2; }
  fclose(f);
  src[n] = 0;
  RtCuda cu = {0};
  static char err[1 << 16];
  int rc = 0;
  for (int i = 3; i < argc && !rc; i++) {
    NvrtcImage im;
    int ptx = !strcmp(argv[i], "ptx");   // past every architecture: PTX for the newest
    int sm = ptx ? 9999 : atoi(argv[i] + (strncmp(argv[i], "sm_", 3) ? 0 : 3));
    if (nvrtc_compile(&cu, src, sm, NULL, &im, err, sizeof err)) {
      printf("FAIL %s sm_%d: %s\n", argv[2], sm, err);
      rc = 1;
      break;
    }
    if (ptx) fwrite(im.image, 1, strnlen(im.image, im.len), stdout);
    else printf("ok %s sm_%d %s %zu bytes%s\n", argv[2], sm, im.cubin ? "CUBIN" : "PTX", im.len, im.cache_hit ? " (cached)" : "");
    nvrtc_image_free(&im);
  }
  rt_cuda_close(&cu);
  free(src);
  return rc;
}

// The next batch's copies on their own stream (rt_cuda_prefetch), on the fake
// driver, whose streams run work only when something waits for it: once a run's
// inputs take the copy (rt_cuda_take_prefetched), the step's stream sees the
// batch; before, not yet.
static void prefetch_checks(const char *fake_dir) {
  char fake[4096 + 32];
  snprintf(fake, sizeof fake, "%s/libkiln_fakecuda.so", fake_dir);
  check(access(fake, R_OK) == 0, "the fake driver is built beside test_cuda: %s", fake);
  setenv("KILN_LIBCUDA", fake, 1);
  RtCuda cu = {0};
  RtCudaExec x;
  char err[512];
  int ok = !rt_cuda_exec_open(&x, &cu, 0, err, sizeof err);
  check(ok, "the fake driver opens: %s", ok ? "ok" : err);
  if (!ok) { unsetenv("KILN_LIBCUDA"); return; }
  float a[64], b[16], got[64], got_b[16], other[16];
  for (int i = 0; i < 64; i++) a[i] = (float)i;
  for (int i = 0; i < 16; i++) b[i] = -(float)i;
  void *host[2] = {a, b}, *run_in[3] = {other, b, a};
  size_t bytes[2] = {sizeof a, sizeof b}, run_bytes[3] = {sizeof other, sizeof b, sizeof a};
  CUdeviceptr dev[3] = {0}, dev2[3] = {0};
  ok = !rt_cuda_prefetch(&x, host, bytes, 2) && rt_cuda_take_prefetched(&x, run_in, run_bytes, 3, dev) == 2 && !dev[0] &&
       dev[1] - dev[2] == 256 && x.nahead == 0 && !rt_cuda_download(&x, got, dev[2], sizeof got) &&
       !rt_cuda_download(&x, got_b, dev[1], sizeof got_b) && !rt_cuda_sync(&x) && !memcmp(got, a, sizeof a) &&
       !memcmp(got_b, b, sizeof b);
  check(ok, "a prefetched batch, taken by a run's inputs (by storage and size), is on the device for its stream: %s", x.err);
  a[0] = 100;
  size_t wrong[3] = {sizeof other, sizeof b - 4, sizeof a - 4};
  ok = !rt_cuda_prefetch(&x, host, bytes, 2) && rt_cuda_take_prefetched(&x, run_in, wrong, 3, dev2) == 0 && x.nahead == 2 &&
       !dev2[1] && !dev2[2] && x.ahead_dev[0] != dev[2] &&   // the other area
       !rt_cuda_download(&x, got, x.ahead_dev[0], sizeof got) && !rt_cuda_sync(&x);
  uint32_t bits;
  memcpy(&bits, got, 4);
  check(ok && bits == 0xFFFFFFFFu, "not taken (other sizes), it stays for a later run, and is not there for the step's "
        "stream (the fake driver's late streams; got %g)", got[0]);
  ok = rt_cuda_take_prefetched(&x, run_in, run_bytes, 3, dev2) == 2 && !rt_cuda_download(&x, got, dev2[2], sizeof got) &&
       !rt_cuda_sync(&x) && got[0] == 100 && !rt_cuda_download(&x, got, dev[2], sizeof got) && !rt_cuda_sync(&x) && got[0] == 0;
  check(ok, "then taken: the new batch in the other area, the last one untouched: %s", x.err);
  ok = !rt_cuda_prefetch(&x, host, bytes, 2) && (rt_cuda_drop_prefetched(&x), rt_cuda_take_prefetched(&x, run_in, run_bytes, 3, dev2) == 0);
  check(ok, "a dropped copy is taken by no run");
  rt_cuda_exec_close(&x);
  rt_cuda_close(&cu);
  unsetenv("KILN_LIBCUDA");
}

// The fake device's own checks of what a GPU leaves undefined (tests/fakecuda/shim.h),
// which the op suites on it rely on: a barrier some threads skip by returning, or
// threads at different barriers, or a pointer assumed aligned that is not, abort
// the run, named; and the threads between two barriers run in turn in
// ascending and descending order, so a read of what another thread wrote with
// no barrier between does not get a lucky answer.
static const char fake_kernels[] =
  "extern \"C\" __global__ void __launch_bounds__(64) skips(float *o) {\n"
  "  if (threadIdx.x < 16) return;\n"
  "  __syncthreads();\n"
  "  o[threadIdx.x] = 1;\n"
  "}\n"
  "extern \"C\" __global__ void __launch_bounds__(64) apart(float *o) {\n"
  "  if (threadIdx.x < 32) __syncthreads();\n"
  "  else __syncthreads();\n"
  "  o[threadIdx.x] = 1;\n"
  "}\n"
  "extern \"C\" __global__ void __launch_bounds__(64) askew(float *o) {\n"
  "  float *p = (float *)__builtin_assume_aligned(o + 1, 16);\n"
  "  p[threadIdx.x % 63] = 1;\n"
  "}\n"
  "extern \"C\" __global__ void __launch_bounds__(64) racy(float *o) {\n"
  "  __shared__ float sh[64];\n"
  "  sh[threadIdx.x] = threadIdx.x;\n"
  "  __syncthreads();\n"
  "  sh[threadIdx.x] += 100;\n"
  "  o[threadIdx.x] = sh[(threadIdx.x + 1) % 64];   // no barrier since the write: a race\n"
  "}\n";

// Launches kernel name of mod over one block of 64 threads, out: 64 floats; in a
// child process, whose stderr goes to err. The child's wait status.
static int fake_launch(RtCudaExec *x, CUmodule mod, const char *name, float *out, char *err, size_t errlen) {
  int fd[2];
  if (pipe(fd)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    CUfunction f;
    CUdeviceptr o = rt_cuda_alloc(x, 64 * sizeof(float));
    void *params[] = {&o};
    if (!o || x->cu->cuModuleGetFunction(&f, mod, name) ||
        x->cu->cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, x->stream, params, NULL) ||
        rt_cuda_download(x, out, o, 64 * sizeof(float)) || rt_cuda_sync(x))
      _exit(2);
    if (write(fd[1], out, 64 * sizeof(float)) < 0) _exit(3);
    _exit(0);
  }
  close(fd[1]);
  char buf[4096];
  size_t n = 0;
  ssize_t r;
  while ((r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
  close(fd[0]);
  buf[n] = 0;
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && !WEXITSTATUS(status) && n == 64 * sizeof(float)) memcpy(out, buf, n);
  snprintf(err, errlen, "%s", buf);
  for (char *p = err; *p; p++) if (*p == '\n') *p = ' ';
  return status;
}

static void fake_schedule_checks(const char *dir, const char *fake_dir) {
  char lib[4096 + 32], nv[4096 + 32], err[4096];
  snprintf(lib, sizeof lib, "%s/libkiln_fakecuda.so", fake_dir);
  snprintf(nv, sizeof nv, "%s/libkiln_fakenvrtc.so", fake_dir);
  setenv("KILN_LIBCUDA", lib, 1);
  setenv("KILN_NVRTC", nv, 1);
  RtCuda cu = {0};
  RtCudaExec x;
  NvrtcImage im = {0};
  CUmodule mod = NULL;
  int ok = !rt_cuda_exec_open(&x, &cu, 0, err, sizeof err) && !rt_cuda_nvrtc(&cu, err, sizeof err) &&
           !nvrtc_compile(&cu, fake_kernels, 90, dir, &im, err, sizeof err);
  ok = ok && !cu.cuModuleLoadData(&mod, im.image);
  check(ok, "the fake NVRTC builds four kernels of this test for the fake driver: %s", ok ? "ok" : err);
  if (ok) {
    float out[64] = {0};
    int st = fake_launch(&x, mod, "skips", out, err, sizeof err);
    check(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && has(err, "kernel skips") && has(err, "48 threads reached barrier 1") &&
          has(err, "16 returned without it"), "a __syncthreads that 16 of 64 threads skip aborts the run: %s", err);
    st = fake_launch(&x, mod, "apart", out, err, sizeof err);
    check(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && has(err, "kernel apart") && has(err, "thread 0 waits at line 7") &&
          has(err, "thread 32 at line 8"), "half the threads at one __syncthreads, half at another, abort the run: %s", err);
    st = fake_launch(&x, mod, "askew", out, err, sizeof err);
    check(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && has(err, "kernel askew, line 12: a pointer assumed 16-byte aligned is not"),
          "a pointer assumed 16-byte aligned that is not aborts the run: %s", err);
    st = fake_launch(&x, mod, "racy", out, err, sizeof err);
    // In ascending order thread 0 would read 1 (thread 1 not yet at its +100) and
    // thread 63 100; the second turn runs descending: 101, and 0.
    check(WIFEXITED(st) && !WEXITSTATUS(st) && out[0] == 101 && out[63] == 0,
          "between two barriers the threads run in descending order (a racy read gets %g and %g)", out[0], out[63]);
    cu.cuModuleUnload(mod);
  }
  nvrtc_image_free(&im);
  rt_cuda_exec_close(&x);
  rt_cuda_close(&cu);
  unsetenv("KILN_LIBCUDA");
  unsetenv("KILN_NVRTC");
}

int main(int argc, char **argv) {
  if (argc > 3 && !strcmp(argv[1], "--compile")) return compile_file(argc, argv);
  char dir[] = "/tmp/kiln_test_cuda_XXXXXX";
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  loader_checks();
  nvrtc_checks(dir);
  char fake_dir[4096];   // the fakes are built beside this program
  ssize_t n = readlink("/proc/self/exe", fake_dir, sizeof fake_dir - 1);
  char *slash = n > 0 ? memrchr(fake_dir, '/', (size_t)n) : NULL;
  if (slash) {
    *slash = 0;
    prefetch_checks(fake_dir);
    fake_schedule_checks(dir, fake_dir);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "test_cuda: could not remove %s\n", dir);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail != 0;
}
