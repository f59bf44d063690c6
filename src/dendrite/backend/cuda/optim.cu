// CUDA AdamW, the squared gradient norm and gradient scaling on flat buffers
// (kernels.h; semantics of ops/optim.h and cpu/optim.cpp). AdamW and scale
// are grid-stride loops over int64 indices, 4 values per access where every
// pointer allows. sum_squares reduces in double in a fixed order: thread t
// of the fixed grid takes the groups of 4 values t, t + grid threads, ...
// (each group's values in order, the same with 4-wide or single loads), each
// block adds its threads' sums as a fixed tree into the caller's scratch, and
// one block adds the block sums the same way. The table forms lay the
// tensors end to end and give each block an equal part (for_each_group), so
// a large tensor gets many blocks and a small one shares a block; the order
// of a norm's sums depends only on the table.
#include <algorithm>
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
  DENDRITE_DYNAMIC_SHARED(double, shared);  // [32]
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// *total = sum of partial[count], in a fixed order.
__global__ void sum_partials_kernel(double* total, const double* partial, int count) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  DENDRITE_DYNAMIC_SHARED(double, shared);  // [32]
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *total = s;
}

// The table's tensors laid end to end (FlatTensor::start), cut into equal
// parts of `per` values (a multiple of 4), one per block: for_each_group
// calls f(tensor, i, width) for the groups of 4 values (width 4 where the
// group is whole and `vec`, else 1 per value) of this block's part, thread t
// taking its groups t, t + blockDim.x, ... tensor by tensor in table order.
template <class F>
__device__ void for_each_group(const ops::FlatTensor* table, int count, int64_t per, bool vec,
                               F&& f) {
  const int64_t lo = int64_t(blockIdx.x) * per, hi = lo + per;
  int a = 0, b = count - 1;  // the last tensor starting at or before lo
  while (a < b) {
    const int mid = (a + b + 1) / 2;
    if (table[mid].start <= lo)
      a = mid;
    else
      b = mid - 1;
  }
  for (int t = a; t < count && table[t].start < hi; ++t) {
    const ops::FlatTensor& x = table[t];
    const int64_t first = lo > x.start ? lo - x.start : 0;
    const int64_t end = hi - x.start < x.n ? hi - x.start : x.n;
    const bool aligned = vec && x.offset % 4 == 0;
    for (int64_t i = first + 4 * int64_t(threadIdx.x); i < end; i += 4 * int64_t(blockDim.x)) {
      if (aligned && i + 4 <= x.n) {
        f(x, i, 4);
      } else {
        for (int64_t k = i; k < i + 4 && k < x.n; ++k) f(x, k, 1);
      }
    }
  }
}

__global__ void sum_squares_tensors_kernel(double* partial, const float* base,
                                           const ops::FlatTensor* table, int count, int64_t per,
                                           bool vec) {
  double s = 0.0;
  for_each_group(table, count, per, vec, [&](const ops::FlatTensor& x, int64_t i, int width) {
    const float* g = base + x.offset + i;
    if (width == 4) {
      float v[4];
      load(v, g);
#pragma unroll
      for (int k = 0; k < 4; ++k) s += double(v[k]) * v[k];
    } else {
      s += double(*g) * *g;
    }
  });
  DENDRITE_DYNAMIC_SHARED(double, shared);  // [32]
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// AdamW over the table: op.keep is the decayed factor; tensors without decay keep 1.
__global__ void adamw_tensors_kernel(AdamW op, const ops::FlatTensor* table, int count, int64_t per,
                                     int64_t low_count, bool vec) {
  for_each_group(table, count, per, vec, [&](const ops::FlatTensor& x, int64_t i, int width) {
    AdamW o = op;
    o.param += x.offset, o.grad += x.offset, o.m += x.offset, o.v += x.offset;
    o.low = op.low && x.offset < low_count ? op.low + x.offset : nullptr;
    if (!x.decay) o.keep = 1.0f;
    if (width == 4)
      o.apply<4>(i);
    else
      o.apply<1>(i);
  });
}

AdamW adamw_op(float* param, const float* grad, float* m, float* v, float lr, int step, bool decay,
               const ops::AdamWConfig& c, float grad_scale, bf16* param_bf16) {
  // step >= 1: checked by Backend (backend.h: ops::check_step)
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
  return op;
}

// A table's `values` in parts of `per` values over at most `cap` blocks,
// 4 values a thread; the grid depends only on `values`. count >= 1 (the
// callers return on an empty table) and values >= 0 (ops::check_table).
struct TableGrid {
  unsigned blocks;
  int64_t per;
};
TableGrid table_grid(int64_t values, int64_t cap) {
  const int64_t groups = std::max<int64_t>(1, (values + 3) / 4);
  const unsigned blocks = blocks_for(groups, kThreads, cap);
  return {blocks, 4 * ((groups + blocks - 1) / blocks)};
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr, int step,
                  bool decay, const ops::AdamWConfig& c, float grad_scale, bf16* param_bf16,
                  cudaStream_t stream) {
  const AdamW op = adamw_op(param, grad, m, v, lr, step, decay, c, grad_scale, param_bf16);
  const bool vec = aligned_to(16, param, grad, m, v) && aligned_to(8, param_bf16);
  launch_map(op, n, vec, stream, "adamw_update");
}

double sum_squares(const float* g, long n, void* scratch, cudaStream_t stream) {
  if (n <= 0) return 0.0;
  auto* partial = static_cast<double*>(scratch);  // [kReduceBlocks] block sums, then the total
  double* total = partial + kReduceBlocks;
  // The grid depends only on n, so the order of the sums does too.
  const unsigned blocks = blocks_for((n + 3) / 4, kThreads, kReduceBlocks);
  DENDRITE_LAUNCH(blocks, kThreads, kBlockSumBytes<double>, stream, sum_squares_kernel)
  (partial, g, n, aligned_to(16, g));
  check_launch("sum_squares");
  DENDRITE_LAUNCH(1, kThreads, kBlockSumBytes<double>, stream, sum_partials_kernel)
  (total, partial, int(blocks));
  check_launch("sum_squares (sum of block sums)");
  double result = 0.0;
  check_cuda(cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (sum_squares result to host)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (sum_squares)");
  return result;
}

void sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table, int count,
                         int64_t values, void* scratch, cudaStream_t stream) {
  if (count == 0) {
    check_cuda(cudaMemsetAsync(total, 0, sizeof(double), stream), "cudaMemsetAsync (empty norm)");
    return;
  }
  auto* partial = static_cast<double*>(scratch);  // [blocks] block sums
  const TableGrid g = table_grid(values, kReduceBlocks);
  DENDRITE_LAUNCH(g.blocks, kThreads, kBlockSumBytes<double>, stream, sum_squares_tensors_kernel)
  (partial, base, table, count, g.per, aligned_to(16, base));
  check_launch("sum_squares_tensors");
  DENDRITE_LAUNCH(1, kThreads, kBlockSumBytes<double>, stream, sum_partials_kernel)
  (total, partial, int(g.blocks));
  check_launch("sum_squares_tensors (sum of block sums)");
}

void adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                          const ops::FlatTensor* table, int count, int64_t values, float lr,
                          int step, const ops::AdamWConfig& c, float grad_scale, bf16* low,
                          int64_t low_count, cudaStream_t stream) {
  if (count == 0) return;
  const AdamW op = adamw_op(param, grad, m, v, lr, step, true, c, grad_scale, low);
  const bool vec = aligned_to(16, param, grad, m, v) && aligned_to(8, low);
  const TableGrid g = table_grid(values, 65535);
  DENDRITE_LAUNCH(g.blocks, kThreads, 0, stream, adamw_tensors_kernel)(
      op, table, count, g.per, low_count, vec);
  check_launch("adamw_update_tensors");
}

void scale(float* g, float s, long n, cudaStream_t stream) {
  launch_map(Scale{g, s}, n, aligned_to(16, g), stream, "scale");
}

}  // namespace dendrite::cuda
