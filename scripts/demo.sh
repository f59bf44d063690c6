#!/usr/bin/env bash
# The main job on the built-in default corpus: tokenize the King James Bible,
# train a small GPT-2 (gpt2-mini, 5M parameters) for a few minutes, plot the
# losses and print a generated sample.
#   scripts/demo.sh [extra options for `dendrite train`]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
mkdir -p data runs
if [[ ! -f data/kjv/train.bin ]]; then
  bible -l10000 "Gen1:1-Rev22:21" > data/kjv.txt
  build/dendrite tokenize --input data/kjv.txt --vocab-size 8192 --out data/kjv
fi
build/dendrite train --model gpt2-mini --data data/kjv --steps 300 --batch 8 --seq 256 \
  --lr 1e-3 --eval-every 50 --log-every 10 --out runs/kjv-mini --metrics runs/kjv-mini/metrics.jsonl "$@"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 scripts/plot_metrics.py runs/kjv-mini/metrics.jsonl runs/kjv-mini/metrics.png
  echo "plot: runs/kjv-mini/metrics.png"
fi
echo "--- sample ---"
build/dendrite generate --checkpoint runs/kjv-mini --prompt "And it came to pass" --tokens 120 \
  --temperature 0.8 --top-k 40
