#!/usr/bin/env bash
# Writes docs/options.md: every command's options as `dendrite CMD --help`
# explains them, so that the page the README links cannot miss one.
#   scripts/options_doc.sh [--check] [DENDRITE]   (DENDRITE: default build/dendrite)
# --check compares instead of writing, and fails naming the fix when the page
# differs from what the binary says (the test suite runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
bin="${1:-build/dendrite}"
commands=("tokenize" "train" "generate" "memorization" "score" "export" "plan" "calibrate"
          "bench step" "bench generate")
page() {
  echo "# Command-line options"
  echo
  echo "Every option of every \`dendrite\` command, as its \`--help\` prints it. The README shows"
  echo "the commands at work; \`train\`'s options can also come from \`--config FILE.json\` (the"
  echo "long option names without their dashes). This page is written by"
  echo "\`scripts/options_doc.sh\` from the binary, and the test suite checks that it still matches."
  for c in "${commands[@]}"; do
    echo
    echo "## dendrite $c"
    echo
    echo '```'
    # shellcheck disable=SC2086  # "bench step" is two words
    "$bin" $c --help | sed -e 's/[[:space:]]*$//'
    echo '```'
  done
}
if ((check)); then
  if ! diff -u docs/options.md <(page) > /dev/null; then
    diff -u docs/options.md <(page) | head -40 >&2 || true
    echo "options_doc: docs/options.md differs from what $bin --help says; run scripts/options_doc.sh" >&2
    exit 1
  fi
  echo "options_doc: docs/options.md matches $bin's --help of ${#commands[@]} commands"
else
  page > docs/options.md
  echo "options_doc: wrote docs/options.md"
fi
