#!/usr/bin/python3
"""Plots the performance model's weak scaling (`dendrite plan --sweep --json`)
on Frontier, Perlmutter and Alps beside AxoNN's published figures (SC'24):
efficiency relative to 512 GPUs (left) and sustained flop/s in all (right).
Usage: bench/plan_sweep_plot.py [build-dir] [out.png] [extra plan options...]
(default options: --overlap all --recompute; writes docs/plan_sweep.png and
prints the sweep as a Markdown table)."""
import json
import os
import subprocess
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINES = [("frontier", "Frontier (MI250X GCD)", "tab:red"),
            ("perlmutter", "Perlmutter (A100)", "tab:green"),
            ("alps", "Alps (GH200 H100)", "tab:blue")]
# AxoNN, SC'24: Frontier weak-scaling efficiency relative to 512 GCDs, and
# sustained totals (GPUs, PFlop/s).
AXONN_EFF = {"frontier": [(512, 1.0), (8192, 0.883), (16384, 0.790), (32768, 0.535)]}
AXONN_TOTAL = {"frontier": (32768, 1381.0), "perlmutter": (4096, 620.1), "alps": (6144, 1423.0)}


def sweep(binary, machine, extra):
    cmd = [binary, "plan", "--sweep", "--json", "--machine",
           os.path.join(ROOT, "machines", machine + ".json")] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    png = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "plan_sweep.png")
    extra = sys.argv[3:] or ["--overlap", "all", "--recompute"]
    fig, (ax_eff, ax_tot) = plt.subplots(1, 2, figsize=(12, 4.8))
    print("| machine | GPUs | params | best grid | step s | TF/s per GPU | PF/s total | efficiency |")
    print("|---|---|---|---|---|---|---|---|")
    for name, label, color in MACHINES:
        j = sweep(os.path.join(build, "dendrite"), name, extra)
        pts = [p for p in j["points"] if p["feasible"]]
        for p in j["points"]:
            if not p["feasible"]:
                print(f"| {name} | {p['gpus']} | {p['params'] / 1e9:.0f}B | no grid fits | | | | |")
                continue
            print(f"| {name} | {p['gpus']} | {p['params'] / 1e9:.0f}B | {p['grid']} | "
                  f"{p['step_s']:.2f} | {p['flops_per_gpu'] / 1e12:.1f} | "
                  f"{p['flops_total'] / 1e15:.1f} | {100 * p['efficiency']:.1f}% |")
        g = [p["gpus"] for p in pts]
        ax_eff.plot(g, [100 * p["efficiency"] for p in pts], "o-", color=color,
                    label=f"{label}, model")
        ax_tot.plot(g, [p["flops_total"] / 1e15 for p in pts], "o-", color=color,
                    label=f"{label}, model")
        if name in AXONN_EFF:
            ax_eff.plot([a for a, _ in AXONN_EFF[name]], [100 * e for _, e in AXONN_EFF[name]],
                        "s--", color=color, mfc="white", label=f"{label}, AxoNN SC'24")
        gpus, pf = AXONN_TOTAL[name]
        ax_tot.plot([gpus], [pf], "*", color=color, markersize=14,
                    label=f"{label}, AxoNN SC'24")
    for ax in (ax_eff, ax_tot):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs (GCDs on Frontier)")
        ax.grid(True, alpha=0.3)
    ax_eff.set_ylabel("weak-scaling efficiency vs 512 (%)")
    ax_eff.set_ylim(0, 110)
    ax_tot.set_yscale("log")
    ax_tot.set_ylabel("sustained PFlop/s (model flops)")
    ax_eff.legend(fontsize=7)
    ax_tot.legend(fontsize=7)
    fig.suptitle("Dendrite's performance model, weak scaling (5B at 512 GPUs to 310B at 32,768; "
                 f"B=2048 x T=2048; {' '.join(extra)})", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"\nwrote {png}")


if __name__ == "__main__":
    main()
