#!/usr/bin/env bash
# The step time with and without each overlap, side by side (docs/overlap.md).
# Runs `bench step --json` on one grid for every overlap setting in turn,
# ROUNDS times (alternating, so drift hits all alike), and prints per setting
# the median step time and its gain over `none`, then rank 0's communication
# per step: the time the collectives took (comm: blocking calls' durations,
# engine tasks' run times), every second the rank was blocked in them or
# waiting for them, queues included (exposed), the rest (hidden = comm -
# exposed), and the CPU time of the progress engine's thread.
# Usage: bench/overlap_compare.sh [BUILD] [GRID] [RANKS] [ROUNDS] [OVERLAPS...]
#   default: build y=2,z=2 4 3 none oar ors oag dp all
#   MODEL (gpt2-124m), BATCH (4), SEQ (64), THREADS (1 per rank), STEPS (4),
#   DEVICE (cpu; cuda: one rank per GPU over NCCL, whose comm and exposed
#   times come from CUDA events: the collectives' time on their streams and
#   the compute stream's waits), PRECISION (fp32), MPIRUN (mpirun)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; GRID=${2:-y=2,z=2}; RANKS=${3:-4}; ROUNDS=${4:-3}
shift $(( $# < 4 ? $# : 4 )) || true
OVERLAPS=("$@"); [ ${#OVERLAPS[@]} -eq 0 ] && OVERLAPS=(none oar ors oag dp all)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for ((round = 1; round <= ROUNDS; ++round)); do
  for ov in "${OVERLAPS[@]}"; do
    ${MPIRUN:-mpirun} -np "$RANKS" --oversubscribe --bind-to none --mca btl self,vader \
      "$BUILD/dendrite" bench step --device "${DEVICE:-cpu}" --precision "${PRECISION:-fp32}" \
      --model "${MODEL:-gpt2-124m}" --batch "${BATCH:-4}" \
      --seq "${SEQ:-64}" --threads "${THREADS:-1}" --grid "$GRID" --steps "${STEPS:-4}" \
      --overlap "$ov" --json
  done
done | "$(command -v /usr/bin/python3 || command -v python3)" -c '
import json, statistics, sys
runs = {}
for line in sys.stdin:
    d = json.loads(line)
    runs.setdefault(d["overlap"], []).append(d)
med = lambda rs, k: statistics.median(r[k] for r in rs)
base = med(runs["none"], "step_ms") if "none" in runs else None
first = next(iter(runs.values()))[0]
print("%s, grid %s, B=%d T=%d, %d thread(s) per rank; medians of %d runs each, alternating" % (
    first["model"], first["grid"], first["batch"], first["seq"], first["threads"],
    min(len(r) for r in runs.values())))
print()
print("| overlap | step ms | range | vs none | comm ms | exposed | hidden | exposed + hidden | engine CPU ms | CPU ms/rank |")
print("|---|---|---|---|---|---|---|---|---|---|")
for ov, rs in runs.items():
    step = med(rs, "step_ms")
    gain = "" if base is None or ov == "none" else "%+.1f%%" % (100 * (step - base) / base)
    r = sorted(rs, key=lambda x: x["step_ms"])[(len(rs) - 1) // 2]  # the median run: one consistent row
    print("| %s | %.0f | %.0f-%.0f | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |" % (
        ov, step, min(x["step_ms"] for x in rs), max(x["step_ms"] for x in rs), gain,
        r["comm_ms"], r["exposed_ms"], r["hidden_ms"], r["exposed_ms"] + r["hidden_ms"],
        r["engine_cpu_ms"], r["cpu_user_ms"] + r["cpu_sys_ms"]))
print()
print("comm, exposed, hidden, engine CPU: rank 0 per step, from the median run of each setting")
'
