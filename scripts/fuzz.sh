#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang++ into build-fuzz/ and runs
# each for SECONDS (default 20), starting from its seed corpus
# fuzz/corpus/<target>/ (new inputs go to build-fuzz/corpus/<target>/).
# Fails on the first crash, sanitizer report, uncaught exception or timeout;
# the input that caused it is saved as build-fuzz/findings/<target>-crash-*.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(safetensors_fuzz token_file_fuzz config_fuzz tokenizer_json_fuzz
                               sentencepiece_model_fuzz)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DDENDRITE_FUZZ=ON \
      -DDENDRITE_TESTS=OFF -DDENDRITE_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"
mkdir -p build-fuzz/findings build-fuzz/tmp
export TMPDIR="$PWD/build-fuzz/tmp"  # where the targets write their input files
export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Each target runs on a core of its own, as many at once as there are cores
# (on 2 cores the five took 60 s so, 100 s one after another); their reports
# follow in the order given.
run_target() {
  local t=$1
  mkdir -p "build-fuzz/corpus/$t"
  build-fuzz/fuzz/"$t" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$t-" "build-fuzz/corpus/$t" "fuzz/corpus/$t" \
    >"build-fuzz/findings/$t.log" 2>&1
}
pids=()
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  run_target "$t" &
  pids+=($!)
done
failed=()
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  log="build-fuzz/findings/$t.log"
  if wait "${pids[$i]}"; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    echo "fuzz: $t: ${runs:-?} inputs in ${seconds} s, no finding"
  else
    echo "fuzz: $t FAILED (log $log):"
    tail -n 60 "$log"
    failed+=("$t")
  fi
done
rm -rf build-fuzz/tmp
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}; inputs in build-fuzz/findings/"
  exit 1
fi
