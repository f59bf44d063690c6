// Host-to-device copies through pinned host memory made once (a ring), so
// that an upload neither waits for the stream nor stalls the host: the host
// copies the bytes into the ring, the GPU reads them there in the stream's
// order, and a part of the ring is written again only once the copy that
// read it has run (an event per copy in flight). Pageable memory would make
// cudaMemcpyAsync synchronous (the backend used to wait for the stream after
// every upload).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace dendrite::cuda {

class PinnedStaging {
 public:
  explicit PinnedStaging(size_t bytes, int max_in_flight = 16);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Enqueues the copy of `bytes` from host to dst (device memory) on stream;
  // the host buffer may change once it returns. False, copying nothing, when
  // the bytes exceed the ring.
  bool upload(void* dst, const void* host, size_t bytes, cudaStream_t stream);
  // Copies that had to wait for the GPU because the ring was full.
  int64_t waits() const { return waits_; }

 private:
  struct InFlight {
    size_t begin, end;  // of the ring
    cudaEvent_t done;
  };
  // Retires the oldest copy, waiting for it if it has not run yet.
  void retire_oldest();

  char* ring_ = nullptr;
  size_t size_ = 0, at_ = 0;
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> events_, free_;
  int64_t waits_ = 0;
};

}  // namespace dendrite::cuda
