#!/usr/bin/env bash
# Checks that two builds of `dendrite` train to the same bits: each run below
# (GPT-2 and Llama, grids of 1 to 8 ranks, with and without overlap, kept
# gathers, recomputation, Goldfish) is made with both binaries, and the losses
# and gradient norms of every step must be equal as printed at full precision.
# Used to show that a refactoring leaves fp32 training unchanged.
#   scripts/same_losses.sh OLD_BINARY NEW_BINARY [extra train options for both]
# Prints one line per run and "N passed, M failed"; exits 1 when any differs.
set -uo pipefail
old=$1 new=$2
shift 2
extra=("$@")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bible -l10000 'Exo1:1-Exo40:38' > "$dir/exodus.txt"
"$old" tokenize --input "$dir/exodus.txt" --vocab-size 512 --out "$dir/data" >/dev/null || exit 1
echo '{"arch": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 32}' > "$dir/gpt2.json"
echo '{"arch": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2, "ffn_hidden": 96, "block_size": 32}' > "$dir/llama.json"

# ranks grid [options]
runs=(
  "1 x=1"
  "1 x=1 --overlap none"
  "2 x=2" "2 y=2" "2 z=2" "2 d=2"
  "4 x=2,y=2" "4 y=2,z=2" "4 z=2,d=2" "4 x=2,d=2" "4 z=4"
  "4 y=2,z=2 --overlap none" "4 y=2,z=2 --keep-gathered" "4 y=2,z=2 --recompute"
  "4 z=2,d=2 --goldfish k=4"
  "8 x=2,y=2,z=2" "8 y=2,z=2,d=2" "8 x=2,y=2,z=2 --overlap none"
)
passed=0 failed=0
losses() {  # metrics file -> "loss norm" per line
  python3 -c 'import json,sys
for l in open(sys.argv[1]): j=json.loads(l); print(repr(j["loss"]), repr(j["grad_norm"]))' "$1"
}
for model in gpt2 llama; do
  for r in "${runs[@]}"; do
    read -r ranks grid opts <<< "$r"
    # The overlaps are on unless a run says otherwise (train's default, auto, picks per machine).
    [[ "$opts" == *--overlap* ]] || opts="$opts --overlap all"
    for which in old new; do
      bin=$old; [[ $which == new ]] && bin=$new
      mpirun -np "$ranks" --oversubscribe --bind-to none --mca btl self,vader "$bin" train \
        --model "$dir/$model.json" --data "$dir/data" --batch 8 --seq 32 --steps 4 --eval-every 0 \
        --grid "$grid" $opts "${extra[@]}" --metrics "$dir/$which.jsonl" > "$dir/$which.log" 2>&1 ||
        { echo "FAIL $model $grid $opts: $which binary failed"; tail -3 "$dir/$which.log"; }
    done
    if [[ -s $dir/old.jsonl ]] && diff <(losses "$dir/old.jsonl") <(losses "$dir/new.jsonl") >/dev/null; then
      passed=$((passed + 1)); echo "same  $model $grid $opts: $(losses "$dir/new.jsonl" | tail -1)"
    else
      failed=$((failed + 1)); echo "DIFF  $model $grid $opts"
      paste <(losses "$dir/old.jsonl") <(losses "$dir/new.jsonl") | head -4
    fi
    rm -f "$dir/old.jsonl" "$dir/new.jsonl"
  done
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
