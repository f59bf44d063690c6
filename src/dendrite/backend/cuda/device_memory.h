// The CUDA backend's device memory: cudaMalloc'd, zeroed on the compute
// stream, and counted (what the run holds and its peak, in the 256-byte
// units cudaMalloc hands out), with an out-of-memory error that names what
// the memory was for, what is free and the fixes. And the SharedArray of a
// group on GPUs: device memory shared by nobody, whose ranges the staged
// transport moves.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "dendrite/comm/communicator.h"
#include "dendrite/core/buffer.h"

namespace dendrite::cuda {

class DeviceMemory {
 public:
  // held: bytes the run holds already (cuBLASLt's workspace), counted in.
  explicit DeviceMemory(size_t held) : allocated_(held), peak_(held) {}
  // Exactly `asked` bytes (so that the tests' emulator sees a read past the
  // end), zeroed on stream.
  void* allocate(size_t asked, cudaStream_t stream);
  // After the work on stream: no kernel may still use p.
  void release(void* p, cudaStream_t stream);
  size_t bytes() const { return allocated_; }
  size_t peak_bytes() const { return peak_; }

 private:
  std::vector<std::pair<void*, size_t>> sizes_;  // live allocations
  size_t allocated_ = 0, peak_ = 0;
};

class DeviceArray final : public SharedArray {
 public:
  DeviceArray(Allocator& memory, int64_t n, DType t);
  ~DeviceArray() override;
  bool shared() const override { return false; }

 private:
  Allocator& memory_;
};

}  // namespace dendrite::cuda
