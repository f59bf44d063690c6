#!/usr/bin/env bash
# The ctest fixture test_data: Genesis and Exodus of the King James Bible
# (Debian's bible-kjv) as text and tokenized with a vocabulary of 512, once
# per test run, for the command-line tests (cli_support.h: book_data).
#   tests/make_test_data.sh DENDRITE_BINARY FOLDER
set -euo pipefail
dendrite="$1" out="$2"
command -v bible >/dev/null || {
  echo "the \`bible\` command (Debian's bible-kjv) is needed: run scripts/setup.sh" >&2
  exit 1
}
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
bible -l10000 'Gen1:1-Gen50:26' > "$out.tmp/genesis.txt"
bible -l10000 'Exo1:1-Exo40:38' > "$out.tmp/exodus.txt"
for book in genesis exodus; do
  "$dendrite" tokenize --input "$out.tmp/$book.txt" --vocab-size 512 --out "$out.tmp/$book" \
    > /dev/null
done
rm -rf "$out" && mv "$out.tmp" "$out"
