#!/usr/bin/env bash
# The prepared check for a lent GPU machine (one NVIDIA GPU, nvcc, PyTorch;
# no OpenMPI, oneDNN or SentencePiece, no ssh, no Debian alternatives), in two
# stages that each fit one device call of 600 s:
#   stage 1 (about 5 minutes; docs/cuda.md gives the estimate by part): the
#     build of what it needs (none with .gpu-prebuilt/), the tests labelled
#     gpu, then GPT-2 124M and 350M at B16 T1024 bf16 with Dendrite and with
#     compiled PyTorch, the planner's memory figure beside each; if time is
#     left, the 124M step's profile (CUPTI: where its time goes by kernel and
#     part), eager PyTorch, and the step without cuBLASLt's epilogues;
#   stage 2 (what the lease has left: 8 minutes by default), in this order:
#     every grid on the GPU (fp32 and bf16, kept gathers, recomputation,
#     overlap off), NCCL on one rank, compute-sanitizer's racecheck over the
#     op harness, the kill test, out of memory's error, eager PyTorch,
#     calibrate and plans on the measured machine file (with the planner's
#     step beside stage 1's measured one), a Llama 3.2 1B-shaped step,
#     GPT-2 124M's step with --gemm-tune and without, grad-accum, the
#     simulated nodes, the attention kernels alone, compute-sanitizer's
#     synccheck and initcheck over the op harness, and with --validate-comm
#     issue 16's per-axis check on the machine's CPU cores.
# The planner starts from machines/h100-node.json or h200-node.json, by the GPU.
# A part whose timeout would end past the stage's seconds is skipped
# (DENDRITE_STAGE_SECONDS: 540 for stage 1, 480 for stage 2).
# Both stages unpack the Debian packages that scripts/gpu_deps.sh downloaded
# into .gpu-debs/ (carry it) into a private prefix, check that the MPI
# launcher starts (where it does not, the parts of several ranks are
# skipped and the rest runs without it), and take the programs
# scripts/gpu_prebuild.sh built before the lease (.gpu-prebuilt/, carried
# too) where they were built from this tree's sources and start here, or
# else build into build-gpu/ (kept when the machine is still warm for
# stage 2). Every command runs under a
# timeout and the summary ($OUT/summary-stage<N>.txt, or under
# /tmp/gpu_check) is written as each part ends, so a run cut short still
# reports what it did. The parts' logs and files are packed into
# $OUT/logs-stage<N>.tar.gz as each part ends: the device tool brings back
# at most 8 files from $OUT.
# On a machine without a GPU (scripts/gpu_rehearse.sh runs it so) the parts
# that need one are listed as skipped and the rest runs: the rehearsal of
# everything up to the first GPU call.
#   scripts/gpu_check.sh --stage 1|2 [--no-compile] [--validate-comm]
set -uo pipefail
stage="" no_compile=0 validate_comm=0
usage="usage: scripts/gpu_check.sh --stage 1|2 [--no-compile] [--validate-comm]"
while (($#)); do
  case $1 in
    --stage) stage=${2:-}; shift ;;
    --stage=*) stage=${1#--stage=} ;;
    --no-compile) no_compile=1 ;;
    --validate-comm) validate_comm=1 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "gpu_check: unknown option $1; $usage"; exit 2 ;;
  esac
  shift
done
[[ $stage == 1 || $stage == 2 ]] || { echo "gpu_check: say which stage: $usage"; exit 2; }
cd "$(dirname "$0")/.." || exit 2
results=${OUT:-/tmp/gpu_check}
out=/tmp/gpu_check-work/stage$stage  # the parts' logs and files, packed into $results
rm -rf "$out"
mkdir -p "$results" "$out"
summary=$results/summary-stage$stage.txt
: > "$summary"
pack() { tar -czf "$results/logs-stage$stage.tar.gz" -C "$out" . 2> /dev/null; }
trap pack EXIT
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }
note() { echo "$*" | tee -a "$summary"; }

# The stage's time: a part whose timeout would end past it is skipped, so the
# call ends inside the device tool's 600 s and the lease's 15 minutes (stage 1
# about 5 minutes, stage 2 what is left after it and the machine's start).
budget=${DENDRITE_STAGE_SECONDS:-$((stage == 1 ? 540 : 480))}

# part NAME SECONDS COMMAND...: runs COMMAND under a timeout, its output in
# $out/NAME.log, and notes how it ended and how long it took.
part() {
  local name=$1 limit=$2 start rc
  shift 2
  if (($(elapsed) + limit > budget)); then
    note "[$(elapsed) s] $name: skipped (its $limit s would end past the stage's $budget s)"
    return 0
  fi
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  local took=$(($(date +%s) - start)) how="ok"
  ((rc == 124 || rc == 137)) && how="TIMED OUT after ${limit} s"
  ((rc != 0 && rc != 124 && rc != 137)) && how="FAILED (exit $rc)"
  note "[$(elapsed) s] $name: $how in $took s"
  pack
  return $rc
}
# The GPU: nvidia-smi names it. An image whose driver folder is mounted at
# /usr/local/nvidia may leave its bin off the PATH; where nvidia-smi still
# fails, PyTorch's view decides, so that a lease with a GPU never skips every
# GPU part for want of one program (the rehearsal's root has neither).
if ! command -v nvidia-smi > /dev/null && [[ -x /usr/local/nvidia/bin/nvidia-smi ]]; then
  PATH=$PATH:/usr/local/nvidia/bin
fi
gpu=0 gpu_line=""
if gpu_line=$(nvidia-smi -L 2>/dev/null | head -1) && [[ -n $gpu_line ]]; then
  gpu=1
  gpu_line="$gpu_line; driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -1)"
elif gpu_line=$(timeout 60 python3 -c 'import torch
assert torch.cuda.is_available()
print(torch.cuda.get_device_name(0))' 2>/dev/null) && [[ -n $gpu_line ]]; then
  gpu=1
  gpu_line="$gpu_line (nvidia-smi -L failed; PyTorch found it)"
fi
# The published machine file of this GPU's node (an H100 or an H200; the
# rehearsal plans on the H200's): the planner's figures start from it.
node=h200-node
[[ $gpu_line == *H100* ]] && node=h100-node
# gpu_part NAME SECONDS COMMAND...: a part that needs the GPU.
gpu_part() {
  if ((!gpu)); then note "[$(elapsed) s] $1: skipped (no GPU on this machine)"; return 0; fi
  part "$@"
}

# ---- the prefix: OpenMPI, oneDNN, SentencePiece and the rest, from .gpu-debs ----
[[ -d .gpu-debs ]] || { note "gpu_check: no .gpu-debs/: run scripts/gpu_deps.sh here and carry .gpu-debs"; exit 2; }
prefix=${DENDRITE_PREFIX:-/tmp/dendrite-prefix}
source scripts/gpu_build.sh
mkdir -p "$prefix"
said=$(gpu_unpack "$prefix") || { note "gpu_check: $said"; exit 1; }
source scripts/gpu_prefix_env.sh "$prefix"
[[ -n ${shm_note:-} ]] && note "gpu_check: $shm_note"
mpirun=$prefix/usr/bin/mpirun.openmpi

note "stage $stage, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
if ((gpu)); then
  note "gpu: $gpu_line"
else
  note "gpu: none (nvidia-smi -L fails, and PyTorch sees no GPU): the GPU parts are skipped, as in the rehearsal"
fi
note "nvcc: $(nvcc --version 2>&1 | tail -1); torch: $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
# The carried packages are Debian 12's: its libevent (OpenMPI's) needs glibc
# 2.36 or newer, so an older system stops at the launcher's check below.
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
note "system: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); glibc ${glibc:-unknown}"
if [[ -n $glibc && $(printf '%s\n' 2.36 "$glibc" | sort -V | head -1) != 2.36 ]]; then
  note "gpu_check: glibc $glibc is older than the 2.36 Debian 12's packages need: expect the launcher to fail"
fi

# The launcher first, before minutes go to a build. Where mpirun cannot start
# two processes, the parts of several ranks are skipped, and those of one
# process go on, each started alone as an isolated MPI singleton (a plain
# singleton starts a daemon as the launcher does, and fails with it): the
# GPU's figures need no launcher.
launcher=1
if ! timeout 60 "$mpirun" -np 2 true > "$out/launcher.log" 2>&1; then
  note "gpu_check: the MPI launcher cannot start 2 processes ($mpirun -np 2 true); see launcher.log:"
  tail -15 "$out/launcher.log" | tee -a "$summary"
  note "gpu_check: the parts of several ranks are skipped; those of one process go on, as isolated singletons (OMPI_MCA_ess_singleton_isolated=1)"
  launcher=0
  export OMPI_MCA_ess_singleton_isolated=1
else
  note "[$(elapsed) s] launcher: mpirun -np 2 true ok"
fi
# ranks_part NAME SECONDS COMMAND...: a part that needs the launcher.
ranks_part() {
  if ((!launcher)); then note "[$(elapsed) s] $1: skipped (the MPI launcher does not start here)"; return 0; fi
  part "$@"
}

# torch.compile's first run is mostly CPU work (tracing, Triton builds): in
# stage 1 it runs for both models beside the build (if any) and the tests,
# while nothing is timed, so that the timed runs find the compiled kernels in
# PyTorch's caches. The two models compile side by side: with the programs
# built before the lease there is no build to hide the warm-up behind, and
# the machine has 16 cores.
warm_pids=()
if ((stage == 1 && gpu && !no_compile)); then
  for m in gpt2-124m gpt2-350m; do
    timeout 300 python3 bench/pytorch_step.py --device cuda --precision bf16 --model $m \
      --batch 16 --seq 1024 --steps 1 --warmup 1 --compile > "$out/torch_compile_warm_$m.log" 2>&1 &
    warm_pids+=($!)
  done
fi

# ---- configure and build what the stage needs ----
# The libraries the toolkit nvcc belongs to may lack (an image whose CUDA
# libraries came with PyTorch): taken from PyTorch's wheels, NCCL's under
# nvidia/nccl, cuBLASLt's and CUPTI's under nvidia/cu13 (headers, and
# versioned .so files only). Their headers are searched after the toolkit's
# (-idirafter), so that the toolkit's own runtime headers stay first.
cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
wheel_dir() {
  python3 -c 'import importlib.util as u, sys; print(list(u.find_spec(sys.argv[1]).submodule_search_locations)[0])' "$1" 2>/dev/null
}
toolkit_has() {  # toolkit_has HEADER LIB: the header, and lib<LIB>.so unversioned (the link's name)
  local d header=0 lib=0
  for d in "$cuda_root"/include "$cuda_root"/extras/CUPTI/include; do [[ -f $d/$1 ]] && header=1; done
  for d in "$cuda_root"/lib64 "$cuda_root"/targets/*/lib "$cuda_root"/extras/CUPTI/lib64; do
    [[ -e $d/lib$2.so ]] && lib=1
  done
  ((header && lib))
}
cuda_libs=() wheel_includes=""
if ! toolkit_has nccl.h nccl; then
  wheel=$(wheel_dir nvidia.nccl)
  lib=$(ls "$wheel"/lib/libnccl.so* 2>/dev/null | head -1)
  if [[ -f $wheel/include/nccl.h && -n $lib ]]; then
    cuda_libs+=(-DNCCL_INCLUDE_DIR="$wheel/include" -DNCCL_LIBRARY="$lib")
    export LD_LIBRARY_PATH=$wheel/lib:${LD_LIBRARY_PATH:-}
    note "NCCL: from PyTorch's wheel ($lib)"
  fi
fi
cu13=$(wheel_dir nvidia.cu13)
for l in cublasLt:cublasLt.h cupti:cupti.h; do
  name=${l%%:*} header=${l#*:}
  toolkit_has "$header" "$name" && continue
  lib=$(ls "$cu13/lib/lib$name.so".* 2>/dev/null | head -1)
  if [[ -f $cu13/include/$header && -n $lib ]]; then
    cuda_libs+=("-DCUDA_${name}_LIBRARY=$lib")
    [[ $name == cupti ]] && cuda_libs+=(-DCUDAToolkit_CUPTI_INCLUDE_DIR="$cu13/include")
    wheel_includes="-idirafter $cu13/include"
    export LD_LIBRARY_PATH=$cu13/lib:${LD_LIBRARY_PATH:-}
    note "$name: not in the toolkit ($cuda_root); from PyTorch's wheel ($lib)"
  else
    note "$name: in neither the toolkit ($cuda_root) nor PyTorch's nvidia/cu13 wheels"
  fi
done
[[ -n $wheel_includes ]] && cuda_libs+=(-DCMAKE_CXX_FLAGS="$wheel_includes")
gpu_stage_targets "$stage"  # ops_tests (the op harness, a program per op family) and targets

# The programs built before the lease (scripts/gpu_prebuild.sh), where
# .gpu-prebuilt/ was carried: taken when they were built from the same
# sources as this tree and start here (their libraries found), in place of
# the build. They hold the folder they were built in (gpu_lease_repo), which
# is linked to this tree.
use_prebuilt() {
  local manifest=.gpu-prebuilt/manifest have want t
  [[ -f $manifest ]] || return 1
  have=$(sed -n 's/^inputs //p' "$manifest")
  want=$(gpu_inputs_hash)
  if [[ $have != "$want" ]]; then
    note "prebuilt: .gpu-prebuilt/ was built from other sources (fingerprint $have, this tree's $want): building here"
    return 1
  fi
  if [[ $(sed -n 's/^prefix //p' "$manifest") != "$prefix" ]]; then
    note "prebuilt: .gpu-prebuilt/ was built for the prefix $(sed -n 's/^prefix //p' "$manifest"), not $prefix: building here"
    return 1
  fi
  if [[ $(readlink -f "$gpu_lease_repo") != "$(readlink -f .)" ]]; then
    if [[ -e $gpu_lease_repo && ! -L $gpu_lease_repo ]]; then
      note "prebuilt: $gpu_lease_repo is a folder of its own here: building here"
      return 1
    fi
    mkdir -p "$(dirname "$gpu_lease_repo")" && ln -sfn "$PWD" "$gpu_lease_repo"
  fi
  mkdir -p build-gpu
  # By Python's tarfile (an image may lack the xz program, as the bare root
  # does), else by tar (a Python may lack its lzma module).
  # shellcheck disable=SC2016  # the command's variables are its own
  part prebuilt_unpack 60 bash -c 'python3 -c "import sys, tarfile
t = tarfile.open(sys.argv[1])
if hasattr(tarfile, \"data_filter\"):
    t.extraction_filter = tarfile.data_filter
t.extractall(sys.argv[2])" "$1" "$2" || tar -xJf "$1" -C "$2"' _ .gpu-prebuilt/programs.tar.xz build-gpu ||
    return 1
  for t in "${targets[@]}"; do
    [[ -x build-gpu/$(gpu_target_path "$t") ]] || { note "prebuilt: no $t in .gpu-prebuilt/: building here"; return 1; }
  done
  # Every program's libraries are found, with every symbol it takes from them
  # (ldd -r: a library older than the headers it was built with, an NCCL
  # say, lacks some), and each starts (without the GPU).
  local programs=()
  for t in "${targets[@]}"; do programs+=("build-gpu/$(gpu_target_path "$t")"); done
  # shellcheck disable=SC2016  # the command's variables are its own
  if ! part prebuilt_start 60 bash -c 'rc=0
      for p; do
        missing=$(ldd -r "$p" 2>&1 | grep -E "not found|undefined symbol") &&
          { echo "$p: $missing"; rc=1; continue; }
        case $p in
          */dendrite) "$p" --help > /dev/null || { echo "$p --help failed"; rc=1; } ;;
          */tests/*) "$p" --gtest_list_tests > /dev/null || { echo "$p --gtest_list_tests failed"; rc=1; } ;;
        esac
      done
      exit $rc' _ "${programs[@]}"; then
    tail -8 "$out/prebuilt_start.log" | tee -a "$summary"
    note "prebuilt: the programs built before the lease do not start here: building here"
    return 1
  fi
  note "build: none; the programs built before the lease ($(sed -n 's/^built //p' "$manifest")), from the sources of this tree"
  note "built with: $(sed -n 's/^configure //p' "$manifest")"
  note "dendrite loads: $(ldd build-gpu/dendrite | grep -oE '(libcudart|libcublasLt|libnccl|libcupti)[^ ]* => [^ ]*' | tr '\n' ' ')"
}

if ! use_prebuilt; then
  # Builds at -j of the machine's cores; on 2 cores here the rehearsal takes minutes.
  # shellcheck disable=SC2016  # the command's variables are its own
  if ! part configure 180 bash -c 'source scripts/gpu_build.sh && gpu_configure "$@"' _ \
       build-gpu "$prefix" "$mpirun" "${cuda_libs[@]}"; then
    tail -30 "$out/configure.log" | tee -a "$summary"
    exit 1
  fi
  note "$(grep -m1 -E 'NCCL transport|no NCCL' "$out/configure.log" || echo 'NCCL: see configure.log')"
  # (bash's time at the end of build.log: the CPU seconds scale the build to other machines.)
  if ! part build "${DENDRITE_BUILD_TIMEOUT:-420}" bash -c 'time "$@"' build \
       cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}"; then
    grep -m 10 -B2 -A6 -E "error|Error" "$out/build.log" | tee -a "$summary"
    exit 1
  fi
fi
# The launcher with the program: two ranks on the CPU, before any GPU call.
two_ranks() {
  ranks_part "$1" 60 "$mpirun" -np 2 --bind-to none build-gpu/dendrite bench step --device cpu \
    --model gpt2-tiny --batch 2 --seq 16 --steps 2 --warmup 1 --grid d=2 --threads 1
}
if ! two_ranks two_ranks_cpu && ((launcher)); then
  # A sandbox that forbids a process to read another's memory stops OpenMPI's
  # shared-memory transport, which copies messages past 4 KB so (CMA): once
  # more with that copy off, kept off for the rest of the stage where it mends it.
  if OMPI_MCA_btl_vader_single_copy_mechanism=none two_ranks two_ranks_cpu_no_single_copy; then
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    note "gpu_check: two ranks ran only with shared memory's single copy (CMA) off: it stays off for the rest"
  fi
fi

# One process: by the launcher, or alone where it does not start (above).
one=("$mpirun" -np 1 --bind-to none)
((launcher)) || one=(env)
# Full fp32 in the tests' GEMMs (docs/cuda.md): TF32 must not be forced on.
unset NVIDIA_TF32_OVERRIDE

# model_arg MODEL: a preset's name, or the folder $out/MODEL where the check
# wrote a Hugging Face config.json under that name.
model_arg() { if [[ -d $out/$1 ]]; then echo "$out/$1"; else echo "$1"; fi; }

# bench_dendrite MODEL [LABEL extra...]: its JSON line in dendrite[_LABEL]_MODEL.json.
bench_dendrite() {
  local model name=dendrite_$1
  model=$(model_arg "$1")
  [[ $# -gt 1 ]] && name=dendrite_${2}_$1 && shift
  shift
  gpu_part "$name" 120 "${one[@]}" build-gpu/dendrite bench step --device cuda --model "$model" \
    --batch 16 --seq 1024 --precision bf16 --steps 10 --warmup 2 --json "$@"
  grep -s '^{' "$out/$name.log" | tail -1 > "$out/$name.json"
}
# bench_torch MODE MODEL [extra...]
bench_torch() {
  local mode=$1 model=$2
  shift 2
  gpu_part "torch_${mode}_$model" "${TORCH_TIMEOUT:-150}" python3 bench/pytorch_step.py --device cuda \
    --precision bf16 --model "$model" --batch 16 --seq 1024 --steps 10 --warmup 3 "$@"
  grep -s '^{' "$out/torch_${mode}_$model.log" | tail -1 > "$out/torch_${mode}_$model.json"
}
# plan_memory MODEL: the planner's memory figure (and its step time, on the
# published rates) for the step bench_dendrite ran, on this GPU's node file
# with this GPU's memory (the bench's device_memory_mb; the head's chunks are
# sized from it, as the trainer sizes them), or the published memory where
# the bench left none.
plan_memory() {
  local machine=machines/$node.json
  python3 - "$out/dendrite_$1.json" "$out/this-gpu.json" "$machine" 2>/dev/null <<'PY' && machine=$out/this-gpu.json
import json, sys
bench, out, published = sys.argv[1], sys.argv[2], sys.argv[3]
mb = json.loads(open(bench).read().strip().splitlines()[-1])["device_memory_mb"]
m = json.load(open(published))
m["name"], m["memory_per_rank_bytes"] = "this-gpu", mb * 1048576
json.dump(m, open(out, "w"), indent=1)
PY
  part "plan_$1" 60 build-gpu/dendrite plan --model "$(model_arg "$1")" --batch 16 --seq 1024 --precision bf16 \
    --machine "$machine" --json
  grep -s '^{' "$out/plan_$1.log" | tail -1 > "$out/plan_$1.json"
}

# row MODEL: the model's figures so far, one line in the summary.
row() {
  python3 - "$out" "$1" <<'PY' | tee -a "$summary"
import json, os, sys
out, m = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return json.loads(open(os.path.join(out, name)).read().strip().splitlines()[-1])
    except Exception:
        return None
row = [m]
d, p = load(f"dendrite_{m}.json"), load(f"plan_{m}.json")
if d:
    row.append(f"dendrite {d['tokens_per_s']:.0f} tok/s, MFU {100 * d['mfu']:.1f}% of a "
               f"{d['peak_gflops'] / 1e3:.0f} TFLOP/s bf16 GEMM, {d.get('device_peak_mb', 0):.0f} MB")
    plans = d.get("gemm_plans", [])
    if plans:
        split = sum(" split-K " in p for p in plans)
        bare = sum("(no algorithm" in p for p in plans)
        row.append(f"{len(plans)} GEMM shapes, {split} split over K, {bare} with no algorithm "
                   f"for their epilogue (kernels)")
b = load(f"dendrite_bare_{m}.json")
if b:
    row.append(f"dendrite without cuBLASLt epilogues {b['tokens_per_s']:.0f} tok/s")
a = load(f"dendrite_again_{m}.json")
if a:
    row.append(f"dendrite with them again {a['tokens_per_s']:.0f} tok/s")
t = load(f"dendrite_qkv3_{m}.json")
if t:
    row.append(f"dendrite with q, k and v as three products {t['tokens_per_s']:.0f} tok/s")
g = load(f"dendrite_tuned_{m}.json")
if g:
    shapes = g.get("gemm", {}).get("shapes", [])
    changed = sum(1 for s in shapes if s["way"] != s["default"])
    row.append(f"dendrite with --gemm-tune {g['tokens_per_s']:.0f} tok/s ({len(shapes)} shapes "
               f"timed in {g['gemm']['tuning_ms']:.0f} ms, another pick kept for {changed}, "
               f"{g['gemm']['saved_ms_per_step']:.2f} ms a step saved by the trials)" if shapes else
               f"dendrite with --gemm-tune {g['tokens_per_s']:.0f} tok/s (no shape timed)")
u = load(f"dendrite_untuned_{m}.json")
if u:
    row.append(f"dendrite untuned, after it {u['tokens_per_s']:.0f} tok/s")
if p:
    planned, held = p['ranked'][0]['memory_mb'], (d or {}).get('device_peak_mb', 0)
    off = f" ({100 * (planned / held - 1):+.1f}% of the device's peak)" if held else ""
    step = p['ranked'][0]['step_ms']
    took = f" ({100 * (step / d['step_ms'] - 1):+.1f}% of the measured)" if d else ""
    row.append(f"planner {planned:.0f} MB{off}, step {step:.1f} ms on published rates{took}")
for mode in ("eager", "compile"):
    t = load(f"torch_{mode}_{m}.json")
    if t:
        row.append(f"torch {mode} {t['tokens_per_s']:.0f} tok/s, {t.get('peak_memory_mb', 0):.0f} MB")
print("figures: " + " | ".join(row))
PY
}

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer \
  /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2> /dev/null | head -1)

# failed_tests PART: the tests a gtest part failed, into the summary.
failed_tests() {
  grep -s -E '^\[  FAILED  \] [^ ]+\.[^ ]+|^== .* TIMED OUT' "$out/$1.log" | sort -u | head -20 |
    tee -a "$summary"
  return 0
}

# diagnose MODEL: after Dendrite's step failed on the GPU, the step that
# names where: once more with every launch waiting for its kernel (the error
# then names the kernel that failed, docs/cuda.md), and a small model's step
# under compute-sanitizer's memcheck (an access out of bounds, with the
# kernel and the thread); their first lines into the summary. Once a stage.
diagnosed=0
diagnose() {
  ((diagnosed)) && return 0
  diagnosed=1
  note "[$(elapsed) s] dendrite_$1 gave no figures: $(grep -s -m1 -iE 'error|what\(\)' "$out/dendrite_$1.log" | cut -c1-300)"
  gpu_part "diagnose_blocking_$1" 90 env CUDA_LAUNCH_BLOCKING=1 "${one[@]}" build-gpu/dendrite \
    bench step --device cuda --model "$(model_arg "$1")" --batch 16 --seq 1024 --precision bf16 \
    --steps 1 --warmup 0
  grep -s -m3 -iE 'error|what\(\)' "$out/diagnose_blocking_$1.log" | cut -c1-300 | tee -a "$summary"
  [[ -n $sanitizer ]] || return 0
  gpu_part diagnose_memcheck 90 "${one[@]}" "$sanitizer" --tool memcheck --error-exitcode 1 \
    build-gpu/dendrite bench step --device cuda --model gpt2-tiny --batch 2 --seq 16 \
    --precision bf16 --steps 1 --warmup 0
  grep -s -m6 -E '^=========\s+(Invalid|Program hit|at |ERROR SUMMARY)' "$out/diagnose_memcheck.log" |
    cut -c1-300 | tee -a "$summary"
  return 0
}

if ((stage == 1)); then
  # (Each program under a timeout of its own: one that hangs on the GPU
  # leaves the others their turn, and its name in the log.)
  # shellcheck disable=SC2016  # the loop's variables are its own
  gpu_part gpu_tests_ops 150 bash -c 'rc=0
    for t; do echo "== $t"; timeout --kill-after=5 40 "build-gpu/tests/$t" --gtest_filter="Cuda/*" \
      --gtest_brief=1 || { r=$?; rc=1; ((r == 124 || r == 137)) && echo "== $t TIMED OUT after 40 s"; }; done
    exit $rc' _ "${ops_tests[@]}" || failed_tests gpu_tests_ops
  gpu_part gpu_tests_model 150 build-gpu/tests/cuda_model_test --gtest_filter='Gpu/*' \
    --gtest_brief=1 || failed_tests gpu_tests_model
  ((${#warm_pids[@]})) && { wait "${warm_pids[@]}"; note "[$(elapsed) s] torch.compile warm-up done"; }
  for m in gpt2-124m gpt2-350m; do
    # A step that hung at 124M would hang at 350M too: its 120 s go to the rest.
    if [[ $m == gpt2-350m ]] && grep -q "dendrite_gpt2-124m: TIMED OUT" "$summary"; then
      note "[$(elapsed) s] dendrite_$m: skipped (124M's step timed out)"
    else
      bench_dendrite $m
    fi
    # (A run that only timed out has nothing to name.)
    ((gpu)) && [[ ! -s $out/dendrite_$m.json ]] && grep -qi error "$out/dendrite_$m.log" && diagnose $m
    plan_memory $m
    ((no_compile)) || bench_torch compile $m --compile
    row $m
  done
  # Where the 124M step's time goes on the GPU: CUPTI's record of every
  # kernel, copy and memset of 3 steps, by kernel and part of the step
  # (bench step --profile; its trace has the GPU's lane), for
  # bench/step_roofline.py --measured to set beside the model's.
  if (($(elapsed) < 420)); then
    gpu_part profile_gpt2-124m 90 "${one[@]}" build-gpu/dendrite bench step --device cuda \
      --model gpt2-124m --batch 16 --seq 1024 --precision bf16 --steps 3 --warmup 2 \
      --profile "$out/profile_gpt2-124m.json" --trace "$out/trace_gpt2-124m.json"
    grep -s -A 40 '^device profile' "$out/profile_gpt2-124m.log" | grep -v '^(written' | tee -a "$summary"
  fi
  # Eager PyTorch when the stage has time left (each about 20 s).
  for m in gpt2-124m gpt2-350m; do
    (($(elapsed) < 420)) && bench_torch eager $m && row $m
  done
  # The step with cuBLASLt's epilogues against their steps as kernels, the
  # same build alternated (the model: 22.2 against 28.5 ms at 124M).
  if (($(elapsed) < 450)); then
    bench_dendrite gpt2-124m bare --no-gemm-epilogues
    bench_dendrite gpt2-124m again
    row gpt2-124m
  fi
  # q, k and v as three products against one (the model: 22.7 against 22.2 ms).
  if (($(elapsed) < 480)); then
    bench_dendrite gpt2-124m qkv3 --no-fused-qkv
    row gpt2-124m
  fi
else
  # In order of what a GPU can show and the emulator cannot: the GPU
  # transports first, then the figures.
  # Every grid of 1-8 ranks sharing the one GPU (the staged transport), fp32
  # and bf16, kept gathers, recomputation and overlap off, and the simulated
  # nodes; then one rank's groups of one over NCCL (NCCL refuses two ranks on
  # one GPU); each against one process on the CPU.
  grids() {  # label, ranks, transport, seconds, test binary, filter
    ((launcher)) || { ranks_part "grids_$1"; return 0; }
    gpu_part "grids_$1" "$4" env DENDRITE_TEST_DEVICE=cuda DENDRITE_GPU_TRANSPORT="$3" \
      OMP_NUM_THREADS=1 "$mpirun" -np "$2" --oversubscribe --bind-to none "build-gpu/tests/$5" \
      --gtest_filter="$6"
  }
  every='Models/EveryGrid.*:Models/EveryGridBf16.*'
  grids staged 8 staged 180 parallel_mpi_test "$every"
  grids nccl_groups_of_one 1 nccl 60 parallel_mpi_test "$every:RanksPerNode/SimulatedNodes.*"
  # What the emulator cannot see (its threads switch only at barriers, and
  # blocks run one after another): shared-memory races, by compute-sanitizer's
  # racecheck over the op harness's GPU cases (small shapes; the tool slows
  # each kernel many times); synccheck (misused barriers) and initcheck
  # (device memory read before anything wrote it, which the emulator shows
  # only where its poison reaches a result) end the stage.
  sanitize() {  # tool, seconds
    if [[ -z $sanitizer ]]; then
      note "[$(elapsed) s] sanitize_$1: skipped (no compute-sanitizer on this machine)"
      return 0
    fi
    # shellcheck disable=SC2016  # the loop's variables are its own
    gpu_part "sanitize_$1" "$2" bash -c 'rc=0 s=$1 tool=$2; shift 2
      for t; do echo "== $t"; "$s" --tool "$tool" --error-exitcode 1 "build-gpu/tests/$t" \
        --gtest_filter="Cuda/*" --gtest_brief=1 || rc=1; done
      exit $rc' _ "$sanitizer" "$1" "${ops_tests[@]}"
  }
  sanitize racecheck 90
  # A rank killed mid-run ends the job (on the GPU; on the CPU in the rehearsal).
  device=cpu
  ((gpu)) && device=cuda
  ranks_part "kill_test_$device" 90 env DENDRITE_TEST_DEVICE=$device build-gpu/tests/kill_test \
    --gtest_filter=KillTest.OneRankKilledMidRunEndsTheJobNonZeroWithin30s
  # Bad input on the GPU: a batch far past the GPU's memory must end the run
  # non-zero with the error that names what ran out, the bytes asked and
  # free, and the fix (as the emulator's small device shows).
  # shellcheck disable=SC2016  # the command's variables are its own
  gpu_part oom_error 60 bash -c 'said=$("$@" 2>&1); rc=$?; echo "$said"; echo "exit $rc"
    ((rc != 0)) && grep -q "out of device memory for .* free of" <<< "$said"' _ \
    "${one[@]}" build-gpu/dendrite bench step --device cuda --model gpt2-350m --batch 512 \
    --seq 1024 --precision bf16 --steps 1 --warmup 0
  grep -s -m1 "error: cuda" "$out/oom_error.log" | cut -c1-300 | tee -a "$summary"
  for m in gpt2-124m gpt2-350m; do bench_torch eager $m; row $m; done
  # The node's machine file: this GPU's GEMM rates, memory and bandwidth
  # measured; NVLink, InfiniBand and the 8 GPUs of a node from the published
  # figures of the node's file (h100-node.json or h200-node.json). Then the
  # planner on it.
  gpu_part calibrate 120 "${one[@]}" build-gpu/dendrite calibrate --device cuda \
    --name "$node-measured" --links-from "machines/$node.json" --out "$out/$node-measured.json"
  machine=$out/$node-measured.json rates=measured
  [[ -f $machine ]] || machine=machines/$node.json rates=published  # the rehearsal
  for w in 8 64; do
    part "plan_node_$w" 30 build-gpu/dendrite plan --machine "$machine" --model gpt2-350m \
      --batch 512 --seq 1024 --precision bf16 --world $w --top 5
  done
  # The planner's step on this GPU's measured rates beside stage 1's
  # measured step (its JSON is still there while the machine is warm).
  for m in gpt2-124m gpt2-350m; do
    part "plan_one_$m" 30 build-gpu/dendrite plan --machine "$machine" --model $m --batch 16 \
      --seq 1024 --precision bf16 --world 1 --json
    python3 - "$out/plan_one_$m.log" "$out/../stage1/dendrite_$m.json" "$m" "$rates" <<'PY' | tee -a "$summary"
import json, sys
def last(path):
    try:
        return json.loads([l for l in open(path) if l.startswith("{")][-1])
    except Exception:
        return None
p, d = last(sys.argv[1]), last(sys.argv[2])
if p:
    step = p["ranked"][0]["step_ms"]
    took = f", stage 1 measured {d['step_ms']:.1f} ms ({100 * (step / d['step_ms'] - 1):+.1f}%)" if d else ""
    print(f"planner on the {sys.argv[4]} rates: {sys.argv[3]} B16 T1024 bf16 step {step:.1f} ms{took}")
PY
  done
  # A Llama 3.2 1B-shaped step (its published config, random weights): GQA,
  # RoPE with llama3 scaling, SwiGLU, RMSNorm and a head of 128,256 tokens at
  # B16 T1024 bf16 (55 GB on an H100 in the emulator's count), the planner's
  # memory beside it.
  mkdir -p "$out/llama-1b"
  python3 - "$out/llama-1b/config.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
           "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
           "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 131072,
           "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192},
           "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True},
          open(sys.argv[1], "w"), indent=1)
PY
  bench_dendrite llama-1b
  plan_memory llama-1b
  row llama-1b
  # --gemm-tune (cuBLASLt's picks timed per shape, the fastest with the
  # first's bits kept) against the first pick, run one after the other.
  bench_dendrite gpt2-124m tuned --gemm-tune
  bench_dendrite gpt2-124m untuned
  row gpt2-124m
  grids grad_accum 8 staged 90 grad_accum_mpi_test '*'
  grids staged_nodes 8 staged 150 parallel_mpi_test 'RanksPerNode/SimulatedNodes.*'
  # Attention alone at GPT-2 124M's shape (B16 T1024, 12 heads of 64): the
  # tensor-core kernels (bf16) and the SIMT ones (fp32), checked against the CPU.
  for p in bf16 fp32; do
    gpu_part "attention_$p" 45 "${one[@]}" build-gpu/bench/attention_bench cuda $p 16 1024 12 12 64
  done
  sanitize synccheck 60
  sanitize initcheck 60
  if ((validate_comm)); then
    OUT=$out/validate_comm MPIRUN=$mpirun ranks_part validate_comm 300 bench/validate_comm.sh build-gpu
  fi
fi

note "stage $stage done in $(elapsed) s"
