#!/usr/bin/env bash
# The memorization dose experiment (DESIGN.md section 7): how verbatim
# memorization grows with the number of copies of a passage in the training
# data and with model size, and what Goldfish loss leaves of it.
#  - Corpus: Genesis to Ruth (King James Bible, Debian's bible-kjv), a
#    2048-piece BPE, 2% held out for validation.
#  - Canaries: the 24 passages of canaries.txt (short fortunes and Jargon File
#    paragraphs, text the Bible lacks; 42-75 tokens), 4 each inserted 1, 2, 4,
#    8, 16 and 32 times into train.bin (`tokenize --canary-repeat
#    1,2,4,8,16,32`): 252 copies, under 5% of the training tokens. Control: the
#    24 passages of control.txt, never trained on.
#  - Models: GPT-2 shapes of about 3.7M, 15M and 65M parameters
#    (model-s/m/l.json), each trained with 2 seeds (initialisation and batch
#    order), with the standard loss and with Goldfish k=4 (h=13, hash): 12 runs
#    of STEPS x BATCH x SEQ tokens (default 400 x 16 x 128 = 0.82M, about 2.7
#    epochs), bf16 GEMMs.
#  - Each run is scored by `dendrite memorization` (prompt 16 tokens, then up
#    to 32 decoded greedily, to the passage's end): all canaries, each copy
#    count, the control, and training text that holds no canary.
# Writes docs/memorization.md and docs/memorization.png (report.py). Two runs
# train side by side, one thread each.
#   experiments/memorization/run.sh                      # about 50 minutes on 2 cores
#   STEPS=40 OUT=runs/mem-quick DOCS=/tmp/mem-docs experiments/memorization/run.sh   # a quick try
set -euo pipefail
cd "$(dirname "$0")/../.."
here=experiments/memorization
OUT=${OUT:-runs/memorization}
STEPS=${STEPS:-400}    # optimizer steps per run
BATCH=${BATCH:-16}     # sequences per step
SEQ=${SEQ:-128}        # tokens per sequence
LRS=${LRS:-s:2e-3 m:2e-3 l:6e-4}  # peak learning rate per size (wider models take a smaller one)
REPEATS=${REPEATS:-1,2,4,8,16,32}
SEEDS=${SEEDS:-1 2}
SIZES=${SIZES:-s m l}
PRECISION=${PRECISION:-bf16}
SAMPLES=${SAMPLES:-48} # training samples scored
DOCS=${DOCS:-docs}
[[ -x build/dendrite ]] || scripts/build.sh
command -v bible > /dev/null || { echo "run.sh: needs bible-kjv (apt-get install bible-kjv)" >&2; exit 1; }
start=$(date +%s)
mkdir -p "$OUT"
bible -l10000 "Gen1:1-Rut4:22" > "$OUT/genesis-ruth.txt"
build/dendrite tokenize --input "$OUT/genesis-ruth.txt" --vocab-size 2048 --val-fraction 0.02 \
  --out "$OUT/data" --canaries $here/canaries.txt --canary-repeat "$REPEATS" | tee "$OUT/tokenize.log"

lr_of() {  # size
  local item
  for item in $LRS; do [[ ${item%%:*} == "$1" ]] && { echo "${item#*:}"; return; }; done
  echo "run.sh: no learning rate for size $1 in LRS='$LRS'" >&2
  exit 1
}

train() {  # size loss seed extra-options...
  local size=$1 loss=$2 seed=$3 dir="$OUT/$1-$2-seed$3" lr
  lr=$(lr_of "$1")
  shift 3
  mkdir -p "$dir"
  OMP_NUM_THREADS=1 build/dendrite train --model $here/model-$size.json --data "$OUT/data" \
    --steps "$STEPS" --batch "$BATCH" --seq "$SEQ" --lr "$lr" --warmup $((STEPS / 10)) \
    --eval-every $((STEPS / 4)) --log-every $((STEPS / 8)) --threads 1 --seed "$seed" \
    --precision "$PRECISION" --out "$dir" --metrics "$dir/metrics.jsonl" "$@" > "$dir/train.log" 2>&1
  OMP_NUM_THREADS=1 build/dendrite memorization --checkpoint "$dir" --data "$OUT/data" \
    --control $here/control.txt --samples "$SAMPLES" --prefix 16 --suffix 32 --threads 1 \
    --json > "$dir/memorization.json"
  echo "$size $loss seed $seed: $(grep -o 'val [0-9.]*' "$dir/train.log" | tail -1), $(( $(date +%s) - start )) s"
}

for size in $SIZES; do
  for seed in $SEEDS; do
    train $size standard $seed & a=$!
    train $size goldfish $seed --goldfish k=4,h=13,mode=hash & b=$!
    wait $a
    wait $b
  done
done
minutes=$(python3 -c "print(($(date +%s) - $start) / 60)")
mkdir -p "$DOCS"
/usr/bin/python3 $here/report.py "$OUT" "$DOCS/memorization.md" "$DOCS/memorization.png" \
  --minutes "$minutes" --command "experiments/memorization/run.sh" --sizes "$SIZES" --seeds "$SEEDS" \
  --settings "Corpus: Genesis to Ruth (KJV), 2048-piece BPE, 2% held out for validation. Models: \
$(for s in $SIZES; do printf '`model-%s.json` %s; ' $s "$(tr -d '\n' < $here/model-$s.json)"; done) \
each trained $STEPS steps of $BATCH x $SEQ tokens, AdamW, peak lr by size ($LRS; warmup $((STEPS / 10)), cosine to lr/10), \
--precision $PRECISION, seeds $SEEDS; canaries: 24 passages, copies $REPEATS (4 passages each); \
Goldfish: \`--goldfish k=4,h=13,mode=hash\`."
echo "done in $minutes minutes"
