#!/usr/bin/python3
"""Compares the performance model's communication with measurement, per axis,
for the runs bench/validate_comm.sh writes into one folder: for every case and
grid, the predicted time of each axis' collectives (`plan --json`: exposed +
hidden) beside the measured one (`bench step --json`: the collectives' time,
exposed + hidden), the error, and whether the planner's first choice is within
10% of the fastest measured grid of the case. Target: each axis within 30%."""
import glob
import json
import os
import sys

TARGET = 0.30


def measured_axes(bench):
    out = {}
    for axis, kinds in bench.get("comm", {}).items():
        out[axis] = sum(k.get("total_ms", 0.0) for k in kinds.values() if isinstance(k, dict))
    return out


def main(folder):
    rows, verdicts = [], []
    for plan_file in sorted(glob.glob(os.path.join(folder, "plan_*.json"))):
        label = os.path.basename(plan_file)[5:-5]
        plan = json.load(open(plan_file))
        group = []
        for pred in plan["ranked"]:
            path = os.path.join(folder, f"bench_{label}_{pred['grid']}.json")
            if not os.path.exists(path) or os.path.getsize(path) == 0:
                print(f"missing measurement {path}")
                continue
            meas = json.load(open(path))
            m_axes = measured_axes(meas)
            p_axes = {a: pred["comm_ms"].get(a, 0.0) + pred["hidden_ms"].get(a, 0.0)
                      for a in pred["comm_ms"]}
            axes = sorted(set(m_axes) | set(p_axes), key="xyzd".index)
            group.append((label, plan["world"], pred["grid"], pred["step_ms"], meas["step_ms"],
                          [(a, p_axes.get(a, 0.0), m_axes.get(a, 0.0)) for a in axes]))
        rows += group
        if group:
            first = group[0]
            fastest = min(group, key=lambda r: r[4])
            verdicts.append((label, first[2], first[4], fastest[2], fastest[4],
                             first[4] <= 1.10 * fastest[4]))
    print(f"{'case':<7} {'P':>2} {'grid':<16} {'pred ms':>8} {'meas ms':>8}   "
          "per axis: predicted / measured communication ms (error)")
    n_axes = n_ok = 0
    worst = []
    for label, P, g, ps, ms, axes in rows:
        parts = []
        for a, p, m in axes:
            err = (p - m) / m if m > 0 else float("inf")
            n_axes += 1
            ok = abs(err) <= TARGET
            n_ok += ok
            worst.append((abs(err), label, g, a, p, m))
            parts.append(f"{a} {p:7.1f} / {m:7.1f} ({100 * err:+5.0f}%){'' if ok else ' *'}")
        print(f"{label:<7} {P:>2} {g:<16} {ps:8.1f} {ms:8.1f}   " + "  ".join(parts))
    if not rows:
        sys.exit("no measurements")
    grids = len(rows)
    print(f"\n{grids} grids, {n_axes} axis figures; within {100 * TARGET:.0f}%: {n_ok} "
          f"({100 * n_ok / n_axes:.0f}%); * marks the others")
    for e, label, g, a, p, m in sorted(worst, reverse=True)[:5]:
        print(f"  largest: {label} {g} axis {a}: predicted {p:.1f} ms, measured {m:.1f} ms "
              f"({100 * e:.0f}%)")
    for label, fg, fm, bg, bm, ok in verdicts:
        print(f"{label}: first choice {fg} measured {fm:.1f} ms, fastest {bg} {bm:.1f} ms: "
              f"{'within' if ok else 'NOT within'} 10%")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dendrite_validate_comm")
