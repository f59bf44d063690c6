#!/usr/bin/python3
"""Makes canaries.txt and control.txt of the memorization experiment: passages
the King James Bible lacks, from Debian's fortunes-min (fortune files) and
jargon-text (the Jargon File), 100-160 characters (about 30-50 tokens with the experiment's tokenizer) each, alternately assigned
to the canaries (inserted into the training data) and the control (never
trained on). Passages are separated by lines holding only '%' (the format
`dendrite tokenize --canaries` reads). The committed files came from this
script; rerunning it needs `apt-get install fortunes-min jargon-text`.

Usage: /usr/bin/python3 experiments/memorization/make_canaries.py [N_EACH]
"""
import gzip
import os
import sys

ASCII = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2014": "--",
         "\u00b7": "", "\u2013": "-", "\u2026": "..."}


def clean(text):
    for a, b in ASCII.items():
        text = text.replace(a, b)
    return text.encode("ascii", "ignore").decode()


def usable(p):
    lines = p.split("\n")
    return 100 <= len(p) <= 160 and all(l.strip() and l.strip() != "%" for l in lines)


def fortunes():
    out = []
    for name in ["fortunes", "literature", "riddles"]:
        with open(f"/usr/share/games/fortunes/{name}", encoding="utf-8", errors="replace") as f:
            out += [clean(p.strip("\n")) for p in f.read().split("\n%\n")]
    return [p for p in out if usable(p)]


def jargon():
    with gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8") as f:
        text = f.read()
    paras = []
    for block in text.split("\n\n"):
        lines = [l.strip() for l in block.strip("\n").split("\n")]
        p = clean("\n".join(lines))
        if not p.startswith(":") and not p.startswith("[") and usable(p):
            paras.append(p)
    return paras[::5]  # spread over the whole alphabet


def main():
    n_each = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    ps = fortunes()
    ps = ps + jargon()
    canaries, control = ps[0::2][:n_each], ps[1::2][:n_each]
    here = os.path.dirname(os.path.abspath(__file__))
    for name, items in [("canaries.txt", canaries), ("control.txt", control)]:
        with open(os.path.join(here, name), "w") as f:
            f.write("\n%\n".join(items) + "\n")
        print(f"wrote {len(items)} passages to {name}")


if __name__ == "__main__":
    main()
