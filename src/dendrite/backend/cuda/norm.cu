// CUDA LayerNorm and RMSNorm (kernels.h; semantics of ops/norm.h and
// cpu/norm.cpp): per-row sums in double, an apply step from the summed sums.
//
// Row sums: one block per row. Thread t takes the groups of 4 columns
// t, t + blockDim, ... (each group's values in column order) and adds them
// into double accumulators, then block_sum adds the threads' sums as a fixed
// tree. The block size depends only on c, and the 4-wide loads used when
// the row is aligned read the same groups in the same order, so the bits
// depend only on the inputs and c.
// Forward apply: one warp per row (the row's scalars computed once per warp).
// Backward apply: a grid of kTileCols columns by blocks of rows
// (kernels.h: row_blocks), so that many blocks write dx and sum
// dgamma/dbeta without atomics: row group ty of a block sums rows ty,
// ty + kRowGroups, ... of its block of rows in order, the groups are added
// as a fixed tree into the block's partial sums (scratch), and a second
// pass adds the blocks' partials into dgamma/dbeta in block order. Each
// batch of rows has its row scalars (which divide in double) computed once
// into shared memory.
#include <algorithm>
#include <cstdint>

#include "dendrite/backend/cuda/vector.cuh"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

// Rows of c floats at these pointers allow 16-byte accesses.
template <class... P>
bool rows_aligned(int c, const P*... p) {
  return c % 4 == 0 && aligned_to(16, p...);
}

// ---- row sums

// Threads per row-sum block: about 16 values a thread, 32 to 512.
constexpr int kMaxRowThreads = 512;  // row_threads' most: the bound of the kernels it sizes

unsigned row_threads(int c) {
  int t = (c + 15) / 16;
  t = (t + 31) / 32 * 32;
  return unsigned(t < 32 ? 32 : t > kMaxRowThreads ? kMaxRowThreads : t);
}

// This thread's share of row r's sums: the groups of 4 columns q = threadIdx.x,
// + blockDim.x, ..., each added in column order (4 wide where vec). One
// function, so every kernel that sums whole rows forms the same partial sums
// (and, through block_sum, the same bits).
template <class Terms>
__device__ __forceinline__ void add_row_terms(const Terms& terms, int r, int c, bool vec,
                                              double& a, double& b) {
  const int groups = (c + 3) / 4;
  for (int q = threadIdx.x; q < groups; q += blockDim.x) {
    const int j = 4 * q;
    if (vec && j + 4 <= c) {
      terms.template add<4>(r, j, a, b);
    } else {
      for (int k = 0; k < 4 && j + k < c; ++k) terms.template add<1>(r, j + k, a, b);
    }
  }
}

// sums[NS r .. NS r + NS - 1] = the row's sums; terms.add<W>(r, j, a, b)
// adds the terms of columns j .. j + W - 1 in column order.
template <int NS, class Terms>
__global__ void row_sums_kernel(double* sums, Terms terms, int c, bool vec) {
  const int r = blockIdx.x;
  double a = 0.0, b = 0.0;
  add_row_terms(terms, r, c, vec, a, b);
  DENDRITE_DYNAMIC_SHARED(double, warp_sums);  // [32]
  a = block_sum(a, warp_sums);
  if constexpr (NS == 2) b = block_sum(b, warp_sums);
  if (threadIdx.x == 0) {
    sums[int64_t(NS) * r] = a;
    if constexpr (NS == 2) sums[int64_t(NS) * r + 1] = b;
  }
}

// {x, x^2}, exact in double
struct LnSums {
  const float* x;
  int c;
  template <int W>
  __device__ void add(int r, int j, double& a, double& b) const {
    float v[W];
    load(v, x + int64_t(r) * c + j);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const double d = v[k];
      a += d;
      b += d * d;
    }
  }
};

// {g, g xhat}: g = dy gamma, xhat = (x - mean) rstd, float products as the CPU's
struct LnBackwardSums {
  const float* dy;
  const float* x;
  const float* mean;
  const float* rstd;
  const float* gamma;
  int c;
  template <int W>
  __device__ void add(int r, int j, double& a, double& b) const {
    const int64_t off = int64_t(r) * c + j;
    const float mu = mean[r], rs = rstd[r];
    float vd[W], vx[W], vg[W];
    load(vd, dy + off);
    load(vx, x + off);
    load(vg, gamma + j);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float g = vd[k] * vg[k];
      a += double(g);
      b += double(g * ((vx[k] - mu) * rs));
    }
  }
};

// x^2, exact in double
struct RmsSums {
  const float* x;
  int c;
  template <int W>
  __device__ void add(int r, int j, double& a, double&) const {
    float v[W];
    load(v, x + int64_t(r) * c + j);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const double d = v[k];
      a += d * d;
    }
  }
};

// dy gamma x, a float product as the CPU's
struct RmsBackwardSums {
  const float* dy;
  const float* x;
  const float* gamma;
  int c;
  template <int W>
  __device__ void add(int r, int j, double& a, double&) const {
    const int64_t off = int64_t(r) * c + j;
    float vd[W], vx[W], vg[W];
    load(vd, dy + off);
    load(vx, x + off);
    load(vg, gamma + j);
#pragma unroll
    for (int k = 0; k < W; ++k) a += double(vd[k] * vg[k] * vx[k]);
  }
};

// Threads of a block that sums whole rows: one for each group of 4 columns,
// in whole warps, at most row_threads(c). A thread adds the groups q, q +
// blockDim.x, ... in turn and block_sum adds the warps' totals, the missing
// warps' zeros included, so every width gets the bits of row_threads(c)
// threads (whose threads past the groups add nothing) without idle warps.
unsigned sum_threads(int c) {
  const unsigned groups = unsigned((c + 3) / 4), in_warps = (groups + 31) / 32 * 32;
  return std::min(row_threads(c), std::max(32u, in_warps));
}

template <int NS, class Terms>
void launch_row_sums(double* sums, const Terms& terms, int m, int c, bool vec,
                     cudaStream_t stream, const char* name) {
  if (m == 0) return;
  DENDRITE_LAUNCH(unsigned(m), sum_threads(c), kBlockSumBytes<double>, stream,
                  row_sums_kernel<NS, Terms>)
  (sums, terms, c, vec);
  check_launch(name);
}

// ---- forward apply: one warp per row

constexpr int kApplyRows = 8;  // rows (warps) per block of the apply kernels

// The norms' apply at W consecutive columns from j, in place in v: each norm
// computes its output by one expression, whichever kernel walks the row.
struct LnApply {
  const float* gamma;
  const float* beta;
  float mu, rs;
  template <int W>
  __device__ __forceinline__ void operator()(float (&v)[W], int j) const {
    float vg[W], vb[W];
    load(vg, gamma + j);
    load(vb, beta + j);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = (v[k] - mu) * rs * vg[k] + vb[k];
  }
};

struct RmsApply {
  const float* gamma;
  float rs;
  template <int W>
  __device__ __forceinline__ void operator()(float (&v)[W], int j) const {
    float vg[W];
    load(vg, gamma + j);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = v[k] * rs * vg[k];
  }
};

// A warp's walk over one row of c values, W a lane at a time.
template <int W, class Out, class Apply>
__device__ __forceinline__ void apply_row_warp(Out* y, const float* x, int c, const Apply& f) {
  for (int j = W * int(threadIdx.x & 31); j < c; j += 32 * W) {
    float v[W];
    load(v, x + j);
    f(v, j);
    store(y + j, v);
  }
}

// A block's walk over one row's groups of 4 columns: 4 at a time where vec
// allows, else one by one (and the last group, short of 4, so).
template <class Out, class Apply>
__device__ __forceinline__ void apply_row_block(Out* y, const float* x, int c, bool vec,
                                                const Apply& f) {
  const int groups = (c + 3) / 4;
  for (int q = threadIdx.x; q < groups; q += blockDim.x) {
    const int j = 4 * q;
    if (vec && j + 4 <= c) {
      float v[4];
      load(v, x + j);
      f(v, j);
      store(y + j, v);
    } else {
      for (int k = 0; k < 4 && j + k < c; ++k) {
        float v[1] = {x[j + k]};
        f(v, j + k);
        store(y + j + k, v);
      }
    }
  }
}

// y: fp32, or bf16 (the fp32 value rounded, as to_bf16 would round it)
template <class Out>
__global__ void layernorm_apply_kernel(Out* y, float* mean, float* rstd, const double* sums,
                                       const float* x, const float* gamma, const float* beta, int m,
                                       int c, int c_total, float eps, bool vec) {
  const int r = blockIdx.x * kApplyRows + threadIdx.x / 32;
  if (r >= m) return;
  const double mu = sums[2 * int64_t(r)] / c_total;
  const double var = sums[2 * int64_t(r) + 1] / c_total - mu * mu;  // clamp rounding below 0
  const float mu_f = float(mu);
  const float rs = float(1.0 / sqrt((var > 0.0 ? var : 0.0) + eps));
  const int64_t off = int64_t(r) * c;
  const LnApply f{gamma, beta, mu_f, rs};
  if (vec)
    apply_row_warp<4>(y + off, x + off, c, f);
  else
    apply_row_warp<1>(y + off, x + off, c, f);
  if ((threadIdx.x & 31) == 0) mean[r] = mu_f, rstd[r] = rs;
}

__global__ void rmsnorm_apply_kernel(float* y, float* rstd, const double* sums, const float* x,
                                     const float* gamma, int m, int c, int c_total, float eps,
                                     bool vec) {
  const int r = blockIdx.x * kApplyRows + threadIdx.x / 32;
  if (r >= m) return;
  const float rs = float(1.0 / sqrt(sums[r] / c_total + eps));
  const int64_t off = int64_t(r) * c;
  const RmsApply f{gamma, rs};
  if (vec)
    apply_row_warp<4>(y + off, x + off, c, f);
  else
    apply_row_warp<1>(y + off, x + off, c, f);
  if ((threadIdx.x & 31) == 0) rstd[r] = rs;
}

// LayerNorm over whole rows (c_total = c) in one pass, one block per row:
// the row sums as row_sums_kernel forms them (the same groups, the same tree),
// then the apply as layernorm_apply_kernel computes it, on the same groups of
// columns, which the block has just read (so from cache); y in bf16.
__global__ void layernorm_rows_kernel(double* sums, bf16* y, float* mean, float* rstd,
                                      const float* x, const float* gamma, const float* beta, int c,
                                      float eps, bool vec) {
  const int r = blockIdx.x;
  const LnSums terms{x, c};
  double a = 0.0, b = 0.0;
  add_row_terms(terms, r, c, vec, a, b);
  DENDRITE_DYNAMIC_SHARED(double, warp_sums);  // [32]
  a = block_sum(a, warp_sums);
  b = block_sum(b, warp_sums);
  const double mu = a / c;
  const double var = b / c - mu * mu;  // clamp rounding below 0
  const float mu_f = float(mu);
  const float rs = float(1.0 / sqrt((var > 0.0 ? var : 0.0) + eps));
  const int64_t off = int64_t(r) * c;
  apply_row_block(y + off, x + off, c, vec, LnApply{gamma, beta, mu_f, rs});
  if (threadIdx.x == 0) {
    sums[2 * int64_t(r)] = a, sums[2 * int64_t(r) + 1] = b;
    mean[r] = mu_f, rstd[r] = rs;
  }
}

// RMSNorm over whole rows (c_total = c) in one pass, one block per row: the
// row's sum as row_sums_kernel forms it, then the apply as
// rmsnorm_apply_kernel computes it, on the columns the block has just read;
// y in bf16 (the fp32 value rounded, as to_bf16 would round it).
__global__ void rmsnorm_rows_kernel(double* sums, bf16* y, float* rstd, const float* x,
                                    const float* gamma, int c, float eps, bool vec) {
  const int r = blockIdx.x;
  const RmsSums terms{x, c};
  double a = 0.0, unused = 0.0;
  add_row_terms(terms, r, c, vec, a, unused);
  DENDRITE_DYNAMIC_SHARED(double, warp_sums);  // [32]
  a = block_sum(a, warp_sums);
  const float rs = float(1.0 / sqrt(a / c + eps));
  const int64_t off = int64_t(r) * c;
  apply_row_block(y + off, x + off, c, vec, RmsApply{gamma, rs});
  if (threadIdx.x == 0) sums[r] = a, rstd[r] = rs;
}

unsigned apply_blocks(int m) { return unsigned((int64_t(m) + kApplyRows - 1) / kApplyRows); }

// ---- backward apply: one block per kTileCols columns over all rows

constexpr int kTileCols = 8;     // columns per block: a warp reads 4 rows x 32 bytes
constexpr int kRowGroups = 128;  // row groups per block (blockDim = kTileCols x kRowGroups)
constexpr int kRowsAhead = 4;    // rows each thread loads per batch
constexpr int kBatch = kRowGroups * kRowsAhead;  // rows per batch (scalars staged together)
static_assert(kBatch <= kTileCols * kRowGroups, "one thread stages each row of a batch");

// The sum of v over the row groups of each column, a fixed tree; every thread gets its column's.
__device__ __forceinline__ float column_total(float v, float (*shared)[kTileCols]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  __syncthreads();  // shared may still be read by a previous call
  shared[ty][tx] = v;
  __syncthreads();
#pragma unroll
  for (int s = kRowGroups / 2; s > 0; s >>= 1) {
    if (ty < s) shared[ty][tx] += shared[ty + s][tx];
    __syncthreads();
  }
  return shared[0][tx];
}

// LayerNorm's input gradient at one value: rstd (dy gamma - S1 / c_total -
// xhat S2 / c_total), s1 and s2 the sums already divided. One function, so
// the kernels over columns and over whole rows compute it alike.
__device__ __forceinline__ float ln_backward_dx(float vd, float gj, float xhat, float rs, float s1,
                                                float s2) {
  return rs * (vd * gj - s1 - xhat * s2);
}

// RMSNorm's input gradient at one value: rstd dy gamma - x rstd^3 S / c_total
// (t = rstd^3 S / c_total). One function, so the kernels over columns and
// over whole rows compute it alike.
__device__ __forceinline__ float rms_backward_dx(float vd, float gj, float vx, float rs, float t) {
  return rs * vd * gj - t * vx;
}

// A row of LayerNorm's backward, for norm_backward_apply_kernel and
// norm_backward_rows_kernel: its sums' terms, the row's statistics from the
// summed sums (over c_total columns), and at each value the gain's and
// bias's terms and the input gradient.
struct LnBackwardRows {
  static constexpr int kSums = 2;  // per row: S1 (g), S2 (g xhat)
  LnBackwardSums terms;
  struct alignas(16) Row {  // staged in shared memory as one 16-byte word
    float mu, rs, s1, s2;
  };
  __device__ Row row(int r, double a, double b, int c) const {
    return {terms.mean[r], terms.rstd[r], float(a / c), float(b / c)};
  }
  __device__ float dx(const Row& w, float vd, float vx, float vg, float& g, float& b) const {
    const float xhat = (vx - w.mu) * w.rs;
    g += vd * xhat;
    b += vd;
    return ln_backward_dx(vd, vg, xhat, w.rs, w.s1, w.s2);
  }
};

// The same for RMSNorm (no bias).
struct RmsBackwardRows {
  static constexpr int kSums = 1;  // per row: S (dy gamma x)
  RmsBackwardSums terms;
  const float* rstd;
  struct alignas(8) Row {
    float rs, t;
  };
  __device__ Row row(int r, double a, double, int c) const {
    const float rs = rstd[r];
    return {rs, float(double(rs) * rs * rs * a / c)};
  }
  __device__ float dx(const Row& w, float vd, float vx, float vg, float& g, float&) const {
    g += vd * vx * w.rs;
    return rms_backward_dx(vd, vg, vx, w.rs, w.t);
  }
};

// dx = the norm's input gradient (Norm: LnBackwardRows or RmsBackwardRows)
// for the rows of block blockIdx.y (`rows` a block), or added to dx
// (accumulate: dx + that, rounded as add_inplace after it would); part_g,
// part_b [gridDim.y, c] = that block's sums of the gain's and bias's terms
// (null: skipped, as dgamma or dbeta on the CPU; RMSNorm has no bias).
// Its shared memory: apply_shared_bytes<Norm>().
template <class Norm>
__global__ void __launch_bounds__(kTileCols* kRowGroups)
    norm_backward_apply_kernel(Norm norm, float* __restrict__ dx, bool accumulate, float* part_g,
                               float* part_b, const double* __restrict__ sums, int m, int c,
                               int c_total, int rows) {
  DENDRITE_DYNAMIC_SHARED(float4, apply_shared);
  auto* stats = reinterpret_cast<typename Norm::Row*>(apply_shared);     // [kBatch], per row
  auto* shared = reinterpret_cast<float(*)[kTileCols]>(stats + kBatch);  // [kRowGroups]
  const float* __restrict__ dy = norm.terms.dy;
  const float* __restrict__ x = norm.terms.x;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kTileCols + tx;
  const int j = blockIdx.x * kTileCols + tx;
  const bool col = j < c;
  const float gj = col ? norm.terms.gamma[j] : 0.0f;
  float acc_g = 0.0f, acc_b = 0.0f;
  const int end = min(m, int(blockIdx.y) * rows + rows);
  for (int r0 = blockIdx.y * rows; r0 < end; r0 += kBatch) {
    if (tid < kBatch && r0 + tid < end) {
      const int r = r0 + tid;
      const double a = sums[Norm::kSums * int64_t(r)];
      double b = 0.0;
      if constexpr (Norm::kSums == 2) b = sums[2 * int64_t(r) + 1];
      stats[tid] = norm.row(r, a, b, c_total);
    }
    __syncthreads();
    float vd[kRowsAhead], vx[kRowsAhead];
#pragma unroll
    for (int k = 0; k < kRowsAhead; ++k) {
      const int r = r0 + ty + k * kRowGroups;
      const bool ok = col && r < end;
      vd[k] = ok ? dy[int64_t(r) * c + j] : 0.0f;
      vx[k] = ok ? x[int64_t(r) * c + j] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kRowsAhead; ++k) {
      const int r = r0 + ty + k * kRowGroups;
      if (col && r < end) {
        const float v = norm.dx(stats[ty + k * kRowGroups], vd[k], vx[k], gj, acc_g, acc_b);
        float* out = dx + int64_t(r) * c + j;
        *out = accumulate ? __fadd_rn(*out, v) : v;  // no contraction into v's products
      }
    }
    __syncthreads();  // stats are restaged next batch
  }
  const int64_t at = int64_t(blockIdx.y) * c + j;
  if (part_g) {
    const float total_g = column_total(acc_g, shared);
    if (ty == 0 && col) part_g[at] = total_g;
  }
  if (part_b) {
    const float total_b = column_total(acc_b, shared);
    if (ty == 0 && col) part_b[at] = total_b;
  }
}

template <class Norm>
constexpr size_t apply_shared_bytes() {
  return kBatch * sizeof(typename Norm::Row) + kRowGroups * kTileCols * sizeof(float);
}

unsigned tile_blocks(int c) { return unsigned((c + kTileCols - 1) / kTileCols); }

// ---- backward over whole rows in one pass

// A thread keeps the gain and bias gradients of at most this many groups of 4
// columns: sum_threads gives every width up to 2048 one group a thread, and
// every width up to 8192 at most 4.
constexpr int kOwnGroups = 4;
constexpr int kWholeRowBlocks = 1024;  // blocks of rows, at most

// Rows per block of layernorm_backward_rows_kernel, from m alone (so the
// order of the gain and bias sums is fixed): at least 3, so that the
// partials [blocks, c] of dgamma and of dbeta fit in the op's scratch [m, c]
// for every m but 1 (2 ceil(m / 3) <= m); with the next product's bias
// partials too, for every m but 1, 2 and 4 (3 ceil(m / 3) <= m).
int whole_rows_per_block(int m) { return std::max(3, (m + kWholeRowBlocks - 1) / kWholeRowBlocks); }

bool whole_rows_fit(int c) { return (c + 3) / 4 <= kOwnGroups * int(sum_threads(c)); }

// Each block takes `rows` rows in turn. Per row: the sums as row_sums_kernel
// forms them (the same groups, the same tree: the bits of the norm's
// backward_sums), then dres += dx as the norm's backward apply kernel
// computes it, on the columns the thread has just read; the thread adds the
// gain's (and LayerNorm's bias's) terms of its columns over the block's rows
// in order, and writes them as the block's partials part_g, part_b
// [gridDim.x, c] (each column is one thread's: no tree), which
// add_row_block_partials adds in block order. Given low, it also writes the
// new dres rounded to bf16 there, and given part_d, the new dres's column
// sums over the block's rows the same way.
// Blocks have at most kMaxRowThreads threads (sum_threads). Bounded to two
// such blocks a multiprocessor, the one-group form fits in 64 registers; the
// four-group form, bounded to one, may take 128 (ptxas 13: 107 to 124 and no
// spill on sm_80 and sm_90; with no bound it took 72 to 102, more than a
// block of 1024 could launch with, and with the threads' bound alone it
// spilled 160 bytes on sm_80).
template <class Norm, int Own>  // groups of 4 columns a thread keeps: 1 or kOwnGroups
__global__ void __launch_bounds__(kMaxRowThreads, Own == 1 ? 2 : 1)
    norm_backward_rows_kernel(Norm norm, double* sums, float* __restrict__ dres, float* part_g,
                              float* part_b, bf16* __restrict__ low, float* part_d, int m, int c,
                              int rows, bool vec) {
  const float* __restrict__ dy = norm.terms.dy;
  const float* __restrict__ x = norm.terms.x;
  const float* __restrict__ gamma = norm.terms.gamma;
  float acc_g[4 * Own] = {}, acc_b[4 * Own] = {}, acc_d[4 * Own] = {};
  DENDRITE_DYNAMIC_SHARED(double, warp_sums);  // [32]
  const int begin = int(blockIdx.x) * rows, end = min(m, begin + rows);
  for (int r = begin; r < end; ++r) {
    double a = 0.0, b = 0.0;
    add_row_terms(norm.terms, r, c, vec, a, b);
    a = block_sum(a, warp_sums);
    if constexpr (Norm::kSums == 2) b = block_sum(b, warp_sums);
    if (threadIdx.x == 0) {
      sums[Norm::kSums * int64_t(r)] = a;
      if constexpr (Norm::kSums == 2) sums[2 * int64_t(r) + 1] = b;
    }
    const typename Norm::Row w = norm.row(r, a, b, c);
    const int64_t off = int64_t(r) * c;
#pragma unroll
    for (int k = 0; k < Own; ++k) {
      const int j = 4 * (int(threadIdx.x) + k * int(blockDim.x));
      if (j >= c) break;
      const int n = min(4, c - j);
      float vd[4], vx[4], vg[4];
      if (vec && n == 4) {
        load(vd, dy + off + j);
        load(vx, x + off + j);
        load(vg, gamma + j);
      } else {
        for (int i = 0; i < n; ++i)
          vd[i] = dy[off + j + i], vx[i] = x[off + j + i], vg[i] = gamma[j + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (i < n) {
          const float d = norm.dx(w, vd[i], vx[i], vg[i], acc_g[4 * k + i], acc_b[4 * k + i]);
          float* out = dres + off + j + i;
          const float v = __fadd_rn(*out, d);  // no contraction into d's products
          *out = v;
          if (low) low[off + j + i] = round_bf16(v);
          acc_d[4 * k + i] += v;
        }
      }
    }
  }
  const int64_t at = int64_t(blockIdx.x) * c;
#pragma unroll
  for (int k = 0; k < Own; ++k) {
    const int j = 4 * (int(threadIdx.x) + k * int(blockDim.x));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (j + i < c) {
        if (part_g) part_g[at + j + i] = acc_g[4 * k + i];
        if (part_b) part_b[at + j + i] = acc_b[4 * k + i];
        if (part_d) part_d[at + j + i] = acc_d[4 * k + i];
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- LayerNorm
// The shapes were checked by Backend (ops::check_norm, check_whole_rows).

void layernorm_row_sums(double* sums, const float* x, const ops::NormShape& s,
                        cudaStream_t stream) {
  const int c = s.c;
  launch_row_sums<2>(sums, LnSums{x, c}, s.m, c, rows_aligned(c, x), stream, "layernorm_row_sums");
}

void layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                     const float* gamma, const float* beta, const ops::NormShape& s, float eps,
                     cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(apply_blocks(s.m), kApplyRows * 32, 0, stream, layernorm_apply_kernel<float>)
  (y, mean, rstd, sums, x, gamma, beta, s.m, s.c, s.c_total, eps,
   rows_aligned(s.c, y, x, gamma, beta));
  check_launch("layernorm_apply");
}

void layernorm_apply_bf16(bf16* y, float* mean, float* rstd, const double* sums, const float* x,
                          const float* gamma, const float* beta, const ops::NormShape& s, float eps,
                          cudaStream_t stream) {
  if (s.m == 0) return;
  const bool vec = rows_aligned(s.c, x, gamma, beta) && aligned_to(8, y);
  DENDRITE_LAUNCH(apply_blocks(s.m), kApplyRows * 32, 0, stream, layernorm_apply_kernel<bf16>)
  (y, mean, rstd, sums, x, gamma, beta, s.m, s.c, s.c_total, eps, vec);
  check_launch("layernorm_apply_bf16");
}

void layernorm_rows_bf16(double* sums, bf16* y, float* mean, float* rstd, const float* x,
                         const float* gamma, const float* beta, const ops::NormShape& s, float eps,
                         cudaStream_t stream) {
  if (s.m == 0) return;
  const bool vec = rows_aligned(s.c, x, gamma, beta) && aligned_to(8, y);
  DENDRITE_LAUNCH(unsigned(s.m), sum_threads(s.c), kBlockSumBytes<double>, stream,
                  layernorm_rows_kernel)
  (sums, y, mean, rstd, x, gamma, beta, s.c, eps, vec);
  check_launch("layernorm_rows_bf16");
}

void layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                             const float* rstd, const float* gamma, const ops::NormShape& s,
                             cudaStream_t stream) {
  const int c = s.c;
  launch_row_sums<2>(sums, LnBackwardSums{dy, x, mean, rstd, gamma, c}, s.m, c,
                     rows_aligned(c, dy, x, gamma), stream, "layernorm_backward_sums");
}

void layernorm_backward_apply(float* dx, bool accumulate, float* dgamma, float* dbeta,
                              const double* sums, const float* dy, const float* x,
                              const float* mean, const float* rstd, const float* gamma,
                              const ops::NormShape& s, void* scratch, cudaStream_t stream) {
  const int m = s.m, c = s.c;
  if (m == 0) return;
  const RowBlocks b = row_blocks(m, c, 2, kBatch, "layernorm_backward_apply");
  float* part_g = dgamma ? static_cast<float*>(scratch) : nullptr;  // [b.count, c]
  float* part_b = dbeta ? static_cast<float*>(scratch) + int64_t(b.count) * c : nullptr;  // same
  const LnBackwardRows norm{{dy, x, mean, rstd, gamma, c}};
  DENDRITE_LAUNCH(dim3(tile_blocks(c), unsigned(b.count)), dim3(kTileCols, kRowGroups),
                  apply_shared_bytes<LnBackwardRows>(), stream,
                  norm_backward_apply_kernel<LnBackwardRows>)
  (norm, dx, accumulate, part_g, part_b, sums, m, c, s.c_total, b.rows);
  check_launch("layernorm_backward_apply");
  add_row_block_partials(RowBlockSums{{dgamma, dbeta}, {part_g, part_b}}, b.count, c, stream);
}

namespace {

// The one pass over whole rows of a norm's backward added into dres (Norm: LnBackwardRows or
// RmsBackwardRows), and with next, its bf16 output and bias sums; false where
// it does not apply (wider than a block keeps, or too few rows for the
// partials to fit in scratch), for the caller to run the separate kernels.
template <class Norm>
bool launch_backward_rows(const Norm& norm, const ops::ResidualGradBf16* next, double* sums,
                          float* dres, float* scratch, float* dgamma, float* dbeta,
                          const ops::NormShape& s, cudaStream_t stream, const char* op) {
  const int m = s.m, c = s.c;
  const int rows = whole_rows_per_block(m);
  const int blocks = (m + rows - 1) / rows;
  const int outputs = (dgamma || dbeta ? 2 : 0) + (next && next->db ? 1 : 0);  // partial sets
  if (!whole_rows_fit(c) || outputs * blocks > m) return false;
  float* part_g = dgamma ? scratch : nullptr;                       // [blocks, c]
  float* part_b = dbeta ? scratch + int64_t(blocks) * c : nullptr;  // [blocks, c]
  float* part_d = next && next->db ? scratch + 2 * int64_t(blocks) * c : nullptr;  // [blocks, c]
  bf16* low = next ? next->low : nullptr;
  const bool vec = rows_aligned(c, dres, norm.terms.dy, norm.terms.x, norm.terms.gamma);
  const unsigned threads = sum_threads(c);
  if ((c + 3) / 4 <= int(threads)) {
    DENDRITE_LAUNCH(unsigned(blocks), threads, kBlockSumBytes<double>, stream,
                    norm_backward_rows_kernel<Norm, 1>)
    (norm, sums, dres, part_g, part_b, low, part_d, m, c, rows, vec);
  } else {
    DENDRITE_LAUNCH(unsigned(blocks), threads, kBlockSumBytes<double>, stream,
                    norm_backward_rows_kernel<Norm, kOwnGroups>)
    (norm, sums, dres, part_g, part_b, low, part_d, m, c, rows, vec);
  }
  check_launch(op);
  float* db = part_d ? next->db : nullptr;
  add_row_block_partials(RowBlockSums{{dgamma, dbeta, db}, {part_g, part_b, part_d}}, blocks, c,
                         stream);
  return true;
}

// The separate kernels' last step: the new dres rounded into next's operand,
// its bias sums beside.
void round_for_next(const ops::ResidualGradBf16* next, const float* dres, const ops::NormShape& s,
                    void* op_scratch, cudaStream_t stream) {
  if (next && next->db)
    to_bf16_column_sums(next->low, next->db, dres, s.m, s.c, op_scratch, stream);
  else if (next)
    to_bf16(next->low, dres, int64_t(s.m) * s.c, stream);
}

void ln_backward_rows_add(const ops::ResidualGradBf16* next, double* sums, float* dres,
                          float* scratch, float* dgamma, float* dbeta, const float* dy,
                          const float* x, const float* mean, const float* rstd, const float* gamma,
                          const ops::NormShape& s, void* op_scratch, cudaStream_t stream,
                          const char* op) {
  if (s.m == 0) return;
  const LnBackwardRows norm{{dy, x, mean, rstd, gamma, s.c}};
  if (launch_backward_rows(norm, next, sums, dres, scratch, dgamma, dbeta, s, stream, op)) return;
  layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, s, stream);
  layernorm_backward_apply(dres, true, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s, op_scratch,
                           stream);
  round_for_next(next, dres, s, op_scratch, stream);
}

void rms_backward_rows_add(const ops::ResidualGradBf16* next, double* sums, float* dres,
                           float* scratch, float* dgamma, const float* dy, const float* x,
                           const float* rstd, const float* gamma, const ops::NormShape& s,
                           void* op_scratch, cudaStream_t stream, const char* op) {
  if (s.m == 0) return;
  const RmsBackwardRows norm{{dy, x, gamma, s.c}, rstd};
  if (launch_backward_rows(norm, next, sums, dres, scratch, dgamma, nullptr, s, stream, op)) return;
  rmsnorm_backward_sums(sums, dy, x, gamma, s, stream);
  rmsnorm_backward_apply(scratch, dgamma, sums, dy, x, rstd, gamma, s, op_scratch, stream);
  add_inplace(dres, scratch, int64_t(s.m) * s.c, stream);
  round_for_next(next, dres, s, op_scratch, stream);
}

}  // namespace

void layernorm_backward_rows_add(double* sums, float* dres, float* scratch, float* dgamma,
                                 float* dbeta, const float* dy, const float* x, const float* mean,
                                 const float* rstd, const float* gamma, const ops::NormShape& s,
                                 void* op_scratch, cudaStream_t stream) {
  ln_backward_rows_add(nullptr, sums, dres, scratch, dgamma, dbeta, dy, x, mean, rstd, gamma, s,
                       op_scratch, stream, "layernorm_backward_rows_add");
}

void layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums, float* dres,
                                      float* scratch, float* dgamma, float* dbeta, const float* dy,
                                      const float* x, const float* mean, const float* rstd,
                                      const float* gamma, const ops::NormShape& s, void* op_scratch,
                                      cudaStream_t stream) {
  ln_backward_rows_add(&next, sums, dres, scratch, dgamma, dbeta, dy, x, mean, rstd, gamma, s,
                       op_scratch, stream, "layernorm_backward_rows_add_bf16");
}

void rmsnorm_backward_rows_add(const ops::ResidualGradBf16* next, double* sums, float* dres,
                               float* scratch, float* dgamma, const float* dy, const float* x,
                               const float* rstd, const float* gamma, const ops::NormShape& s,
                               void* op_scratch, cudaStream_t stream) {
  rms_backward_rows_add(next, sums, dres, scratch, dgamma, dy, x, rstd, gamma, s, op_scratch,
                        stream,
                        next ? "rmsnorm_backward_rows_add_bf16" : "rmsnorm_backward_rows_add");
}

// ---------------------------------------------------------------- RMSNorm

void rmsnorm_row_sums(double* sums, const float* x, const ops::NormShape& s, cudaStream_t stream) {
  const int c = s.c;
  launch_row_sums<1>(sums, RmsSums{x, c}, s.m, c, rows_aligned(c, x), stream, "rmsnorm_row_sums");
}

void rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x, const float* gamma,
                   const ops::NormShape& s, float eps, cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(apply_blocks(s.m), kApplyRows * 32, 0, stream, rmsnorm_apply_kernel)
  (y, rstd, sums, x, gamma, s.m, s.c, s.c_total, eps, rows_aligned(s.c, y, x, gamma));
  check_launch("rmsnorm_apply");
}

void rmsnorm_rows_bf16(double* sums, bf16* y, float* rstd, const float* x, const float* gamma,
                       const ops::NormShape& s, float eps, cudaStream_t stream) {
  if (s.m == 0) return;
  const bool vec = rows_aligned(s.c, x, gamma) && aligned_to(8, y);
  DENDRITE_LAUNCH(unsigned(s.m), sum_threads(s.c), kBlockSumBytes<double>, stream,
                  rmsnorm_rows_kernel)
  (sums, y, rstd, x, gamma, s.c, eps, vec);
  check_launch("rmsnorm_rows_bf16");
}

void rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                           const ops::NormShape& s, cudaStream_t stream) {
  const int c = s.c;
  launch_row_sums<1>(sums, RmsBackwardSums{dy, x, gamma, c}, s.m, c, rows_aligned(c, dy, x, gamma),
                     stream, "rmsnorm_backward_sums");
}

void rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                            const float* x, const float* rstd, const float* gamma,
                            const ops::NormShape& s, void* scratch, cudaStream_t stream) {
  const int m = s.m, c = s.c;
  if (m == 0) return;
  const RowBlocks b = row_blocks(m, c, 1, kBatch, "rmsnorm_backward_apply");
  float* part_g = dgamma ? static_cast<float*>(scratch) : nullptr;  // [b.count, c]
  const RmsBackwardRows norm{{dy, x, gamma, c}, rstd};
  DENDRITE_LAUNCH(dim3(tile_blocks(c), unsigned(b.count)), dim3(kTileCols, kRowGroups),
                  apply_shared_bytes<RmsBackwardRows>(), stream,
                  norm_backward_apply_kernel<RmsBackwardRows>)
  (norm, dx, false, part_g, nullptr, sums, m, c, s.c_total, b.rows);
  check_launch("rmsnorm_backward_apply");
  if (dgamma) add_row_block_partials(dgamma, part_g, b.count, c, stream);
}

}  // namespace dendrite::cuda
