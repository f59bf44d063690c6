#include "dendrite/comm/cuda/error_text.h"

#include <cstdlib>
#include <cstring>

namespace dendrite::cuda {

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

bool launches_block() {
  const char* v = std::getenv("CUDA_LAUNCH_BLOCKING");
  return v && std::strcmp(v, "1") == 0;
}

std::string error_text(cudaError_t e) {
  std::string text = cudaGetErrorString(e);
  if (raised_by_a_running_kernel(e) && !launches_block())
    text +=
        "; a kernel failed while it ran, and CUDA reports that at a later call: rerun with "
        "CUDA_LAUNCH_BLOCKING=1 to stop at the kernel that failed";
  return text;
}

}  // namespace dendrite::cuda
