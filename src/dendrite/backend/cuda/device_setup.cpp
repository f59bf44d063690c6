// The GPUs visible here, and the GPU of one rank (device_setup.h).
#include "dendrite/backend/cuda/device_setup.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/check.h"

// The architectures the build compiled the kernels for (CMakeLists.txt).
#ifndef DENDRITE_CUDA_ARCHITECTURES
#define DENDRITE_CUDA_ARCHITECTURES "(not recorded)"
#endif

namespace dendrite::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the error, report none
    return 0;
  }
  return n;
}

DeviceChoice choose_device(const BackendOptions& o) {
  const int count = device_count();
  DENDRITE_CHECK(count > 0, "device: --device cuda, but no CUDA GPU is visible here ",
                 "(cudaGetDeviceCount found none: no GPU, no driver, or CUDA_VISIBLE_DEVICES ",
                 "hides them); run with --device cpu");
  DeviceChoice d;
  d.device = o.node_rank % count;
  d.shared_by = (std::max(o.node_ranks, 1) + count - 1 - d.device) / count;
  d.node_gpus = count;
  check_cuda(cudaSetDevice(d.device), "cudaSetDevice");
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, d.device), "cudaGetDeviceProperties");
  d.name = p.name;
  d.total_bytes = p.totalGlobalMem;
  DENDRITE_CHECK(p.major >= 8, "device: ", p.name, " has compute capability ", p.major, ".",
                 p.minor, "; the CUDA backend needs 8.0 or newer (bf16 tensor cores and ",
                 "cp.async: A100, the RTX 30 series, H100 and later); run with --device cpu");
  const cudaError_t image = kernel_image_error();
  DENDRITE_CHECK(
      image != cudaErrorNoKernelImageForDevice && image != cudaErrorInvalidDeviceFunction,
      "device: this build has no GPU code for ", p.name, " (compute capability ", p.major, ".",
      p.minor, "; built for CMAKE_CUDA_ARCHITECTURES ", DENDRITE_CUDA_ARCHITECTURES,
      "); rebuild with cmake -DCMAKE_CUDA_ARCHITECTURES=", p.major, p.minor,
      " (or native), or run with --device cpu");
  check_cuda(image, "cudaFuncGetAttributes");
  return d;
}

}  // namespace dendrite::cuda
