#!/usr/bin/env bash
# Checks the performance model against measurement on this machine: calibrate
# with 2 ranks, then for every grid of 2 ranks and of 4 ranks (oversubscribed
# on a small machine; the plan is told --ranks-per-node 4 so it models the
# sharing) time `dendrite bench step` and compare with `dendrite plan --json`.
# Prints a table, the mean absolute percentage error, the Spearman rank
# correlation and whether the planner's first choice is within 10% of the
# fastest measured grid.
# The 4-rank plans use a second calibration with 4 ranks (calibrate
# --compute-from): the 2-rank compute figures, the collectives and the wait
# for peers as the oversubscribed ranks meet them.
# Usage: bench/validate_plan.sh [build-dir] (env: MODEL, BATCH, SEQ, STEPS, OUT, WORLDS="2 4",
#        OVERLAP=oar,ors,oag (not train's default, all): the --overlap of both the runs and the plan)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
BIN=$BUILD/dendrite
MODEL=${MODEL:-gpt2-124m}
BATCH=${BATCH:-4}
SEQ=${SEQ:-64}
STEPS=${STEPS:-3}
OVERLAP=${OVERLAP:-oar,ors,oag}
OUT=${OUT:-/tmp/dendrite_validate_plan}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
MPIRUN="mpirun --oversubscribe --bind-to none --mca btl self,vader"
mkdir -p "$OUT"
rm -f "$OUT"/bench_*.json

echo "== calibrate (2 ranks, 1 thread each)"
$MPIRUN -np 2 "$BIN" calibrate --out "$OUT/machine.json" --threads 1 --name validate-2rank
cp "$OUT/machine.json" "$OUT/machine_2.json"
echo "== collectives and waits with 4 ranks (1 thread each)"
$MPIRUN -np 4 "$BIN" calibrate --compute-from "$OUT/machine.json" --out "$OUT/machine_4.json" \
  --threads 1 --name validate-4rank

for P in ${WORLDS:-2 4}; do
  [[ -f $OUT/machine_$P.json ]] || { echo "no calibration for $P ranks (2 and 4 only)" >&2; exit 2; }
  "$BIN" plan --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --world "$P" \
    --machine "$OUT/machine_$P.json" --ranks-per-node "$P" --overlap "$OVERLAP" --json > "$OUT/plan_$P.json"
  grids=$(/usr/bin/python3 -c "import json,sys; print(' '.join(r['grid'] for r in json.load(open(sys.argv[1]))['ranked']))" "$OUT/plan_$P.json")
  for g in $grids; do
    echo "== bench $P ranks, grid $g"
    $MPIRUN -np "$P" "$BIN" bench step --model "$MODEL" --batch "$BATCH" --seq "$SEQ" \
      --threads 1 --steps "$STEPS" --warmup 1 --overlap "$OVERLAP" --grid "$g" --json \
      | tail -n 1 > "$OUT/bench_${P}_$g.json"
  done
done
/usr/bin/python3 "$ROOT/bench/validate_plan.py" "$OUT"
