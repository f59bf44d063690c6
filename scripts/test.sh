#!/usr/bin/env bash
# Builds Dendrite and runs the test suite, on every core.
#   scripts/test.sh            the suite: every test but those labelled long
#   scripts/test.sh --long     the long ones alone (the grids on emulated GPUs, the race check)
#   scripts/test.sh --all      both
# Other arguments go to ctest (-R REGEX, -V, ...). The tests labelled gpu (the
# CUDA backend's, on a real GPU) run where a GPU is found.
set -euo pipefail
cd "$(dirname "$0")/.."
include=() exclude=() long=1
case "${1:-}" in
  --long) include=(-L long) && shift ;;
  --all) shift ;;
  *) exclude+=(long) && long=0 ;;
esac
nvidia-smi -L >/dev/null 2>&1 || exclude+=(gpu)
scripts/build.sh
# The race check's programs are not in the build's default targets.
((long)) && cmake --build build --target racecheck -j "$(nproc)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
cd build
labels=$(IFS='|' && echo "${exclude[*]}")
# Two tests per core: most of them wait on the processes they start (mpirun,
# dendrite) for much of their time. The MPI tests ask for more slots than
# that (PROCESSORS) and so run alone. On 2 cores the suite took 147 s so,
# 184 s with one test per core.
ctest --output-on-failure --timeout 600 -j "$((2 * $(nproc)))" "${include[@]}" \
  ${labels:+-LE "($labels)"} "$@"
