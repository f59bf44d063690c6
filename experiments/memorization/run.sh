#!/usr/bin/env bash
# The memorization experiment (DESIGN.md section 7): three GPT-2 sizes (about
# 1M, 4M and 16M parameters: model-s/m/l.json) trained on the Book of Genesis
# (King James Bible, Debian's bible-kjv) with canary passages inserted R times,
# once with the standard loss and once with Goldfish k=4 (h=13, hash), each
# scored by `dendrite memorization`; writes docs/memorization.md and
# docs/memorization.png. The standard and Goldfish runs of a size train side
# by side, one thread each (on 2 busy cores that beats one run on two threads).
#   experiments/memorization/run.sh            # about 30 minutes on 2 cores (measured 28.5)
#   STEPS=40 OUT=runs/mem-quick experiments/memorization/run.sh   # a quick try (docs still written)
set -euo pipefail
cd "$(dirname "$0")/../.."
here=experiments/memorization
OUT=${OUT:-runs/memorization}
STEPS=${STEPS:-400}    # optimizer steps per run
BATCH=${BATCH:-8}      # sequences per step
SEQ=${SEQ:-128}        # tokens per sequence
LR=${LR:-2e-3}
R=${R:-18}             # copies of each canary in train.bin
SAMPLES=${SAMPLES:-48} # training samples scored
DOCS=${DOCS:-docs}
[[ -x build/dendrite ]] || scripts/build.sh
start=$(date +%s)
mkdir -p "$OUT"
bible -l10000 "Gen1:1-Gen50:26" > "$OUT/genesis.txt"
build/dendrite tokenize --input "$OUT/genesis.txt" --vocab-size 2048 --val-fraction 0.05 \
  --out "$OUT/data" --canaries $here/canaries.txt --canary-repeat "$R"

train() {  # size loss extra-options...
  local size=$1 loss=$2 dir="$OUT/$1-$2"
  shift 2
  mkdir -p "$dir"
  OMP_NUM_THREADS=1 build/dendrite train --model $here/model-$size.json --data "$OUT/data" \
    --steps "$STEPS" --batch "$BATCH" --seq "$SEQ" --lr "$LR" --warmup $((STEPS / 10)) \
    --eval-every $((STEPS / 4)) --log-every $((STEPS / 4)) --threads 1 --out "$dir" \
    --metrics "$dir/metrics.jsonl" "$@" > "$dir/train.log" 2>&1
  OMP_NUM_THREADS=1 build/dendrite memorization --checkpoint "$dir" --data "$OUT/data" \
    --control $here/control.txt --samples "$SAMPLES" --prefix 32 --suffix 32 --threads 1 \
    --json > "$dir/memorization.json"
  echo "$size $loss: $(grep -o 'val [0-9.]*' "$dir/train.log" | tail -1), $(( $(date +%s) - start )) s"
}

for size in s m l; do
  train $size standard & a=$!
  train $size goldfish --goldfish k=4,h=13,mode=hash & b=$!
  wait $a
  wait $b
done
minutes=$(python3 -c "print(($(date +%s) - $start) / 60)")
mkdir -p "$DOCS"
/usr/bin/python3 $here/report.py "$OUT" "$DOCS/memorization.md" "$DOCS/memorization.png" \
  --minutes "$minutes" --command "experiments/memorization/run.sh" \
  --settings "Corpus: Genesis (KJV), 2048-piece BPE, 5% held out for validation. Models: \
$(for s in s m l; do printf '`model-%s.json` %s; ' $s "$(tr -d '\n' < $here/model-$s.json)"; done) \
each trained $STEPS steps of $BATCH x $SEQ tokens, AdamW, lr $LR (warmup $((STEPS / 10)), cosine to lr/10), \
seed 1337; canaries repeated R = $R times; Goldfish: \`--goldfish k=4,h=13,mode=hash\`."
echo "done in $minutes minutes"
