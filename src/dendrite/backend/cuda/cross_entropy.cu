// CUDA pieces of the vocabulary-parallel softmax cross-entropy
// (ops/cross_entropy.h). A rank holds logits [rows, Vloc] for ids
// [v0, v0 + Vloc); ids at or above V are padding (never predicted, gradient 0).
// - ce_local_stats: one block per row: the max, then the sum of exp(x - max)
//   (float per thread, double across threads), with fixed-order block
//   reductions; the same bits every run (not the CPU's: its order differs).
// - ce_combine: one block; each thread combines one row over the parts as
//   the CPU does, then one thread sums the row losses in row order, so the
//   total is the CPU's (for one part exactly, given equal stats), and adds it
//   to the caller's accumulator in device memory (no copy to the host).
// - ce_dlogits: elementwise, with the CPU's exp polynomial and its roundings
//   spelled out, so equal lse gives the CPU's bits.
// - ce_stats_dlogits_bf16 (the whole vocabulary on this rank): one block per
//   row, ce_local_stats' passes and then the row's bf16 dlogits with the
//   same arithmetic, so the bits of the separate ops; the chunk's logits come
//   from memory once instead of twice.
#include <cmath>

#include "dendrite/backend/cuda/common.cuh"
#include "dendrite/backend/exact_math.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {
namespace {

constexpr int kRowThreads = 1024;   // threads of a ce_local_stats row block
constexpr int kCombineThreads = 256;

// The kernels' dynamic shared memory: a row block's reductions, and
// ce_combine's weights and differences of its rows.
struct RowScratch {
  double sum[32];
  float max[32];
};
struct CombineScratch {
  double wt[kCombineThreads], diff[kCombineThreads];
};

using exact::exp_approx;  // backend/exact_math.h: the CPU's bits

// Columns of [v0, v0 + Vloc) that hold real ids (below V): [0, n).
int real_columns(const ops::VocabShape& s) {
  const int64_t n = int64_t(s.V) - s.v0;
  return int(n < 0 ? 0 : n > s.Vloc ? s.Vloc : n);
}

// The block's row: its max, then the sum of exp(x - max) (float per thread,
// double across threads), both known to every thread; the log-sum-exp as
// stats[0] holds it.
__device__ __forceinline__ float row_logsumexp(const float* __restrict__ row, int n, float* smax,
                                               double* ssum) {
  float mx = -INFINITY;
#pragma unroll 4
  for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, smax);
  float part = 0.0f;
#pragma unroll 4
  for (int j = threadIdx.x; j < n; j += blockDim.x) part += exp_approx(row[j] - mx);
  const double sum = block_sum<double>(double(part), ssum);
  return n > 0 ? float(double(mx) + log(sum)) : -INFINITY;
}

// One dlogit: (exp(x - lse) - [target]) * scale, with the roundings spelled out.
__device__ __forceinline__ float dlogit(float x, float lse, float scale, bool target) {
  const float v = __fmul_rn(exp_approx(__fsub_rn(x, lse)), scale);
  return target ? __fsub_rn(v, scale) : v;
}

// stats[r] = {logsumexp over the row's n real columns (-inf if none), the target's logit or 0}.
__global__ void __launch_bounds__(kRowThreads)
    ce_local_stats_kernel(float* __restrict__ stats, const float* __restrict__ logits,
                          const int32_t* __restrict__ targets, const float* __restrict__ weight,
                          int Vloc, int v0, int n) {
  DENDRITE_DYNAMIC_SHARED(RowScratch, scratch);
  const int r = blockIdx.x;
  float* st = stats + 2 * int64_t(r);
  if (weight && weight[r] == 0.0f) {  // uniform over the block
    if (threadIdx.x == 0) st[0] = st[1] = 0.0f;
    return;
  }
  const float* __restrict__ row = logits + int64_t(r) * Vloc;
  const float lse = row_logsumexp(row, n, scratch->max, scratch->sum);
  if (threadIdx.x == 0) {
    const int64_t t = int64_t(targets[r]) - v0;  // column of the target, if held here
    st[0] = lse;
    st[1] = t >= 0 && t < Vloc ? row[t] : 0.0f;
  }
}

// The whole vocabulary on this rank (v0 = 0): ce_local_stats_kernel's
// statistics, and then, with the row's lse already in hand, its bf16
// dlogits; the row's second and third reads find it in the caches.
__global__ void __launch_bounds__(kRowThreads)
    ce_stats_dlogits_kernel(float* __restrict__ stats, bf16* __restrict__ dlogits,
                            const float* __restrict__ logits, const int32_t* __restrict__ targets,
                            const float* __restrict__ weight, double denominator, int Vloc, int n) {
  DENDRITE_DYNAMIC_SHARED(RowScratch, scratch);
  const int r = blockIdx.x;
  float* st = stats + 2 * int64_t(r);
  bf16* out = dlogits + int64_t(r) * Vloc;
  const double wt = weight ? double(weight[r]) : 1.0;
  if (wt == 0.0) {  // uniform over the block
    if (threadIdx.x == 0) st[0] = st[1] = 0.0f;
    for (int j = threadIdx.x; j < Vloc; j += blockDim.x) out[j] = round_bf16(0.0f);
    return;
  }
  const float* __restrict__ row = logits + int64_t(r) * Vloc;
  const float lse = row_logsumexp(row, n, scratch->max, scratch->sum);
  const int t = targets[r];
  if (threadIdx.x == 0) {
    st[0] = lse;
    st[1] = t >= 0 && t < Vloc ? row[t] : 0.0f;
  }
  const float scale = float(wt / denominator);
  for (int j = threadIdx.x; j < Vloc; j += blockDim.x)
    out[j] = round_bf16(j < n ? dlogit(row[j], lse, scale, j == t) : 0.0f);
}

// lse[r] = logsumexp over the parts; *total += sum_r weight[r] * (lse[r] - target[r]) in row order.
__global__ void __launch_bounds__(kCombineThreads)
    ce_combine_kernel(float* __restrict__ lse, double* __restrict__ total_out,
                      const float* __restrict__ gathered, const float* __restrict__ weight, int rows,
                      int parts) {
  DENDRITE_DYNAMIC_SHARED(CombineScratch, combine);
  double* s_wt = combine->wt;
  double* s_diff = combine->diff;
  const int64_t part_stride = 2 * int64_t(rows);  // gathered [parts, rows, 2]
  double total = 0.0;                             // thread 0's, in row order
  for (int r0 = 0; r0 < rows; r0 += kCombineThreads) {
    const int r = r0 + int(threadIdx.x);
    if (r < rows) {
      double mx = -INFINITY, target = 0.0;
      for (int p = 0; p < parts; ++p) {
        const double g = gathered[p * part_stride + 2 * int64_t(r)];
        mx = mx < g ? g : mx;
        target += gathered[p * part_stride + 2 * int64_t(r) + 1];
      }
      double l = mx;  // exact for one part; -inf when no part holds a real id
      if (parts > 1 && isfinite(mx)) {
        double sum = 0.0;
        for (int p = 0; p < parts; ++p)
          sum += exp(double(gathered[p * part_stride + 2 * int64_t(r)]) - mx);
        l = mx + log(sum);
      }
      lse[r] = float(l);
      s_wt[threadIdx.x] = weight ? double(weight[r]) : 1.0;
      s_diff[threadIdx.x] = l - target;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int k1 = rows - r0 < kCombineThreads ? rows - r0 : kCombineThreads;
      for (int k = 0; k < k1; ++k)  // the CPU's total += wt * (l - target), fused
        if (s_wt[k] != 0.0) total = fma(s_wt[k], s_diff[k], total);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *total_out += total;
}

// dlogits = (exp(logits - lse) - onehot) * weight / denominator; 0 for padding
// and zero weight. Out fp32 (dlogits may be logits: in place) or bf16 (the
// fp32 value rounded).
template <class Out>
__global__ void ce_dlogits_kernel(Out* dlogits, const float* logits, const float* __restrict__ lse,
                                  const int32_t* __restrict__ targets,
                                  const float* __restrict__ weight, double denominator, int rows,
                                  int Vloc, int v0, int n) {
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* row = logits + int64_t(r) * Vloc;
    Out* out = dlogits + int64_t(r) * Vloc;
    const double wt = weight ? double(weight[r]) : 1.0;
    const float scale = wt != 0.0 ? float(wt / denominator) : 0.0f, l = lse[r];
    const int64_t t = int64_t(targets[r]) - v0;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < Vloc; j += gridDim.x * blockDim.x) {
      const float v = wt != 0.0 && j < n ? dlogit(row[j], l, scale, j == t) : 0.0f;
      if constexpr (sizeof(Out) == 2)
        out[j] = round_bf16(v);
      else
        out[j] = v;
    }
  }
}

}  // namespace

// The sizes and the denominator were checked by Backend (backend.h:
// ops::check_vocab, check_combine, check_denominator).

void ce_local_stats(float* stats, const float* logits, const int32_t* targets, const float* weight,
                    const ops::VocabShape& s, cudaStream_t stream) {
  if (s.rows == 0) return;
  DENDRITE_LAUNCH(unsigned(s.rows), kRowThreads, sizeof(RowScratch), stream, ce_local_stats_kernel)
  (stats, logits, targets, weight, s.Vloc, s.v0, real_columns(s));
  check_launch("ce_local_stats");
}

void ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                double* total, cudaStream_t stream) {
  if (rows == 0) return;
  DENDRITE_LAUNCH(1, kCombineThreads, sizeof(CombineScratch), stream, ce_combine_kernel)
  (lse, total, gathered, weight, rows, parts);
  check_launch("ce_combine");
}

namespace {

template <class Out>
void launch_dlogits(Out* dlogits, const float* logits, const float* lse, const int32_t* targets,
                    const float* weight, double denominator, const ops::VocabShape& s,
                    cudaStream_t stream, const char* op) {
  if (s.rows == 0) return;
  const dim3 grid(blocks_for(s.Vloc), unsigned(s.rows < 65535 ? s.rows : 65535));
  DENDRITE_LAUNCH(grid, kThreads, 0, stream, ce_dlogits_kernel<Out>)
  (dlogits, logits, lse, targets, weight, denominator, s.rows, s.Vloc, s.v0, real_columns(s));
  check_launch(op);
}

}  // namespace

void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                double denominator, const ops::VocabShape& s, cudaStream_t stream) {
  launch_dlogits(logits, logits, lse, targets, weight, denominator, s, stream, "ce_dlogits");
}

void ce_dlogits_bf16(bf16* dlogits, const float* logits, const float* lse, const int32_t* targets,
                     const float* weight, double denominator, const ops::VocabShape& s,
                     cudaStream_t stream) {
  launch_dlogits(dlogits, logits, lse, targets, weight, denominator, s, stream, "ce_dlogits_bf16");
}

void ce_stats_dlogits_bf16(float* stats, bf16* dlogits, const float* logits, const int32_t* targets,
                           const float* weight, double denominator, const ops::VocabShape& s,
                           cudaStream_t stream) {
  if (s.rows == 0) return;
  DENDRITE_LAUNCH(unsigned(s.rows), kRowThreads, sizeof(RowScratch), stream,
                  ce_stats_dlogits_kernel)
  (stats, dlogits, logits, targets, weight, denominator, s.Vloc, real_columns(s));
  check_launch("ce_stats_dlogits_bf16");
}

}  // namespace dendrite::cuda
