#!/usr/bin/env bash
# Configures and builds Kiln into a build folder (default: build).
# Extra arguments go to `meson setup`, e.g. -Db_sanitize=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
# An existing folder takes the options again (meson configure), so that a folder
# set up before an option was added to the call gets it.
if [ -f "$dir/build.ninja" ]; then
  [ $# -eq 0 ] || meson configure "$dir" "$@" >/dev/null
else
  meson setup "$dir" "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null
echo "built $dir/kiln ($("$dir/kiln" --version))"
