// is_device_pointer (device_pointer.h), from the CUDA runtime's attributes.
#include "dendrite/comm/cuda/device_pointer.h"

#include <cuda_runtime.h>

namespace dendrite {

bool is_device_pointer(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // host memory the runtime does not know, or no driver: clear it
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

}  // namespace dendrite
