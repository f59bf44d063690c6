// The pinned ring of uploads (pinned_staging.h).
#include "dendrite/backend/cuda/pinned_staging.h"

#include <cstring>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

PinnedStaging::PinnedStaging(size_t bytes, int max_in_flight) : size_(bytes) {
  void* p = nullptr;
  check_cuda(cudaMallocHost(&p, bytes), "cudaMallocHost (the staging of uploads)");
  ring_ = static_cast<char*>(p);
  events_.resize(size_t(max_in_flight));
  for (cudaEvent_t& e : events_)
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  free_ = events_;
}

PinnedStaging::~PinnedStaging() {
  // No throw here: a failed kernel was reported (or will be) by a call that can.
  for (const InFlight& f : in_flight_) cudaEventSynchronize(f.done);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  cudaFreeHost(ring_);
}

void PinnedStaging::retire_oldest() {
  const InFlight f = in_flight_.front();
  if (cudaEventQuery(f.done) != cudaSuccess) {
    ++waits_;
    check_cuda(cudaEventSynchronize(f.done), "cudaEventSynchronize (a staged upload)");
  }
  free_.push_back(f.done);
  in_flight_.pop_front();
}

bool PinnedStaging::upload(void* dst, const void* host, size_t bytes, cudaStream_t stream) {
  if (bytes > size_) return false;
  const size_t begin = at_ + bytes <= size_ ? at_ : 0, end = begin + bytes;
  // Copies run in the order they were enqueued (one stream), so the oldest
  // are retired first until none still reads [begin, end).
  auto overlaps = [&] {
    for (const InFlight& f : in_flight_)
      if (f.begin < end && begin < f.end) return true;
    return false;
  };
  while (!in_flight_.empty() && (free_.empty() || overlaps())) retire_oldest();
  std::memcpy(ring_ + begin, host, bytes);
  check_cuda(cudaMemcpyAsync(dst, ring_ + begin, bytes, cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync (upload)");
  const cudaEvent_t done = free_.back();
  free_.pop_back();
  check_cuda(cudaEventRecord(done, stream), "cudaEventRecord (a staged upload)");
  in_flight_.push_back({begin, end, done});
  at_ = end;
  return true;
}

}  // namespace dendrite::cuda
