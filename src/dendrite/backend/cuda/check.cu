// Errors of CUDA calls and kernel launches, named by call and kernel.
#include <cuda_runtime.h>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/comm/cuda/error_text.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {
// Does nothing: its attributes say whether the build has code for the GPU.
__global__ void image_probe_kernel() {}
}  // namespace

cudaError_t kernel_image_error() {
  cudaFuncAttributes a{};
  const cudaError_t e = cudaFuncGetAttributes(&a, image_probe_kernel);
  if (e != cudaSuccess) cudaGetLastError();  // reported by the caller, not left for the next check
  return e;
}

void check_cuda(cudaError_t e, const char* call) {
  DENDRITE_CHECK(e == cudaSuccess, "cuda: ", call, " failed: ", error_text(e));
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  if (!raised_by_a_running_kernel(e))
    fail("cuda: kernel ", kernel, " failed to launch: ", cudaGetErrorString(e));
  if (launches_block())
    fail("cuda: kernel ", kernel, " failed while it ran: ", cudaGetErrorString(e));
  fail("cuda: a kernel failed while it ran: ", cudaGetErrorString(e),
       " (reported at the launch of ", kernel, ", which may come after the kernel at fault); ",
       "rerun with CUDA_LAUNCH_BLOCKING=1 to stop at the kernel that failed");
}

}  // namespace dendrite::cuda
