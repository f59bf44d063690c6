#!/usr/bin/env bash
# Builds Dendrite and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
cd build
ctest --output-on-failure --timeout 600 "$@"
