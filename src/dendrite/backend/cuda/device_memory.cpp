// The CUDA backend's device memory (device_memory.h).
#include "dendrite/backend/cuda/device_memory.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/comm/cuda/error_text.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

// Bytes for a message: "512 bytes", "3.0 KiB", "40.0 MiB", "139.8 GiB".
std::string bytes_text(size_t bytes) {
  if (bytes < 1024) return str(bytes, " bytes");
  const char* unit[] = {"KiB", "MiB", "GiB"};
  double v = double(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 2) v /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", v, unit[u]);
  return text;
}

}  // namespace

void* DeviceMemory::allocate(size_t asked, cudaStream_t stream) {
  // Counted in the 256-byte units cudaMalloc hands out; asked for exactly,
  // so that the tests' emulator (tests/emulated_cuda) sees a read past the end.
  const size_t bytes = (std::max<size_t>(asked, 1) + 255) / 256 * 256;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, asked);
  if (e != cudaSuccess && e != cudaErrorMemoryAllocation) {
    // Not the device's memory: most often a kernel's fault, which CUDA
    // returns from every call after it.
    const char* what = AllocationPurpose::current();
    fail("cuda: cudaMalloc", what ? str(" for ", what) : std::string(), " failed: ", error_text(e));
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    const char* what = AllocationPurpose::current();
    fail("cuda: out of device memory", what ? str(" for ", what) : std::string(), ": asked for ",
         bytes_text(bytes), " with ", bytes_text(free), " free of ", bytes_text(total), " (",
         bytes_text(allocated_), " held by this run); use a smaller ",
         "--batch or more --grad-accum micro-batches, a larger z, or --recompute");
  }
  check_cuda(cudaMemsetAsync(p, 0, asked, stream), "cudaMemsetAsync");
  sizes_.push_back({p, bytes});
  allocated_ += bytes;
  peak_ = std::max(peak_, allocated_);
  return p;
}

void DeviceMemory::release(void* p, cudaStream_t stream) {
  if (!p) return;
  cudaStreamSynchronize(stream);  // no kernel may still use it
  for (size_t i = 0; i < sizes_.size(); ++i)
    if (sizes_[i].first == p) {
      allocated_ -= sizes_[i].second;
      sizes_[i] = sizes_.back();
      sizes_.pop_back();
      break;
    }
  cudaFree(p);
}

DeviceArray::DeviceArray(Allocator& memory, int64_t n, DType t) : memory_(memory) {
  n_ = n;
  dtype_ = t;
  bytes_ = static_cast<std::byte*>(memory.allocate(std::max<size_t>(1, size_t(n) * dtype_size(t))));
}

DeviceArray::~DeviceArray() { memory_.release(bytes_); }

}  // namespace dendrite::cuda
