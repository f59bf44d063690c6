// The CUDA backend built on the CPU emulator (tests/CMakeLists.txt,
// dendrite_cuda_emulated): src/dendrite/backend/cuda compiled against this
// folder's cuda_runtime.h and cublasLt.h, with its names renamed so that it
// links beside the real backend. Tests only.
#pragma once

#include <memory>

#include "dendrite/backend/backend.h"

namespace dendrite {

// make_cuda_backend of the emulated build: one emulated GPU, device() kCuda.
std::unique_ptr<Backend> make_emulated_cuda_backend(const BackendOptions& options);

}  // namespace dendrite

namespace emu {
// Device memory the emulated GPU has (default 4 GiB); cudaMalloc fails past it.
void set_device_memory(size_t bytes);
// GPUs the emulated machine shows (default 1): one rank per GPU lets the
// CUDA backend choose the NCCL transport.
void set_device_count(int n);
// Run each block's threads, each warp's lanes and each grid's blocks from the
// last instead of the first (default false). Threads that read what another
// wrote without a barrier between see it in one order and not in the other,
// so a test passing in both finds such races where they change a result.
void set_reverse_order(bool reverse);
}  // namespace emu
