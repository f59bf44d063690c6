#!/usr/bin/python3
"""Which inputs of the performance model make its Frontier weak-scaling curve
(`dendrite plan --sweep`) differ from AxoNN's measured one (SC'24: 88.3% at
8,192 GCDs, 79.0% at 16,384, 53.5% at 32,768, relative to 512). Runs the sweep
with one input changed at a time, then together, and prints a Markdown table:
the efficiency at every count, the per-GCD rate at 512, the total at 32,768 and
the distance from AxoNN's three figures.

Inputs changed (all on machines/frontier.json, --overlap all --recompute):
  bf16 collectives  AxoNN moves bf16, Dendrite fp32: every collective's bytes
                    halved, done by doubling every link's bandwidth in a copy
                    of the machine file (latencies unchanged; the same cost).
  batch 8192        8,192 sequences of 2,048 tokens (16.8M tokens) per step
                    instead of 2,048: more compute per collective.
  network x2, x4    Slingshot bandwidth per GCD doubled or quadrupled (as
                    topology-aware placement and hierarchical collectives
                    would give).
  no overlap        --overlap none.
  free comm         every bandwidth x1000: the compute-only bound.
Usage: bench/sweep_ablation.py [build-dir]"""
import copy
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AXONN = {8192: 88.3, 16384: 79.0, 32768: 53.5}
COUNTS = [1024, 2048, 4096, 8192, 16384, 32768]


def machine(tmp, name, bf16=False, network=1.0, free=False):
    m = json.load(open(os.path.join(ROOT, "machines", "frontier.json")))
    m = copy.deepcopy(m)
    for level in ("node", "network"):
        k = (2.0 if bf16 else 1.0) * (network if level == "network" else 1.0) * (1000 if free else 1)
        m["collectives"][level]["bandwidth"] *= k
    path = os.path.join(tmp, name + ".json")
    json.dump(m, open(path, "w"))
    return path


def sweep(binary, path, extra):
    cmd = [binary, "plan", "--sweep", "--json", "--machine", path, "--recompute"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {p["gpus"]: p for p in json.loads(out.strip().splitlines()[-1])["points"]}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    binary = os.path.join(build, "dendrite")
    with tempfile.TemporaryDirectory() as tmp:
        variants = [  # (label, machine file, options): each file named by what it changes
            ("Dendrite as built: fp32 collectives, batch 2048", machine(tmp, "base"), []),
            ("bf16 collectives", machine(tmp, "bf16", bf16=True), []),
            ("batch 8192", machine(tmp, "base"), ["--batch", "8192"]),
            ("network x4", machine(tmp, "net4", network=4), []),
            ("no overlap", machine(tmp, "base"), ["--overlap", "none"]),
            ("bf16 collectives + batch 8192", machine(tmp, "bf16", bf16=True), ["--batch", "8192"]),
            ("bf16 collectives + network x2", machine(tmp, "bf16net2", bf16=True, network=2), []),
            ("bf16 collectives + network x4", machine(tmp, "bf16net4", bf16=True, network=4), []),
            ("bf16 + batch 8192 + network x2", machine(tmp, "bf16net2", bf16=True, network=2),
             ["--batch", "8192"]),
            ("free communication (bound)", machine(tmp, "free", free=True), []),
        ]
        print("| inputs | TF/s per GCD at 512 | " + " | ".join(f"{g:,}" for g in COUNTS)
              + " | EFlop/s at 32,768 | grid at 8,192 | distance from AxoNN (8,192 / 16,384 / 32,768) |")
        print("|---" * (len(COUNTS) + 5) + "|")
        print("| AxoNN, measured (SC'24) | | | | | 88.3% | 79.0% | 53.5% | 1.381 | | |")
        for label, path, extra in variants:
            if "--overlap" not in extra:
                extra = extra + ["--overlap", "all"]
            pts = sweep(binary, path, extra)
            eff = {g: 100 * pts[g]["efficiency"] for g in COUNTS}
            dist = " / ".join(f"{eff[g] - a:+.1f}" for g, a in AXONN.items())
            print(f"| {label} | {pts[512]['flops_per_gpu'] / 1e12:.1f} | "
                  + " | ".join(f"{eff[g]:.1f}%" for g in COUNTS)
                  + f" | {pts[32768]['flops_total'] / 1e18:.3f} | {pts[8192]['grid']} | {dist} |")


if __name__ == "__main__":
    main()
