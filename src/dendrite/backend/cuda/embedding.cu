// CUDA token and position embeddings (ops/embedding.h). The forwards are
// gathers, one block per row, threads over the columns; they overwrite their
// rows (position_add adds). The backwards are scatter-adds, summed without
// atomics in row order per gradient element, as the CPU does, so the bits
// equal the CPU's and never depend on the launch shape:
// - token backward: a thread owns one column j and, for the tokens of its
//   block's slice (token % slices), walks their rows in row order. The block
//   stages the rows of its slice in shared memory, in row order, so threads
//   skip the other slices' rows; the slices give parallelism beyond C threads.
//   A thread loads kBatch rows' values at once (latency), adding rows that
//   share a token in registers, in order.
// - position backward: a thread owns one (position, column) and adds its
//   rows r = t, t + T, ... in order.
// Token ids outside the range are skipped; ids are validated by the host, the
// kernels only never touch memory outside the buffers. The sizes were checked
// by Backend (backend.h: ops::check_embedding, check_chunk, check_positions).
#include "dendrite/backend/cuda/common.cuh"
#include "dendrite/core/check.h"

namespace dendrite::cuda {
namespace {

// Threads of a row's block: C rounded up to whole warps, at most kThreads.
unsigned row_threads(int C) {
  const int w = (C + 31) / 32 * 32;
  return unsigned(w < kThreads ? w : kThreads);
}

// ---- forwards: block = one row r of out [m, C] ----

template <class W>
__global__ void range_forward_kernel(float* __restrict__ out, const int32_t* __restrict__ tokens,
                                     const W* __restrict__ w, int v0, int rows, int C) {
  const int64_t r = blockIdx.x;
  const int64_t t = int64_t(tokens[r]) - v0;  // row of this rank's block
  float* __restrict__ o = out + r * C;
  if (t >= 0 && t < rows) {
    const W* __restrict__ e = w + t * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) o[j] = widen(e[j]);
  } else {
    for (int j = threadIdx.x; j < C; j += blockDim.x) o[j] = 0.0f;
  }
}

// The chunk holds floats [c0, c0 + n) of the block [rows, C]: element (t, j)
// is chunk[t*C + j - c0] when that index lies in [0, n).
template <class W>
__global__ void chunk_forward_kernel(float* __restrict__ out, const int32_t* __restrict__ tokens,
                                     const W* __restrict__ chunk, int64_t c0, int64_t n, int v0,
                                     int rows, int C) {
  const int64_t r = blockIdx.x;
  const int64_t t = int64_t(tokens[r]) - v0;
  const bool in = t >= 0 && t < rows;
  const int64_t base = t * C - c0;  // chunk index of (t, 0)
  float* __restrict__ o = out + r * C;
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    const int64_t i = base + j;
    o[j] = in && i >= 0 && i < n ? widen(chunk[i]) : 0.0f;
  }
}

template <class W>
__global__ void position_add_kernel(float* __restrict__ out, const W* __restrict__ wpe, int T,
                                    int C) {
  const int64_t r = blockIdx.x;
  float* __restrict__ o = out + r * C;
  const W* __restrict__ p = wpe + (r % T) * C;
  for (int j = threadIdx.x; j < C; j += blockDim.x) o[j] += widen(p[j]);
}

// ---- token backward: dst[t*C + j - c0] += dout[r, j] for t = tokens[r] - v0
// in [t_lo, t_hi) and the index in [0, n) ----

constexpr int kScatterThreads = 256;  // columns per block
constexpr int kRowsPerThread = 8;     // rows a thread stages per pass
constexpr int kPassRows = kScatterThreads * kRowsPerThread;
constexpr int kBatch = 8;             // staged rows a thread adds per step
constexpr int kScatterBlocks = 256;   // target blocks (columns x slices)

// scatter_rows_kernel's dynamic shared memory.
struct ScatterLists {
  int row[kPassRows];  // this slice's rows of the pass, in row order
  int tok[kPassRows];  // and their tokens (block rows)
  int warp_count[kScatterThreads / 32];
};

__global__ void __launch_bounds__(kScatterThreads)
    scatter_rows_kernel(float* __restrict__ dst, const float* __restrict__ dout,
                        const int32_t* __restrict__ tokens, int64_t c0, int64_t n, int v0, int t_lo,
                        int t_hi, int m, int C) {
  DENDRITE_DYNAMIC_SHARED(ScatterLists, lists);
  int* list_row = lists->row;
  int* list_tok = lists->tok;
  int* warp_count = lists->warp_count;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int j = blockIdx.x * kScatterThreads + tid;  // this thread's column
  const int slice = blockIdx.y, slices = gridDim.y;

  for (int base = 0; base < m; base += kPassRows) {
    // Stage: thread tid looks at rows base + tid*kRowsPerThread + k.
    const int r0 = base + tid * kRowsPerThread;
    int tok[kRowsPerThread];
    int count = 0;
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      tok[k] = -1;
      if (r0 + k < m) {
        const int64_t t = int64_t(tokens[r0 + k]) - v0;
        if (t >= t_lo && t < t_hi && int(t) % slices == slice) tok[k] = int(t);
      }
      count += tok[k] >= 0;
    }
    // Exclusive scan of the counts in thread order keeps the list in row order.
    int incl = count;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    if (lane == 31) warp_count[warp] = incl;
    __syncthreads();
    int offset = incl - count, total = 0;
#pragma unroll
    for (int w = 0; w < kScatterThreads / 32; ++w) {
      const int c = warp_count[w];
      offset += w < warp ? c : 0;
      total += c;
    }
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k)
      if (tok[k] >= 0) {
        list_row[offset] = r0 + k;
        list_tok[offset] = tok[k];
        ++offset;
      }
    __syncthreads();

    // Add: kBatch staged rows at a time, their loads issued together. A row
    // whose token an earlier row of the batch shares continues that row's
    // sum in registers (its loaded value is stale); the last store wins.
    if (j < C) {
      for (int e0 = 0; e0 < total; e0 += kBatch) {
        int tk[kBatch];
        int64_t idx[kBatch];
        bool ok[kBatch];
        float d[kBatch], a[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int e = e0 + k;
          tk[k] = e < total ? list_tok[e] : -1;
          idx[k] = int64_t(tk[k]) * C + j - c0;
          ok[k] = tk[k] >= 0 && idx[k] >= 0 && idx[k] < n;
          d[k] = ok[k] ? dout[int64_t(list_row[e]) * C + j] : 0.0f;
          a[k] = ok[k] ? dst[idx[k]] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
#pragma unroll
          for (int q = 0; q < k; ++q)
            if (ok[q] && tk[q] == tk[k]) a[k] = a[q];
          a[k] += d[k];
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (ok[k]) dst[idx[k]] = a[k];
      }
    }
    __syncthreads();  // the list and warp_count are rewritten by the next pass
  }
}

// The token backward into dst [n] = floats [c0, c0 + n) of the block [rows, C].
void scatter_rows(float* dst, const float* dout, const int32_t* tokens,
                  const ops::TableChunk& piece, const ops::EmbeddingShape& s, cudaStream_t stream) {
  const int64_t c0 = piece.c0, n = piece.n;
  const int v0 = s.v0, rows = s.rows, m = s.m, C = s.C;
  if (m == 0 || n <= 0 || rows == 0) return;
  // Block rows that meet the chunk: [t_lo, t_hi).
  const int64_t lo = c0 > 0 ? c0 / C : 0, hi = (c0 + n + C - 1) / C;
  const int t_lo = int(lo < rows ? lo : rows), t_hi = int(hi < rows ? hi : rows);
  if (t_lo >= t_hi) return;
  const int col_blocks = (C + kScatterThreads - 1) / kScatterThreads;
  int slices = (kScatterBlocks + col_blocks - 1) / col_blocks;
  if (slices > t_hi - t_lo) slices = t_hi - t_lo;
  if (slices > 65535) slices = 65535;
  if (slices < 1) slices = 1;
  DENDRITE_LAUNCH(dim3(unsigned(col_blocks), unsigned(slices)), kScatterThreads,
                  sizeof(ScatterLists), stream, scatter_rows_kernel)
  (dst, dout, tokens, c0, n, v0, t_lo, t_hi, m, C);
  check_launch("embedding_scatter_rows");
}

// dwpe[t, j] += dout[r, j] for r = t, t + T, ... < m, in row order; one thread per (t, j).
__global__ void position_backward_kernel(float* __restrict__ dwpe, const float* __restrict__ dout,
                                         int m, int T, int C, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, j = i - t * C;
    float acc = dwpe[i];
#pragma unroll 4
    for (int64_t r = t; r < m; r += T) acc += dout[r * C + j];
    dwpe[i] = acc;
  }
}

}  // namespace

// The launches name each kernel's instance (range_forward_kernel<bf16>, ...):
// the emulator's counters report the name, which bench/step_roofline.py reads.

void embedding_range_forward(float* out, const int32_t* tokens, const float* w,
                             const ops::EmbeddingShape& s, cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(unsigned(s.m), row_threads(s.C), 0, stream, range_forward_kernel<float>)
  (out, tokens, w, s.v0, s.rows, s.C);
  check_launch("embedding_range_forward");
}

void embedding_range_forward(float* out, const int32_t* tokens, const bf16* w,
                             const ops::EmbeddingShape& s, cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(unsigned(s.m), row_threads(s.C), 0, stream, range_forward_kernel<bf16>)
  (out, tokens, w, s.v0, s.rows, s.C);
  check_launch("embedding_range_forward_bf16");
}

void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                              const ops::EmbeddingShape& s, cudaStream_t stream) {
  scatter_rows(dw, dout, tokens, ops::TableChunk{0, int64_t(s.rows) * s.C}, s, stream);
}

void embedding_chunk_forward(float* out, const int32_t* tokens, const float* chunk,
                             const ops::TableChunk& piece, const ops::EmbeddingShape& s,
                             cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(unsigned(s.m), row_threads(s.C), 0, stream, chunk_forward_kernel<float>)
  (out, tokens, chunk, piece.c0, piece.n, s.v0, s.rows, s.C);
  check_launch("embedding_chunk_forward");
}

void embedding_chunk_forward(float* out, const int32_t* tokens, const bf16* chunk,
                             const ops::TableChunk& piece, const ops::EmbeddingShape& s,
                             cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(unsigned(s.m), row_threads(s.C), 0, stream, chunk_forward_kernel<bf16>)
  (out, tokens, chunk, piece.c0, piece.n, s.v0, s.rows, s.C);
  check_launch("embedding_chunk_forward_bf16");
}

void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                              const ops::TableChunk& piece, const ops::EmbeddingShape& s,
                              cudaStream_t stream) {
  scatter_rows(dchunk, dout, tokens, piece, s, stream);
}

void position_add(float* out, const float* wpe, const ops::PositionShape& s, cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(unsigned(s.m), row_threads(s.C), 0, stream, position_add_kernel<float>)
  (out, wpe, s.T, s.C);
  check_launch("position_add");
}

void position_add(float* out, const bf16* wpe, const ops::PositionShape& s, cudaStream_t stream) {
  if (s.m == 0) return;
  DENDRITE_LAUNCH(unsigned(s.m), row_threads(s.C), 0, stream, position_add_kernel<bf16>)
  (out, wpe, s.T, s.C);
  check_launch("position_add_bf16");
}

void position_backward(float* dwpe, const float* dout, const ops::PositionShape& s,
                       cudaStream_t stream) {
  const int positions = s.m < s.T ? s.m : s.T;
  if (positions == 0) return;
  const int64_t total = int64_t(positions) * s.C;
  DENDRITE_LAUNCH(blocks_for(total), kThreads, 0, stream, position_backward_kernel)
  (dwpe, dout, s.m, s.T, s.C, total);
  check_launch("position_backward");
}

}  // namespace dendrite::cuda
