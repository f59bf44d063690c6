#!/usr/bin/python3
"""Compares `dendrite plan --json` predictions with `dendrite bench step --json`
measurements written by bench/validate_plan.sh into one folder: a table
(predicted compute, exposed communication and hidden communication beside the
measured wait and hidden time), the
mean absolute percentage error, Spearman's rank correlation (all points, and
per world size), and whether the planner's first choice is within 10% of the
fastest measured grid of each world size."""
import glob
import json
import os
import sys


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va > 0 and vb > 0 else float("nan")


def main(folder):
    rows, verdicts = [], []
    for plan_file in sorted(glob.glob(os.path.join(folder, "plan_*.json"))):
        plan = json.load(open(plan_file))
        P = plan["world"]
        group = []
        for pred in plan["ranked"]:
            path = os.path.join(folder, f"bench_{P}_{pred['grid']}.json")
            if not os.path.exists(path) or os.path.getsize(path) == 0:
                print(f"missing measurement {path}")
                continue
            meas = json.load(open(path))
            wait = hidden = 0.0  # milliseconds blocked in collectives / hidden behind compute
            # The mean over the job's ranks where bench step reports it (comm_ranks),
            # else rank 0's figures: in a group, which rank waits is the scheduler's.
            for axis in (meas.get("comm_ranks") or meas.get("comm", {})).values():
                if "wait_ms" in axis:
                    wait += axis["wait_ms"]
                else:
                    kinds = [k for k in axis.values() if isinstance(k, dict)]
                    wait += sum(k.get("exposed_ms", 0.0) for k in kinds)
                    hidden += sum(k.get("hidden_ms", 0.0) for k in kinds)
            group.append((P, pred["grid"], pred["step_ms"], meas["step_ms"], pred["compute_ms"],
                          pred.get("comm_exposed_ms", pred["comm_total_ms"]), wait,
                          pred.get("comm_hidden_ms", 0.0), hidden))
        rows += group
        if group:
            first = group[0]  # the planner's first choice (plan order)
            fastest = min(group, key=lambda r: r[3])
            ok = first[3] <= 1.10 * fastest[3]
            sp = spearman([r[2] for r in group], [r[3] for r in group]) if len(group) > 2 else float("nan")
            verdicts.append((P, first[1], first[3], fastest[1], fastest[3], ok, sp))
    print(f"{'P':>2} {'grid':<18} {'pred ms':>9} {'meas ms':>9} {'err %':>7} "
          f"{'pred comp':>9} {'pred comm':>9} {'meas wait':>9} {'pred hid':>9} {'meas hid':>9}")
    for P, g, pred, meas, comp, comm, wait, phid, mhid in rows:
        print(f"{P:>2} {g:<18} {pred:9.1f} {meas:9.1f} {100 * (pred - meas) / meas:7.1f} "
              f"{comp:9.1f} {comm:9.1f} {wait:9.1f} {phid:9.1f} {mhid:9.1f}")
    if not rows:
        sys.exit("no measurements")
    mape = 100 * sum(abs(r[2] - r[3]) / r[3] for r in rows) / len(rows)
    rho = spearman([r[2] for r in rows], [r[3] for r in rows])
    print(f"\nmean absolute percentage error: {mape:.1f}% over {len(rows)} grids (target <= 20%)")
    print(f"Spearman rank correlation, all grids: {rho:.3f} (target >= 0.8)")
    for P, fg, fm, bg, bm, ok, sp in verdicts:
        print(f"P={P}: Spearman {sp:.3f}; first choice {fg} measured {fm:.1f} ms, fastest {bg} "
              f"{bm:.1f} ms: {'within' if ok else 'NOT within'} 10%")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dendrite_validate_plan")
