// What the CUDA emulator's files share (emulator.h): the runtime's state and
// errors (runtime.cpp), the streams' queues (streams.cpp), and the limits of
// shared memory. Internal to the emulator's files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_runtime.h"

namespace emu {

constexpr size_t kDefaultSharedLimit = 48 << 10, kOptInSharedLimit = 227 << 10;

// ---- the sums of products as a GPU's hardware rounds them (gpu_rounding.cpp)

// Whether set_gpu_rounding is on.
bool gpu_rounds();
// acc plus n exact products as a tensor core adds them (the model of
// set_gpu_rounding): each term cut toward zero to the fp32 grid of the
// largest, the sum cut toward zero to fp32.
float tensor_core_sum(float acc, const float* products, int n);

// ---- the runtime's state

struct Runtime {
  std::mutex launch;                        // one launch at a time
  std::mutex memory;                        // guards the rest
  std::map<uintptr_t, size_t> allocations;  // device memory: start -> bytes
  std::map<uintptr_t, size_t> pinned;       // pinned host memory: start -> bytes
  size_t used = 0, capacity = size_t(4) << 30;
  int devices = 1;  // GPUs the machine shows (one memory serves them all)
  int major = 9, minor = 0;                    // their compute capability (an H100's, H200's)
  bool kernel_image = true;                    // the build has code for them
  std::map<const void*, size_t> shared_limit;  // cudaFuncAttributeMaxDynamicSharedMemorySize
  // A failure of work on a concurrent stream: it stays (stream_error).
  cudaError_t sticky = cudaSuccess;
  std::string sticky_detail;
  std::string fault;  // fault_next_launch's kernel name
};
Runtime& rt();

// The thread runs a concurrent stream's work: its failures stay (fail).
extern thread_local bool t_stream_worker;
// Prints detail and sets the calling thread's last error to e, or on a
// concurrent stream's thread the error that stays; returns e.
cudaError_t fail(cudaError_t e, const std::string& detail);
// The error a failure on a concurrent stream left (cudaSuccess: none).
cudaError_t sticky_error();

// ---- the streams' queues

struct Queue;  // a stream's work, in order
// A piece of work enqueued: its place in its queue (0: none), and, for the
// race check (race_check.h), what orders it: the enqueuer releases `before`
// as it enqueues and the stream acquires it before running the work; the
// stream releases `after` once the work has run, and whoever waits for it
// acquires it.
struct Ticket {
  struct Sync {
    char before = 0, after = 0;
  };
  uint64_t n = 0;
  std::shared_ptr<Sync> sync;
};
// The queue of stream s (null: the default stream).
const std::shared_ptr<Queue>& queue_of(EmulatedStream* s);
// Enqueues work on q; returns its ticket (q has run it once finished reaches it).
Ticket enqueue(const std::shared_ptr<Queue>& q, std::function<void()> work);
// Returns once q has run the work of `t`, which then comes before what the
// caller does next.
void wait_for(const Queue& q, const Ticket& t);
// Every stream's work enqueued so far has run (what cudaFree waits for).
void drain_all();

}  // namespace emu
