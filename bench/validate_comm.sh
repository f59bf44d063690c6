#!/usr/bin/env bash
# Checks the performance model's communication on communication-heavy runs:
# gpt2-124m with a small batch (B=2, T=32 by default, so that collectives are a
# large share of the step), over the MPI message path, over shared memory, and
# across simulated nodes (DENDRITE_RANKS_PER_NODE), on every grid of 2, 4 and 8
# ranks the batch allows. For each grid it compares, per axis, the predicted
# communication (`dendrite plan --json`: exposed + hidden) with the measured one
# (`dendrite bench step --json`: every collective's time, exposed + hidden), and
# whether the planner's first choice of each case is within 10% of the fastest
# measured grid. Calibrates first (8 ranks where the machine has 8 cores; else
# 2 ranks, then the collectives and the wait for peers again with 4 and with 8
# ranks, oversubscribed, keeping the 2-rank compute figures).
# Usage: bench/validate_comm.sh [build-dir] (env: MODEL, BATCH, SEQ, STEPS, OUT,
#        CASES="msg2 shm4 nodes4 nodes8" to run a subset, REPLAN=1 to keep the
#        machine files and measurements already in OUT and redo only the plans:
#        a change to the model, judged on the same runs; COMPARE=DIR, an earlier
#        run's OUT: how far the two runs' measurements lie apart)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
BIN=$BUILD/dendrite
MODEL=${MODEL:-gpt2-124m}
BATCH=${BATCH:-2}
SEQ=${SEQ:-32}
STEPS=${STEPS:-5}
OUT=${OUT:-/tmp/dendrite_validate_comm}
CASES=${CASES:-msg2 shm4 nodes4 nodes8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
PY=$(command -v /usr/bin/python3 || command -v python3)
MPIRUN="${MPIRUN:-mpirun} --oversubscribe --bind-to none --mca btl self,vader"
REPLAN=${REPLAN:-0}
mkdir -p "$OUT"
if [[ $REPLAN == 1 ]]; then
  for P in 2 4 8; do
    [[ -f $OUT/machine_$P.json ]] || { echo "REPLAN=1: no $OUT/machine_$P.json; run without REPLAN first" >&2; exit 2; }
  done
  rm -f "$OUT"/plan_*.json
else
  rm -f "$OUT"/bench_*.json "$OUT"/plan_*.json
fi
start=$(date +%s)

# With a core per rank for 8 ranks (the lent GPU machine has 16), calibrate
# with 8 ranks; on a smaller machine with 2, then the collectives and waits of
# the oversubscribed 4 and 8 (calibrate --compute-from: the compute of a run
# with a core per rank, which the model slows by threads over cores).
CORES=$(nproc)
CAL=2
((CORES >= 8)) && CAL=8
calibrate() {
  echo "== calibrate ($CAL ranks, 1 thread each)"
  $MPIRUN -np $CAL "$BIN" calibrate --device cpu --out "$OUT/machine.json" --threads 1 \
    --name validate-comm
  for P in 4 8; do
    if ((P > CORES)); then
      echo "== collectives and waits oversubscribed ($P ranks, 1 thread each)"
      $MPIRUN -np $P "$BIN" calibrate --device cpu --compute-from "$OUT/machine.json" \
        --out "$OUT/machine_$P.json" --threads 1 --name validate-comm-$P
    else
      cp "$OUT/machine.json" "$OUT/machine_$P.json"
    fi
  done
  cp "$OUT/machine.json" "$OUT/machine_2.json"
}
[[ $REPLAN == 1 ]] || calibrate

# case: label, ranks, environment of the runs, plan options.
run_case() {
  local label=$1 P=$2 envs=$3 flags=$4
  "$BIN" plan --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --world "$P" \
    --machine "$OUT/machine_$P.json" --ranks-per-node "$P" --overlap none $flags --json \
    > "$OUT/plan_$label.json"
  local grids
  grids=$("$PY" -c "import json,sys; print(' '.join(r['grid'] for r in json.load(open(sys.argv[1]))['ranked']))" "$OUT/plan_$label.json")
  [[ $REPLAN == 1 ]] && return
  for g in $grids; do
    echo "== $label: $P ranks, grid $g"
    env $envs $MPIRUN -np "$P" "$BIN" bench step --device cpu --model "$MODEL" --batch "$BATCH" \
      --seq "$SEQ" \
      --threads 1 --steps "$STEPS" --warmup 1 --overlap none --grid "$g" --json \
      | tail -n 1 > "$OUT/bench_${label}_$g.json"
  done
}
for c in $CASES; do
  case $c in
    msg2) run_case msg2 2 "DENDRITE_SHARED_MEMORY=0" "--no-shared-memory" ;;
    shm4) run_case shm4 4 "DENDRITE_SHARED_MEMORY=1" "" ;;
    nodes4) run_case nodes4 4 "DENDRITE_RANKS_PER_NODE=2" "--simulate-nodes 2" ;;
    nodes8) run_case nodes8 8 "DENDRITE_RANKS_PER_NODE=4" "--simulate-nodes 4" ;;
    *) echo "unknown case $c (msg2, shm4, nodes4, nodes8)" >&2; exit 2 ;;
  esac
done
echo "== took $(( $(date +%s) - start )) s"
"$PY" "$ROOT/bench/validate_comm.py" "$OUT" ${COMPARE:+"$COMPARE"}
