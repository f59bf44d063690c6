#!/usr/bin/python3
"""Writes docs/memorization.md and docs/memorization.png from the runs of
experiments/memorization/run.sh: for each model size and loss, the parameter
count (from the training log), the final validation loss (metrics.jsonl), and
the figures of `dendrite memorization --json` (memorization.json).

Usage: /usr/bin/python3 experiments/memorization/report.py RUNS_DIR OUT.md OUT.png
           --minutes M --command "..." [--settings "..."]
"""
import argparse
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIZES = [("s", "small"), ("m", "medium"), ("l", "large")]
LOSSES = [("standard", "standard"), ("goldfish", "Goldfish k=4")]


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


def fmt(iv):
    return f"{iv['value']:.3f} [{iv['lo']:.2f}, {iv['hi']:.2f}]"


def table(runs):
    head = ("| model | params | loss | supervised | val loss | canary exact match | canary token match "
            "| canary ROUGE-L | control exact match | control token match | control ROUGE-L "
            "| train exact match | train token match |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for key, size in SIZES:
        for loss, loss_name in LOSSES:
            r = runs.get((key, loss))
            if not r:
                continue
            m = r["mem"]
            rows.append(f"| {size} | {r['params'] / 1e6:.2f}M | {loss_name} | {r['supervised']:.3f} "
                        f"| {r['val']:.4f} | {fmt(m['canaries']['exact_match'])} "
                        f"| {fmt(m['canaries']['token_match'])} | {fmt(m['canaries']['rouge_l'])} "
                        f"| {fmt(m['control']['exact_match'])} | {fmt(m['control']['token_match'])} "
                        f"| {fmt(m['control']['rouge_l'])} | {fmt(m['train']['exact_match'])} "
                        f"| {fmt(m['train']['token_match'])} |")
    return "\n".join(rows)


def targets(runs):
    lines = []
    std = [runs[(k, "standard")]["mem"]["canaries"]["exact_match"]["value"] for k, _ in SIZES]
    grows = all(a < b for a, b in zip(std, std[1:]))
    grows_weakly = all(a <= b for a, b in zip(std, std[1:])) and std[-1] > std[0]
    verdict = "met" if grows else ("met weakly (non-decreasing)" if grows_weakly else "missed")
    lines.append(f"- Standard loss, canary exact match grows with model size: "
                 f"{' < '.join(f'{v:.3f}' for v in std)} — **{verdict}**.")
    ls, lg = runs[("l", "standard")], runs[("l", "goldfish")]
    es, eg = (ls["mem"]["canaries"]["exact_match"]["value"], lg["mem"]["canaries"]["exact_match"]["value"])
    ok = eg <= es / 5 and es > 0
    lines.append(f"- Largest model, Goldfish canary exact match at most 1/5 of the standard loss's: "
                 f"{eg:.3f} vs {es:.3f} (limit {es / 5:.3f}) — **{'met' if ok else 'missed'}**.")
    rel = (lg["val"] - ls["val"]) / ls["val"]
    lines.append(f"- ... at a validation loss within 5% of it: {lg['val']:.4f} vs {ls['val']:.4f} "
                 f"({100 * rel:+.1f}%) — **{'met' if abs(rel) <= 0.05 else 'missed'}**.")
    return "\n".join(lines)


def plot(runs, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    ax2 = ax.twinx()
    colors = {"standard": "tab:blue", "goldfish": "tab:orange"}
    for loss, name in LOSSES:
        xs = [runs[(k, loss)]["params"] for k, _ in SIZES]
        iv = [runs[(k, loss)]["mem"]["canaries"]["exact_match"] for k, _ in SIZES]
        ys = [i["value"] for i in iv]
        err = [[y - i["lo"] for y, i in zip(ys, iv)], [i["hi"] - y for y, i in zip(ys, iv)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=4, color=colors[loss],
                    label=f"canary exact match, {name}")
        ax2.plot(xs, [runs[(k, loss)]["val"] for k, _ in SIZES], "--s", color=colors[loss], alpha=0.6,
                 label=f"validation loss, {name}")
    ax.set_xscale("log")
    ax.set_xlabel("parameters")
    ax.set_ylabel("canary exact-match rate (95% Wilson interval)")
    ax.set_ylim(-0.02, 1.02)
    ax2.set_ylabel("validation loss (dashed)")
    ax.grid(alpha=0.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    ax.set_title("Verbatim memorization of canaries: standard loss vs Goldfish (k=4, h=13)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("md")
    ap.add_argument("png")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--command", default="experiments/memorization/run.sh")
    ap.add_argument("--settings", default="")
    a = ap.parse_args()
    runs = {}
    for key, _ in SIZES:
        for loss, _ in LOSSES:
            folder = os.path.join(a.runs, f"{key}-{loss}")
            if os.path.exists(os.path.join(folder, "memorization.json")):
                runs[(key, loss)] = load_run(folder)
    plot(runs, a.png)
    m0 = runs[("l", "standard")]["mem"]
    text = f"""# Memorization: standard loss vs Goldfish loss

Made by `{a.command}` in {a.minutes:.1f} minutes on a 2-core machine shared with other jobs;
`experiments/memorization/report.py` wrote this page and `docs/memorization.png` from the runs.

## Set-up

{a.settings}

Canaries: the {m0['canaries']['n']} passages of `experiments/memorization/canaries.txt` (fortunes
and Jargon File paragraphs, text the Bible lacks), each inserted R times into `train.bin` by
`dendrite tokenize --canaries` (never into `val.bin`). Control: the {m0['control']['n']} passages of
`experiments/memorization/control.txt`, from the same sources, never trained on. Train:
{m0['train']['n']} samples at seeded offsets of `train.bin` (mostly Genesis text, which occurs once
in `train.bin` where each canary occurs R times). Each sample is scored once: the first {m0['prefix']} tokens are the
prompt, {m0['suffix']} tokens are decoded greedily and compared with the true ones (canaries: each
distinct canary once, since all its copies hold the same tokens). Exact match is the fraction of
samples whose whole continuation is right (95% Wilson interval); token match is the mean fraction
of positions that are right and ROUGE-L the mean F1 of the longest common token subsequence (95%
normal intervals). "supervised" is the mean fraction of target tokens in the training loss.

## Results

{table(runs)}

![canary exact match vs model size](memorization.png)

## Targets

{targets(runs)}
"""
    with open(a.md, "w") as f:
        f.write(text)
    print(f"wrote {a.md} and {a.png}")


if __name__ == "__main__":
    main()
