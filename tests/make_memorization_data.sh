#!/usr/bin/env bash
# The ctest fixture memorization_data, for memorization_cli_test, once per
# test run: a passage repeated 300 times, tokenized with a vocabulary of 300
# (data/) and again with two canaries put in three times each
# (canary-data/); a control text; and a tiny GPT-2 trained on data/ for 200
# steps (run/), which learns the passage by heart.
#   tests/make_memorization_data.sh DENDRITE_BINARY FOLDER
set -euo pipefail
dendrite="$1" out="$2"
export OMP_NUM_THREADS=1  # a tiny model: one thread is the fastest on a busy machine
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
cd "$out.tmp"
passage="The quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire, \
and seven bold wizards quietly hex the jumping frogs before dawn breaks over the hills."
for _ in $(seq 300); do echo "$passage"; done > text.txt
printf 'Zebras eat kiwis.\n%%\nA xylophone plays jazz quietly.\n' > canaries.txt
echo "Violet mushrooms grow under ancient oak trees beside a quiet river bank every spring \
while owls hoot softly and foxes wander past the old stone bridge at night." > control.txt
echo '{"arch": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 32}' > tiny.json
"$dendrite" tokenize --input text.txt --vocab-size 300 --out data > tokenize.log
"$dendrite" tokenize --input text.txt --vocab-size 300 --out canary-data --canaries canaries.txt \
  --canary-repeat 3 > tokenize-canaries.log
"$dendrite" train --model tiny.json --data data --steps 200 --batch 8 --seq 32 --lr 1e-2 \
  --warmup 10 --eval-every 0 --out run > train.log
cd - > /dev/null
rm -rf "$out" && mv "$out.tmp" "$out"
