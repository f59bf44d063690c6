// The accumulating reduce-scatter's second half (nccl_communicator.cpp):
// out[i] += part[i], on the axis stream, after NCCL has reduced into part.
// One thread per element, 256 per block: a memory-bound add.
#include <cuda_runtime.h>

#include <cstdint>

#include "dendrite/comm/nccl/accumulate.h"

namespace dendrite::nccl {

namespace {
__global__ void add_kernel(float* out, const float* part, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] += part[i];
}
}  // namespace

cudaError_t accumulate(float* out, const float* part, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
#ifdef DENDRITE_CUDA_EMULATION  // the tests' CPU emulator (tests/emulated_cuda)
  emu::launch(static_cast<unsigned>(blocks), threads, 0, stream, "add_kernel", add_kernel)(out, part,
                                                                                          n);
#else
  add_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(out, part, n);
#endif
  return cudaGetLastError();
}

}  // namespace dendrite::nccl
