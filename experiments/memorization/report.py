#!/usr/bin/python3
"""Writes docs/memorization.md and docs/memorization.png from the runs of
experiments/memorization/run.sh (the dose experiment): for each model size and
loss, pooled over the seeds, verbatim memorization of the canaries by their
number of copies in train.bin (exact match with Wilson intervals, ROUGE-L with
normal intervals), beside the control passages (never trained on) and
training text that holds no canary; the validation loss and the share of
target tokens in the loss ("supervised") of each run.

Usage: /usr/bin/python3 experiments/memorization/report.py RUNS_DIR OUT.md OUT.png
           --minutes M --command "..." [--settings "..."] [--sizes "s m l"] [--seeds "1 2"]
"""
import argparse
import json
import math
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIZE_NAMES = {"s": "small", "m": "medium", "l": "large"}
LOSSES = [("standard", "standard"), ("goldfish", "Goldfish k=4")]
Z = 1.96


def load_run(folder):
    params = None
    with open(os.path.join(folder, "train.log")) as f:
        for line in f:
            m = re.search(r"model \w+: ([0-9.]+)M parameters", line)
            if m:
                params = float(m.group(1)) * 1e6
    val, supervised = None, []
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if "val_loss" in rec:
                val = rec["val_loss"]
            supervised.append(rec.get("supervised", 1.0))
    with open(os.path.join(folder, "memorization.json")) as f:
        mem = json.load(f)
    return {"params": params, "val": val, "mem": mem,
            "supervised": sum(supervised) / max(len(supervised), 1)}


def wilson(k, n):
    if n == 0:
        return 0.0, 0.0, 0.0
    p = k / n
    d = 1 + Z * Z / n
    c = (p + Z * Z / (2 * n)) / d
    h = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / d
    return p, max(0.0, c - h), min(1.0, c + h)


def pool_rate(sets):
    """Exact match over several runs' sets of one kind: successes add up."""
    k = sum(round(s["exact_match"]["value"] * s["n"]) for s in sets)
    n = sum(s["n"] for s in sets)
    return wilson(k, n), n


def pool_mean(sets, key):
    """The mean over every sample of several runs' sets, and its normal interval:
    each set's standard deviation recovered from its interval (mean +- z sd / sqrt(n))."""
    n = sum(s["n"] for s in sets)
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = sum(s[key]["value"] * s["n"] for s in sets) / n
    ss = 0.0
    for s in sets:
        iv, m = s[key], s["n"]
        sd = (iv["hi"] - iv["lo"]) / (2 * Z) * math.sqrt(m) if m > 0 else 0.0
        # clamping to [0, 1] shrinks an interval; the wider half is the closer estimate
        sd = max(sd, max(iv["hi"] - iv["value"], iv["value"] - iv["lo"]) / Z * math.sqrt(m))
        ss += (m - 1) * sd * sd + m * (iv["value"] - mean) ** 2
    sd = math.sqrt(ss / max(n - 1, 1))
    h = Z * sd / math.sqrt(n)
    return mean, max(0.0, mean - h), min(1.0, mean + h)


def fmt(v):
    return f"{v[0]:.3f} [{v[1]:.2f}, {v[2]:.2f}]"


def doses(mem):
    out = []
    for key in mem:
        m = re.fullmatch(r"canaries x(\d+)", key)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("md")
    ap.add_argument("png")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--command", default="experiments/memorization/run.sh")
    ap.add_argument("--settings", default="")
    ap.add_argument("--sizes", default="s m l")
    ap.add_argument("--seeds", default="1 2")
    ap.add_argument("--notes", default="", help="Markdown appended under Notes (how this page was made)")
    a = ap.parse_args()
    sizes, seeds = a.sizes.split(), a.seeds.split()

    runs = {}
    for size in sizes:
        for loss, _ in LOSSES:
            for seed in seeds:
                folder = os.path.join(a.runs, f"{size}-{loss}-seed{seed}")
                if os.path.exists(os.path.join(folder, "memorization.json")):
                    runs[(size, loss, seed)] = load_run(folder)
    if not runs:
        raise SystemExit(f"report.py: no runs with memorization.json under {a.runs}")
    ds = doses(next(iter(runs.values()))["mem"])
    tokenize_log = os.path.join(a.runs, "tokenize.log")
    share = ""
    if os.path.exists(tokenize_log):
        m = re.search(r"\((\d+) copies, (\d+) tokens, ([0-9.]+)% of the training tokens",
                      open(tokenize_log).read())
        if m:
            share = (f"The canaries are {m.group(1)} copies, {m.group(2)} tokens: {m.group(3)}% of "
                     "the training tokens. ")

    # Pooled figures per (size, loss).
    pooled = {}
    for size in sizes:
        for loss, _ in LOSSES:
            rs = [runs[(size, loss, s)] for s in seeds if (size, loss, s) in runs]
            if not rs:
                continue
            p = {"params": rs[0]["params"], "n_runs": len(rs),
                 "val": sum(r["val"] for r in rs) / len(rs),
                 "vals": [r["val"] for r in rs],
                 "supervised": sum(r["supervised"] for r in rs) / len(rs)}
            for kind in ["canaries", "control", "train"] + [f"canaries x{d}" for d in ds]:
                sets = [r["mem"][kind] for r in rs if kind in r["mem"]]
                p[kind] = {"exact": pool_rate(sets)[0], "n": sum(s["n"] for s in sets),
                           "token": pool_mean(sets, "token_match"),
                           "rouge": pool_mean(sets, "rouge_l")}
            pooled[(size, loss)] = p

    lines = ["# Memorization: how it grows with copies and model size, and what Goldfish leaves", ""]
    lines.append(f"Made by `{a.command}` in {a.minutes:.1f} minutes on a 2-core machine; "
                 "`experiments/memorization/report.py` wrote this page and `docs/memorization.png` "
                 "from the runs.")
    lines += ["", "## Set-up", "", a.settings, ""]
    lines.append(
        share + "Each distinct canary is scored once per run: its first 16 tokens are the prompt, "
        "the rest of it (up to 32 tokens) is decoded greedily and compared with the true tokens. "
        "Exact match is the "
        "fraction of canaries whose whole continuation is right (95% Wilson interval over the "
        f"canaries of all {len(seeds)} seeds); ROUGE-L is the mean F1 of the longest common token "
        "subsequence (95% normal interval). Control: the passages of `control.txt`, never trained "
        "on. Train: 48 seeded windows of 48 tokens of `train.bin` that touch no canary copy "
        "(text that occurs once). \"supervised\" is the mean share of target tokens in the training loss.")
    def dose_table(title, metric):
        head = "| model | params | loss | " + " | ".join(f"x{d}" for d in ds) + " | control | train |"
        out = ["", title, "", head, "|" + "---|" * (head.count("|") - 1)]
        for (size, loss), p in pooled.items():
            cells = [fmt(p[f"canaries x{d}"][metric]) for d in ds]
            out.append(f"| {SIZE_NAMES.get(size, size)} | {p['params'] / 1e6:.1f}M | {dict(LOSSES)[loss]} | "
                       + " | ".join(cells) + f" | {fmt(p['control'][metric])} | {fmt(p['train'][metric])} |")
        return out

    lines += dose_table("## Exact match by copies in the training data", "exact")
    n_dose = next(iter(pooled.values()))[f"canaries x{ds[0]}"]["n"] if ds else 0
    lines += ["", f"(n = {n_dose} canaries per copy count and model: {n_dose // max(len(seeds), 1)} "
                  f"passages x {len(seeds)} seeds.)"]
    lines += dose_table("## ROUGE-L by copies in the training data", "rouge")
    lines += ["", "![exact match and ROUGE-L against copies](memorization.png)", ""]
    lines += ["## Runs", ""]
    head2 = "| model | loss | seed | supervised | val loss | canaries exact match | canaries ROUGE-L |"
    lines += [head2, "|" + "---|" * (head2.count("|") - 1)]
    for (size, loss, seed), r in sorted(runs.items()):
        c = r["mem"]["canaries"]
        lines.append(f"| {SIZE_NAMES.get(size, size)} | {dict(LOSSES)[loss]} | {seed} | "
                     f"{r['supervised']:.3f} | {r['val']:.4f} | "
                     f"{c['exact_match']['value']:.3f} | {c['rouge_l']['value']:.3f} |")

    # What the figures say, computed (not asserted).
    lines += ["", "## Reading", ""]
    std = {s: pooled[(s, "standard")] for s in sizes if (s, "standard") in pooled}
    gold = {s: pooled[(s, "goldfish")] for s in sizes if (s, "goldfish") in pooled}
    for s, p in std.items():
        em = [p[f"canaries x{d}"]["exact"][0] for d in ds]
        rises = all(b >= a for a, b in zip(em, em[1:]))
        lines.append(f"- Standard loss, {SIZE_NAMES.get(s, s)} model: exact match by copies "
                     + ", ".join(f"x{d} {v:.2f}" for d, v in zip(ds, em))
                     + (" (never falls as copies grow)." if rises else " (not monotone in copies)."))
    if len(std) > 1 and ds:
        top = f"canaries x{ds[-1]}"
        order = [(s, std[s][top]["exact"][0]) for s in sizes if s in std]
        rises = all(b[1] >= a[1] for a, b in zip(order, order[1:]))
        lines.append(f"- Standard loss at x{ds[-1]}: exact match by size "
                     + ", ".join(f"{SIZE_NAMES.get(s, s)} {v:.2f}" for s, v in order)
                     + (" (grows with size)." if rises else " (does not grow with size at every step)."))
    for s, p in gold.items():
        em = [p[f"canaries x{d}"]["exact"] for d in ds]
        lines.append(f"- Goldfish, {SIZE_NAMES.get(s, s)} model: exact match at most "
                     f"{max(v[0] for v in em):.2f} at any copy count (upper 95% bound "
                     f"{max(v[2] for v in em):.2f}); the standard loss's largest is "
                     f"{max(std[s][f'canaries x{d}']['exact'][0] for d in ds):.2f}." if s in std else "")
        if s in std:
            dv = (p["val"] - std[s]["val"]) / std[s]["val"]
            lines.append(f"  Validation loss {p['val']:.4f} against {std[s]['val']:.4f} "
                         f"({100 * dv:+.1f}%), training on {100 * p['supervised']:.0f}% of the targets.")
    lines += ["", "## Notes", ""]
    lines.append("- Exposures: each run passes over `train.bin` about STEPS x BATCH x SEQ / (its "
                 "tokens) times (see Set-up), so a canary of N copies comes by about that many times N. "
                 "Exact match asks for the whole rest of the passage (up to 32 tokens) verbatim; "
                 "ROUGE-L shows how much of it the model reproduces short of that.")
    if a.notes:
        lines.append(a.notes)
    lines.append("")
    with open(a.md, "w") as f:
        f.write("\n".join(lines))

    # The plot: exact match and ROUGE-L against copies, per size, standard and Goldfish.
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"s": "tab:blue", "m": "tab:orange", "l": "tab:red"}
    for ax, metric, title in [(axes[0], "exact", "exact match"), (axes[1], "rouge", "ROUGE-L")]:
        for (size, loss), p in pooled.items():
            ys = [p[f"canaries x{d}"][metric] for d in ds]
            mid = [y[0] for y in ys]
            err = [[y[0] - y[1] for y in ys], [y[2] - y[0] for y in ys]]
            shift = 1.04 if loss == "goldfish" else 1.0
            ax.errorbar([d * shift for d in ds], mid, yerr=err, marker="o" if loss == "standard" else "s",
                        linestyle="-" if loss == "standard" else "--", color=colors.get(size, "k"),
                        capsize=3, label=f"{SIZE_NAMES.get(size, size)} ({p['params'] / 1e6:.0f}M), "
                                         f"{dict(LOSSES)[loss]}")
        ctrl = [p["control"][metric][0] for p in pooled.values()]
        ax.axhspan(min(ctrl), max(ctrl), color="0.85", label="control (never trained on)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ds)
        ax.set_xticklabels([str(d) for d in ds])
        ax.set_xlabel("copies of the canary in train.bin")
        ax.set_ylabel(title)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Memorization of canaries against their copies in the training data (95% intervals)")
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
