// CUDA elementwise ops, fp32 <-> bf16 conversions, data movement, the bias
// add and bias-gradient column sums, and the non-finite count (kernels.h;
// semantics of ops/activation.h, convert.h, tensor.h and matmul.h).
// Flat ops are grid-stride loops over int64 indices that move 4 values per
// access (16 bytes of fp32) when every pointer is aligned for it, one value
// per access otherwise; the per-element result is the same either way.
// The activations use the exponential both backends compile
// (backend/exact_math.h), so they follow the CPU formulas to the rounding.
#include <algorithm>
#include <cstdint>

#include "dendrite/backend/cuda/vector.cuh"
#include "dendrite/backend/exact_math.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

// ---- activations, as cpu/activation.cpp

constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

using exact::exp_approx;  // backend/exact_math.h: the CPU's bits

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

template <class Out>  // float, or bf16: the fp32 value rounded as to_bf16 rounds it
struct GeluForward {
  Out* y;
  const float* x;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
    load(v, x + i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float xi = v[k];
      const float u = kGeluS * (xi + kGeluA * xi * xi * xi);
      v[k] = xi * sigmoid(2.0f * u);
    }
    store(y + i, v);
  }
};

// dx may alias dy: each value is read before it is written, by one thread.
struct GeluBackward {
  float* dx;
  const float* dy;
  const float* x;
  template <int W>
  __device__ void apply(int64_t i) const {
    float d[W], v[W];
    load(d, dy + i);
    load(v, x + i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float xi = v[k];
      const float u = kGeluS * (xi + kGeluA * xi * xi * xi);
      const float du = kGeluS * (1.0f + 3.0f * kGeluA * xi * xi);
      const float s = sigmoid(2.0f * u);  // 0.5 (1 + tanh u);  1 - tanh^2 u = 4 s (1 - s)
      d[k] = d[k] * (s + 2.0f * xi * s * (1.0f - s) * du);
    }
    store(dx + i, d);
  }
};

// Where value i of rows of `width` lies in rows of `stride` (SwiGLU's gate
// and up, side by side in one product's rows); flat when the two are equal.
// A 4-wide access stays in its row: width and stride are multiples of 4 then.
struct Rows {
  int64_t width, stride;
  __device__ int64_t at(int64_t i) const {
    return stride == width ? i : i / width * stride + i % width;
  }
};

// Strided rows take the 4-wide path where a group of 4 stays in its row.
bool whole_groups(const ops::GluRows& s) { return s.width % 4 == 0 && s.stride % 4 == 0; }

template <class Out>  // float, or bf16: the fp32 value rounded as to_bf16 rounds it
struct SwigluForward {
  Out* y;
  const float* gate;
  const float* up;
  Rows in;  // gate's and up's rows
  template <int W>
  __device__ void apply(int64_t i) const {
    const int64_t j = in.at(i);
    float g[W], u[W];
    load(g, gate + j);
    load(u, up + j);
#pragma unroll
    for (int k = 0; k < W; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
    store(y + i, g);
  }
};

template <class Out>  // as SwigluForward
struct SwigluBackward {
  Out* dgate;
  Out* dup;
  const float* dy;
  const float* gate;
  const float* up;
  Rows in;  // gate's, up's and their gradients' rows
  template <int W>
  __device__ void apply(int64_t i) const {
    const int64_t j = in.at(i);
    float g[W], u[W], d[W], dg[W], du[W];
    load(g, gate + j);
    load(u, up + j);
    load(d, dy + i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float s = sigmoid(g[k]);
      du[k] = d[k] * g[k] * s;
      dg[k] = d[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
    }
    store(dup + j, du);
    store(dgate + j, dg);
  }
};

// y may alias a or b.
struct Add {
  float* y;
  const float* a;
  const float* b;
  template <int W>
  __device__ void apply(int64_t i) const {
    float va[W], vb[W];
    load(va, a + i);
    load(vb, b + i);
#pragma unroll
    for (int k = 0; k < W; ++k) va[k] += vb[k];
    store(y + i, va);
  }
};

// out = in, through float (to bf16: rounded to nearest even; from it: exact)
template <class Out, class In>
struct Convert {
  Out* out;
  const In* in;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
    load(v, in + i);
    store(out + i, v);
  }
};

struct Fill {
  float* x;
  float value;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = value;
    store(x + i, v);
  }
};

// ---- row-structured data movement. A flat grid-stride loop over the units
// (W values) of rows x cols_u, each thread stepping its (row, column) by the
// grid's stride without dividing per value.

// dst[r, :] = src[r * src_stride, :]; cols_u = cols / W, strides in floats.
template <int W>
__global__ void copy_rows_kernel(float* dst, const float* src, int64_t rows, int64_t cols_u,
                                 int64_t cols, int64_t src_stride) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t dr = stride / cols_u, dj = stride % cols_u;
  int64_t r = t / cols_u, j = t % cols_u;
  while (r < rows) {
    float v[W];
    load(v, src + r * src_stride + j * W);
    store(dst + r * cols + j * W, v);
    r += dr, j += dj;
    if (j >= cols_u) j -= cols_u, ++r;
  }
}

// y[r, :] += b over the m x n_u units of y.
template <int W>
__global__ void add_bias_kernel(float* y, const float* b, int64_t units, int64_t n_u) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t dj = stride % n_u;
  int64_t j = t % n_u;
  for (int64_t e = t; e < units; e += stride) {
    float vy[W], vb[W];
    load(vy, y + e * W);
    load(vb, b + j * W);
#pragma unroll
    for (int k = 0; k < W; ++k) vy[k] += vb[k];
    store(y + e * W, vy);
    j += dj;
    if (j >= n_u) j -= n_u;
  }
}

// Part blockIdx.z: out[r, p Vloc + j] = parts[p][r, j] for j < its real ids.
__global__ void interleave_vocab_parts_kernel(float* out, const float* parts, int m, int Vloc,
                                              int V) {
  const int p = blockIdx.z;
  const int ids = min(Vloc, V - p * Vloc);  // real ids in this part (the rest is padding)
  for (int r = blockIdx.y; r < m; r += gridDim.y) {
    const float* src = parts + (int64_t(p) * m + r) * Vloc;
    float* dst = out + int64_t(r) * V + int64_t(p) * Vloc;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < ids; j += gridDim.x * blockDim.x)
      dst[j] = src[j];
  }
}

// ---- column sums: a grid of kTileCols columns by blocks of rows
// (row_blocks); row group ty of a block sums rows ty, ty + kRowGroups, ...
// of its block of rows in order (kRowsAhead rows loaded before they are
// added), the groups' sums are added as a fixed tree into the block's
// partial, and add_row_block_partials adds the partials in block order. The
// order depends on nothing but m and n, so the bits are the same every run.

constexpr int kTileCols = 8;     // columns per block: a warp reads 4 rows x 32 bytes
constexpr int kRowGroups = 128;  // row groups per block (blockDim = kTileCols x kRowGroups)
constexpr int kRowsAhead = 4;    // rows each thread loads before adding them

// The sum of v over the row groups of each column, a fixed tree; valid in row group 0.
__device__ __forceinline__ float column_total(float v, float (*shared)[kTileCols]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  shared[ty][tx] = v;
  __syncthreads();
#pragma unroll
  for (int s = kRowGroups / 2; s > 0; s >>= 1) {
    if (ty < s) shared[ty][tx] += shared[ty + s][tx];
    __syncthreads();
  }
  return shared[0][tx];
}

// partials [gridDim.y, n]: block blockIdx.y's sums of its rows; low (or
// null) [m, n]: dy rounded to bf16, written as it is read.
__global__ void __launch_bounds__(kTileCols* kRowGroups)
    column_sums_kernel(float* __restrict__ partials, bf16* __restrict__ low,
                       const float* __restrict__ dy, int m, int n, int rows) {
  DENDRITE_DYNAMIC_SHARED(float, tile);  // [kRowGroups][kTileCols]
  const int j = blockIdx.x * kTileCols + threadIdx.x;
  const bool col = j < n;
  const int begin = blockIdx.y * rows, end = min(m, begin + rows);
  float acc = 0.0f;
  for (int r0 = begin + threadIdx.y; r0 < end; r0 += kRowGroups * kRowsAhead) {
    float v[kRowsAhead];
#pragma unroll
    for (int k = 0; k < kRowsAhead; ++k) {
      const int r = r0 + k * kRowGroups;
      v[k] = col && r < end ? dy[int64_t(r) * n + j] : 0.0f;
      if (low && col && r < end) low[int64_t(r) * n + j] = round_bf16(v[k]);
    }
#pragma unroll
    for (int k = 0; k < kRowsAhead; ++k)
      if (r0 + k * kRowGroups < end) acc += v[k];
  }
  const float total = column_total(acc, reinterpret_cast<float(*)[kTileCols]>(tile));
  if (threadIdx.y == 0 && col) partials[int64_t(blockIdx.y) * n + j] = total;
}

// sums.out[y] [n] += sum over b of sums.partials[y] [b, n], b = 0 first: one
// thread a column, blockIdx.y the sum (the first gridDim.y of sums are given).
// Sum k = blockIdx.y picks its pointers by comparisons: indexing the
// parameter's arrays by a value known only at run time would copy them to
// local memory (a stack frame, tests/kernel_resources.py).
__global__ void add_row_block_partials_kernel(RowBlockSums sums, int blocks, int n) {
  static_assert(RowBlockSums::kMax == 3);
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const unsigned k = blockIdx.y;
  const float* partials = k == 0 ? sums.partials[0] : k == 1 ? sums.partials[1] : sums.partials[2];
  float* out = k == 0 ? sums.out[0] : k == 1 ? sums.out[1] : sums.out[2];
  float total = partials[j];
  for (int b = 1; b < blocks; ++b) total += partials[int64_t(b) * n + j];
  out[j] += total;
}

// ---- the non-finite count: a fixed grid of per-block counts, then one block
// adds them (integers: exact in any order; the order is fixed all the same).

constexpr int kReduceBlocks = 1024;  // at most this many first-stage blocks
static_assert((kReduceBlocks + 1) * sizeof(long long) <= kScratchBytes);

__device__ __forceinline__ long long nonfinite(float v) {
  return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;  // exponent all ones: inf or NaN
}

__global__ void count_nonfinite_kernel(long long* partial, const float* x, int64_t n, bool vec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  long long bad = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    for (int64_t q = t; q < n4; q += stride) {
      float v[4];
      load(v, x + 4 * q);
      bad += nonfinite(v[0]) + nonfinite(v[1]) + nonfinite(v[2]) + nonfinite(v[3]);
    }
    for (int64_t i = 4 * n4 + t; i < n; i += stride) bad += nonfinite(x[i]);
  } else {
    for (int64_t i = t; i < n; i += stride) bad += nonfinite(x[i]);
  }
  DENDRITE_DYNAMIC_SHARED(long long, counts);  // [32]
  bad = block_sum(bad, counts);
  if (threadIdx.x == 0) partial[blockIdx.x] = bad;
}

__global__ void sum_counts_kernel(long long* total, const long long* partial, int count) {
  long long s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  DENDRITE_DYNAMIC_SHARED(long long, counts);  // [32]
  s = block_sum(s, counts);
  if (threadIdx.x == 0) *total = s;
}

}  // namespace

void gelu_forward(float* y, const float* x, long n, cudaStream_t stream) {
  launch_map(GeluForward<float>{y, x}, n, aligned_to(16, y, x), stream, "gelu_forward");
}

void gelu_forward_bf16(bf16* y, const float* x, long n, cudaStream_t stream) {
  launch_map(GeluForward<bf16>{y, x}, n, aligned_to(8, y) && aligned_to(16, x), stream,
             "gelu_forward_bf16");
}

void gelu_backward(float* dx, const float* dy, const float* x, long n, cudaStream_t stream) {
  launch_map(GeluBackward{dx, dy, x}, n, aligned_to(16, dx, dy, x), stream, "gelu_backward");
}

void swiglu_forward(float* y, const float* gate, const float* up, long n, cudaStream_t stream) {
  launch_map(SwigluForward<float>{y, gate, up, {n, n}}, n, aligned_to(16, y, gate, up), stream,
             "swiglu_forward");
}

void swiglu_forward_bf16(bf16* y, const float* gate, const float* up, const ops::GluRows& s,
                         cudaStream_t stream) {
  launch_map(SwigluForward<bf16>{y, gate, up, {s.width, s.stride}}, s.count(),
             aligned_to(8, y) && aligned_to(16, gate, up) && whole_groups(s), stream,
             "swiglu_forward_bf16");
}

void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                     long n, cudaStream_t stream) {
  launch_map(SwigluBackward<float>{dgate, dup, dy, gate, up, {n, n}}, n,
             aligned_to(16, dgate, dup, dy, gate, up), stream, "swiglu_backward");
}

void swiglu_backward_bf16(bf16* dgate, bf16* dup, const float* dy, const float* gate,
                          const float* up, const ops::GluRows& s, cudaStream_t stream) {
  launch_map(SwigluBackward<bf16>{dgate, dup, dy, gate, up, {s.width, s.stride}}, s.count(),
             aligned_to(8, dgate, dup) && aligned_to(16, dy, gate, up) && whole_groups(s), stream,
             "swiglu_backward_bf16");
}

void add(float* y, const float* a, const float* b, long n, cudaStream_t stream) {
  launch_map(Add{y, a, b}, n, aligned_to(16, y, a, b), stream, "add");
}

void add_inplace(float* y, const float* x, long n, cudaStream_t stream) {
  launch_map(Add{y, y, x}, n, aligned_to(16, y, x), stream, "add_inplace");  // y += x
}

void to_bf16(bf16* out, const float* in, int64_t n, cudaStream_t stream) {
  launch_map(Convert<bf16, float>{out, in}, n, aligned_to(8, out) && aligned_to(16, in), stream,
             "to_bf16");
}

void to_float(float* out, const bf16* in, int64_t n, cudaStream_t stream) {
  launch_map(Convert<float, bf16>{out, in}, n, aligned_to(16, out) && aligned_to(8, in), stream,
             "to_float");
}

void fill(float* x, float value, int64_t n, cudaStream_t stream) {
  launch_map(Fill{x, value}, n, aligned_to(16, x), stream, "fill");
}

void copy_rows(float* dst, const float* src, int64_t rows, int64_t cols, int64_t src_stride,
               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (cols % 4 == 0 && src_stride % 4 == 0 && aligned_to(16, dst, src)) {
    DENDRITE_LAUNCH(blocks_for(rows * (cols / 4)), kThreads, 0, stream, copy_rows_kernel<4>)(
        dst, src, rows, cols / 4, cols, src_stride);
  } else {
    DENDRITE_LAUNCH(blocks_for(rows * cols), kThreads, 0, stream, copy_rows_kernel<1>)(
        dst, src, rows, cols, cols, src_stride);
  }
  check_launch("copy_rows");
}

// The sizes were checked by Backend (backend.h: ops::check_vocab_parts); the
// parts are the grid's z, whose limit is CUDA's.
void interleave_vocab_parts(float* out, const float* parts, const ops::VocabParts& s,
                            cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_CHECK(s.parts <= 65535, "interleave_vocab_parts: at most 65535 parts on cuda, got ",
                 s.parts);
  const dim3 grid(blocks_for(s.Vloc), unsigned(s.m < 65535 ? s.m : 65535), unsigned(s.parts));
  DENDRITE_LAUNCH(grid, kThreads, 0, stream, interleave_vocab_parts_kernel)
  (out, parts, s.m, s.Vloc, s.V);
  check_launch("interleave_vocab_parts");
}

void add_bias(float* y, const float* b, int m, int n, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  const int64_t total = int64_t(m) * n;
  if (n % 4 == 0 && aligned_to(16, y, b))
    DENDRITE_LAUNCH(blocks_for(total / 4), kThreads, 0, stream, add_bias_kernel<4>)(
        y, b, total / 4, n / 4);
  else
    DENDRITE_LAUNCH(blocks_for(total), kThreads, 0, stream, add_bias_kernel<1>)(y, b, total, n);
  check_launch("add_bias");
}

RowBlocks row_blocks(int m, int n, int outputs, int step, const char* op) {
  // About 512 rows a block: for 16,384 rows, 32 blocks of rows per column tile.
  constexpr int kRowsPerBlock = 512;
  const int64_t fit = int64_t(kScratchBytes) / (int64_t(sizeof(float)) * outputs * n);
  DENDRITE_CHECK(fit >= 1, op, ": the partial sums of ", outputs, " x ", n,
                 " columns do not fit the ", kScratchBytes, " bytes of scratch; at most ",
                 kScratchBytes / (sizeof(float) * outputs), " columns");
  const int64_t want = std::max<int64_t>(1, (int64_t(m) + kRowsPerBlock - 1) / kRowsPerBlock);
  const int count = int(std::min<int64_t>({want, fit, 65535}));
  RowBlocks b;
  b.rows = (m + count - 1) / count;
  b.rows = (b.rows + step - 1) / step * step;
  b.count = std::max(1, (m + b.rows - 1) / b.rows);
  return b;
}

void add_row_block_partials(const RowBlockSums& sums, int blocks, int n, cudaStream_t stream) {
  RowBlockSums given;  // the sums given, first
  int count = 0;
  for (int k = 0; k < RowBlockSums::kMax; ++k)
    if (sums.out[k]) {
      given.out[count] = sums.out[k];
      given.partials[count++] = sums.partials[k];
    }
  if (n <= 0 || count == 0) return;
  DENDRITE_LAUNCH(dim3(blocks_for(n), unsigned(count)), kThreads, 0, stream,
                  add_row_block_partials_kernel)
  (given, blocks, n);
  check_launch("add_row_block_partials");
}

void add_row_block_partials(float* out, const float* partials, int blocks, int n,
                            cudaStream_t stream) {
  RowBlockSums sums;
  sums.out[0] = out;
  sums.partials[0] = partials;
  add_row_block_partials(sums, blocks, n, stream);
}

namespace {

void launch_column_sums(bf16* low, float* db, const float* dy, int m, int n, void* scratch,
                        cudaStream_t stream, const char* op) {
  if (m <= 0 || n <= 0) return;
  const RowBlocks b = row_blocks(m, n, 1, kRowGroups * kRowsAhead, op);
  float* partials = static_cast<float*>(scratch);  // [b.count, n]
  const dim3 grid(unsigned((n + kTileCols - 1) / kTileCols), unsigned(b.count));
  DENDRITE_LAUNCH(grid, dim3(kTileCols, kRowGroups), kRowGroups * kTileCols * sizeof(float), stream,
                  column_sums_kernel)
  (partials, low, dy, m, n, b.rows);
  check_launch(op);
  add_row_block_partials(db, partials, b.count, n, stream);
}

}  // namespace

void add_column_sums(float* db, const float* dy, int m, int n, void* scratch, cudaStream_t stream) {
  launch_column_sums(nullptr, db, dy, m, n, scratch, stream, "add_column_sums");
}

void to_bf16_column_sums(bf16* low, float* db, const float* dy, int m, int n, void* scratch,
                         cudaStream_t stream) {
  launch_column_sums(low, db, dy, m, n, scratch, stream, "to_bf16_column_sums");
}

int64_t count_nonfinite(const float* x, int64_t n, void* scratch, cudaStream_t stream) {
  if (n <= 0) return 0;
  auto* partial = static_cast<long long*>(scratch);  // [kReduceBlocks] counts, then the total
  long long* total = partial + kReduceBlocks;
  const unsigned blocks = blocks_for((n + 3) / 4, kThreads, kReduceBlocks);
  DENDRITE_LAUNCH(blocks, kThreads, kBlockSumBytes<long long>, stream, count_nonfinite_kernel)
  (partial, x, n, aligned_to(16, x));
  check_launch("count_nonfinite");
  DENDRITE_LAUNCH(1, kThreads, kBlockSumBytes<long long>, stream, sum_counts_kernel)
  (total, partial, int(blocks));
  check_launch("count_nonfinite (sum of counts)");
  long long result = 0;
  check_cuda(cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (count_nonfinite result to host)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (count_nonfinite)");
  return result;
}

}  // namespace dendrite::cuda
