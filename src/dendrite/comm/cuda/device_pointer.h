// What the GPU transports (backend/cuda/staged_communicator, comm/nccl) share:
// telling device memory from host memory. Built with the CUDA backend.
#pragma once

namespace dendrite::cuda {

// Whether p points into device (or managed) memory; false for host memory,
// null, and on a machine without a GPU or driver.
bool is_device_pointer(const void* p);

}  // namespace dendrite::cuda
