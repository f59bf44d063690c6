// is_device_pointer (device_pointer.h), from the CUDA runtime's attributes.
#include "dendrite/comm/cuda/device_pointer.h"

#include <cuda_runtime.h>

#include "dendrite/comm/cuda/error_text.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

bool is_device_pointer(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  // Host memory the runtime does not know is cudaMemoryTypeUnregistered, not
  // an error (CUDA 11 on), so an error here is a real one, most often a
  // kernel's fault that CUDA reports at the next call: report it rather than
  // clear it with cudaGetLastError, which would hide it from every later check.
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    // No GPU or no driver (a CUDA build on a CPU machine): no memory is the
    // device's, and no kernel ran whose error clearing this could hide.
    cudaGetLastError();
    return false;
  }
  DENDRITE_CHECK(e == cudaSuccess, "cuda: cudaPointerGetAttributes failed: ", error_text(e));
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

}  // namespace dendrite::cuda
