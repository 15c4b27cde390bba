#!/usr/bin/env bash
# The GPU session's one script (docs/cuda.md): on a machine with an NVIDIA GPU,
# build Kiln as such a machine allows (no LLVM, BLIS or libedit: -Djit=cc
# -Dblis=disabled), run the CUDA checks on the real device, then measure
# (bench.py). Everything it prints also goes to $OUT (default benchmarks/gpu/out).
#
#   benchmarks/gpu/run.sh            # checks, then the benchmark (about 5 minutes on an H200 machine, estimated)
#   benchmarks/gpu/run.sh --checks   # the checks alone
#   benchmarks/gpu/run.sh --bench    # the benchmark alone
#
# A CUDA image may lack libffi's and zlib's headers. Then it takes them from
# Debian packages carried in .gpudeps/ (git ignores it); fetch them on a Debian
# machine first: mkdir -p .gpudeps && (cd .gpudeps && apt-get download libffi-dev libffi8 zlib1g-dev zlib1g)
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
out=${OUT:-benchmarks/gpu/out}
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
py=python3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if ! printf '#include <ffi.h>\n#include <zlib.h>\n' | cc -E - >/dev/null 2>&1; then
  if ! ls .gpudeps/*.deb >/dev/null 2>&1; then
    echo "run.sh: ffi.h or zlib.h missing, and no .gpudeps/*.deb to take them from"; exit 1
  fi
  for f in .gpudeps/*.deb; do dpkg -x "$f" /tmp/kiln-deps; done
  lib=/tmp/kiln-deps/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/kiln-deps
  export LIBRARY_PATH=$lib LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ ! -x build-gpu/kiln ]; then
  meson setup build-gpu -Djit=cc -Dblis=disabled -Dlibedit=disabled -Dplot=disabled --buildtype=release >/dev/null \
    && ninja -C build-gpu >/dev/null || { echo "run.sh: the build failed"; exit 1; }
fi
build-gpu/kiln --version
export PYTHONUNBUFFERED=1 KILN_TEST_JOBS=${KILN_TEST_JOBS:-$(nproc)} KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-gpu-cache}
# NCCL, for cuda:0,1: PyTorch's wheel carries one when the loader's path has none.
if [ -z "${KILN_NCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  n=$($py -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  [ -n "$n" ] && [ -f "$n" ] && export KILN_NCCL=$n
fi
rc=0
if [ "$what" != --bench ]; then
  echo "=== test_cuda_run.py --real"
  $py tests/test_cuda_run.py build-gpu/kiln --real | grep -v '^ok' || rc=1
  echo "=== test_parallel.py --real"   # cuda+cpu; cuda:0,1 too where there are two GPUs
  KILN_TEST_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') $py tests/test_parallel.py build-gpu/kiln --real | grep -v '^ok' || rc=1
  for t in ops gradcheck nn; do
    echo "=== test_$t.py on the GPU"
    KILN_TEST_DEVICE=cuda $py tests/test_$t.py build-gpu/kiln | grep -v '^ok' || rc=1
  done
fi
if [ "$what" != --checks ]; then
  echo "=== bench.py"
  $py benchmarks/gpu/bench.py build-gpu/kiln --out "$out" --reps 2 || rc=1
fi
exit $rc
