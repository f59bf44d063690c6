// A hash of a matrix's bits (kernels.h: bits_hash), for GEMM tuning's test
// that a trial algorithm gives the default's result (gemm_tuning.cpp). Each
// 16-bit word is mixed with its position and the mixes are added modulo
// 2^64: a sum, so any order of the threads gives the same hash, and each
// thread keeps its own partial (no atomics, no barriers).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "dendrite/backend/cuda/common.cuh"
#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

constexpr int kHashThreads = 256;
constexpr int kHashBlocks = 64;

// splitmix64's finaliser: every input bit moves every output bit.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// rows of `words` 16-bit words, `ld` words apart; partials[thread] = the
// sum of the thread's words' mixes.
__global__ void __launch_bounds__(kHashThreads)
    bits_hash_kernel(uint64_t* partials, const uint16_t* p, int64_t rows, int64_t words,
                     int64_t ld) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x, n = rows * words;
  uint64_t h = 0;
  for (int64_t i = t; i < n; i += step) {
    const int64_t r = i / words, c = i - r * words;
    h += mix64(uint64_t(i) * 0x9e3779b97f4a7c15ull + uint64_t(p[r * ld + c]) + 1);
  }
  partials[t] = h;
}

}  // namespace

uint64_t bits_hash(const void* p, int64_t rows, int64_t row_bytes, int64_t ld_bytes, void* scratch,
                   cudaStream_t stream) {
  DENDRITE_CHECK(row_bytes % 2 == 0 && ld_bytes % 2 == 0 && ld_bytes >= row_bytes,
                 "bits_hash: rows of ", row_bytes, " bytes, ", ld_bytes,
                 " apart: not of 16-bit words");
  const int64_t words = row_bytes / 2, n = rows * words;
  if (n == 0) return 0;
  const unsigned blocks =
      unsigned(std::min<int64_t>(kHashBlocks, (n + kHashThreads - 1) / kHashThreads));
  static_assert(size_t(kHashBlocks) * kHashThreads * sizeof(uint64_t) <= kScratchBytes);
  auto* partials = static_cast<uint64_t*>(scratch);
  DENDRITE_LAUNCH(blocks, kHashThreads, 0, stream, bits_hash_kernel)
  (partials, static_cast<const uint16_t*>(p), rows, words, ld_bytes / 2);
  check_launch("bits_hash");
  std::vector<uint64_t> host(size_t(blocks) * kHashThreads);
  check_cuda(cudaMemcpyAsync(host.data(), partials, host.size() * sizeof(uint64_t),
                             cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (bits_hash)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (bits_hash)");
  uint64_t h = 0;
  for (uint64_t x : host) h += x;
  return h;
}

}  // namespace dendrite::cuda
