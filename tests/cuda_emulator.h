// Runs CUDA kernels written for it on the CPU, for tests on machines without
// a GPU: every thread of a block is a host thread, __syncthreads is a barrier
// of the block, and the warp-wide primitives the kernels use (shfl_xor, the
// m16n8k16 bf16 tensor-core product) are barriers of the warp's 32 threads
// around an exchange through memory. Blocks run one after another.
//
// Include it before a kernel header that supports it (it defines
// DENDRITE_CUDA_EMULATION); the kernels then compile as plain C++. It checks
// the kernels' indexing, masking, fragment layouts (as the PTX ISA gives
// them) and synchronisation, not the GPU's timing or its rounding inside a
// tensor-core sum (emulated in fp32, products exact, in k order).
#pragma once

#define DENDRITE_CUDA_EMULATION 1

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct uint4 {
  uint32_t x, y, z, w;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace emu {

// A warp's exchange areas, two of each: collective n uses set n % 2, so one
// barrier per collective suffices (a lane can write set n % 2 again only
// after every lane has passed collective n + 1's barrier, having read n's).
struct Warp {
  explicit Warp(int threads) : sync(threads) {}
  std::barrier<> sync;
  float value[2][32];
  uint32_t a[2][32][4], b[2][32][2];
};

struct Block {
  explicit Block(int threads) : sync(threads) {}
  std::barrier<> sync;
  std::vector<uint4> shared;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local dim3 thread_idx, block_idx;
inline thread_local Block* block = nullptr;
inline thread_local Warp* warp = nullptr;
inline thread_local int lane = 0;
inline thread_local int phase = 0;  // which exchange set the lane's next collective uses
inline dim3 grid_dim, block_dim;

// Runs kernel() as grid x `threads` threads (a multiple of 32) with
// `shared_bytes` of dynamic shared memory per block, filled with a pattern
// (0x7f7f7f7f, a large finite float) so that reading what no thread wrote
// shows in the results, as it would on a GPU.
inline void launch(dim3 grid, int threads, size_t shared_bytes,
                   const std::function<void()>& kernel) {
  grid_dim = grid;
  block_dim = dim3{unsigned(threads), 1, 1};
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      Block blk(threads);
      blk.shared.resize((shared_bytes + 15) / 16);
      std::memset(blk.shared.data(), 0x7f, blk.shared.size() * sizeof(uint4));
      for (int w = 0; w < threads / 32; ++w) blk.warps.push_back(std::make_unique<Warp>(32));
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          thread_idx = dim3{unsigned(t), 0, 0};
          block_idx = dim3{bx, by, 0};
          block = &blk;
          warp = blk.warps[t / 32].get();
          lane = t % 32;
          phase = 0;
          kernel();
        });
      for (auto& th : pool) th.join();
    }
}

}  // namespace emu

#define threadIdx (::emu::thread_idx)
#define blockIdx (::emu::block_idx)
#define gridDim (::emu::grid_dim)
#define blockDim (::emu::block_dim)
#define DENDRITE_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::emu::block->shared.data())

inline void __syncthreads() { emu::block->sync.arrive_and_wait(); }
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
using std::max;
using std::min;

namespace dendrite::cuda::flash {

inline float shfl_xor(float v, int mask) {
  emu::Warp& w = *emu::warp;
  float* value = w.value[emu::phase];
  emu::phase ^= 1;
  value[emu::lane] = v;
  w.sync.arrive_and_wait();
  return value[emu::lane ^ mask];
}

// d += a b for the warp's m16n8k16 bf16 fragments (layouts as in the PTX ISA).
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  emu::Warp& w = *emu::warp;
  const int lane = emu::lane, set = emu::phase;
  emu::phase ^= 1;
  std::memcpy(w.a[set][lane], a, sizeof a);
  std::memcpy(w.b[set][lane], b, sizeof b);
  w.sync.arrive_and_wait();
  auto bf = [](uint32_t reg, int half) {
    return __uint_as_float(half ? reg & 0xffff0000u : reg << 16);
  };
  // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row / 8) + 2 (k / 8).
  auto A = [&](int row, int k) {
    return bf(w.a[set][4 * (row % 8) + (k % 8) / 2][row / 8 + 2 * (k / 8)], k % 2);
  };
  // B[k][n]: lane 4 n + (k % 8) / 2, register k / 8.
  auto B = [&](int k, int n) { return bf(w.b[set][4 * n + (k % 8) / 2][k / 8], k % 2); };
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += A(row, k) * B(k, col);
    d[e] += sum;
  }
}

}  // namespace dendrite::cuda::flash
