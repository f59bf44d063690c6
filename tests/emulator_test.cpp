// The CUDA emulator's own checks (tests/emulated_cuda), each on a small
// kernel that breaks the rule it checks: without these, a change to the
// emulator that stopped a check from firing would leave every other test
// passing. Compiled against the emulator's cuda_runtime.h, as the backend's
// kernels are; the race check's cases run in emulator_test_racecheck, built
// with ThreadSanitizer (tests/CMakeLists.txt).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "counters.h"
#include "cuda_runtime.h"
#include "emulated_backend.h"

namespace {

using ::testing::HasSubstr;

constexpr uint32_t kPoison = 0x7f7f7f7fu;  // four 0x7f bytes

// The settings of the emulated device back to their defaults, and the
// launch's error cleared, however a test ends.
struct Restore {
  ~Restore() {
    emu::set_reverse_order(false);
    emu::set_interleaved_blocks(1);
    emu::clear_errors();
  }
};

template <class T>
T* device_array(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// A launch that fails: its error, and what the emulator said about it.
struct Failure {
  cudaError_t error;
  std::string said;
};
template <class Launch>
Failure failing(Launch launch) {
  ::testing::internal::CaptureStderr();
  launch();
  const cudaError_t e = cudaGetLastError();
  return {e, ::testing::internal::GetCapturedStderr()};
}

// ---- kernels

constexpr int kThreads = 64;

// Each thread reads its word of the block's shared memory before any thread
// wrote it, then writes the block's index there.
__global__ void read_unwritten_shared_kernel(uint32_t* out) {
  auto* shared = static_cast<uint32_t*>(emu::dynamic_shared());
  const unsigned t = threadIdx.x, b = blockIdx.x;
  out[b * kThreads + t] = shared[t];
  __syncthreads();
  shared[t] = b;
}

// Thread 0 writes the word at `word` of the block's shared memory (the
// launch gives it fewer).
__global__ void write_past_shared_kernel(uint32_t word) {
  if (threadIdx.x == 0) static_cast<uint32_t*>(emu::dynamic_shared())[word] = 1;
}

// Warp 1's first half waits at __syncwarp for its second half, which waits
// at __syncthreads for the first half: neither barrier can open.
__global__ void crossed_barriers_kernel() {
  if (threadIdx.x >= 32 && threadIdx.x < 48)
    __syncwarp();
  else
    __syncthreads();
}

// Lanes shuffle with a mask that is wrong: every lane with a mask of the
// first 16 lanes (exited = false), or the first 16 with the whole warp's
// after the others exited (exited = true).
__global__ void wrong_mask_shuffle_kernel(int* out, bool exited) {
  if (exited && threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_sync(exited ? 0xffffffffu : 0xffffu, int(threadIdx.x), 0);
}

// Thread 0 writes a word of shared memory that every thread then reads, with
// no barrier between: a race.
__global__ void unordered_read_kernel(uint32_t* out) {
  auto* word = static_cast<uint32_t*>(emu::dynamic_shared());
  if (threadIdx.x == 0) *word = 5;
  out[threadIdx.x] = *word;
}

// The same with __syncthreads between the write and the reads: no race.
// Each block writes its own words of out (of blocks * kThreads).
__global__ void ordered_read_kernel(uint32_t* out) {
  auto* word = static_cast<uint32_t*>(emu::dynamic_shared());
  if (threadIdx.x == 0) *word = 5 + blockIdx.x;
  __syncthreads();
  out[blockIdx.x * kThreads + threadIdx.x] = *word;
}

// Block 1's thread 0 reads the word block 0's thread 0 wrote: nothing
// orders two blocks of a launch, so a race whichever block runs first.
__global__ void cross_block_read_kernel(uint32_t* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 5;
  if (blockIdx.x == 1 && threadIdx.x == 0) out[1] = out[0];
}

// ---- the checks

TEST(EmulatorMemory, NewDeviceAndPinnedMemoryHoldPoisonNotZeros) {
  const size_t n = 1000;
  uint32_t* d = device_array<uint32_t>(n);
  EXPECT_THAT(to_host(d, n), ::testing::Each(kPoison));
  // Memory freed and allocated again does not keep what was written to it.
  ASSERT_EQ(cudaMemsetAsync(d, 0, n * sizeof(uint32_t)), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  d = device_array<uint32_t>(n);
  EXPECT_THAT(to_host(d, n), ::testing::Each(kPoison));
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  void* h = nullptr;
  ASSERT_EQ(cudaMallocHost(&h, n * sizeof(uint32_t)), cudaSuccess);
  const auto* words = static_cast<const uint32_t*>(h);
  EXPECT_THAT(std::vector<uint32_t>(words, words + n), ::testing::Each(kPoison));
  ASSERT_EQ(cudaFreeHost(h), cudaSuccess);
}

// The pages of the process that are in memory (/proc/self/statm), in bytes.
size_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%lu %lu", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

// Counting without running reads no device memory, so new memory is not
// poisoned there: its pages stay untouched, and a model whose device memory
// is past the host's (GPT-2 350M at B16 T1024, 26 GB) can still be counted.
TEST(EmulatorMemory, CountingWithoutRunningLeavesNewDeviceMemoryUntouched) {
  struct Running {  // the other tests' mode, however this one ends
    ~Running() { emu::counters::set_count_only(false); }
  } running;
  emu::counters::set_count_only(true);
  const size_t bytes = size_t(256) << 20, before = resident_bytes();
  ASSERT_GT(before, 0u) << "cannot read /proc/self/statm";
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
  const size_t grew = resident_bytes() - before;
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_LT(grew, bytes / 8) << "a count-only allocation of " << (bytes >> 20) << " MiB took "
                             << (grew >> 20) << " MiB of host memory";
}

TEST(EmulatorMemory, EveryBlockStartsWithPoisonedSharedMemoryInEveryOrder) {
  Restore restore;
  const int blocks = 3;
  for (const int order : {0, 1, 2}) {  // in order, reversed, interleaved
    emu::set_reverse_order(order == 1);
    emu::set_interleaved_blocks(order == 2 ? blocks : 1);
    uint32_t* out = device_array<uint32_t>(blocks * kThreads);
    emu::launch(dim3(blocks), dim3(kThreads), kThreads * sizeof(uint32_t), nullptr,
                "read_unwritten_shared_kernel", read_unwritten_shared_kernel)(out);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_THAT(to_host(out, blocks * kThreads), ::testing::Each(kPoison))
        << "order " << order << ": a block read another block's shared memory, or zeros";
    ASSERT_EQ(cudaFree(out), cudaSuccess);
  }
}

// A kernel that uses more shared memory than its launch gave fails the
// launch, naming the block and the bytes; under ASan, which sees the write
// where it happens, ASan reports it.
TEST(EmulatorMemory, AKernelWritingPastItsSharedMemoryFailsItsLaunch) {
  Restore restore;
  auto launch = [] {
    emu::launch(dim3(2), dim3(kThreads), 4 * sizeof(uint32_t), nullptr, "write_past_shared_kernel",
                write_past_shared_kernel)(4u);
  };
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_DEATH(launch(), "use-after-poison");
#else
  const Failure f = failing(launch);
  EXPECT_EQ(f.error, cudaErrorLaunchFailure);
  EXPECT_THAT(f.said, HasSubstr("kernel write_past_shared_kernel, block (0, 0, 0): wrote byte 16 "
                                "of shared memory, past the 16 bytes of dynamic shared memory"));
#endif
  // Within the bytes: no failure.
  const Failure within = failing([] {
    emu::launch(dim3(2), dim3(kThreads), 4 * sizeof(uint32_t), nullptr, "write_past_shared_kernel",
                write_past_shared_kernel)(3u);
  });
  EXPECT_EQ(within.error, cudaSuccess) << within.said;
}

TEST(EmulatorBarriers, ThreadsWaitingAtBarriersNoneCanOpenFailTheLaunch) {
  Restore restore;
  const Failure f = failing([] {
    emu::launch(dim3(2), dim3(kThreads), 0, nullptr, "crossed_barriers_kernel",
                crossed_barriers_kernel)();
  });
  EXPECT_EQ(f.error, cudaErrorLaunchFailure);
  EXPECT_THAT(f.said, HasSubstr("kernel crossed_barriers_kernel, block (0, 0, 0): deadlock"));
}

TEST(EmulatorBarriers, AWarpCollectiveWhoseMaskIsNotTheLanesThatCallItFailsTheLaunch) {
  Restore restore;
  int* out = device_array<int>(32);
  for (const bool exited : {false, true}) {
    const Failure f = failing([out, exited] {
      emu::launch(dim3(1), dim3(32), 0, nullptr, "wrong_mask_shuffle_kernel",
                  wrong_mask_shuffle_kernel)(out, exited);
    });
    EXPECT_EQ(f.error, cudaErrorLaunchFailure);
    EXPECT_THAT(f.said, HasSubstr("kernel wrong_mask_shuffle_kernel, block (0, 0, 0): "));
    EXPECT_THAT(f.said, HasSubstr(exited ? "names lanes that do not exist or have exited"
                                         : "a lane called a warp collective outside its own mask"));
    emu::clear_errors();
  }
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(EmulatorOrders, ARaceThatChangesAResultShowsInOneOrderOfTheThreads) {
  Restore restore;
  std::vector<uint32_t> seen[2];
  for (const bool reverse : {false, true}) {
    emu::set_reverse_order(reverse);
    uint32_t* out = device_array<uint32_t>(kThreads);
    emu::launch(dim3(1), dim3(kThreads), sizeof(uint32_t), nullptr, "unordered_read_kernel",
                unordered_read_kernel)(out);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    seen[reverse] = to_host(out, kThreads);
    ASSERT_EQ(cudaFree(out), cudaSuccess);
  }
  // In order, thread 0 wrote before the others ran; reversed, thread 63 read
  // before thread 0 wrote.
  EXPECT_EQ(seen[0].back(), 5u);
  EXPECT_EQ(seen[1].back(), kPoison);
}

// What the race check sees: emulator_test_racecheck runs these, built with
// ThreadSanitizer; the plain build runs the second only (it cannot see the
// first's race).
TEST(EmulatorRaceCheck, AReadOfAWriteWithNoBarrierBetweenIsReported) {
  // Under ThreadSanitizer the launch is reported and the program stops:
  // the ctest entry emulator_test_racecheck_reports passes on that report.
  uint32_t* out = device_array<uint32_t>(kThreads);
  emu::launch(dim3(1), dim3(kThreads), sizeof(uint32_t), nullptr, "unordered_read_kernel",
              unordered_read_kernel)(out);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(EmulatorRaceCheck, ABarrierBetweenTheWriteAndTheReadsOrdersThem) {
  uint32_t* out = device_array<uint32_t>(kThreads);
  emu::launch(dim3(1), dim3(kThreads), sizeof(uint32_t), nullptr, "ordered_read_kernel",
              ordered_read_kernel)(out);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_THAT(to_host(out, kThreads), ::testing::Each(5u));
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

// Blocks run together (set_interleaved_blocks) are unordered under the race
// check as on a GPU: emulator_test_racecheck_together_reports passes only on
// ThreadSanitizer's report of block 1 reading what block 0 wrote; the plain
// build runs neither (it cannot see the race).
TEST(EmulatorRaceCheck, ABlockReadingWhatAnotherWroteIsReportedWhenBlocksRunTogether) {
  Restore restore;
  emu::set_interleaved_blocks(2);
  uint32_t* out = device_array<uint32_t>(2);
  emu::launch(dim3(2), dim3(kThreads), 0, nullptr, "cross_block_read_kernel",
              cross_block_read_kernel)(out);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

// Its control: four blocks run together, each with its shared word (at an
// address of its own, as every block's shared memory) and its own words of
// out.
TEST(EmulatorRaceCheck, BlocksRunTogetherWithTheirOwnSharedMemoryAndOutputsPassClean) {
  Restore restore;
  emu::set_interleaved_blocks(4);
  uint32_t* out = device_array<uint32_t>(4 * kThreads);
  emu::launch(dim3(4), dim3(kThreads), sizeof(uint32_t), nullptr, "ordered_read_kernel",
              ordered_read_kernel)(out);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<uint32_t> seen = to_host(out, 4 * kThreads);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 5 + i / kThreads) << i;
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

// ---- the host against the streams' work, under the race check

// Streams made while one lives each run their work on a thread of their own
// (emu::Streams::kConcurrent), ordered against the host and each other only
// by events and synchronisations.
struct ConcurrentStreams {
  ConcurrentStreams() { emu::set_streams(emu::Streams::kConcurrent); }
  ~ConcurrentStreams() { emu::set_streams(emu::Streams::kAtOnce); }
  cudaStream_t make() {
    cudaStream_t s = nullptr;
    EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
    made.push_back(s);
    return s;
  }
  void destroy() {
    for (cudaStream_t s : made) EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    made.clear();
  }
  std::vector<cudaStream_t> made;
};

constexpr size_t kWords = 256;

// A concurrent stream, kWords of pinned host memory and as many of device
// memory, freed once the stream is gone.
struct StreamAndBuffers {
  StreamAndBuffers() {
    void* p = nullptr;
    EXPECT_EQ(cudaMallocHost(&p, kWords * sizeof(uint32_t)), cudaSuccess);
    pinned = static_cast<uint32_t*>(p);
  }
  ~StreamAndBuffers() {
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    streams.destroy();
    EXPECT_EQ(cudaFree(d), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  }
  ConcurrentStreams streams;
  cudaStream_t s = streams.make();
  uint32_t* pinned = nullptr;
  uint32_t* d = device_array<uint32_t>(kWords);
};

// The host writes pinned memory again while a copy on a stream may still
// read it, with no synchronisation between: on a GPU the copy takes the
// first bytes or the second. emulator_test_racecheck_reports_host passes on
// ThreadSanitizer's report of the two, however the threads ran.
TEST(EmulatorRaceCheck, AHostWriteToPinnedMemoryACopyStillReadsIsReported) {
  StreamAndBuffers on;
  for (size_t i = 0; i < kWords; ++i) on.pinned[i] = 1;
  ASSERT_EQ(
      cudaMemcpyAsync(on.d, on.pinned, kWords * sizeof(uint32_t), cudaMemcpyHostToDevice, on.s),
      cudaSuccess);
  for (size_t i = 0; i < kWords; ++i) on.pinned[i] = 2;  // the race
}

// The host reads pinned memory that a copy from the device writes, before
// waiting for it: emulator_test_racecheck_reports_host_read passes on the
// report. (The plain build runs neither: what the host reads there depends
// on the timing.)
TEST(EmulatorRaceCheck, AHostReadOfPinnedMemoryACopyStillWritesIsReported) {
  StreamAndBuffers on;
  ASSERT_EQ(cudaMemsetAsync(on.d, 1, kWords * sizeof(uint32_t), on.s), cudaSuccess);
  ASSERT_EQ(
      cudaMemcpyAsync(on.pinned, on.d, kWords * sizeof(uint32_t), cudaMemcpyDeviceToHost, on.s),
      cudaSuccess);
  uint32_t seen = 0;
  for (size_t i = 0; i < kWords; ++i) seen |= on.pinned[i];  // the race
  std::printf("read before the copy ran or after: %x\n", seen);
}

// A copy on one stream reads what a copy on another writes, with no event
// between: emulator_test_racecheck_reports_streams passes on the report.
TEST(EmulatorRaceCheck, TwoStreamsWithNoEventBetweenAreReported) {
  ConcurrentStreams streams;
  cudaStream_t writer = streams.make(), reader = streams.make();
  uint32_t* a = device_array<uint32_t>(kWords);
  uint32_t* b = device_array<uint32_t>(kWords);
  ASSERT_EQ(cudaMemsetAsync(a, 1, kWords * sizeof(uint32_t), writer), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, a, kWords * sizeof(uint32_t), cudaMemcpyDeviceToDevice, reader),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(writer), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
  streams.destroy();
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

// Their controls, clean under the race check (and run in the plain build):
// an event the host waits for before it writes the pinned memory again; a
// stream that waits for another's event before it reads what that one
// wrote; a kernel's results read back by a copy to pageable memory, which
// returns once it has run; a query that says an event has passed; and a
// copy to pinned memory read after its stream's synchronisation.
TEST(EmulatorRaceCheck, EventsAndSynchronisationsOrderTheHostAndTheStreams) {
  ConcurrentStreams streams;
  cudaStream_t writer = streams.make(), reader = streams.make();
  void* p = nullptr;
  ASSERT_EQ(cudaMallocHost(&p, kWords * sizeof(uint32_t)), cudaSuccess);
  auto* pinned = static_cast<uint32_t*>(p);
  uint32_t* a = device_array<uint32_t>(kWords);
  uint32_t* b = device_array<uint32_t>(kWords);
  cudaEvent_t uploaded = nullptr, written = nullptr;
  ASSERT_EQ(cudaEventCreate(&uploaded), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&written), cudaSuccess);
  for (size_t i = 0; i < kWords; ++i) pinned[i] = 1;
  ASSERT_EQ(cudaMemcpyAsync(a, pinned, kWords * sizeof(uint32_t), cudaMemcpyHostToDevice, writer),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(uploaded, writer), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(uploaded), cudaSuccess);
  for (size_t i = 0; i < kWords; ++i) pinned[i] = 2;
  // The pinned memory's second bytes, after the first copy: a's words are 2.
  ASSERT_EQ(cudaMemcpyAsync(a, pinned, kWords * sizeof(uint32_t), cudaMemcpyHostToDevice, writer),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(written, writer), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(reader, written, 0), cudaSuccess);
  emu::launch(dim3(kWords / kThreads), dim3(kThreads), sizeof(uint32_t), reader,
              "ordered_read_kernel", ordered_read_kernel)(b);
  // The host waits for the kernel's results (the copy to pageable memory),
  // then for the first stream by polling its event.
  std::vector<uint32_t> read(kWords);
  ASSERT_EQ(
      cudaMemcpyAsync(read.data(), b, kWords * sizeof(uint32_t), cudaMemcpyDeviceToHost, reader),
      cudaSuccess);
  while (cudaEventQuery(written) == cudaErrorNotReady) {
  }
  for (size_t i = 0; i < kWords; ++i) pinned[i] = 3;
  std::vector<uint32_t> uploaded_words(kWords);
  ASSERT_EQ(cudaMemcpyAsync(uploaded_words.data(), a, kWords * sizeof(uint32_t),
                            cudaMemcpyDeviceToHost, writer),
            cudaSuccess);
  // A copy to pinned memory returns at once: the host reads it after the
  // stream's synchronisation.
  ASSERT_EQ(cudaMemcpyAsync(pinned, b, kWords * sizeof(uint32_t), cudaMemcpyDeviceToHost, reader),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
  const std::vector<uint32_t> downloaded(pinned, pinned + kWords);
  streams.destroy();
  for (size_t i = 0; i < kWords; ++i) EXPECT_EQ(read[i], 5 + i / kThreads) << i;
  EXPECT_THAT(uploaded_words, ::testing::Each(2u));
  EXPECT_EQ(downloaded, read);
  EXPECT_EQ(cudaEventDestroy(uploaded), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(written), cudaSuccess);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(p), cudaSuccess);
}

}  // namespace
