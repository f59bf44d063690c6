// Errors of kernel launches, named by kernel.
#include <cuda_runtime.h>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  DENDRITE_CHECK(e == cudaSuccess, "cuda: kernel ", kernel, " failed to launch: ",
                 cudaGetErrorString(e));
}

}  // namespace dendrite::cuda
