#!/usr/bin/env bash
# Builds Dendrite with AddressSanitizer and UndefinedBehaviorSanitizer into
# build-san/ (-O1 with line tables: half the compile time of -O2 -g, and
# enough for the sanitizers' stack traces; benchmarks left out) and runs the
# whole test suite there but the grids on the emulated GPU (label
# emulated_grids: minutes of fibers under ASan; the emulated op and model tests
# do run here) and the op harness's instances in other orders or roundings.
# The sanitizer options every test gets are set by CMake (DENDRITE_SANITIZE in
# CMakeLists.txt); extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-san -G Ninja -DDENDRITE_SANITIZE=ON -DDENDRITE_BENCH=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
cmake --build build-san -j "$(nproc)"
cd build-san
# Two tests per core, as scripts/test.sh runs them (many wait on the
# processes they start): on 2 cores 471 s, against 523 s one per core. The
# op harness's emulated instances with the threads reversed, the blocks
# interleaved or the model of a GPU's rounding (*emulated_reversed,
# *emulated_interleaved, *gpu_rounding) are left out: their kernels make the
# same accesses as the instance in order, which runs here (only the
# emulator's own scheduling differs, and the default suite checks that every
# order gives the same bits); the rounding model's own code runs here in
# emulated_rounding_test. They took 99 s of the tests' 1,175 (2026-12-06).
ctest --output-on-failure --timeout 600 -j "$((2 * $(nproc)))" -LE emulated_grids \
      -E "emulated_(reversed|interleaved)|gpu_rounding" "$@"
