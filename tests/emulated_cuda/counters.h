// The emulated GPU's counters: what a stretch of host code asked of the GPU
// (kernel launches by name, cuBLASLt products with their shapes, host
// synchronisations, device allocations and frees, copies and memsets), each
// attributed to the Backend op that issued it (counting_backend.h) and to the
// part of the training step it ran in (the step's trace spans, core/trace.h).
// Tests only: the emulator (runtime.cpp, scheduler.cpp, streams.cpp,
// cublas_lt.cpp) calls the hooks; a step's anatomy is read from start() to
// stop().
//
// Host synchronisations counted (the CUDA runtime's API synchronisation
// rules): cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize
// where called; a device-to-host cudaMemcpyAsync into pageable memory (it
// returns once the copy is done, so the host waits for the stream's work
// before it); cudaFree (it waits for the device). A host-to-device copy from
// pageable memory may block while the driver stages it: counted with the
// copies, not as a synchronisation. Every host buffer here is pageable (the
// backend pins none).
//
// Count-only mode (set_count_only): launches, products, memsets and
// device-to-device copies are counted but not run, so that a step of a real
// model size (GPT-2 124M at B16 T1024) is counted on the CPU in seconds. The
// host takes the same path (the device's values never steer it in a
// training step; the anatomy test checks that the counts match a run that
// executes), and reads whatever the device memory holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct dim3;

namespace emu::counters {

// ---- hooks the emulator calls (cheap when not recording)
void launch(const char* kernel, const dim3& grid, const dim3& block);
// A cuBLASLt product D[m, n] = op(A) op(B) (+ C): column-major m, n, k as cuBLASLt sees them;
// aux_bytes per element of an [m, n] auxiliary buffer the epilogue writes
// (GELU's input) or reads (DGELU's), 0 without one.
void matmul(uint64_t m, uint64_t n, uint64_t k, int a_bytes, int b_bytes, int d_bytes,
            bool accumulate, int aux_bytes);
void sync(const char* call);
void allocation(size_t bytes);
void free(size_t bytes);
enum class Copy { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };
void copy(Copy kind, size_t bytes);
void memset(size_t bytes);

// Launches, products, memsets and device-to-device copies are counted, not run.
void set_count_only(bool on);
bool count_only();

// ---- the op being issued (counting_backend.h): a name and its sizes
using OpArgs = std::vector<std::pair<const char*, double>>;
class OpScope {
 public:
  OpScope(const char* op, OpArgs args);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  bool outermost_ = false;
};

// ---- reading a step
// Clears the counts and records from now on; also records the step's trace
// spans (core/trace.h), which name the parts.
void start();
// Stops recording; returns the anatomy as one JSON object (counters.cpp
// describes its fields).
std::string stop();

}  // namespace emu::counters
