#!/usr/bin/env bash
# What the lease's scripts (scripts/gpu_build.sh, gpu_check.sh,
# gpu_prebuild.sh, gpu_rehearse.sh) rely on in the tree, checked where there
# is neither a GPU nor root, so that a change here cannot break them unseen
# until a lease:
# - every program the two stages run is a target of the build, at the path
#   the check runs it from (a test program renamed or dropped would fail the
#   lease's build, or the programs built before it);
# - every source file of the tree lies under the folders the fingerprint of
#   the programs built before the lease reads (gpu_input_paths): a source
#   outside them could change, and programs built from the old one would
#   still pass for this tree's;
# - that fingerprint is the same for a copy of the tree, and another once
#   one byte of one file changes;
# - the scripts parse.
#   tests/gpu_scripts_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=${1:?usage: gpu_scripts_test.sh SOURCE_DIR BUILD_DIR} build=${2:?usage: gpu_scripts_test.sh SOURCE_DIR BUILD_DIR}
failed=0
bad() {
  echo "gpu_scripts_test: $*"
  failed=1
}
cd "$src" || exit 2
# shellcheck source=scripts/gpu_build.sh
source scripts/gpu_build.sh

for s in scripts/gpu_build.sh scripts/gpu_check.sh scripts/gpu_prebuild.sh scripts/gpu_rehearse.sh; do
  bash -n "$s" || bad "$s does not parse"
done

gpu_stage_targets 2
((${#ops_tests[@]} > 0)) || bad "no op harness programs (tests/backend_ops_*_test.cpp)"
for t in "${targets[@]}"; do
  p=$(gpu_target_path "$t")
  [[ -x $build/$p ]] || bad "the stages run $t as build-gpu/$p, but the build has no program at $p"
done
echo "gpu_scripts_test: the stages' ${#targets[@]} programs: ${targets[*]}"

outside=()
while IFS= read -r f; do
  under=0
  for p in "${gpu_input_paths[@]}"; do
    [[ $f == "$p" || $f == "$p"/* ]] && under=1
  done
  ((under)) || outside+=("$f")
done < <(find . \( -path './.*' -o -path './build*' \) -prune -o -type f \
              \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cmake' \
                 -o -name CMakeLists.txt \) -print | sed 's|^\./||')
((${#outside[@]} == 0)) ||
  bad "sources outside the fingerprint's folders (${gpu_input_paths[*]}, scripts/gpu_build.sh): ${outside[*]}"

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -a "${gpu_input_paths[@]}" "$copy/"
here=$(gpu_inputs_hash)
there=$(cd "$copy" && gpu_inputs_hash)
[[ $here == "$there" ]] || bad "the fingerprint of a copy of the tree is $there, not $here"
printf 'x' >> "$copy/src/dendrite/model/config.cpp"
changed=$(cd "$copy" && gpu_inputs_hash)
[[ $changed != "$here" ]] || bad "the fingerprint stayed $here after a source changed"
echo "gpu_scripts_test: fingerprint $here (a copy: $there; one byte more in a source: $changed)"
exit $failed
