// The CUDA backend built on the CPU emulator (tests/CMakeLists.txt,
// dendrite_cuda_emulated): src/dendrite/backend/cuda compiled against this
// folder's cuda_runtime.h and cublasLt.h, its namespaces cuda and nccl
// renamed cuda_emulated and nccl_emulated so that it links beside the real
// backend. Tests only.
#pragma once

#include <memory>
#include <string>

#include "dendrite/backend/backend.h"

namespace dendrite {

namespace cuda_emulated {  // backend/cuda/device_setup.h, built on the emulator
std::unique_ptr<Backend> make_backend(const BackendOptions& options);
int device_count();
}  // namespace cuda_emulated

// cuda::make_backend of the emulated build: one emulated GPU, device() kCuda.
inline std::unique_ptr<Backend> make_emulated_cuda_backend(const BackendOptions& options) {
  return cuda_emulated::make_backend(options);
}
// cuda::device_count of the emulated build: the GPUs set_device_count shows.
inline int emulated_cuda_device_count() { return cuda_emulated::device_count(); }

}  // namespace dendrite

namespace emu {
// Device memory the emulated GPU has (default 4 GiB); cudaMalloc fails past it.
void set_device_memory(size_t bytes);
// GPUs the emulated machine shows (default 1): one rank per GPU lets the
// CUDA backend choose the NCCL transport.
void set_device_count(int n);
// The emulated GPUs' compute capability (default 9.0, an H100's or H200's).
void set_compute_capability(int major, int minor);
// Whether the build has code for them (default true; false: cudaFuncGetAttributes
// says there is no kernel image, as for a GPU the build's architectures leave out).
void set_kernel_image(bool present);
// Run each block's threads, each warp's lanes and each grid's blocks from the
// last instead of the first (default false). Threads that read what another
// wrote without a barrier between see it in one order and not in the other,
// so a test passing in both finds such races where they change a result.
void set_reverse_order(bool reverse);
// Run up to `blocks` blocks of a grid together (default 1: one after
// another), at most 4096 threads in all: their threads interleave at every
// barrier, block by block, as blocks resident on a GPU at once. Blocks that
// share what they should not (scratch memory indexed without blockIdx, say)
// see each other's writes between their barriers.
void set_interleaved_blocks(int blocks);

// How the emulated kernels and cuBLASLt round their sums of products. By
// default (false) as written: the tensor-core product m16n8k16 adds its 16
// products in fp32 in k order, nearest-even; cuBLASLt sums in double. With
// gpu_rounding, as a model of a GPU's hardware (after Fasi, Higham, Mikaitis
// and Pranesh, "Numerical behavior of NVIDIA tensor cores", 2021, measured
// on an A100; an H200's is not measured): tensor cores (m16n8k16, and
// cuBLASLt's bf16 and TF32 products) add the accumulator and 8 exact
// products at a time, each cut toward zero to the fp32 grid of the largest,
// and cut the sum toward zero to fp32; cuBLASLt's fp32 products chain one
// fp32 FMA per k. Tests whose bounds are a GPU's check them with it.
void set_gpu_rounding(bool on);

// How the emulated streams run their work (emulator.h). A stream keeps the
// way in force when it was made, so set it before making the backend. Where
// it is not set, DENDRITE_EMULATED_STREAMS chooses (at-once, concurrent,
// collectives-late, compute-late), for the tests mpirun starts.
enum class Streams {
  kAtOnce,      // on the calling thread, before the call returns (the default)
  kConcurrent,  // each stream a host thread, ordered only by events and synchronisations
  // Concurrent, and the streams that carry collectives (the NCCL transport's
  // axis streams) sleep before each piece of their work: work that reads a
  // collective's result, or overwrites what it sends, without waiting for it
  // finds the data not yet there, or changed.
  kCollectivesLate,
  // Concurrent, and the other streams (the compute stream) sleep before each
  // piece of work: a collective that does not wait for the compute stream's
  // work sends what is not written yet.
  kComputeLate,
};
void set_streams(Streams s);
// CUDA_LAUNCH_BLOCKING=1 in the environment makes every stream made after it
// run its work at once, as launches that wait for their kernels do.

// The next launch of a kernel whose name contains `name` fails while it runs
// with an illegal address, as a faulting kernel on a GPU (an error that
// stays: clear_errors ends it).
void fault_next_launch(const std::string& name);
// Forgets the errors that stay (what a test does after provoking one).
void clear_errors();
// The slices the emulated cuBLASLt's last product split its sum over K into
// (1: none; cublasLt.h).
int last_gemm_splits();
// The emulated NCCL communicators this process has made (ncclCommInitRank
// calls): a training step must make none.
int nccl_communicators_made();
}  // namespace emu
