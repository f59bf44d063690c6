// Internal to comm/nccl/: one collective of the NCCL transport in flight, as
// the communicator posts it (nccl_communicator.cpp) and its watchdog follows
// it (nccl_watchdog.h): its events on the axis stream and on the compute
// stream.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/cuda/error_text.h"
#include "dendrite/core/check.h"

namespace dendrite::nccl {

inline void check_cuda(cudaError_t e, const char* call, const std::string& where) {
  DENDRITE_CHECK(e == cudaSuccess, "nccl transport (", where, "): ", call,
                 " failed: ", cuda::error_text(e));
}

// One collective in flight: its events on the axis stream (start, done) and
// on the compute stream (the stretch the compute stream stood waiting).
struct Op {
  Collective kind = Collective::kAllReduce;
  int64_t bytes = 0;
  cudaEvent_t ready = nullptr, start = nullptr, done = nullptr;
  cudaEvent_t wait_begin = nullptr, wait_end = nullptr;
  // The compute stream's wait is issued (wait_* recorded): set by the caller's
  // thread after recording, read by the watchdog's.
  std::atomic<bool> waited{false};
  // When the watchdog first saw its axis stream start it (watchdog only).
  bool started = false;
  std::chrono::steady_clock::time_point started_at{};
  Op() {
    for (cudaEvent_t* e : {&ready, &start, &done, &wait_begin, &wait_end})
      check_cuda(cudaEventCreate(e), "cudaEventCreate", "event");
  }
  ~Op() {
    for (cudaEvent_t e : {ready, start, done, wait_begin, wait_end}) cudaEventDestroy(e);
  }
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
};

}  // namespace dendrite::nccl
