// Device helpers shared by the CUDA backend's kernels (backend/cuda/*.cu):
// bf16 conversions with the rounding of dendrite::to_bf16, launch sizes, and
// fixed-order block reductions (no atomics: the same bits on every run).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/comm/cuda/error_text.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

// kernel<<<grid, block, shared, stream>>>(args...) is written
// DENDRITE_LAUNCH(grid, block, shared, stream, kernel)(args...), and a
// kernel's dynamic shared memory DENDRITE_DYNAMIC_SHARED(T, name), so that the
// CPU emulator of the tests (tests/emulated_cuda) can run the same source.
// All of a kernel's shared memory is dynamic, its bytes given at the launch:
// the emulator gives each block its own only so, and refuses a static
// __shared__ (its cuda_runtime.h). Where a kernel needs several arrays, a
// struct of them is the type. Within a namespace, one name is one type (the
// declarations are one extern array on a GPU).
#ifdef DENDRITE_CUDA_EMULATION
#define DENDRITE_LAUNCH(grid, block, shared, stream, ...) \
  ::emu::launch(grid, block, shared, stream, #__VA_ARGS__, __VA_ARGS__)
#define DENDRITE_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::emu::dynamic_shared())
#else
#define DENDRITE_LAUNCH(grid, block, shared, stream, ...) \
  __VA_ARGS__<<<grid, block, shared, stream>>>
#define DENDRITE_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

constexpr int kThreads = 256;  // threads per block of the elementwise kernels

// Blocks for n items at `per_block` items a block, capped so a grid-stride loop covers the rest.
inline unsigned blocks_for(int64_t n, int per_block = kThreads, int64_t cap = 65535) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return unsigned(b < cap ? b : cap);
}

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(bf16 x) { return __uint_as_float(uint32_t(x.bits) << 16); }

// fp32 -> bf16 as dendrite::to_bf16: nearest-even; NaN stays a quiet NaN;
// denormals become zeros of their sign.
__device__ __forceinline__ bf16 round_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  if ((u & 0x7f800000u) == 0) return bf16{uint16_t((u >> 16) & 0x8000u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// Lets kernel F use `bytes` of dynamic shared memory (past the default
// 48 KB), once per device and kernel.
template <auto F>
void allow_shared(size_t bytes, const char* kernel) {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  const cudaError_t got = cudaGetDevice(&dev);
  DENDRITE_CHECK(got == cudaSuccess, "cuda: cudaGetDevice failed in ", kernel, ": ",
                 error_text(got));
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  const cudaError_t e =
      cudaFuncSetAttribute(F, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  DENDRITE_CHECK(e == cudaSuccess, "cuda: cudaFuncSetAttribute(", kernel,
                 ", cudaFuncAttributeMaxDynamicSharedMemorySize, ", bytes,
                 ") failed: ", error_text(e),
                 raised_by_a_running_kernel(e)
                     ? ""
                     : "; the device allows less shared memory per block than the kernel's tiles "
                       "need");
  done.fetch_or(bit, std::memory_order_acq_rel);
}

// The sum of v over the block's threads, in a fixed order (warp shuffles,
// then the warps' sums by the first warp); every thread gets the result.
// blockDim.x must be a multiple of 32 and at most 1024. `shared` holds 32 T
// (kBlockSumBytes<T> of the kernel's dynamic shared memory).
template <class T>
constexpr size_t kBlockSumBytes = 32 * sizeof(T);
template <class T>
__device__ T block_sum(T v, T* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = int(threadIdx.x) < warps ? shared[threadIdx.x] : T(0);
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

// The same for the maximum.
__device__ __forceinline__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = int(threadIdx.x) < warps ? shared[threadIdx.x] : -INFINITY;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

}  // namespace dendrite::cuda
