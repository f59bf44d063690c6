#!/usr/bin/env bash
# Builds here, before a lease, the programs scripts/gpu_check.sh runs on a
# lent GPU machine, so that the lease's minutes go to the GPU and not to a
# build: both stages' programs, for Hopper (sm_90), against the Debian
# packages of .gpu-debs/ unpacked as the check unpacks them there. They land
# stripped of their debugging sections in .gpu-prebuilt/ (ignored by git):
#   programs.tar.xz  build-gpu/'s programs, as the check runs them
#   manifest         the fingerprint of the sources they were built from
#                    (scripts/gpu_build.sh), when and with what
# Carry .gpu-prebuilt beside .gpu-debs. There the check takes the programs
# when its copy of the tree has the same fingerprint and they start (their
# libraries found), and builds as before otherwise: a program built on this
# machine's system may not run on another's.
# The sources are copied (as the device tool sends them) to the folder the
# programs will find them in there (gpu_lease_repo) and built in its
# build-gpu/; a later run rebuilds only what changed.
#   scripts/gpu_prebuild.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_build.sh
scripts/gpu_deps.sh
here=$PWD
prefix=/tmp/dendrite-prefix  # gpu_check.sh's default, where the programs' MPI launcher will be
mkdir -p "$prefix"
gpu_unpack "$prefix"

# The tree as the device tool sends it.
repo=$gpu_lease_repo
if [[ -L $repo ]]; then
  echo "gpu_prebuild: $repo is a link (a check ran here?): remove it first"
  exit 1
fi
git ls-files -co --exclude-standard | gpu_sync_tree "$repo"

cd "$repo"
gpu_stage_targets 2
(
  source "$here/scripts/gpu_prefix_env.sh" "$prefix"
  gpu_configure build-gpu "$prefix" "$prefix/usr/bin/mpirun.openmpi" > build-gpu.configure.log 2>&1 ||
    { tail -30 build-gpu.configure.log; exit 1; }
  echo "gpu_prebuild: building ${targets[*]} (sm_90; many minutes on 2 cores)"
  cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}" | tail -3
)

# The programs, stripped of their debugging sections, and the manifest.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for t in "${targets[@]}"; do
  p=$(gpu_target_path "$t")
  mkdir -p "$stage/$(dirname "$p")"
  strip --strip-debug -o "$stage/$p" "build-gpu/$p"
done
mkdir -p "$here/.gpu-prebuilt"
tar -C "$stage" -cf - . | xz -T0 -9 > "$here/.gpu-prebuilt/programs.tar.xz"
{
  echo "inputs $(gpu_inputs_hash)"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) at $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet HEAD || echo ' with changes'), $(. /etc/os-release && echo "$PRETTY_NAME"), nvcc $(nvcc --version | grep -oE "V[0-9]+\.[0-9.]+" | head -1)"
  echo "configure $(grep -m1 -E 'NCCL transport|no NCCL' build-gpu.configure.log || echo 'NCCL: see the configure log')"
  echo "prefix $prefix"
  echo "programs ${targets[*]}"
} > "$here/.gpu-prebuilt/manifest"
cd "$here"
carried=$(( ($(git ls-files -co --exclude-standard -z | xargs -0 du -cb | tail -1 | cut -f1) +
             $(du -sb .gpu-debs | cut -f1) + $(du -sb .gpu-prebuilt | cut -f1)) / 1048576 ))
echo "gpu_prebuild: $(du -h .gpu-prebuilt/programs.tar.xz | cut -f1) in .gpu-prebuilt/; with the tree and .gpu-debs, $carried MiB to carry (the device tool carries 64 MiB at most)"
((carried < 64)) || { echo "gpu_prebuild: too much to carry"; exit 1; }
