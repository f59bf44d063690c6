#!/usr/bin/env bash
# Configures and builds Dendrite (Release) into build/. The CUDA backend is
# built where nvcc and a GPU are found; DENDRITE_CUDA=ON (CI) builds it
# without a GPU, DENDRITE_CUDA=OFF never.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  ${DENDRITE_CUDA:+-DDENDRITE_CUDA="$DENDRITE_CUDA"} >/dev/null
cmake --build build -j "$(nproc)"
