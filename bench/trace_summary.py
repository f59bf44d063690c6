#!/usr/bin/env python3
"""Where each rank's steps went, from a `--trace` file (train or bench step).

Per rank: the mean step, its parts (the layers' forwards and backwards
summed), the time the rank was blocked by each axis'
collectives (blocking calls and waits for posted ones) and how much of that was
the wait for the group's last rank, and the progress engine's busy time.

    python3 bench/trace_summary.py trace.json
"""
import collections
import json
import sys


# The parts of a step, in their order, and how deep each sits.
ORDER = [("forward and backward", 1), ("embedding forward", 2), ("layers' forward", 2),
         ("head and loss", 2), ("layers' backward", 2),
         ("embedding backward and gradient sync", 2), ("gradient norm", 1), ("optimizer", 1)]


def main(path):
    events = json.load(open(path))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    ranks = collections.defaultdict(lambda: {
        "steps": [], "parts": collections.Counter(), "blocked": collections.Counter(),
        "peer_wait": collections.Counter(), "engine": collections.Counter()})
    for e in events:
        if e["ph"] != "X":
            continue
        r = ranks[e["pid"]]
        ms = e["dur"] / 1e3
        if e["cat"] == "step":
            if e["name"].startswith("step "):
                r["steps"].append(ms)
            elif e["name"].startswith("layer "):  # "layer 3 forward": the layers together
                r["parts"]["layers' " + e["name"].split(" ", 2)[2]] += ms
            else:
                r["parts"][e["name"]] += ms
        elif e["cat"] in ("collective", "wait"):
            key = e["name"][5:] if e["cat"] == "wait" else e["name"]
            r["blocked"][key] += ms
            r["peer_wait"][key] += e.get("args", {}).get("peer_wait_ms", 0)
        elif e["cat"] == "engine":
            r["engine"][e["name"]] += ms
    for pid in sorted(ranks):
        r = ranks[pid]
        n = max(len(r["steps"]), 1)
        step = sum(r["steps"]) / n
        print(f"{names.get(pid, pid)}: {len(r['steps'])} steps, {step:.1f} ms per step")
        known = [p for p, _ in ORDER if p in r["parts"]]
        for part, indent in ORDER + [(p, 1) for p in r["parts"] if p not in known]:
            if part in r["parts"]:
                label = "  " * indent + part
                print(f"{label:<42} {r['parts'][part] / n:9.1f} ms")
        blocked = sum(r["blocked"].values()) / n
        print(f"  blocked by collectives                   {blocked:9.1f} ms ({100 * blocked / step if step else 0:.0f}%"
              " of the step), of which waiting for peers "
              f"{sum(r['peer_wait'].values()) / n:.1f} ms")
        for key in sorted(r["blocked"]):
            print(f"    {key:<38} {r['blocked'][key] / n:9.1f} ms  (peers {r['peer_wait'][key] / n:.1f})")
        if r["engine"]:
            print(f"  progress engine busy                     {sum(r['engine'].values()) / n:9.1f} ms")
            for key in sorted(r["engine"]):
                print(f"    {key:<38} {r['engine'][key] / n:9.1f} ms")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
