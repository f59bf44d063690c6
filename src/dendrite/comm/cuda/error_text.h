// The words for a CUDA error, shared by the CUDA backend and the GPU
// transports. Built with the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace dendrite::cuda {

// Whether e is an error a kernel raised while it ran: the GPU reports it at a
// later CUDA call of the process, whichever call that is, and every call after.
bool raised_by_a_running_kernel(cudaError_t e);
// Whether every launch waits for its kernel (CUDA_LAUNCH_BLOCKING=1), so that
// a kernel's error is reported at its own launch.
bool launches_block();
// cudaGetErrorString(e), and for an error a kernel raised while it ran, how
// to find that kernel.
std::string error_text(cudaError_t e);

}  // namespace dendrite::cuda
