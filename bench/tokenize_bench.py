#!/opt/hfref-venv/bin/python
"""Tokens per second of `dendrite tokenize --tokenizer DIR` beside the Hugging Face
`tokenizers` library's batch encoder (all cores), on the same text, for GPT-2's
tokenizer (tests/data/hf/bpe, Dendrite's ByteLevelBpe) and the Llama-3-style one
(tests/data/hf/tokenizers/llama3, HfTokenizer), or the folders given.

The text: the whole KJV Bible (Debian bible-kjv, `bible -f Gen1:1-Rev22:21`, verse
references stripped) and the Jargon File (jargon-text), repeated to --mb megabytes
(default 64), one file. First the check: the ids `dendrite tokenize` writes for a
1 MB prefix of the text equal the library's encode(prefix, add_special_tokens=False)
(after the BOS Dendrite puts before a document). Then the timings: dendrite's
whole run (reading, encoding, writing train.bin) against the library's
encode_batch(documents, add_special_tokens=False) over the text cut into documents
of about 64 KB at line ends (RAYON_NUM_THREADS unset: every core), best of --repeat.
Dendrite's count includes the BOS it puts before the file (Llama 3 style).

  bench/tokenize_bench.py [--mb 64] [--repeat 2] [--dendrite build/dendrite] [DIR ...]

Prints, per tokenizer: tokens, seconds and tokens/s of each, with the machine and
the commit. Needs the venv of scripts/make_tokenizer_reference.py.
"""
import argparse
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIRS = [os.path.join(ROOT, "tests/data/hf/bpe"),
                os.path.join(ROOT, "tests/data/hf/tokenizers/llama3")]


def corpus_text(megabytes):
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True, encoding="utf-8").stdout
    bible = "\n".join(re.sub(r"^\S+?\d+:\d+ ", "", line) for line in out.splitlines())
    with gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8") as f:
        base = bible + "\n\n" + f.read()
    reps = max(1, megabytes * (1 << 20) // len(base.encode()))
    return "\n\n".join([base] * reps)


def documents(text, size=1 << 16):
    docs, start = [], 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        docs.append(text[start:end])
        start = end
    return docs


def run_dendrite(binary, tok_dir, path, out):
    t0 = time.perf_counter()
    subprocess.run([binary, "tokenize", "--tokenizer", tok_dir, "--input", path, "--out", out,
                    "--val-fraction", "0"], check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    return meta, seconds


def read_ids(out):
    """train.bin (io/token_file.h): a 24-byte header (magic, version, width, count), the ids."""
    import numpy as np
    raw = open(os.path.join(out, "train.bin"), "rb").read()
    width = int.from_bytes(raw[12:16], "little")
    count = int.from_bytes(raw[16:24], "little")
    dtype = np.uint16 if width == 2 else np.int32
    return np.frombuffer(raw[24:24 + width * count], dtype=dtype).astype(int).tolist()


def check(binary, tok_dir, text, tmp):
    prefix = text[: 1 << 20]
    path = os.path.join(tmp, "prefix.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(prefix)
    out = os.path.join(tmp, "check")
    meta, _ = run_dendrite(binary, tok_dir, path, out)
    got = read_ids(out)[len(meta.get("bos_ids", [])):]
    want = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json")).encode(
        prefix, add_special_tokens=False).ids
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        sys.exit(f"tokenize_bench: {tok_dir}: ids differ from the library's at token {first} "
                 f"({len(got)} against {len(want)} tokens)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*", default=DEFAULT_DIRS)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dendrite", default=os.path.join(ROOT, "build/dendrite"))
    args = ap.parse_args()
    text = corpus_text(args.mb)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if "model name" in l), "?")
    print(f"tokenize_bench: {len(text.encode()) / 2**20:.0f} MB of text; {os.cpu_count()} cores "
          f"({cpu}), {platform.node()}, commit {commit}, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "text.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        docs = documents(text)
        for tok_dir in args.dirs:
            name = os.path.relpath(tok_dir, ROOT)
            check(args.dendrite, tok_dir, text, tmp)
            best_d = best_h = float("inf")
            for _ in range(args.repeat):
                meta, secs = run_dendrite(args.dendrite, tok_dir, path, os.path.join(tmp, "out"))
                best_d = min(best_d, secs)
                tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
                t0 = time.perf_counter()
                enc = tok.encode_batch(docs, add_special_tokens=False)
                best_h = min(best_h, time.perf_counter() - t0)
            n_d = meta["train_tokens"]
            n_h = sum(len(e.ids) for e in enc)
            print(f"{name}: ids checked on 1 MB; dendrite tokenize {n_d} tokens in {best_d:.2f} s = "
                  f"{n_d / best_d / 1e6:.2f} M tokens/s (whole run); tokenizers "
                  f"{tokenizers_version()} encode_batch {n_h} tokens in {best_h:.2f} s = "
                  f"{n_h / best_h / 1e6:.2f} M tokens/s")


def tokenizers_version():
    import tokenizers
    return tokenizers.__version__


if __name__ == "__main__":
    main()
