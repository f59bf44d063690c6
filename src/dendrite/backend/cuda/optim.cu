// CUDA AdamW, the squared gradient norm and gradient scaling on flat buffers
// (kernels.h; semantics of ops/optim.h and cpu/optim.cpp). AdamW and scale
// are grid-stride loops over int64 indices, 4 values per access where every
// pointer allows. sum_squares reduces in double in a fixed order: thread t
// of the fixed grid takes the groups of 4 values t, t + grid threads, ...
// (each group's values in order, the same with 4-wide or single loads), each
// block adds its threads' sums as a fixed tree into the caller's scratch, and
// one block adds the block sums the same way.
#include <cmath>
#include <cstdint>

#include "dendrite/backend/cuda/vector.cuh"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

// One AdamW step as cpu/optim.cpp's adamw_range; low (may be null) gets the
// new values rounded to bf16.
struct AdamW {
  float* param;
  const float* grad;
  float* m;
  float* v;
  bf16* low;
  float b1, b2, a1, a2, eps;  // a1 = 1 - b1, a2 = 1 - b2
  float keep;                 // 1 - lr wd, or 1 without decay
  float step_size;            // lr / (1 - b1^step)
  float inv_sqrt_bc2;         // 1 / sqrt(1 - b2^step)
  float grad_scale;           // clipping factor
  template <int W>
  __device__ void apply(int64_t i) const {
    float p[W], g[W], mi[W], vi[W];
    load(p, param + i);
    load(g, grad + i);
    load(mi, m + i);
    load(vi, v + i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float gk = g[k] * grad_scale;
      mi[k] = b1 * mi[k] + a1 * gk;
      vi[k] = b2 * vi[k] + a2 * gk * gk;
      p[k] = p[k] * keep - step_size * mi[k] / (sqrtf(vi[k]) * inv_sqrt_bc2 + eps);
    }
    store(m + i, mi);
    store(v + i, vi);
    store(param + i, p);
    if (low) store(low + i, p);
  }
};

struct Scale {
  float* g;
  float s;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
    load(v, g + i);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] *= s;
    store(g + i, v);
  }
};

constexpr int kReduceBlocks = 1024;  // at most this many first-stage blocks
static_assert((kReduceBlocks + 1) * sizeof(double) <= kScratchBytes);

// partial[block] = this block's share of sum g^2 (exact products, double sums).
__global__ void sum_squares_kernel(double* partial, const float* g, int64_t n, bool vec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t groups = (n + 3) / 4;
  double s = 0.0;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < groups; q += stride) {
    const int64_t i = 4 * q;
    if (vec && i + 4 <= n) {
      float v[4];
      load(v, g + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) s += double(v[k]) * v[k];
    } else {
      for (int k = 0; k < 4 && i + k < n; ++k) s += double(g[i + k]) * g[i + k];
    }
  }
  __shared__ double shared[32];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// *total = sum of partial[count], in a fixed order.
__global__ void sum_partials_kernel(double* total, const double* partial, int count) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  __shared__ double shared[32];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *total = s;
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr, int step,
                  bool decay, const ops::AdamWConfig& c, float grad_scale, bf16* param_bf16,
                  cudaStream_t stream) {
  DENDRITE_CHECK(step >= 1, "adamw_update: step counts from 1, got step=", step);
  // As torch.optim.AdamW: p *= 1 - lr wd;  p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), step);
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), step);
  AdamW op;
  op.param = param, op.grad = grad, op.m = m, op.v = v, op.low = param_bf16;
  op.b1 = c.beta1, op.b2 = c.beta2, op.a1 = 1.0f - c.beta1, op.a2 = 1.0f - c.beta2, op.eps = c.eps;
  op.keep = decay ? 1.0f - lr * c.weight_decay : 1.0f;
  op.step_size = static_cast<float>(lr / bc1);
  op.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  op.grad_scale = grad_scale;
  const bool vec = aligned_to(16, param, grad, m, v) && aligned_to(8, param_bf16);
  launch_map(op, n, vec, stream, "adamw_update");
}

double sum_squares(const float* g, long n, void* scratch, cudaStream_t stream) {
  if (n <= 0) return 0.0;
  auto* partial = static_cast<double*>(scratch);  // [kReduceBlocks] block sums, then the total
  double* total = partial + kReduceBlocks;
  // The grid depends only on n, so the order of the sums does too.
  const unsigned blocks = blocks_for((n + 3) / 4, kThreads, kReduceBlocks);
  DENDRITE_LAUNCH(blocks, kThreads, 0, stream, sum_squares_kernel)(
      partial, g, n, aligned_to(16, g));
  check_launch("sum_squares");
  DENDRITE_LAUNCH(1, kThreads, 0, stream, sum_partials_kernel)(total, partial, int(blocks));
  check_launch("sum_squares (sum of block sums)");
  double result = 0.0;
  check_cuda(cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (sum_squares result to host)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (sum_squares)");
  return result;
}

void scale(float* g, float s, long n, cudaStream_t stream) {
  launch_map(Scale{g, s}, n, aligned_to(16, g), stream, "scale");
}

}  // namespace dendrite::cuda
