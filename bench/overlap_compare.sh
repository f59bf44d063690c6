#!/usr/bin/env bash
# Compares --overlap none with the default overlaps on one grid and prints, per
# axis and kind of collective, total / exposed / hidden ms per step, the step
# time, the CPU time per rank and the share of communication hidden
# (docs/overlap.md); an overlap listed several times (alternating) gets a line
# of medians.
# Usage: bench/overlap_compare.sh [BUILD] [GRID] [RANKS] [OVERLAPS...]
#   default: build y=2,z=2 4 none all
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; GRID=${2:-y=2,z=2}; RANKS=${3:-4}; shift $(( $# < 3 ? $# : 3 )) || true
OVERLAPS=("$@"); [ ${#OVERLAPS[@]} -eq 0 ] && OVERLAPS=(none all)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for ov in "${OVERLAPS[@]}"; do
  mpirun -np "$RANKS" --oversubscribe --bind-to none --mca btl self,vader \
    "$BUILD/dendrite" bench step --model "${MODEL:-gpt2-124m}" --batch 4 --seq 64 --threads 1 \
    --grid "$GRID" --steps "${STEPS:-4}" --overlap "$ov" --json
done | /usr/bin/python3 -c '
import json, statistics, sys
runs = {}
print("| overlap | tokens/s | step ms | cpu ms (user+sys) | compute ms | comm total ms | exposed | hidden | hidden % | per axis.kind total/exposed |")
print("|---|---|---|---|---|---|---|---|---|---|")
for line in sys.stdin:
    d = json.loads(line)
    items = [(a + "." + k, v) for a, kk in d["comm"].items() for k, v in kk.items()]
    tot = sum(v["total_ms"] for _, v in items); exp = sum(v["exposed_ms"] for _, v in items)
    per = ", ".join("%s %.0f/%.0f" % (n, v["total_ms"], v["exposed_ms"]) for n, v in items)
    print("| %s | %.1f | %.0f | %.0f+%.0f | %.0f | %.0f | %.0f | %.0f | %.0f%% | %s |" % (
        d["overlap"] if "overlap" in d else "?", d["tokens_per_s"], d["step_ms"],
        d["cpu_user_ms"], d["cpu_sys_ms"], d["compute_ms"],
        tot, exp, tot - exp, 100 * (tot - exp) / tot if tot else 0, per))
    runs.setdefault(d["overlap"], []).append(
        (d["step_ms"], d["cpu_user_ms"] + d["cpu_sys_ms"], tot, exp, d["context_switches"]))
# Repeated overlaps (list one several times, alternating): medians, and the
# share hidden over all their runs.
for ov, r in runs.items():
    if len(r) < 2: continue
    med = lambda i: statistics.median(x[i] for x in r)
    hidden = sum(x[2] - x[3] for x in r) / max(sum(x[2] for x in r), 1e-9)
    print("median of %d runs, %s: step %.0f ms (%.0f-%.0f), cpu %.0f ms/rank, comm total %.0f, "
          "exposed %.0f, hidden %.1f%%, %.0f context switches/rank" % (
              len(r), ov, med(0), min(x[0] for x in r), max(x[0] for x in r), med(1), med(2),
              med(3), 100 * hidden, med(4)))
'
