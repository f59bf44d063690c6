#!/usr/bin/env bash
# Fine-tunes a Llama 3.2 1B-shaped Hugging Face folder on this machine: the
# published config with random weights in bf16 (bench/make_llama_1b.py), read
# with --init-from on 2 ranks of a grid that fits 24 GiB, a few steps trained
# with a checkpoint saved, and exported back as a Hugging Face folder, which
# transformers then loads (its logits beside `dendrite score`'s). Prints each
# rank's peak resident memory (GNU time's maximum RSS) beside the planner's
# estimate for the same grid, and the tokens/s.
#   bench/scale_llama_1b.sh [GRID] [STEPS]       (default y=2 and 3)
#   SAVE=0 bench/scale_llama_1b.sh               (no checkpoint, no export)
# Needs: build/dendrite, the `bible` command, GNU time, and a Python with
# transformers and torch (PYTHON, default /opt/hfref-venv/bin/python) the
# first time, to write the folder (FOLDER, default /var/tmp/llama-1b).
set -euo pipefail
cd "$(dirname "$0")/.."
grid="${1:-y=2}" steps="${2:-3}"
FOLDER="${FOLDER:-/var/tmp/llama-1b}" WORK="${WORK:-/var/tmp/llama-1b-run}"
PYTHON="${PYTHON:-/opt/hfref-venv/bin/python}"
batch=2 seq=128 save=(--out "$WORK/run")
[[ "${SAVE:-1}" == 0 ]] && save=()
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
[[ -f "$FOLDER/config.json" ]] || "$PYTHON" bench/make_llama_1b.py "$FOLDER"
rm -rf "$WORK"
mkdir -p "$WORK"
bible -l10000 "Gen1:1-Rev22:21" > "$WORK/bible.txt"
build/dendrite tokenize --input "$WORK/bible.txt" --vocab-size 8192 --out "$WORK/data" > /dev/null
# The planner's memory per rank for this grid (the machine file only sets
# rates and the memory limit, not the estimate).
build/dendrite plan --model "$FOLDER" --world 2 --batch $batch --seq $seq --json \
  --machine machines/h200-node.json > "$WORK/plan.json"
planned=$(python3 -c "
import json, sys
want = dict(kv.split('=') for kv in '$grid'.split(','))
for p in json.load(open('$WORK/plan.json'))['ranked']:
    g = dict(kv.split('=') for kv in p['grid'].split(','))
    if all(g.get(a, '1') == want.get(a, '1') for a in 'xyzd'):
        print(round(p['memory_mb'])); sys.exit()
print('none')")
start=$(date +%s)
OMP_NUM_THREADS=1 mpirun -np 2 --bind-to none /usr/bin/time -f "peak RSS %M KB (rank process, %e s)" \
  build/dendrite train --init-from "$FOLDER" --data "$WORK/data" --grid "$grid" --steps "$steps" \
  --batch $batch --seq $seq --threads 1 --eval-every 0 --lr 1e-5 --warmup 1 \
  "${save[@]}" --metrics "$WORK/metrics.jsonl" 2>&1 | tee "$WORK/train.log"
if ((${#save[@]})); then
  build/dendrite export --checkpoint "$WORK/run" --hf "$WORK/hf" > /dev/null
  # transformers reads the export: its logits beside dendrite score's, 2 x 32 tokens.
  python3 -c "import json, random; random.seed(7)
print(json.dumps({'tokens': [[random.randrange(8192) for _ in range(32)] for _ in range(2)]}))" \
    > "$WORK/tokens.json"
  build/dendrite score --checkpoint "$WORK/run" --tokens "$WORK/tokens.json" \
    --out "$WORK/logits.bin" --device cpu > /dev/null
  "$PYTHON" bench/check_export_logits.py "$WORK/hf" "$WORK/tokens.json" "$WORK/logits.bin" \
    > "$WORK/export_check.txt"
fi
echo "scale_llama_1b: grid $grid, batch $batch x $seq tokens, $steps steps in $(( $(date +%s) - start )) s (loading, and saving with SAVE=1, included)"
python3 - "$WORK" "$planned" <<'PY'
import json, re, sys
work, planned = sys.argv[1], sys.argv[2]
peaks = [int(m) / 1024 for m in re.findall(r"peak RSS (\d+) KB", open(f"{work}/train.log").read())]
steps = [json.loads(l) for l in open(f"{work}/metrics.jsonl")]
print("  peak RSS per rank: " + ", ".join(f"{p:.0f} MB" for p in peaks) + f"; plan's estimate {planned} MB"
      + (f" ({max(peaks) / float(planned) - 1:+.1%} for the largest)" if planned != "none" else ""))
print("  tokens/s by step: " + ", ".join(f"{s['tokens_per_s']:.1f}" for s in steps)
      + "; loss " + ", ".join(f"{s['loss']:.3f}" for s in steps))
import os
if os.path.isdir(f"{work}/hf"): print(f"  exported to {work}/hf")
if os.path.exists(f"{work}/export_check.txt"): print(open(f"{work}/export_check.txt").read().rstrip())
PY
