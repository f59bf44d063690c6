// Errors of CUDA calls and kernel launches, named by call and kernel.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

// Errors a kernel raises while it runs. The GPU reports them at the next
// CUDA call of the process, which may come kernels later, and they stay.
bool raised_by_a_running_kernel(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
      return true;
    default:
      return false;
  }
}

// Whether every launch waits for its kernel (CUDA_LAUNCH_BLOCKING=1): a
// kernel's error is then reported at its own launch.
bool launches_block() {
  const char* v = std::getenv("CUDA_LAUNCH_BLOCKING");
  return v && std::strcmp(v, "1") == 0;
}

constexpr const char* kFindIt =
    "; a kernel failed while it ran, and CUDA reports that at a later call: rerun with "
    "CUDA_LAUNCH_BLOCKING=1 to stop at the kernel that failed";

}  // namespace

std::string error_text(cudaError_t e) {
  std::string text = cudaGetErrorString(e);
  if (raised_by_a_running_kernel(e) && !launches_block()) text += kFindIt;
  return text;
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
