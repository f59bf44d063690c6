#!/usr/bin/env bash
# Builds Dendrite and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
cd build
# The tests labelled gpu (the CUDA backend's) need a GPU: run them where one is found.
gpu=(-LE gpu)
if nvidia-smi -L >/dev/null 2>&1; then gpu=(); fi
ctest --output-on-failure --timeout 600 "${gpu[@]}" "$@"
