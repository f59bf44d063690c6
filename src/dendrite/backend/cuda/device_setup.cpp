// The GPUs visible here, and the GPU of one rank (device_setup.h).
#include "dendrite/backend/cuda/device_setup.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/check.h"

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
  return d;
}

}  // namespace dendrite::cuda
