#!/usr/bin/env bash
# Set-up and the main job: installs what is missing (Debian packages, among
# them the Fashion-MNIST data set; a .venv for the tests), builds Kiln, and
# trains examples/mlp.kiln on Fashion-MNIST end to end (5 epochs, then the
# test accuracy, and mlp.safetensors saved in build/).
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/build.sh build
build/kiln run examples/intro.kiln
cd build && ./kiln run ../examples/mlp.kiln --log mlp.csv --plot mlp.png
