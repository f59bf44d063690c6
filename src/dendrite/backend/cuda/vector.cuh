// Flat, vectorised access shared by the elementwise, norm and optimizer
// kernels (elementwise.cu, norm.cu, optim.cu): 4 values per access (16 bytes
// of fp32) where every pointer is aligned for it, one otherwise, with the
// same per-element result either way; and the grid-stride maps over them.
#pragma once

#include <cstdint>

#include "dendrite/backend/cuda/common.cuh"

namespace dendrite::cuda {

// Whether every pointer is a multiple of `bytes` (null counts as aligned).
template <class... P>
bool aligned_to(uintptr_t bytes, const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % bytes == 0) && ...);
}

// ---- W consecutive values (W = 4: one vector access; p aligned for it)

template <int W>
__device__ __forceinline__ void load(float (&v)[W], const float* p) {
  if constexpr (W == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else {
    v[0] = *p;
  }
}

template <int W>
__device__ __forceinline__ void load(float (&v)[W], const bf16* p) {
  if constexpr (W == 4) {
    const uint2 t = *reinterpret_cast<const uint2*>(p);  // little-endian: element 0 is the low half
    v[0] = __uint_as_float(t.x << 16), v[1] = __uint_as_float(t.x & 0xffff0000u);
    v[2] = __uint_as_float(t.y << 16), v[3] = __uint_as_float(t.y & 0xffff0000u);
  } else {
    v[0] = widen(*p);
  }
}

template <int W>
__device__ __forceinline__ void store(float* p, const float (&v)[W]) {
  if constexpr (W == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *p = v[0];
  }
}

template <int W>
__device__ __forceinline__ void store(bf16* p, const float (&v)[W]) {
  if constexpr (W == 4) {
    uint2 t;
    t.x = uint32_t(round_bf16(v[0]).bits) | uint32_t(round_bf16(v[1]).bits) << 16;
    t.y = uint32_t(round_bf16(v[2]).bits) | uint32_t(round_bf16(v[3]).bits) << 16;
    *reinterpret_cast<uint2*>(p) = t;
  } else {
    *p = round_bf16(v[0]);
  }
}

// ---- flat maps: op.apply<W>(i) handles values i .. i + W - 1

template <class Op>
__global__ void map4_kernel(Op op, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n4 = n / 4;
  for (int64_t q = t; q < n4; q += stride) op.template apply<4>(4 * q);
  for (int64_t i = 4 * n4 + t; i < n; i += stride) op.template apply<1>(i);  // the < 4 left
}

template <class Op>
__global__ void map1_kernel(Op op, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    op.template apply<1>(i);
}

// vec: every pointer of op is aligned for 4-value accesses.
template <class Op>
void launch_map(const Op& op, int64_t n, bool vec, cudaStream_t stream, const char* name) {
  if (n <= 0) return;
  if (vec)
    DENDRITE_LAUNCH(blocks_for((n + 3) / 4), kThreads, 0, stream, map4_kernel<Op>)(op, n);
  else
    DENDRITE_LAUNCH(blocks_for(n), kThreads, 0, stream, map1_kernel<Op>)(op, n);
  check_launch(name);
}

}  // namespace dendrite::cuda
