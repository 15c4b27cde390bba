#!/usr/bin/env bash
# Standalone binaries (kiln build) against kiln run on examples/mlp.kiln: sizes,
# start-up to the first prediction, forward latency; writes results.md here.
# Needs the data set (/usr/share/datasets/fashion-mnist) for the binary's short
# training run, and the test environment's .venv (numpy, safetensors). PyTorch's
# TorchScript export is measured too when benchmarks/.venv-speed has torch
# (benchmarks/train_speed/setup_venv.sh makes it) or $TORCH_PYTHON names a Python with it.
#   benchmarks/standalone/run.sh [--threads N]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${KILN_BUILD:-$root/build}"
[ -x "$build/kiln" ] && [ -f "$build/libkiln.a" ] || "$root/scripts/build.sh" "$build"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
# kiln_harness (benchmarks/train_speed) times the JIT's graph through the C API; it links
# the build's two static libraries as the uninstalled pkg-config file lists them.
cc -O2 -I"$root/include" "$root/benchmarks/train_speed/csrc/kiln_harness.c" -L"$build" \
  $(PKG_CONFIG_PATH="$build/meson-uninstalled" pkg-config --static --libs kiln) -rdynamic -o "$bin/kiln_harness"
torch_py="${TORCH_PYTHON:-$root/benchmarks/.venv-speed/bin/python}"
args=()
[ -x "$torch_py" ] && "$torch_py" -c 'import torch, numpy' 2>/dev/null && args+=(--torch-python "$torch_py")
exec "$root/.venv/bin/python" "$here/bench.py" --kiln "$build/kiln" --harness "$bin/kiln_harness" "${args[@]}" "$@"
