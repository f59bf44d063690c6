// Causal attention on the tensor cores for bf16 operands (bf16 precision):
// the kernels behind attention_forward and attention_backward when q, k, v
// and the saved output are bf16 (attention_mma.cu launches them). The fp32
// path stays on attention.cu's SIMT kernels.
//
// Shapes: B batch, T positions, NH query heads, NKV key/value heads, hs head
// size padded with zeros to D = 64 or 128. A block owns one (b, h) (or one
// (b, KV head) for dk/dv) and a tile of 64 rows; each of its 4 warps owns 16
// rows. Products run as mma.sync m16n8k16 (bf16 in, fp32 accumulate):
//   forward  S = Q K^T [16 x 64 keys] per warp and key tile; online softmax
//            in fp32 (running max and sum per row, exp2 of scores scaled by
//            log2(e)/sqrt(hs)); O += P V with P rounded to bf16, as flash
//            attention does; lse = max + log(sum) of the fp32 P.
//   pre-pass a warp per (row, head): dO rounded to bf16 and D = rowsum(dO *
//            O) in fp32, written once to scratch that the backend owns
//            (attention_backward_scratch_bytes), so that no tile pair redoes
//            them.
//   dq       per query tile, key tiles up to the diagonal: S = Q K^T and
//            dP = dO V^T; P = exp(S - lse) recomputed, dS = P (dP - D),
//            dQ += dS K.
//   dk, dv   per key tile, for each query head of its KV head in order and
//            each query tile from the diagonal on: S^T = K Q^T, dP^T = V dO^T,
//            dV += P^T dO, dK += dS^T Q.
//   bf16     (attention_backward_bf16) both kernels write their outputs in
//            bf16, and each block the column sums of its fp32 outputs (its
//            run of 64 rows, summed row by row) for the bias gradients; a
//            last kernel adds the runs in row order (attention_mma.cu).
// Products per (query tile, key tile) pair of the backward: seven, where a
// backward summing dQ across key tiles with atomics needs five: S and dP run
// in both kernels. Five without atomics needs dS (or per-key-tile partial
// dQ) in device memory, which grows with T^2 (docs/cuda.md). Every sum runs
// in a fixed order and nothing is atomic, so results are deterministic; the
// rounding of P, dS and dO to bf16 puts the outputs within about 2^-8
// (relative) of the fp32 SIMT path's, the bound
// tests/backend_ops_attention_test.cpp holds them to.
//
// Fragments (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 g + t; A [16 x 16]
// holds rows g, g+8 at columns 2t, 2t+1 (registers 0, 1) and 2t+8, 2t+9
// (registers 2, 3); B [16 x 8] holds rows 2t, 2t+1 (register 0) and 2t+8,
// 2t+9 (register 1) of column g; C [16 x 8] holds rows g (0, 1) and g+8 (2, 3)
// at columns 2t, 2t+1. Two packed bf16 keep the lower column in the lower
// half. A C tile pair of 16 columns is therefore, packed, the A fragment of
// the next product (P and dS never leave registers).
//
// Fragments come from shared memory by ldmatrix (.m8n8.x4.b16: each lane
// gives the address of one 16-byte row of one of four 8 x 8 matrices, and
// gets row lane / 4, columns 2 (lane % 4) and + 1 of each: the A and B
// layouts above). A B operand that runs along the rows of a tile (V in P V,
// K in dS K, dO and Q in the dk/dv products) is loaded with .trans, which
// hands each lane a column's two consecutive rows instead.
//
// Shared tiles are row-major bf16 [rows][D + 8]: a row of (D + 8) / 2 words
// is 4 banks past the previous one, so the 8 rows x 16 bytes that one phase
// of ldmatrix reads hit 32 banks.
//
// This header compiles under nvcc and, for the tests' CPU emulator
// (tests/emulated_cuda), as plain C++: the inline PTX it uses
// (flash_ptx.cuh) has the emulator's stand-ins there.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dendrite/backend/cuda/common.cuh"
#include "dendrite/backend/cuda/flash_ptx.cuh"
#include "dendrite/core/bf16.h"
#include "dendrite/ops/attention.h"

namespace dendrite::cuda::flash {

__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kRows = 64;  // rows (queries, or keys for dk/dv) of a block
constexpr int kCols = 64;  // columns (keys, or queries for dk/dv) of a tile
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <int D>
struct Tile {
  static constexpr int ld = D + 8;          // bf16 per shared row
  static constexpr int elems = kRows * ld;  // one [64][D + 8] tile
  static constexpr int bytes = elems * 2;
};
// Forward: Q, then two stages of K and V. dq: Q, dO, then two stages of K
// and V. dk/dv: K, V, two stages of Q and dO, then two stages of lse and D
// of the query tile (4 x 64 floats).
template <int D>
constexpr size_t shared_bytes(int tiles, int floats) {
  return size_t(tiles) * Tile<D>::bytes + size_t(floats) * 4;
}

// ---- small helpers

__device__ __forceinline__ uint16_t bf16_bits(float f) {  // nearest-even, as to_bf16
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  if ((u & 0x7f800000u) == 0) return uint16_t((u >> 16) & 0x8000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return uint32_t(bf16_bits(lo)) | (uint32_t(bf16_bits(hi)) << 16);
}
__device__ __forceinline__ float quad_max(float v) {  // over the 4 lanes of a row
  v = fmaxf(v, shfl_xor(v, 1));
  return fmaxf(v, shfl_xor(v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += shfl_xor(v, 1);
  return v + shfl_xor(v, 2);
}
__device__ __forceinline__ float warp_sum(float v) {  // butterfly: the same bits on every lane
  for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}

// ---- tile copies from device memory (all threads of the block)
//
// A loop over tiles keeps two stages in shared memory: at the top of step i
// each thread waits for its copies of tile i (cp.async.wait_group 0), a
// barrier makes tile i the block's and tells every thread that the other
// stage's tile (i - 1) is consumed, the copies of tile i + 1 into it start,
// and tile i is computed on while they fly. One barrier a step.

// Starts filling a [kRows][D] tile: dst[r][c] = src[r * stride + c] for
// r < n, c < hs, zeros elsewhere. With `vec` (hs, stride and src allow
// 16-byte copies) by cp.async; else by plain loads and stores. Either way a
// barrier after cp_async_wait_all makes the tile the block's.
template <int D>
__device__ __forceinline__ void fill_tile(uint16_t* dst, const bf16* src, int64_t stride, int n,
                                          int hs, bool vec) {
  constexpr int ld = Tile<D>::ld;
  if (vec) {
    constexpr int chunks = D / 8;
#pragma unroll 1  // addresses hoisted out of the tile loop would hold registers
    for (int e = threadIdx.x; e < kRows * chunks; e += kThreads) {
      const int r = e / chunks, c = (e % chunks) * 8;
      const bool in = r < n && c < hs;
      cp_async_16(dst + r * ld + c, in ? src + r * stride + c : src, in ? 16 : 0);
    }
  } else {
    for (int e = threadIdx.x; e < kRows * D; e += kThreads) {
      const int r = e / D, c = e % D;
      dst[r * ld + c] = r < n && c < hs ? src[r * stride + c].bits : uint16_t(0);
    }
  }
}

// Starts filling the K and V tiles of keys k0 .. k0+63 of sequence b (rows
// from row0) and KV head kvh.
template <int D>
__device__ __forceinline__ void fill_kv_tiles(uint16_t* Ks, uint16_t* Vs, const bf16* k,
                                              const bf16* v, const ops::AttentionShape& s,
                                              int64_t row0, int k0, int kvh, bool vec) {
  const int nk = min(kCols, s.T - k0);
  const int64_t at = (row0 + k0) * s.kv_stride + kvh * s.hs;
  fill_tile<D>(Ks, k + at, s.kv_stride, nk, s.hs, vec);
  fill_tile<D>(Vs, v + at, s.kv_stride, nk, s.hs, vec);
}

// Starts filling what dk/dv reads of query tile q0 of head h of sequence b:
// the Q and dO tiles, and lse and D of its kCols rows (zeros past T).
template <int D>
__device__ __forceinline__ void fill_query_tiles(uint16_t* Qs, uint16_t* dOs, float* lse_s,
                                                 float* Ds, const bf16* q, const bf16* dob,
                                                 const float* lse, const float* Dg,
                                                 const ops::AttentionShape& s, int b, int h, int q0,
                                                 bool vec) {
  const int nq = min(kCols, s.T - q0);
  const int64_t row0 = int64_t(b) * s.T, do_stride = int64_t(s.NH) * s.hs;
  fill_tile<D>(Qs, q + (row0 + q0) * s.q_stride + h * s.hs, s.q_stride, nq, s.hs, vec);
  fill_tile<D>(dOs, dob + (row0 + q0) * do_stride + h * s.hs, do_stride, nq, s.hs, vec);
  static_assert(kThreads == 2 * kCols, "a thread per row of lse and of D");
  const int64_t at = (int64_t(b) * s.NH + h) * s.T + q0;
  const int c = threadIdx.x % kCols;
  const bool first = threadIdx.x < kCols;
  cp_async_4((first ? lse_s : Ds) + c, (first ? lse : Dg) + at + (c < nq ? c : 0), c < nq ? 4 : 0);
}

// ---- fragment loads from shared tiles (rows r0.., columns c0..), by ldmatrix

// A [16 x 16] from rows r0 + (0..15), columns c0 + (0..15) of a tile: lanes
// 0-15 give rows r0 + lane at column c0 (registers 0, 1: rows g and g + 8),
// lanes 16-31 the same rows at c0 + 8 (registers 2, 3).
template <int LD>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const uint16_t* s, int r0, int c0,
                                       int lane) {
  ldmatrix_x4(a, s + (r0 + lane % 16) * LD + c0 + (lane / 16) * 8);
}
// Two B [16 x 8] (n-tiles n0 and n0 + 8) = M^T where M's rows hold the
// columns: B[k][n] = M[n0 + n][k0 + k]. Matrices: rows n0.. at k0 and k0 + 8
// (b0), rows n0 + 8.. at k0 and k0 + 8 (b1); one ldmatrix.x4 with kPairs,
// else two .x2 (two registers fewer live, for the kernel that has none to
// spare).
template <int LD, bool kPairs>
__device__ __forceinline__ void frag_b_rows(uint32_t (&b0)[2], uint32_t (&b1)[2], const uint16_t* s,
                                            int n0, int k0, int lane) {
  if constexpr (kPairs) {
    uint32_t r[4];
    ldmatrix_x4(r, s + (n0 + lane % 8 + (lane / 16) * 8) * LD + k0 + (lane / 8 % 2) * 8);
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
  } else {
    const uint16_t* row = s + (n0 + lane % 8) * LD + k0 + (lane / 8 % 2) * 8;
    ldmatrix_x2(b0, row);
    ldmatrix_x2(b1, row + 8 * LD);
  }
}
// Two B [16 x 8] read down the tile: B[k][n] = M[k0 + k][n0 + n], transposed
// by ldmatrix. Matrices: rows k0.. and k0 + 8.. at n0 (b0), then at n0 + 8
// (b1).
template <int LD, bool kPairs>
__device__ __forceinline__ void frag_b_cols(uint32_t (&b0)[2], uint32_t (&b1)[2], const uint16_t* s,
                                            int k0, int n0, int lane) {
  if constexpr (kPairs) {
    uint32_t r[4];
    ldmatrix_x4_trans(r, s + (k0 + lane % 8 + (lane / 8 % 2) * 8) * LD + n0 + (lane / 16) * 8);
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
  } else {
    const uint16_t* row = s + (k0 + lane % 16) * LD + n0;
    ldmatrix_x2_trans(b0, row);
    ldmatrix_x2_trans(b1, row + 8);
  }
}
// The A fragment of columns 16 kk .. 16 kk + 15 of a [16 x 64] accumulator
// (n-tiles 2 kk and 2 kk + 1), rounded to bf16.
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c)[8][4], int kk) {
  a[0] = pack(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// acc[16 x 64] = A[16 rows of `a_tile` from r0] · B^T, B = rows of `b_tile`
// (64 of them, the columns of the result), over D: a score tile.
template <int D, bool kPairs>
__device__ __forceinline__ void scores(float (&acc)[8][4], const uint16_t* a_tile, int r0,
                                       const uint16_t* b_tile, int lane) {
  constexpr int LD = Tile<D>::ld;
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[4];
    frag_a<LD>(a, a_tile, r0, ks * 16, lane);
#pragma unroll
    for (int j = 0; j < 8; j += 2) {
      uint32_t b0[2], b1[2];
      frag_b_rows<LD, kPairs>(b0, b1, b_tile, j * 8, ks * 16, lane);
      mma_16816(acc[j], a, b0);
      mma_16816(acc[j + 1], a, b1);
    }
  }
}

// out[16 x D] += W[16 x 64] (an fp32 accumulator, rounded) · M, M the
// [64][D] tile: the products P V, dS K, P^T dO and dS^T Q.
template <int D, bool kPairs>
__device__ __forceinline__ void accumulate(float (&out)[D / 8][4], const float (&w)[8][4],
                                           const uint16_t* m_tile, int lane) {
  constexpr int LD = Tile<D>::ld;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
    acc_to_a(a, w, kk);
#pragma unroll
    for (int nd = 0; nd < D / 8; nd += 2) {
      uint32_t b0[2], b1[2];
      frag_b_cols<LD, kPairs>(b0, b1, m_tile, kk * 16, nd * 8, lane);
      mma_16816(out[nd], a, b0);
      mma_16816(out[nd + 1], a, b1);
    }
  }
}

// Writes rows r0 + g and r0 + g + 8 of a [16 x D] accumulator times `mul`
// (per row) to dst rows of `stride` elements, columns < hs, rows < n; Out
// fp32, or bf16 (the fp32 value rounded).
template <int D, class Out>
__device__ __forceinline__ void store_rows(Out* dst, int64_t stride, const float (&acc)[D / 8][4],
                                           int r0, int n, int hs, float mul_lo, float mul_hi, int g,
                                           int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + g + 8 * half;
    if (r >= n) continue;
    const float mul = half ? mul_hi : mul_lo;
    Out* row = dst + int64_t(r) * stride;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      const int c = nd * 8 + 2 * t;
      if constexpr (sizeof(Out) == 2) {
        if (c < hs) row[c] = round_bf16(acc[nd][2 * half] * mul);
        if (c + 1 < hs) row[c + 1] = round_bf16(acc[nd][2 * half + 1] * mul);
      } else {
        if (c < hs) row[c] = acc[nd][2 * half] * mul;
        if (c + 1 < hs) row[c + 1] = acc[nd][2 * half + 1] * mul;
      }
    }
  }
}

// ---- forward: grid (B*NH, query tiles), the last (heaviest) tile first;
// out in fp32 or bf16 (Out).
template <int D, class Out>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Out* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                   ops::AttentionShape s, bool vec) {
  constexpr int T_ = Tile<D>::elems;
  DENDRITE_DYNAMIC_SHARED(uint4, smem4);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem4);
  uint16_t* KV = Qs + T_;  // two stages of K then V tiles: stage st at KV + 2 st T_
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH, kvh = h / (s.NH / s.NKV);
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int nq = min(kRows, s.T - q0);
  const int64_t row0 = int64_t(b) * s.T;
  const float scale2 = kLog2e / sqrtf(float(s.hs));  // scores in log2 units
  fill_tile<D>(Qs, q + (row0 + q0) * s.q_stride + h * s.hs, s.q_stride, nq, s.hs, vec);
  fill_kv_tiles<D>(KV, KV + T_, k, v, s, row0, 0, kvh, vec);
  cp_async_commit();

  float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
  const int i_lo = q0 + warp * 16 + g;  // the lane's query rows i_lo and i_lo + 8
  const int end = q0 + nq;              // keys 0 .. end - 1 reach the block's queries
  for (int k0 = 0, st = 0; k0 < end; k0 += kCols, st ^= 1) {
    const uint16_t* Ks = KV + 2 * st * T_;
    const uint16_t* Vs = Ks + T_;
    cp_async_wait_all();
    __syncthreads();  // this tile is the block's; the other stage's is consumed
    if (k0 + kCols < end) {
      uint16_t* next = KV + 2 * (st ^ 1) * T_;
      fill_kv_tiles<D>(next, next + T_, k, v, s, row0, k0 + kCols, kvh, vec);
    }
    cp_async_commit();
    float sc[8][4];
    scores<D, true>(sc, Qs, warp * 16, Ks, lane);
    // Keys after the query are masked; key 0 is in the first tile, so the
    // running max is finite from it on and exp2(-inf - max) = 0.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + j * 8 + 2 * t + (e & 1), i = i_lo + 8 * (e >> 1);
        sc[j][e] = key <= i ? sc[j][e] * scale2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], sc[j][e]);
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float m_new = fmaxf(m[half], quad_max(mx[half]));
      const float alpha = exp2f(m[half] - m_new);  // 0 on the first tile (m = -inf)
      m[half] = m_new;
      l[half] *= alpha;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) o[nd][2 * half] *= alpha, o[nd][2 * half + 1] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[j][e] = exp2f(sc[j][e] - m[e >> 1]);
        l[e >> 1] += sc[j][e];
      }
    accumulate<D, true>(o, sc, Vs, lane);
  }
  // Each lane summed its own columns; the row's sum is the quad's.
  const float l_lo = quad_sum(l[0]), l_hi = quad_sum(l[1]);
  const int r0 = warp * 16;
  store_rows<D>(out + (row0 + q0) * s.out_stride + h * s.hs, s.out_stride, o, r0, nq, s.hs,
                1.0f / l_lo, 1.0f / l_hi, g, t);
  if (t == 0) {
    float* lse_row = lse + int64_t(bh) * s.T + q0;
    if (r0 + g < nq) lse_row[r0 + g] = m[0] * kLn2 + logf(l_lo);
    if (r0 + g + 8 < nq) lse_row[r0 + g + 8] = m[1] * kLn2 + logf(l_hi);
  }
}

// The bias gradients' first pass (ops::AttentionGradsBf16's order), after a
// kernel's loop: the block's fp32 outputs (rows r0 + g and r0 + g + 8 of
// each warp's accumulator times mul, the values store_rows rounds) staged in
// shared memory as [kRows][D + 1] floats over the tiles the loop read, then
// sums[c] = rows 0 .. n - 1 of column c added row by row (c < hs, a thread a
// column). The barrier first lets the stage reuse the tiles (or the last
// stage) once every warp is done with them.
template <int D>
__device__ __forceinline__ void run_sums(float* sums, float* stage, const float (&acc)[D / 8][4],
                                         int r0, int n, int hs, float mul, int g, int t) {
  constexpr int LD = D + 1;
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + g + 8 * half;
    if (r >= n) continue;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      const int c = nd * 8 + 2 * t;
      if (c < hs) stage[r * LD + c] = acc[nd][2 * half] * mul;
      if (c + 1 < hs) stage[r * LD + c + 1] = acc[nd][2 * half + 1] * mul;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < hs; c += kThreads) {
    float total = stage[c];
    for (int r = 1; r < n; ++r) total += stage[r * LD + c];
    sums[c] = total;
  }
}
template <int D>
constexpr size_t stage_bytes = size_t(kRows) * (D + 1) * 4;

// ---- dq: grid (B*NH, query tiles), the last tile first.
// Out: fp32, or bf16 with the bias gradient's run sums into sums (or null):
// rows of sums_ld floats, row b * gridDim.y + the tile's index, q's columns
// as in a row of dq.
template <int D, class Out>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Out* dq, float* sums, int sums_ld, const bf16* dob, const float* Dg, const float* lse,
              const bf16* q, const bf16* k, const bf16* v, ops::AttentionShape s, bool vec) {
  constexpr int T_ = Tile<D>::elems;
  DENDRITE_DYNAMIC_SHARED(uint4, smem4);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem4);
  uint16_t* dOs = Qs + T_;
  uint16_t* KV = dOs + T_;  // two stages of K then V tiles: stage st at KV + 2 st T_
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH, kvh = h / (s.NH / s.NKV);
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int nq = min(kRows, s.T - q0);
  const int64_t row0 = int64_t(b) * s.T;
  const float scale = 1.0f / sqrtf(float(s.hs)), scale2 = scale * kLog2e;
  const int64_t q_at = (row0 + q0) * s.q_stride + h * s.hs;
  const int64_t do_stride = int64_t(s.NH) * s.hs;
  fill_tile<D>(Qs, q + q_at, s.q_stride, nq, s.hs, vec);
  fill_tile<D>(dOs, dob + (row0 + q0) * do_stride + h * s.hs, do_stride, nq, s.hs, vec);
  fill_kv_tiles<D>(KV, KV + T_, k, v, s, row0, 0, kvh, vec);
  cp_async_commit();
  const int r0 = warp * 16, i_lo = q0 + r0 + g;
  float lse2[2], Dr[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + g + 8 * half;
    lse2[half] = r < nq ? lse[int64_t(bh) * s.T + q0 + r] * kLog2e : 0.0f;
    Dr[half] = r < nq ? Dg[int64_t(bh) * s.T + q0 + r] : 0.0f;
  }

  float acc[D / 8][4];
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) acc[nd][0] = acc[nd][1] = acc[nd][2] = acc[nd][3] = 0.0f;
  const int end = q0 + nq;  // keys 0 .. end - 1 reach the block's queries
  for (int k0 = 0, st = 0; k0 < end; k0 += kCols, st ^= 1) {
    const uint16_t* Ks = KV + 2 * st * T_;
    const uint16_t* Vs = Ks + T_;
    cp_async_wait_all();
    __syncthreads();  // this tile is the block's; the other stage's is consumed
    if (k0 + kCols < end) {
      uint16_t* next = KV + 2 * (st ^ 1) * T_;
      fill_kv_tiles<D>(next, next + T_, k, v, s, row0, k0 + kCols, kvh, vec);
    }
    cp_async_commit();
    float sc[8][4], dp[8][4];
    scores<D, true>(sc, Qs, r0, Ks, lane);
    scores<D, true>(dp, dOs, r0, Vs, lane);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + j * 8 + 2 * t + (e & 1), i = i_lo + 8 * (e >> 1);
        const float p = key <= i ? exp2f(sc[j][e] * scale2 - lse2[e >> 1]) : 0.0f;
        sc[j][e] = p * (dp[j][e] - Dr[e >> 1]);  // dS
      }
    accumulate<D, true>(acc, sc, Ks, lane);
  }
  store_rows<D>(dq + q_at, s.q_stride, acc, r0, nq, s.hs, scale, scale, g, t);
  if (sizeof(Out) == 2 && sums) {
    float* at = sums + (int64_t(b) * gridDim.y + q0 / kRows) * sums_ld + h * s.hs;
    run_sums<D>(at, reinterpret_cast<float*>(smem4), acc, r0, nq, s.hs, scale, g, t);
  }
}

// ---- dk, dv: grid (B*NKV, key tiles), the first keys (most queries) first.
// Its two [16 x D] accumulators and two score tiles leave few registers
// (168 at most for D = 64, three blocks a multiprocessor, which the launch
// bounds ask of ptxas; 255 for D = 128): B fragments come by ldmatrix.x2
// (with .x4, D = 64 took 174 registers, two blocks a multiprocessor), dV is
// summed before dP^T is computed, and the tile copies' loops stay rolled.
// Without the bound, the bias sums after the loop (bf16) led ptxas to 238
// registers for D = 64 (two blocks); with it, 168 and one 4-byte spill, its
// reload once a pair of tiles (ptxas 13, sm_90).
// Out, sums_k and sums_v as dq_kernel's (row b * gridDim.y + the key tile's
// index); the fp32 form has no sums.
template <int D, class Out>
__global__ void __launch_bounds__(kThreads, D == 64 ? 3 : 1)
    dkv_kernel(Out* dk, Out* dv, float* sums_k, float* sums_v, int sums_ld, const bf16* dob,
               const float* Dg, const float* lse, const bf16* q, const bf16* k, const bf16* v,
               ops::AttentionShape s, bool vec) {
  constexpr int T_ = Tile<D>::elems;
  DENDRITE_DYNAMIC_SHARED(uint4, smem4);
  uint16_t* Ks = reinterpret_cast<uint16_t*>(smem4);
  uint16_t* Vs = Ks + T_;
  uint16_t* QdO = Vs + T_;  // two stages of Q then dO tiles: stage st at QdO + 2 st T_
  // Two stages of [kCols] lse then [kCols] D of the query tile: stage st at rows + 2 st kCols.
  float* rows = reinterpret_cast<float*>(QdO + 4 * T_);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int bg = blockIdx.x, b = bg / s.NKV, kvh = bg % s.NKV, group = s.NH / s.NKV;
  const int k0 = blockIdx.y * kRows;
  const int nk = min(kRows, s.T - k0);
  const int64_t row0 = int64_t(b) * s.T;
  const float scale = 1.0f / sqrtf(float(s.hs)), scale2 = scale * kLog2e;
  const int64_t kv_at = (row0 + k0) * s.kv_stride + kvh * s.hs;
  fill_tile<D>(Ks, k + kv_at, s.kv_stride, nk, s.hs, vec);
  fill_tile<D>(Vs, v + kv_at, s.kv_stride, nk, s.hs, vec);
  // The (head, query tile) pairs in order: each query head of the KV head,
  // and for each the query tiles from the diagonal on.
  int h = kvh * group, q0 = k0;
  fill_query_tiles<D>(QdO, QdO + T_, rows, rows + kCols, q, dob, lse, Dg, s, b, h, q0, vec);
  cp_async_commit();
  const int r0 = warp * 16, j_lo = k0 + r0 + g;  // the lane's keys j_lo and j_lo + 8

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[nd][e] = dv_acc[nd][e] = 0.0f;
  for (int st = 0;; st ^= 1) {
    const uint16_t* Qs = QdO + 2 * st * T_;
    const uint16_t* dOs = Qs + T_;
    const float* lse_s = rows + 2 * st * kCols;
    const float* Ds = lse_s + kCols;
    int h_next = h, q_next = q0 + kCols;
    if (q_next >= s.T) ++h_next, q_next = k0;
    const bool more = h_next < (kvh + 1) * group;
    cp_async_wait_all();
    __syncthreads();  // this pair's tiles are the block's; the other stage's are consumed
    if (more) {
      uint16_t* next = QdO + 2 * (st ^ 1) * T_;
      float* next_rows = rows + 2 * (st ^ 1) * kCols;
      fill_query_tiles<D>(next, next + T_, next_rows, next_rows + kCols, q, dob, lse, Dg, s, b,
                          h_next, q_next, vec);
    }
    cp_async_commit();
    float sc[8][4], dp[8][4];
    scores<D, false>(sc, Ks, r0, Qs, lane);  // S^T: the warp's keys x the tile's queries
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = j * 8 + 2 * t + (e & 1), i = q0 + c, key = j_lo + 8 * (e >> 1);
        sc[j][e] =
            i >= key && i < s.T ? exp2f(sc[j][e] * scale2 - lse_s[c] * kLog2e) : 0.0f;  // P^T
      }
    accumulate<D, false>(dv_acc, sc, dOs, lane);
    scores<D, false>(dp, Vs, r0, dOs, lane);  // dP^T
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = j * 8 + 2 * t + (e & 1);
        dp[j][e] = sc[j][e] * (dp[j][e] - Ds[c]);  // dS^T
      }
    accumulate<D, false>(dk_acc, dp, Qs, lane);
    q0 += kCols;
    if (q0 >= s.T) ++h, q0 = k0;
    if (h >= (kvh + 1) * group) break;
  }
  store_rows<D>(dk + kv_at, s.kv_stride, dk_acc, r0, nk, s.hs, scale, scale, g, t);
  store_rows<D>(dv + kv_at, s.kv_stride, dv_acc, r0, nk, s.hs, 1.0f, 1.0f, g, t);
  if constexpr (sizeof(Out) == 2) {
    const int64_t run = (int64_t(b) * gridDim.y + blockIdx.y) * sums_ld + kvh * s.hs;
    float* stage = reinterpret_cast<float*>(smem4);
    if (sums_k) run_sums<D>(sums_k + run, stage, dk_acc, r0, nk, s.hs, scale, g, t);
    if (sums_v) run_sums<D>(sums_v + run, stage, dv_acc, r0, nk, s.hs, 1.0f, g, t);
  }
}

// The launches (attention_mma.cu), after attention.cu's shape checks.
void forward(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
             const ops::AttentionShape& s, cudaStream_t stream);
void forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
             const ops::AttentionShape& s, cudaStream_t stream);
// scratch: backward_scratch_bytes(s), 256-byte aligned.
size_t backward_scratch_bytes(const ops::AttentionShape& s);
void backward(float* dq, float* dk, float* dv, const float* dout, const bf16* out, const float* lse,
              const bf16* q, const bf16* k, const bf16* v, const ops::AttentionShape& s,
              void* scratch, cudaStream_t stream);
// The gradients in bf16 with their bias gradients' sums (ops/attention.h:
// attention_backward_bf16); g's fp32 scratch is not touched.
void backward(const ops::AttentionGradsBf16& g, const float* dout, const bf16* out,
              const float* lse, const bf16* q, const bf16* k, const bf16* v,
              const ops::AttentionShape& s, void* scratch, cudaStream_t stream);

}  // namespace dendrite::cuda::flash
