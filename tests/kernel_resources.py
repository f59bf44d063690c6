#!/usr/bin/python3
"""What ptxas gives each kernel of the CUDA backend: registers, spills, stack
and static shared memory, per GPU architecture. The emulator runs the kernels
as C++ and cannot see any of it, yet on a GPU:

- a kernel without __launch_bounds__ that takes more than 64 registers a
  thread fails to launch with 1024 threads (65,536 registers a multiprocessor
  and a block); with bounds, ptxas keeps it within them;
- a spill or a stack frame is local memory, read through the caches from
  HBM, in the inner loop of the kernel that has it.

So every kernel must have bounds or at most 64 registers, spill no more than
ALLOWED_SPILL says, and keep a stack frame only where ALLOWED_STACK says
why. The kernels are compiled as the build compiles them (-O3, the given
architectures) with nvcc --resource-usage and --keep, which leaves the PTX
whose .maxntid lines are the bounds.

Usage: tests/kernel_resources.py --nvcc NVCC --include DIR --arch 90 [--arch 80]
       [--table] FILE.cu ...
Exit status 0 when every kernel keeps the rules, 1 with the kernels that do not.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# (demangled-name pattern, architecture) -> the spill stores allowed, in bytes,
# and why. docs/cuda.md: dk/dv at D = 64 in bf16 with its bias sums, bounded
# to three blocks a multiprocessor, spills one value reloaded once a tile pair.
ALLOWED_SPILL = {
    (r"flash::dkv_kernel<64, dendrite::bf16>", "sm_90"): 4,
    (r"flash::dkv_kernel<64, dendrite::bf16>", "sm_80"): 32,  # ptxas 13 for an A100
}
# Kernels that may keep a stack frame, and why.
ALLOWED_STACK = {
    r"rope_kernel<": "double cos and sin: the math library's reduction of large angles",
}
BLOCK_REGISTERS = 65536  # a multiprocessor's and a block's, sm_80 and sm_90
MAX_THREADS = 1024

ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '(\S+)' for '(sm_\d+)'")
PROPS_FOR = re.compile(r"ptxas info\s*: Function properties for (\S+)")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers(?:.*?, (\d+) bytes smem)?")
PTX_ENTRY = re.compile(r"^\s*(?:\.(?:visible|weak)\s+)?\.entry\s+(\S+?)\(")
PTX_BOUND = re.compile(r"^\s*\.(?:maxntid|reqntid)\s+(\d+),\s*(\d+),\s*(\d+)")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def bounds_of(ptx_dir):
    """Threads a block may have, by mangled kernel name, from the PTX's .maxntid."""
    bounds = {}
    for ptx in Path(ptx_dir).glob("*.ptx"):
        entry = None
        for line in ptx.read_text().splitlines():
            m = PTX_ENTRY.match(line)
            if m:
                entry = m.group(1)
                continue
            m = PTX_BOUND.match(line)
            if m and entry:
                bounds[entry] = int(m.group(1)) * int(m.group(2)) * int(m.group(3))
    return bounds


def parse(log):
    """One record per (kernel, architecture) that ptxas compiled."""
    kernels = []
    current = target = None
    for line in log.splitlines():
        m = ENTRY.search(line)
        if m:
            current = {"name": m.group(1), "arch": m.group(2)}
            kernels.append(current)
            continue
        if current is None:
            continue
        m = PROPS_FOR.search(line)
        if m:  # the next line's figures are this function's, maybe one the kernel calls
            target = m.group(1)
            continue
        m = PROPS.search(line)
        if m and target == current["name"]:
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
            continue
        m = USED.search(line)
        if m and "registers" not in current:
            current["registers"] = int(m.group(1))
            current["smem"] = int(m.group(2) or 0)
    return kernels


def blocks_by_registers(registers, threads):
    """Blocks a multiprocessor holds for their registers (allocated 256 a warp)."""
    per_warp = (registers * 32 + 255) // 256 * 256
    warps = (threads + 31) // 32
    return BLOCK_REGISTERS // (per_warp * warps)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nvcc", default="nvcc")
    p.add_argument("--include", action="append", default=[])
    p.add_argument("--arch", action="append", required=True, help="e.g. 90 for sm_90")
    p.add_argument("--table", action="store_true", help="print every kernel as a Markdown table")
    p.add_argument("sources", nargs="+")
    a = p.parse_args()

    kernels, bounds, empty = [], {}, []
    with tempfile.TemporaryDirectory() as tmp:
        def compile_one(i, src):
            keep = Path(tmp) / str(i)
            keep.mkdir()
            # -fatbin: the device code alone (no host compile), every
            # architecture in one call, a third less time than -c
            cmd = [a.nvcc, "-std=c++20", "-O3", "-DNDEBUG", "--resource-usage", "--keep",
                   "--keep-dir", str(keep), "-fatbin", src, "-o", str(keep / "out.fatbin")]
            cmd += [f"-I{d}" for d in a.include]
            for arch in a.arch:
                cmd += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
            return cmd, keep, subprocess.run(cmd, capture_output=True, text=True)

        # one nvcc a core: a minute alone on 2 cores, one after another
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            runs = list(pool.map(compile_one, range(len(a.sources)), a.sources))
        for src, (cmd, keep, r) in zip(a.sources, runs):
            if r.returncode != 0:
                sys.exit(f"kernel_resources: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
            found = parse(r.stdout + r.stderr)
            if not found and "__global__" in Path(src).read_text():
                empty.append(src)
            kernels += found
            bounds.update(bounds_of(keep))
    if empty or not kernels:
        sys.exit("kernel_resources: ptxas reported no kernel for " + ", ".join(empty or a.sources) +
                 " (did nvcc's --resource-usage output change?)")
    names = demangle(sorted({k["name"] for k in kernels}))

    faults = []
    for k in kernels:
        name, arch = names[k["name"]], k["arch"]
        if "registers" not in k or "stack" not in k:
            faults.append(f"{arch} {name}: ptxas gave no register or stack figure")
            continue
        bound = bounds.get(k["name"])
        k["bound"] = bound
        k["blocks"] = blocks_by_registers(k["registers"], bound or MAX_THREADS)
        if bound is None and k["registers"] * MAX_THREADS > BLOCK_REGISTERS:
            faults.append(f"{arch} {name}: {k['registers']} registers and no __launch_bounds__: "
                          f"a block of {MAX_THREADS} threads would not launch (declare the "
                          "block size it is launched with)")
        allowed = max([v for (pat, ar), v in ALLOWED_SPILL.items()
                       if ar == arch and re.search(pat, name)], default=0)
        if k["spill_stores"] > allowed:
            faults.append(f"{arch} {name}: {k['spill_stores']} bytes of spill stores "
                          f"({allowed} allowed)")
        if k["stack"] and k["spill_stores"] == 0 and not any(
                re.search(pat, name) for pat in ALLOWED_STACK):
            faults.append(f"{arch} {name}: a {k['stack']}-byte stack frame (local memory: an "
                          "array indexed at run time, a parameter's included?)")

    if a.table:
        # blocks: how many a multiprocessor's registers hold, of the bound's
        # threads (1024 where the kernel has no bound).
        print("| architecture | kernel | registers | bound | blocks | static shared bytes "
              "| spill stores | stack |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for k in sorted(kernels, key=lambda k: (k["arch"], names[k["name"]])):
            short = names[k["name"]].replace("(anonymous namespace)::", "")
            short = re.sub(r"\(.*", "", short.replace("dendrite::", ""))
            print(f"| {k['arch']} | `{short}` | {k.get('registers')} | {k.get('bound') or '-'} "
                  f"| {k.get('blocks')} | {k.get('smem')} | {k.get('spill_stores')} "
                  f"| {k.get('stack')} |")
    archs = sorted({k["arch"] for k in kernels})
    print(f"kernel_resources: {len(kernels)} kernels compiled for {', '.join(archs)} "
          f"from {len(a.sources)} files; {len(faults)} break the rules")
    for f in faults:
        print("  " + f)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
