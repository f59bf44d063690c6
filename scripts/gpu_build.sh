# Sourced by scripts/gpu_check.sh (on the lent GPU machine) and
# scripts/gpu_prebuild.sh (here, before a lease): what the check builds, how,
# and the fingerprint of what it is built from, so that programs built here
# can stand in for the build there.
#   source scripts/gpu_build.sh
# shellcheck shell=bash

# Where the programs built here were built from, and where the lent machine's
# copy of the tree is linked to when it runs them: the tests hold the source
# folder and the dendrite program's path as compiled in (DENDRITE_SOURCE_DIR,
# DENDRITE_BINARY), and the tree's folder there is not known here.
# shellcheck disable=SC2034  # read by the scripts that source this
gpu_lease_repo=/tmp/dendrite-lease/repo

# gpu_stage_targets STAGE: sets ops_tests (the op harness, a program per op
# family: tests/backend_ops_*_test.cpp) and targets (what the stage runs).
gpu_stage_targets() {
  ops_tests=(tests/backend_ops_*_test.cpp)
  ops_tests=("${ops_tests[@]##*/}")
  ops_tests=("${ops_tests[@]%.cpp}")
  targets=(dendrite "${ops_tests[@]}" cuda_model_test)
  (($1 == 2)) && targets+=(parallel_mpi_test grad_accum_mpi_test kill_test attention_bench)
  return 0
}

# gpu_target_path TARGET: the program's path in the build folder.
gpu_target_path() {
  case $1 in
    dendrite) echo dendrite ;;
    *_bench) echo "bench/$1" ;;
    *) echo "tests/$1" ;;
  esac
}

# gpu_unpack PREFIX: the packages of .gpu-debs/ unpacked into PREFIX (again
# only when the list of packages changed).
gpu_unpack() {
  local f
  [[ -f $1/.unpacked ]] && cmp -s "$1/.unpacked" <(ls .gpu-debs) && return 0
  for f in .gpu-debs/*.deb; do
    dpkg-deb -x "$f" "$1" || { echo "gpu_build: cannot unpack $f"; return 1; }
  done
  ls .gpu-debs > "$1/.unpacked"
}

# gpu_sync_tree DEST: the files listed on standard input (paths relative to
# here) copied into DEST as the device tool would send them, keeping DEST's
# build-gpu/: a file that changed replaces the old copy (dated now, so that
# the build sees it as newer), and a file the list no longer has goes
# (CMake's globs would still build it).
gpu_sync_tree() {
  local dest=$1 incoming f
  incoming=$(mktemp -d)
  tar -cf - -T - | tar -xf - -C "$incoming"
  mkdir -p "$dest"
  (cd "$incoming" && find . -type f) | while read -r f; do
    cmp -s "$incoming/$f" "$dest/$f" || { mkdir -p "$(dirname "$dest/$f")" && cp "$incoming/$f" "$dest/$f"; }
  done
  comm -23 <(cd "$dest" && find . -path ./build-gpu -prune -o -type f -print | sort) \
           <(cd "$incoming" && find . -type f | sort) | (cd "$dest" && xargs -r rm -f)
  rm -rf "$incoming"
}

# gpu_configure BUILD PREFIX MPIRUN [CMAKE_ARGS...]: the CUDA build for
# Hopper (sm_90: an H100 or an H200) against the unpacked packages.
gpu_configure() {
  local build=$1 prefix=$2 mpirun=$3
  shift 3
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDENDRITE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DMPI_CXX_COMPILER="$prefix/usr/bin/mpicxx.openmpi" -DMPIEXEC_EXECUTABLE="$mpirun" \
    -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf" "$@"
}

# What the build reads from the tree (tests/gpu_scripts_test.sh checks that
# every source file of the tree lies under one of them).
gpu_input_paths=(CMakeLists.txt apps bench fuzz src tests)

# gpu_inputs_hash: a fingerprint of those files (the same files here and in
# the device tool's copy: tracked, and untracked but not ignored), by
# content, run in the tree's root.
gpu_inputs_hash() {
  find "${gpu_input_paths[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
