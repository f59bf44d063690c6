#!/usr/bin/env bash
# Dendrite against PyTorch 1.13 on the same model and settings, side by side:
# GPT-2 124M training steps (forward, backward, clipping, AdamW), fp32.
#   bench/compare_pytorch.sh [BATCH] [SEQ] [THREADS]      (defaults 4 64 2)
# Needs `scripts/setup.sh --torch` (PyTorch and the OpenMP build of OpenBLAS).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-4} T=${2:-64} N=${3:-2}
scripts/build.sh >/dev/null
ours=$(OMP_NUM_THREADS=$N build/dendrite bench step --model gpt2-124m --batch "$B" --seq "$T" --threads "$N" --steps 5 --json)
theirs=$(OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=$N /usr/bin/python3 bench/pytorch_step.py --batch "$B" --seq "$T" --threads "$N" --steps 5)
echo "dendrite: $ours"
echo "pytorch:  $theirs"
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"tokens/s: dendrite {a['tokens_per_s']:.1f}, pytorch {b['tokens_per_s']:.1f}, "
      f"ratio {a['tokens_per_s'] / b['tokens_per_s']:.2f}x; dendrite MFU {100 * a['mfu']:.1f}% "
      f"of {a['peak_gflops']:.0f} GFLOP/s, peak RSS {a['peak_rss_mb']:.0f} MB")
PY
