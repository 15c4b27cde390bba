#!/usr/bin/env bash
# Compile latency benchmark, one command: sets up the Python environments for the
# peers and runs bench.py, which writes results.md next to this file.
#
#   benchmarks/compile_latency/run.sh [bench.py options]   (--quick: smoke test)
#
# benchmarks/.venv         PyTensor (latest; needs numpy 2)
# benchmarks/.venv-theano  Theano 1.0.5, the last Theano release, in its own venv
#                          because it needs numpy < 1.24 (it uses np.bool etc.),
#                          which PyTensor's numpy 2 excludes.
# Set SKIP_THEANO=1 to leave Theano out.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bench="$root/benchmarks"
kiln="${KILN_BIN:-$root/build/kiln}"

if [ ! -x "$kiln" ]; then
  echo "run.sh: $kiln not found; building" >&2
  ninja -C "$root/build"
fi

venv="$bench/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import pytensor' 2>/dev/null; then
  echo "run.sh: installing pytensor into $venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q pytensor
fi

theano_py=""
theano_note=""
if [ "${SKIP_THEANO:-0}" != 1 ]; then
  tv="$bench/.venv-theano"
  [ -x "$tv/bin/python" ] || python3 -m venv "$tv"
  # blas.ldflags= : Theano's BLAS probe reads numpy.distutils' blas_opt_info,
  # which numpy 1.23 no longer has; with it empty Theano uses its NumPy C-API
  # BLAS (bench.py passes the same flag).
  if ! THEANO_FLAGS="base_compiledir=$(mktemp -d),blas.ldflags=" "$tv/bin/python" -c 'import theano' 2>/dev/null; then
    echo "run.sh: installing Theano 1.0.5 into $tv" >&2
    # numpy 1.23 is the newest numpy Theano 1.0.5 runs with, and the oldest
    # with wheels for Python 3.11; scipy 1.11 is the newest that accepts it.
    "$tv/bin/python" -m pip install -q --upgrade pip || true
    "$tv/bin/python" -m pip install -q "numpy>=1.23,<1.24" "scipy<1.12" "theano==1.0.5" \
      || theano_note="pip could not install Theano 1.0.5 on $(python3 --version)"
  fi
  if [ -z "$theano_note" ]; then
    theano_py="$tv/bin/python"
  fi
fi

exec "$venv/bin/python" "$here/bench.py" --kiln "$kiln" \
  --theano-python "$theano_py" --theano-note "$theano_note" "$@"
