#!/usr/bin/env bash
# Installs what Kiln needs on Debian 12, only what is missing: the build tools,
# LLVM/Clang 14's libraries, BLIS, libffi, libedit, zlib, PLplot (for --plot),
# the Fashion-MNIST data set, and a Python virtual environment (.venv) with
# NumPy and safetensors for the tests. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential pkg-config meson ninja-build python3-venv
      llvm-14-dev libclang-14-dev libclang-cpp14-dev
      libffi-dev libedit-dev zlib1g-dev libblis-dev
      libplplot-dev plplot-driver-cairo dataset-fashion-mnist)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import numpy, safetensors' 2>/dev/null; then
  echo "deps: making .venv with numpy and safetensors"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q numpy safetensors
fi
