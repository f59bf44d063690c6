#!/usr/bin/python3
"""Compares the performance model's communication with measurement, per axis,
for the runs bench/validate_comm.sh writes into one folder: for every case and
grid, the predicted time of each axis' collectives (`plan --json`: exposed +
hidden) beside the measured one (`bench step --json`: the collectives' time,
exposed + hidden, and the part of it spent waiting for the group's last rank to
arrive), the errors against the whole time and against the time once the group
had arrived, and whether the planner's first choice is within 10% of the
fastest measured grid of the case. Target: each axis within 30%. Given a
second run's folder, also counts how many of the measured figures moved
between the two runs by more than the targets."""
import glob
import json
import os
import sys

TARGET = 0.30


def measured_axes(bench, key=None):
    """Per axis: (the collectives' time, of which waiting for peers), the mean
    over the job's ranks (comm_ranks) where the run reports it, else rank 0's
    (comm); key="comm" asks for rank 0's."""
    key = key or ("comm_ranks" if "comm_ranks" in bench else "comm")
    out = {}
    for axis, kinds in bench.get(key, {}).items():
        ks = [k for k in kinds.values() if isinstance(k, dict)]
        out[axis] = (sum(k.get("total_ms", 0.0) for k in ks),
                     sum(k.get("peer_wait_ms", 0.0) for k in ks))
    return out


def error(p, m):
    return (p - m) / m if m > 0 else float("inf")


def main(folder):
    rows, verdicts, computes = [], [], []
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
            rank0 = {a: t for a, (t, _) in measured_axes(meas, "comm").items()}
            p_axes = {a: pred["comm_ms"].get(a, 0.0) + pred["hidden_ms"].get(a, 0.0)
                      for a in pred["comm_ms"]}
            p_wait = pred.get("peer_wait_axis_ms", {})
            axes = sorted(set(m_axes) | set(p_axes), key="xyzd".index)
            wait = sum(w for (_, w) in m_axes.values())
            # The compute of the ranks the figures describe: the step less
            # the time blocked in collectives (the mean rank's where reported).
            compute = meas["compute_ms"]
            if "comm_ranks" in meas:
                compute = meas["step_ms"] - sum(k.get("exposed_ms", 0.0)
                                                for kinds in meas["comm_ranks"].values()
                                                for k in kinds.values() if isinstance(k, dict))
            computes.append((pred["compute_ms"], compute, compute + wait))
            group.append((label, plan["world"], pred["grid"], pred["step_ms"], meas["step_ms"],
                          [(a, p_axes.get(a, 0.0), *m_axes.get(a, (0.0, 0.0)),
                            p_wait.get(a, 0.0), rank0.get(a, 0.0)) for a in axes],
                          "comm_ranks" in meas))
        rows += group
        if group:
            first = group[0]
            fastest = min(group, key=lambda r: r[4])
            verdicts.append((label, first[2], first[4], fastest[2], fastest[4],
                             first[4] <= 1.10 * fastest[4]))
    if not rows:
        sys.exit("no measurements")
    over_ranks = all(r[6] for r in rows)
    print("Per axis: predicted communication (exposed + hidden, with the predicted wait\n"
          "for peers) / measured time of the collectives / of which waiting for the group's\n"
          f"last rank (predicted wait: measured wait), ms per step, measured "
          f"{'as the mean over the ranks' if over_ranks else 'on rank 0'}; the errors of the\n"
          "prediction against the whole time (all) and of the prediction less its wait\n"
          "against the time once the group had arrived (all - wait). * marks an error\n"
          "above 30%.\n")
    print(f"{'case':<7} {'P':>2} {'grid':<16} {'pred ms':>8} {'meas ms':>8}   "
          "axis  pred / meas / wait pred:meas (all, all - wait)")
    n_axes = n_all = n_moved = n_rank0 = 0
    worst = []
    have_wait = False
    for label, P, g, ps, ms, axes, _ in rows:
        parts = []
        for a, p, m, w, pw, m0 in axes:
            have_wait = have_wait or w > 0
            e_all, e_moved = error(p, m), error(p - pw, m - w)
            n_axes += 1
            n_all += abs(e_all) <= TARGET
            n_rank0 += abs(error(p, m0)) <= TARGET
            n_moved += abs(e_moved) <= TARGET
            worst.append((abs(e_all), label, g, a, p, m))
            mark = lambda e: f"{100 * e:+4.0f}%{'*' if abs(e) > TARGET else ' '}"
            parts.append(f"{a} {p:6.1f} /{m:6.1f} /{pw:5.1f}:{w:5.1f} "
                         f"({mark(e_all)} {mark(e_moved)})")
        print(f"{label:<7} {P:>2} {g:<16} {ps:8.1f} {ms:8.1f}   " + "  ".join(parts))
    grids = len(rows)
    print(f"\n{grids} grids, {n_axes} axis figures within {100 * TARGET:.0f}%: "
          f"{n_all} ({100 * n_all / n_axes:.0f}%) of the whole time, "
          f"{n_moved} ({100 * n_moved / n_axes:.0f}%) of the time once the group had arrived")
    if over_ranks:
        print(f"  against rank 0's figures alone: {n_rank0} ({100 * n_rank0 / n_axes:.0f}%) "
              "of the whole time")
    if not have_wait:
        print("  (no run measured a wait for peers: the ranks of a group did not share a machine)")
    for e, label, g, a, p, m in sorted(worst, reverse=True)[:5]:
        print(f"  largest (all): {label} {g} axis {a}: predicted {p:.1f} ms, "
              f"measured {m:.1f} ms ({100 * e:.0f}%)")
    wait = sum(w for r in rows for (_, _, _, w, _, _) in r[5])
    pwait = sum(pw for r in rows for (_, _, _, _, pw, _) in r[5])
    total = sum(m for r in rows for (_, _, m, _, _, _) in r[5])
    print(f"waiting for peers: {wait:.0f} of the {total:.0f} ms the collectives took "
          f"({100 * wait / max(total, 1e-9):.0f}%), summed over the grids; predicted {pwait:.0f} ms")
    # Where the wait for peers belongs: the model charges an oversubscribed
    # rank's turns on the cores to its compute (ranks / cores times its CPU
    # time); a rank that ran early meets them as a wait at the next collective.
    def mape(i):
        return 100 * sum(abs(c[0] - c[i]) / c[i] for c in computes) / len(computes)
    print(f"compute: predicted against measured, mean absolute error {mape(1):.0f}%; "
          f"against measured + the wait for peers {mape(2):.0f}%")
    steps = [abs(ps - ms) / ms for (_, _, _, ps, ms, _, _) in rows]
    print(f"steps: predicted against measured, mean absolute error "
          f"{100 * sum(steps) / len(steps):.0f}%, largest {100 * max(steps):.0f}%")
    for label, fg, fm, bg, bm, ok in verdicts:
        print(f"{label}: first choice {fg} measured {fm:.1f} ms, fastest {bg} {bm:.1f} ms: "
              f"{'within' if ok else 'NOT within'} 10%")


def noise(folder, other):
    """How far two measured runs of the same grids lie apart: the floor under
    any prediction's error on this machine."""
    axes = steps = axes_apart = steps_apart = 0
    for path in sorted(glob.glob(os.path.join(folder, "bench_*.json"))):
        path2 = os.path.join(other, os.path.basename(path))
        if not os.path.exists(path2) or os.path.getsize(path) == 0 or os.path.getsize(path2) == 0:
            continue
        a, b = json.load(open(path)), json.load(open(path2))
        steps += 1
        steps_apart += abs(a["step_ms"] - b["step_ms"]) > 0.10 * min(a["step_ms"], b["step_ms"])
        ma, mb = measured_axes(a), measured_axes(b)
        for axis in ma.keys() & mb.keys():
            axes += 1
            axes_apart += abs(ma[axis][0] - mb[axis][0]) > TARGET * min(ma[axis][0], mb[axis][0])
    if steps:
        print(f"run to run ({folder} against {other}): {axes_apart} of {axes} axis figures "
              f"differ by more than {100 * TARGET:.0f}%, {steps_apart} of {steps} steps by more "
              f"than 10%")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dendrite_validate_comm")
    if len(sys.argv) > 2:  # a second run's folder: the measurements' own spread
        noise(sys.argv[1], sys.argv[2])
