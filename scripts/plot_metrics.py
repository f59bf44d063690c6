#!/usr/bin/python3
"""Plot a training run from the metrics file written by `dendrite train --metrics FILE`.

The file is JSON Lines: one object per step with "step", "loss", "lr", "grad_norm",
"tokens_per_s", "step_ms", "mfu", and "val_loss" on the steps where validation ran.
Writes a PNG with two panels: train and validation loss against step (top), and
tokens/s against step (bottom).

Usage: /usr/bin/python3 scripts/plot_metrics.py METRICS.jsonl OUT.png [--title T]
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def read_metrics(path):
    """Returns the list of records; a blank line is skipped, a malformed one is an error."""
    records = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_metrics: {path}:{lineno}: not a JSON object ({e}); "
                         "pass the file written by `dendrite train --metrics`")
            if not isinstance(rec, dict) or "step" not in rec:
                sys.exit(f"plot_metrics: {path}:{lineno}: record has no \"step\" field")
            records.append(rec)
    if not records:
        sys.exit(f"plot_metrics: {path} holds no records; did the run write any steps?")
    return records


def series(records, key):
    """(steps, values) for the records that carry `key` with a number."""
    pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot(records, out, title):
    fig, (ax_loss, ax_speed) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                            gridspec_kw={"height_ratios": [2, 1]})
    steps, loss = series(records, "loss")
    ax_loss.plot(steps, loss, lw=1, color="tab:blue", label="train loss")
    vsteps, vloss = series(records, "val_loss")
    if vsteps:
        ax_loss.plot(vsteps, vloss, "o-", ms=4, lw=1.5, color="tab:orange", label="val loss")
    ax_loss.set_ylabel("loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    if title:
        ax_loss.set_title(title)

    tsteps, tps = series(records, "tokens_per_s")
    ax_speed.plot(tsteps, tps, lw=1, color="tab:green")
    ax_speed.set_ylabel("tokens/s")
    ax_speed.set_xlabel("step")
    ax_speed.set_ylim(bottom=0)
    ax_speed.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description="Plot loss and tokens/s from a Dendrite metrics file.")
    ap.add_argument("metrics", help="JSON Lines file from `dendrite train --metrics`")
    ap.add_argument("out", help="PNG to write")
    ap.add_argument("--title", default="", help="figure title")
    args = ap.parse_args()
    plot(read_metrics(args.metrics), args.out, args.title)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
