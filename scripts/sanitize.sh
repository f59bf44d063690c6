#!/usr/bin/env bash
# Builds Dendrite with AddressSanitizer and UndefinedBehaviorSanitizer into
# build-san/ (RelWithDebInfo, benchmarks left out) and runs the whole test
# suite there. The sanitizer options every test gets are set by CMake
# (DENDRITE_SANITIZE in CMakeLists.txt); extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-san -G Ninja -DDENDRITE_SANITIZE=ON -DDENDRITE_BENCH=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-san -j "$(nproc)"
cd build-san
ctest --output-on-failure --timeout 600 "$@"
