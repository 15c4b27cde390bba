#!/usr/bin/env bash
# Makes benchmarks/.venv-speed with the peers (CPU wheels). Each peer installs on
# its own so one failure leaves the others; failures go to $venv/install-notes.txt.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/../.venv-speed"
py="${PYTHON:-python3}"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q)
notes="$venv/install-notes.txt"
: > "$notes"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"${pip[@]}" numpy matplotlib || echo "numpy/matplotlib: pip install failed" >> "$notes"
try() {  # try NAME IMPORT PIP-ARGS...
  local name="$1" mod="$2"; shift 2
  if "$venv/bin/python" -c "import $mod" 2>/dev/null; then return; fi
  echo "setup_venv: installing $name" >&2
  "${pip[@]}" "$@" > "$venv/pip-$name.log" 2>&1 \
    || echo "$name: pip install failed ($(tail -1 "$venv/pip-$name.log"))" >> "$notes"
}
# torch: the CPU-only index when it answers, else the default PyPI wheel
if curl -s -o /dev/null --max-time 10 https://download.pytorch.org/whl/cpu/torch/; then
  try torch torch torch --index-url https://download.pytorch.org/whl/cpu
else
  try torch torch torch
fi
try jax jax "jax[cpu]"
try pytensor pytensor pytensor
try tensorflow tensorflow tensorflow-cpu
try tinygrad tinygrad tinygrad
cat "$notes" >&2
