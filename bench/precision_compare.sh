#!/usr/bin/env bash
# bf16 against fp32 on one model and grid: alternating `bench step` runs of
# each precision, medians of tokens/s, step time and peak memory, and the
# tokens/s ratio, with the CPU's bf16 instruction sets printed first.
#   bench/precision_compare.sh BUILD_DIR [pairs]     (default 3 pairs)
# Environment: MODEL (gpt2-124m), BATCH (8), SEQ (256), STEPS (3), THREADS
# (all cores), RANKS (1) and GRID (empty) for a run under mpirun.
set -euo pipefail
build=${1:?usage: bench/precision_compare.sh BUILD_DIR [pairs]}
pairs=${2:-3}
model=${MODEL:-gpt2-124m} batch=${BATCH:-8} seq=${SEQ:-256} steps=${STEPS:-3}
threads=${THREADS:-$(nproc)} ranks=${RANKS:-1} grid=${GRID:-}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
     "bf16 flags: $(grep -o -w 'avx512_bf16\|amx_bf16\|amx_tile' /proc/cpuinfo | sort -u | xargs)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() {  # precision
  local cmd=("$build/dendrite" bench step --model "$model" --batch "$batch" --seq "$seq"
             --steps "$steps" --warmup 1 --threads "$threads" --precision "$1" --json)
  [[ -n $grid ]] && cmd+=(--grid "$grid")
  if ((ranks > 1)); then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -np "$ranks" --oversubscribe --bind-to none "${cmd[@]}" | tail -1 >> "$out"
  else
    "${cmd[@]}" | tail -1 >> "$out"
  fi
}
for ((i = 0; i < pairs; ++i)); do run fp32; run bf16; done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda p, k: statistics.median(r[k] for r in rows if r["precision"] == p)
first = rows[0]
print(f"{first['model']} B={first['batch']} T={first['seq']} grid {first['grid']}, "
      f"{first['threads']} threads per rank, {len(rows) // 2} alternating pairs (medians):")
for p in ("fp32", "bf16"):
    print(f"  {p}: {med(p, 'tokens_per_s'):.1f} tokens/s, {med(p, 'step_ms'):.0f} ms/step, "
          f"peak RSS {med(p, 'peak_rss_mb'):.0f} MB per rank")
print(f"  tokens/s ratio bf16/fp32: {med('bf16', 'tokens_per_s') / med('fp32', 'tokens_per_s'):.2f}")
PY
