#!/usr/bin/env bash
# Set-up and the main job: installs what is missing, builds Kiln, and runs the
# example program end to end.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/build.sh build
build/kiln run examples/intro.kiln
