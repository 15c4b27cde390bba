#!/usr/bin/env bash
# CPU speed benchmark, one command: makes the peers' virtual environment, builds
# Kiln and the C helpers, runs bench.py, which writes results.md, results.json
# and chart.png next to this file.
#
#   benchmarks/train_speed/run.sh [--quick | --full] [bench.py options]
#
# benchmarks/.venv-speed     PyTorch, JAX, TensorFlow, PyTensor, tinygrad, matplotlib
#                            (setup_venv.sh; a peer that fails to install is
#                            reported in the table, the rest still run)
# benchmarks/.speed-bin      fma_peak, triad, blis_gemm, gemm_kernels, kiln_harness
# $KILN_CACHE_DIR            Kiln's compile cache (default: a folder under /tmp)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${KILN_BUILD:-$root/build}"
kiln="$build/kiln"
bin="$root/benchmarks/.speed-bin"
export KILN_CACHE_DIR="${KILN_CACHE_DIR:-/tmp/kiln-speed-cache}"

if [ ! -x "$kiln" ] || [ ! -f "$build/libkiln.a" ]; then
  echo "run.sh: building Kiln in $build" >&2
  "$root/scripts/build.sh" "$build"
fi

"$here/setup_venv.sh"

mkdir -p "$bin"
cc=${CC:-cc}
src="$here/csrc"
$cc -O3 -march=native -fopenmp "$src/fma_peak.c" -o "$bin/fma_peak"
$cc -O3 -march=native -fopenmp "$src/triad.c" -o "$bin/triad"
$cc -O3 -march=native "$src/blis_gemm.c" -o "$bin/blis_gemm" -lblis -lm
# gemm_kernels: Kiln's rt_gemm_f32 against BLIS on the training steps' shapes
# (run by hand: $bin/gemm_kernels); it needs only the runtime's pool and GEMM
$cc -O2 "$src/gemm_kernels.c" "$build/libkiln_rt.a" -lblis -lm -pthread -o "$bin/gemm_kernels"
# kiln_harness links the build's two static libraries and what they need, as
# the build's uninstalled pkg-config file lists them
$cc -O2 -I"$root/include" "$src/kiln_harness.c" -L"$build" \
  $(PKG_CONFIG_PATH="$build/meson-uninstalled" pkg-config --static --libs kiln) \
  -rdynamic -o "$bin/kiln_harness"

exec "$root/benchmarks/.venv-speed/bin/python" "$here/bench.py" --kiln "$kiln" --bindir "$bin" "$@"
