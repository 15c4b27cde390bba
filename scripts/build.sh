#!/usr/bin/env bash
# Configures and builds Kiln into a build folder (default: build).
# Extra arguments go to `meson setup`, e.g. -Db_sanitize=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
[ -f "$dir/build.ninja" ] || meson setup "$dir" "$@" >/dev/null
ninja -C "$dir" >/dev/null
echo "built $dir/kiln ($("$dir/kiln" --version))"
