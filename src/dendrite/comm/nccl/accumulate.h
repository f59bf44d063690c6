// out[n] += part[n] on `stream` (accumulate.cu): what NCCL's reduce-scatter
// lacks for the accumulating form the weight stream needs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dendrite::nccl {

cudaError_t accumulate(float* out, const float* part, int64_t n, cudaStream_t stream);

}  // namespace dendrite::nccl
