#!/usr/bin/env bash
# The prepared check for a lent GPU machine (one NVIDIA GPU, nvcc, PyTorch;
# no OpenMPI, oneDNN or SentencePiece): unpacks the Debian packages that
# scripts/gpu_deps.sh downloaded into .gpu-debs/ (carry it) into a private
# prefix, builds Dendrite with the CUDA backend (Release, 16 jobs, sm_90),
# runs the tests labelled gpu, every grid of 1-8 ranks on the GPU (staged)
# and the NCCL path on one rank, then GPT-2 124M and 350M training steps at
# B16 T1024 in bf16 beside PyTorch eager and compiled on the same GPU, and
# calibrates the GPU into an H200 node's machine file for the planner.
# Logs and one JSON line per bench run go to $OUT (or /tmp/gpu_check); the
# summary is printed last. The tests and figures come first (within about 8
# minutes); the grid, NCCL and kill checks follow (each bounded by a timeout,
# 7.5 minutes at most together): give the call 600 s.
#   scripts/gpu_check.sh [--no-compile] [--validate-comm]
#     --no-compile: skip torch.compile
#     --validate-comm: then bench/validate_comm.sh on the machine's CPU cores
#       (issue 16's per-axis check with a core per rank; about 4 more minutes)
set -uo pipefail
no_compile=0 validate_comm=0
for a in "$@"; do
  case $a in
    --no-compile) no_compile=1 ;;
    --validate-comm) validate_comm=1 ;;
    *) echo "gpu_check: unknown option $a (--no-compile, --validate-comm)"; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }

[[ -d .gpu-debs ]] || { echo "gpu_check: no .gpu-debs/: run scripts/gpu_deps.sh here and carry .gpu-debs"; exit 2; }
prefix=/tmp/dendrite-prefix
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$prefix"; done
lib=$prefix/usr/lib/x86_64-linux-gnu
export OPAL_PREFIX=$prefix/usr PATH=$prefix/usr/bin:$PATH CPATH=$prefix/usr/include
export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_SYSROOT_DIR=$prefix PKG_CONFIG_LIBDIR=$lib/pkgconfig:$prefix/usr/share/pkgconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

note "date: $(date -u +%Y-%m-%dT%H:%MZ)"
note "gpu: $(nvidia-smi -L 2>&1 | head -1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -1)"
note "nvcc: $(nvcc --version | tail -1); torch: $(python3 -c 'import torch; print(torch.__version__)' 2>&1)"

# NCCL: the toolkit's where it has one, else the one PyTorch's nvidia-nccl
# wheel brings (its header and libnccl.so.2).
nccl=()
if [[ ! -f /usr/local/cuda/include/nccl.h ]]; then
  wheel=$(python3 -c 'import importlib.util as u; print(list(u.find_spec("nvidia.nccl").submodule_search_locations)[0])' 2>/dev/null)
  lib=$(ls "$wheel"/lib/libnccl.so* 2>/dev/null | head -1)
  if [[ -f $wheel/include/nccl.h && -n $lib ]]; then
    nccl=(-DNCCL_INCLUDE_DIR="$wheel/include" -DNCCL_LIBRARY="$lib")
    export LD_LIBRARY_PATH=$wheel/lib:$LD_LIBRARY_PATH
  fi
fi
note "nccl: ${nccl[*]:-from the CUDA toolkit}"

if ! cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDENDRITE_CUDA=ON "${nccl[@]}" \
     -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix/usr" \
     -DMPI_CXX_COMPILER="$prefix/usr/bin/mpicxx.openmpi" \
     -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf" > "$out/configure.log" 2>&1; then
  tail -40 "$out/configure.log"; note "configure failed after $(elapsed) s"; exit 1
fi
if ! cmake --build build-gpu -j 16 --target dendrite backend_ops_test cuda_model_test parallel_mpi_test kill_test attention_bench \
     > "$out/build.log" 2>&1; then
  grep -m 20 -B2 -A6 "error" "$out/build.log"; note "build failed after $(elapsed) s"; exit 1
fi
note "built in $(elapsed) s; $(grep -m1 -E 'NCCL transport|no NCCL' "$out/configure.log" || echo 'NCCL: see configure.log')"

(cd build-gpu && timeout 180 ctest -L gpu --output-on-failure --timeout 120) > "$out/gpu_tests.log" 2>&1
note "gpu tests: $(grep -E 'tests passed|tests failed' "$out/gpu_tests.log" | tail -1)"
grep -E "Failed|\*\*\*" "$out/gpu_tests.log" | head -20 | tee -a "$summary"

mpirun=("$prefix/usr/bin/mpirun.openmpi" -np 1 --bind-to none)
# Attention alone at GPT-2 124M's shape (B16 T1024, 12 heads of 64): the
# tensor-core kernels (bf16) and the SIMT ones (fp32), checked against the CPU.
for p in bf16 fp32; do
  timeout 60 "${mpirun[@]}" build-gpu/bench/attention_bench cuda $p 16 1024 12 12 64 \
    > "$out/attention_$p.log" 2>&1
  note "attention $p (exit $?): $(grep -E '^(check|forward|backward)' "$out/attention_$p.log" | tr -s ' ' | tr '\n' ';')"
done
bench() {  # model
  timeout 150 "${mpirun[@]}" build-gpu/dendrite bench step --device cuda --model "$1" --batch 16 \
    --seq 1024 --precision bf16 --steps 10 --warmup 2 --json > "$out/dendrite_$1.json" \
    2> "$out/dendrite_$1.err" || note "dendrite bench $1 failed: $(tail -2 "$out/dendrite_$1.err")"
  for mode in eager compile; do
    [[ $mode == compile && $no_compile == 1 ]] && continue
    local extra=()
    [[ $mode == compile ]] && extra=(--compile)
    timeout 200 python3 bench/pytorch_step.py --device cuda --precision bf16 --model "$1" --batch 16 \
      --seq 1024 --steps 10 --warmup 3 "${extra[@]}" > "$out/torch_${mode}_$1.json" \
      2> "$out/torch_${mode}_$1.err" || note "pytorch $mode $1 failed: $(tail -2 "$out/torch_${mode}_$1.err")"
  done
}
for m in gpt2-124m gpt2-350m; do
  bench "$m"
  # The planner's memory estimate for the same run (any machine file: memory does not depend on it).
  build-gpu/dendrite plan --model "$m" --batch 16 --seq 1024 --precision bf16 \
    --machine machines/alps.json --json 2>/dev/null | tail -1 > "$out/plan_$m.json"
done

python3 - "$out" <<'PY' | tee -a "$summary"
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.loads(open(os.path.join(out, name)).read().strip().splitlines()[-1])
    except Exception:
        return None
for m in ("gpt2-124m", "gpt2-350m"):
    d = load(f"dendrite_{m}.json")
    row = [m]
    p = load(f"plan_{m}.json")
    if d:
        row.append(f"dendrite {d['tokens_per_s']:.0f} tok/s, MFU {100 * d['mfu']:.1f}% of a "
                   f"{d['peak_gflops'] / 1e3:.0f} TFLOP/s bf16 GEMM, {d.get('device_peak_mb', 0):.0f} MB")
        if p:
            row.append(f"planner {p['ranked'][0]['memory_mb']:.0f} MB")
    for mode in ("eager", "compile"):
        t = load(f"torch_{mode}_{m}.json")
        if t:
            row.append(f"torch {mode} {t['tokens_per_s']:.0f} tok/s, {t.get('peak_memory_mb', 0):.0f} MB")
    print(" | ".join(row))
PY
# The node's machine file: this GPU's GEMM rates (bf16 and TF32 by shape), memory and
# bandwidth measured; NVLink, InfiniBand and the 8 GPUs of a node from the published
# figures of machines/h200-node.json (one GPU cannot measure them). Then the planner
# on it: 8 and 64 H200 for GPT-2 350M, and the weak-scaling sweep.
timeout 150 "${mpirun[@]}" build-gpu/dendrite calibrate --device cuda --name h200-node-measured \
  --links-from machines/h200-node.json --out "$out/h200-node-measured.json" > "$out/calibrate.log" 2>&1
note "calibrate on the GPU (exit $?): $(tail -1 "$out/calibrate.log")"
if [[ -f $out/h200-node-measured.json ]]; then
  for w in 8 64; do
    build-gpu/dendrite plan --machine "$out/h200-node-measured.json" --model gpt2-350m --batch 512 \
      --seq 1024 --precision bf16 --world $w --top 5 > "$out/plan_h200_$w.txt" 2>&1
    note "plan $w H200: $(grep -m1 'first choice' "$out/plan_h200_$w.txt")"
  done
  build-gpu/dendrite plan --sweep --machine "$out/h200-node-measured.json" --precision bf16 \
    --overlap all --recompute --json > "$out/sweep_h200.json" 2> "$out/sweep_h200.err"
  note "sweep on the measured file: $out/sweep_h200.json (exit $?)"
fi
# After the figures: every grid of 1-8 ranks on the one GPU (the staged transport: the ranks
# share it) and the NCCL path forced on one rank's groups of one, against one
# process on the CPU (parallel_mpi_test's EveryGrid, GPT-2 and Llama).
grids() {  # label, ranks, transport
  local rc=0
  (cd build-gpu && DENDRITE_TEST_DEVICE=cuda DENDRITE_GPU_TRANSPORT=$3 OMP_NUM_THREADS=1 \
    timeout 150 "$prefix/usr/bin/mpirun.openmpi" -np "$2" --oversubscribe --bind-to none \
    tests/parallel_mpi_test --gtest_filter='Models/EveryGrid.*') > "$out/grids_$1.log" 2>&1 || rc=$?
  note "grids on the GPU, $1: $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/grids_$1.log" | tr '\n' ' ')(exit $rc)"
}
grids staged 8 staged
grids nccl-groups-of-one 1 nccl
# A rank killed mid-run (8 ranks training on the GPU) ends the job within 30 s.
(cd build-gpu && DENDRITE_TEST_DEVICE=cuda timeout 150 tests/kill_test \
  --gtest_filter=KillTest.OneRankKilledMidRunEndsTheJobNonZeroWithin30s) > "$out/kill.log" 2>&1
note "kill test on the GPU (exit $?): $(grep -E '^killed rank|^\[  (PASSED|FAILED)' "$out/kill.log" | tr '\n' ' ')"

if ((validate_comm)); then
  OUT=$out/validate_comm MPIRUN=$prefix/usr/bin/mpirun.openmpi timeout 420 \
    bench/validate_comm.sh build-gpu > "$out/validate_comm.log" 2>&1
  note "validate_comm (exit $?): $(grep -E 'axis figures within|first choice' "$out/validate_comm.log" | tr '\n' ' ')"
fi
note "done in $(elapsed) s"
