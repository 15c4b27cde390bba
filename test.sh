#!/usr/bin/env bash
# The test suite: unit tests, language and error-message tests, REPL tests,
# forward values against NumPy, gradient checks against finite differences,
# standalone binaries and libraries from kiln build;
# CUDA kernels through NVRTC (no GPU needed), and run on a fake CUDA device that
# runs them on the CPU (the op suites again, training, the REPL's :device);
# in the optimized build, in the fallback build without LLVM and BLIS (-Djit=cc -Dblis=disabled;
# KILN_TEST_FALLBACK=0 skips it) and under AddressSanitizer + UBSan
# (KILN_TEST_ASAN=0 skips it). Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")"
scripts/deps.sh || exit 1
total_pass=0; total_fail=0
# One suite: runs a command, shows its output, adds up its closing
# "N passed, N failed" line (a suite that dies without one counts as 1 failed).
suite() {
  local name=$1; shift
  echo "=== $name"
  local out rc
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -v '^ok' | grep -v '^#' | tail -n 40
  local line p f
  line=$(printf '%s\n' "$out" | grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  if [ -n "$line" ]; then
    p=$(echo "$line" | sed -E 's/^([A-Za-z]+: )?([0-9]+) passed.*/\2/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  else p=0; f=1; fi
  [ $rc -ne 0 ] && [ "$f" -eq 0 ] && f=1
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
}
run_suites() {  # build dir, label
  local b=$1 l=$2
  for t in jit runtime data ckpt parser autodiff passes api conv_sweep cuda cuda_abi fuzz; do
    [ -x "$b/tests/test_$t" ] && suite "$l $t" "$b/tests/test_$t" "$PWD/tests/golden"
  done
  suite "$l safetensors" .venv/bin/python tests/test_safetensors.py "$b"
  suite "$l language" tests/run_lang.sh "$b/kiln"
  suite "$l repl" .venv/bin/python tests/test_repl.py "$b/kiln"
  suite "$l ops vs numpy" .venv/bin/python tests/test_ops.py "$b/kiln"
  suite "$l gradcheck" .venv/bin/python tests/test_gradcheck.py "$b/kiln"
  suite "$l nn ops" .venv/bin/python tests/test_nn.py "$b/kiln"
  suite "$l training" .venv/bin/python tests/test_train.py "$b/kiln"
  # kiln build links against this build's libkiln_rt.a: under ASan, sanitized binaries.
  suite "$l build" .venv/bin/python tests/test_build.py "$b/kiln"
  suite "$l docs" .venv/bin/python tests/test_docs.py "$b/kiln"
  suite "$l vectorize" .venv/bin/python tests/test_vectorize.py "$b/kiln"
  suite "$l cuda (nvrtc)" .venv/bin/python tests/test_cuda.py "$b/kiln"
  # --device cuda on the fake driver and NVRTC (tests/fakecuda): the kernels run on the CPU.
  suite "$l cuda device" .venv/bin/python tests/test_cuda_run.py "$b/kiln"
  # a train statement over two fake GPUs (fake NCCL) and over a GPU and the CPU
  suite "$l several devices" .venv/bin/python tests/test_parallel.py "$b/kiln"
  # The op suites' products through the fake cuBLAS (bias epilogues through the fake cuBLASLt);
  # the gradients' and nn ops' all as tiled kernels.
  local fake="KILN_LIBCUDA=$PWD/$b/tests/libkiln_fakecuda.so KILN_NVRTC=$PWD/$b/tests/libkiln_fakenvrtc.so KILN_TEST_DEVICE=cuda"
  suite "$l ops vs numpy on cuda" env $fake KILN_CUBLAS=$PWD/$b/tests/libkiln_fakecublas.so \
    KILN_CUBLASLT=$PWD/$b/tests/libkiln_fakecublaslt.so .venv/bin/python tests/test_ops.py "$b/kiln"
  suite "$l gradcheck on cuda" env $fake KILN_CUBLAS=/nonexistent .venv/bin/python tests/test_gradcheck.py "$b/kiln"
  suite "$l nn ops on cuda" env $fake KILN_CUBLAS=/nonexistent .venv/bin/python tests/test_nn.py "$b/kiln"
}
# A private compile cache, so tests see the compiler run and nothing stale.
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$PWD/build/test-cache}
# test_cuda.py's NVRTC images of the op suites' kernels, shared by the builds:
# they depend on the source, options and NVRTC only.
export KILN_NVRTC_TEST_CACHE=${KILN_NVRTC_TEST_CACHE:-$PWD/build/nvrtc-test-cache}
scripts/build.sh build || { echo "0 passed, 1 failed"; exit 1; }
run_suites build optimized
# The fallback build (system cc + dlopen, no LLVM/Clang libraries, no BLIS, no
# libedit), as a machine without them builds it: the same emitted C must give the
# same values, and the REPL reads plain lines.
if [ "${KILN_TEST_FALLBACK:-1}" != 0 ]; then
  if scripts/build.sh build-cc -Djit=cc -Dblis=disabled -Dlibedit=disabled; then
    export KILN_CACHE_DIR=$PWD/build-cc/test-cache
    suite "cc-fallback api" build-cc/tests/test_api
    suite "cc-fallback language" tests/run_lang.sh build-cc/kiln
    suite "cc-fallback repl" .venv/bin/python tests/test_repl.py build-cc/kiln
    suite "cc-fallback ops vs numpy" .venv/bin/python tests/test_ops.py build-cc/kiln
    suite "cc-fallback gradcheck" .venv/bin/python tests/test_gradcheck.py build-cc/kiln
    suite "cc-fallback nn ops" .venv/bin/python tests/test_nn.py build-cc/kiln
    suite "cc-fallback training" .venv/bin/python tests/test_train.py build-cc/kiln
    suite "cc-fallback build" .venv/bin/python tests/test_build.py build-cc/kiln
    suite "cc-fallback vectorize" .venv/bin/python tests/test_vectorize.py build-cc/kiln
    # a GPU machine has no LLVM libraries: its host functions go through the system cc
    suite "cc-fallback cuda device" .venv/bin/python tests/test_cuda_run.py build-cc/kiln
    suite "cc-fallback several devices" .venv/bin/python tests/test_parallel.py build-cc/kiln
  else
    total_fail=$((total_fail + 1)); echo "FAIL the -Djit=cc build"
  fi
fi
if [ "${KILN_TEST_ASAN:-1}" != 0 ]; then
  scripts/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false || { echo "$total_pass passed, $((total_fail + 1)) failed"; exit 1; }
  # intercept_tls_get_addr=0: GCC 12's libasan (as LLVM's up to 16) takes a dynamic TLS
  # block that malloc happened to place 16 bytes into a page for a pre-2.25 glibc header,
  # reads a bogus range before it, and LeakSanitizer's tracer dies at exit ("Tracer caught
  # signal 11"). The fake CUDA's kernel libraries (tests/fakecuda/shim.h) each hold
  # thread_local state, so the several-devices runs made many such blocks.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
  export KILN_CACHE_DIR=$PWD/build-asan/test-cache
  # A sanitized kiln runs a few times slower; on a loaded machine one batch of the nn
  # suite has taken over 300 s (tests/kiln_testlib.py's limit per program).
  export KILN_TEST_TIMEOUT=${KILN_TEST_TIMEOUT:-900}
  run_suites build-asan asan
fi
echo "$total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ]
