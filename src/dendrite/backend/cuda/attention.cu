// CUDA causal self-attention (flash-style, fp32 SIMT) and rotary embedding,
// with the semantics of ops/attention.h and the conventions of the CPU
// backend (backend/cpu/attention.cpp): q is scaled by 1/sqrt(hs) as it is
// loaded, lse [B,NH,T] is the log-sum-exp of the scaled scores, dq = scale *
// dS k, dk = dS^T (scale q), dv = P^T dout, D[t] = dout[t]·out[t]. These
// SIMT kernels serve fp32 operands; bf16 operands go to the tensor-core
// kernels of flash_mma.cuh (the checks here first).
//
// Every kernel works on one (batch, head) and one tile of rows, with the
// head size padded with zeros to D = 64 or 128 (hs <= 128). Within a block,
// each warp owns R "row" items (queries, or keys in the dk/dv kernel) whose
// vectors it reads from shared memory as broadcasts, and each lane owns one
// or two "column" items (keys, or queries) whose vectors it reads as rows of
// a shared tile padded to D+1 floats (lanes hit distinct banks). Products
// with a per-warp [R, cols] matrix (P or dS, also in shared memory) are
// accumulated with each lane owning head columns lane, lane+32, ...
//
//   forward   block = 64 queries of one (b, h), 8 warps x 8 rows; key tiles of
//             64 (two per lane) from key 0 to the tile's last query; online
//             softmax (running max and sum per row), exp via expf.
//   dq        block = 32 queries of one (b, h), 4 warps x 8 rows; key tiles of
//             64 up to the last query; P = expf(s - lse) recomputed.
//   dk, dv    block = 32 keys of one (b, KV head g), 4 warps x 8 keys; for
//             each query head of g in order, query tiles of 32 (one per
//             lane) from the key tile on; P recomputed as in dq.
// D is computed where it is needed (per row, by a warp, in one fixed order,
// so dq and dk/dv see the same bits) and needs no scratch buffer.
//
// Generation (attention_cached): the new keys and values are copied into
// the caches, then one warp per query row walks the cached keys in runs of
// 32, one key per lane (online softmax, fixed-order warp reductions).
//
// No [T,T] matrix exists anywhere; sums run in a fixed order and there are
// no atomics, so the same inputs give the same bits on every run. Causal
// work grows with the query tile, so the forward and dq grids start with the
// last (heaviest) tiles and the dk/dv grid with the first keys.
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "dendrite/backend/cuda/common.cuh"
#include "dendrite/backend/cuda/flash_mma.cuh"
#include "dendrite/core/check.h"

namespace dendrite::cuda {
namespace {

constexpr int kMaxHeadSize = 128;

// ---- tile shapes (floats) shared by the kernels and their launches

template <int D>
struct ForwardTiles {
  static constexpr int kWarps = 8, kRows = 8, kQ = kWarps * kRows, kK = 64;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int q = 0;                 // [kQ][D]     scaled q
  static constexpr int k = q + kQ * D;        // [kK][D+1]   k
  static constexpr int v = k + kK * (D + 1);  // [kK][D]     v
  static constexpr int p = v + kK * D;        // [kWarps][kRows][kK] probabilities
  static constexpr int floats = p + kWarps * kRows * kK;
  static constexpr size_t bytes = size_t(floats) * sizeof(float);
};

template <int D>
struct DqTiles {
  static constexpr int kWarps = 4, kRows = 8, kQ = kWarps * kRows, kK = 64;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int q = 0;                  // [kQ][D]     scaled q
  static constexpr int dout = q + kQ * D;      // [kQ][D]     dout
  static constexpr int k = dout + kQ * D;      // [kK][D+1]   k
  static constexpr int v = k + kK * (D + 1);   // [kK][D+1]   v
  static constexpr int ds = v + kK * (D + 1);  // [kWarps][kRows][kK] dS
  static constexpr int floats = ds + kWarps * kRows * kK;
  static constexpr size_t bytes = size_t(floats) * sizeof(float);
};

template <int D>
struct DkvTiles {
  static constexpr int kWarps = 4, kRows = 8, kK = kWarps * kRows, kQ = 32;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int k = 0;                           // [kK][D]     k
  static constexpr int v = k + kK * D;                  // [kK][D]     v
  static constexpr int q = v + kK * D;                  // [kQ][D+1]   scaled q
  static constexpr int dout = q + kQ * (D + 1);         // [kQ][D+1]   dout
  static constexpr int p = dout + kQ * (D + 1);         // [kWarps][kRows][kQ] P^T
  static constexpr int ds = p + kWarps * kRows * kQ;    // [kWarps][kRows][kQ] dS^T
  static constexpr int lse = ds + kWarps * kRows * kQ;  // [kQ]
  static constexpr int dd = lse + kQ;                   // [kQ]        D = dout·out
  static constexpr int floats = dd + kQ;
  static constexpr size_t bytes = size_t(floats) * sizeof(float);
};

// float4 broadcast reads need every array at a multiple of 4 floats.
static_assert(ForwardTiles<64>::p % 4 == 0 && ForwardTiles<128>::p % 4 == 0);
static_assert(DqTiles<64>::ds % 4 == 0 && DqTiles<128>::ds % 4 == 0);
static_assert(DkvTiles<64>::ds % 4 == 0 && DkvTiles<128>::ds % 4 == 0);
static_assert(DkvTiles<64>::p % 4 == 0 && DkvTiles<128>::p % 4 == 0);

// ---- device helpers

// Butterfly reductions: every lane ends with the same bits (a+b == b+a).
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// dst[r][d] (row stride LD) = mul * src[r*stride + d] for r < n, d < hs;
// zero elsewhere up to [ROWS][D]. Consecutive threads read consecutive d.
template <int ROWS, int D, int LD, int NT, class In>
__device__ __forceinline__ void load_rows(float* dst, const In* src, int64_t stride, int n, int hs,
                                          float mul) {
  for (int e = threadIdx.x; e < ROWS * D; e += NT) {
    const int r = e / D, d = e % D;
    float x = 0.0f;
    if (r < n && d < hs) x = mul * widen(src[r * stride + d]);
    dst[r * LD + d] = x;
  }
}

// D = dout·out of one row over hs columns, by a whole warp in a fixed order
// (lane partial sums over d = lane, lane+32, ..., then the butterfly).
template <class In>
__device__ __forceinline__ float row_dot(const float* dout, const In* out, int hs, int lane) {
  float acc = 0.0f;
  for (int d = lane; d < hs; d += 32) acc = fmaf(dout[d], widen(out[d]), acc);
  return warp_sum(acc);
}

// acc[r][l] = A[r]·B[l*32 + lane] over D columns, d ascending. A: the warp's
// R rows, stride LA, read as float4 broadcasts; B: one row per lane, stride
// LB = D+1 so the 32 lanes hit 32 banks.
template <int R, int L, int D, int LA, int LB>
__device__ __forceinline__ void tile_dots(float (&acc)[R][L], const float* A, const float* B,
                                          int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int l = 0; l < L; ++l) acc[r][l] = 0.0f;
#pragma unroll 1  // a step is R*L*4 FMAs already; unrolling more makes the forward spill
  for (int d = 0; d < D; d += 4) {
    float b[L][4];
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
      for (int e = 0; e < 4; ++e) b[l][e] = B[(l * 32 + lane) * LB + d + e];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float4 a = *reinterpret_cast<const float4*>(A + r * LA + d);
#pragma unroll
      for (int l = 0; l < L; ++l) {
        float x = acc[r][l];
        x = fmaf(a.x, b[l][0], x);
        x = fmaf(a.y, b[l][1], x);
        x = fmaf(a.z, b[l][2], x);
        x = fmaf(a.w, b[l][3], x);
        acc[r][l] = x;
      }
    }
  }
}

// acc[r][c] += sum_x W[r][x] * M[x][c*32 + lane], x ascending. W: the warp's
// [R][NX] matrix, read as float4 broadcasts; M: NX rows of stride LM, each
// lane reading its own columns (consecutive lanes, no bank conflicts).
template <int R, int NX, int C, int LM>
__device__ __forceinline__ void tile_accumulate(float (&acc)[R][C], const float* W, const float* M,
                                                int lane) {
#pragma unroll 2
  for (int x = 0; x < NX; x += 4) {
    float m[4][C];
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int c = 0; c < C; ++c) m[e][c] = M[(x + e) * LM + c * 32 + lane];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float4 w = *reinterpret_cast<const float4*>(W + r * NX + x);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        float y = acc[r][c];
        y = fmaf(w.x, m[0][c], y);
        y = fmaf(w.y, m[1][c], y);
        y = fmaf(w.z, m[2][c], y);
        y = fmaf(w.w, m[3][c], y);
        acc[r][c] = y;
      }
    }
  }
}

// ---- forward: grid (B*NH, query tiles), the last tile first.
template <int D, class In>
__global__ void __launch_bounds__(ForwardTiles<D>::kThreads)
    forward_kernel(float* out, float* lse, const In* q, const In* k, const In* v,
                   ops::AttentionShape s, float scale) {
  using L = ForwardTiles<D>;
  constexpr int R = L::kRows, BK = L::kK, C = D / 32;
  DENDRITE_DYNAMIC_SHARED(float4, smem4);
  float* smem = reinterpret_cast<float*>(smem4);
  float* Qs = smem + L::q;
  float* Ks = smem + L::k;
  float* Vs = smem + L::v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH, g = h / (s.NH / s.NKV);
  const int q0 = (gridDim.y - 1 - blockIdx.y) * L::kQ;
  const int nq = min(L::kQ, s.T - q0);
  const int64_t row0 = int64_t(b) * s.T;
  const In* kh = k + row0 * s.kv_stride + g * s.hs;
  const In* vh = v + row0 * s.kv_stride + g * s.hs;
  load_rows<L::kQ, D, D, L::kThreads>(Qs, q + (row0 + q0) * s.q_stride + h * s.hs, s.q_stride, nq,
                                      s.hs, scale);
  const float* Qw = Qs + warp * R * D;
  float* Pw = smem + L::p + warp * R * BK;
  const int i0 = q0 + warp * R;  // the warp's first query

  float o[R][C], m[R], l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) o[r][c] = 0.0f;
  }
  const int kend = q0 + nq;  // keys 0 .. kend-1 reach the tile's queries
  for (int k0 = 0; k0 < kend; k0 += BK) {
    const int nk = min(BK, s.T - k0);
    __syncthreads();  // the previous tile's K, V and P are consumed (and Qs is written)
    load_rows<BK, D, D + 1, L::kThreads>(Ks, kh + int64_t(k0) * s.kv_stride, s.kv_stride, nk, s.hs,
                                         1.0f);
    load_rows<BK, D, D, L::kThreads>(Vs, vh + int64_t(k0) * s.kv_stride, s.kv_stride, nk, s.hs,
                                     1.0f);
    __syncthreads();
    float sc[R][2];
    tile_dots<R, 2, D, D, D + 1>(sc, Qw, Ks, lane);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // Keys after the query are masked. Key 0 is in the first tile, so the
      // running max is finite from then on and expf(-inf - max) = 0.
      const int i = i0 + r;
      const float x0 = k0 + lane <= i ? sc[r][0] : -INFINITY;
      const float x1 = k0 + 32 + lane <= i ? sc[r][1] : -INFINITY;
      const float mx = fmaxf(m[r], warp_max(fmaxf(x0, x1)));
      const float p0 = expf(x0 - mx), p1 = expf(x1 - mx);
      const float alpha = expf(m[r] - mx);  // 0 on the first tile (m = -inf)
      l[r] = l[r] * alpha + warp_sum(p0 + p1);
      m[r] = mx;
#pragma unroll
      for (int c = 0; c < C; ++c) o[r][c] *= alpha;
      Pw[r * BK + lane] = p0;
      Pw[r * BK + 32 + lane] = p1;
    }
    __syncwarp();
    tile_accumulate<R, BK, C, D>(o, Pw, Vs, lane);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = i0 + r;
    if (i >= s.T) break;
    const float inv = 1.0f / l[r];
    float* orow = out + (row0 + i) * s.out_stride + h * s.hs;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (c * 32 + lane < s.hs) orow[c * 32 + lane] = o[r][c] * inv;
    if (lane == 0) lse[int64_t(bh) * s.T + i] = m[r] + logf(l[r]);
  }
}

// ---- dq: grid (B*NH, query tiles), the last tile first.
template <int D, class In>
__global__ void __launch_bounds__(DqTiles<D>::kThreads)
    dq_kernel(float* dq, const float* dout, const In* out, const float* lse, const In* q,
              const In* k, const In* v, ops::AttentionShape s, float scale) {
  using L = DqTiles<D>;
  constexpr int R = L::kRows, BK = L::kK, C = D / 32;
  DENDRITE_DYNAMIC_SHARED(float4, smem4);
  float* smem = reinterpret_cast<float*>(smem4);
  float* Qs = smem + L::q;
  float* dOs = smem + L::dout;
  float* Ks = smem + L::k;
  float* Vs = smem + L::v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH, g = h / (s.NH / s.NKV);
  const int q0 = (gridDim.y - 1 - blockIdx.y) * L::kQ;
  const int nq = min(L::kQ, s.T - q0);
  const int64_t row0 = int64_t(b) * s.T;
  const In* kh = k + row0 * s.kv_stride + g * s.hs;
  const In* vh = v + row0 * s.kv_stride + g * s.hs;
  const float* douth = dout + row0 * s.out_stride + h * s.hs;
  load_rows<L::kQ, D, D, L::kThreads>(Qs, q + (row0 + q0) * s.q_stride + h * s.hs, s.q_stride, nq,
                                      s.hs, scale);
  load_rows<L::kQ, D, D, L::kThreads>(dOs, douth + int64_t(q0) * s.out_stride, s.out_stride, nq,
                                      s.hs, 1.0f);
  const float* Qw = Qs + warp * R * D;
  const float* dOw = dOs + warp * R * D;
  float* dSw = smem + L::ds + warp * R * BK;
  const int i0 = q0 + warp * R;

  // The warp's rows' lse and D (rows past T: zeros, never written out).
  float lse_r[R], D_r[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = i0 + r;
    lse_r[r] = 0.0f;
    D_r[r] = 0.0f;
    if (i < s.T) {
      const int64_t at = (row0 + i) * s.out_stride + h * s.hs;
      D_r[r] = row_dot(dout + at, out + at, s.hs, lane);
      lse_r[r] = lse[int64_t(bh) * s.T + i];
    }
  }

  float acc[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
  const int kend = q0 + nq;
  for (int k0 = 0; k0 < kend; k0 += BK) {
    const int nk = min(BK, s.T - k0);
    __syncthreads();  // the previous tile's K, V and dS are consumed (and Qs, dOs are written)
    load_rows<BK, D, D + 1, L::kThreads>(Ks, kh + int64_t(k0) * s.kv_stride, s.kv_stride, nk, s.hs,
                                         1.0f);
    load_rows<BK, D, D + 1, L::kThreads>(Vs, vh + int64_t(k0) * s.kv_stride, s.kv_stride, nk, s.hs,
                                         1.0f);
    __syncthreads();
    float sc[R][2], dp[R][2];
    tile_dots<R, 2, D, D, D + 1>(sc, Qw, Ks, lane);
    tile_dots<R, 2, D, D, D + 1>(dp, dOw, Vs, lane);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = i0 + r;
#pragma unroll
      for (int l = 0; l < 2; ++l) {
        const float p = k0 + l * 32 + lane <= i ? expf(sc[r][l] - lse_r[r]) : 0.0f;
        dSw[r * BK + l * 32 + lane] = p * (dp[r][l] - D_r[r]);
      }
    }
    __syncwarp();
    tile_accumulate<R, BK, C, D + 1>(acc, dSw, Ks, lane);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = i0 + r;
    if (i >= s.T) break;
    float* row = dq + (row0 + i) * s.q_stride + h * s.hs;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (c * 32 + lane < s.hs) row[c * 32 + lane] = scale * acc[r][c];
  }
}

// ---- dk, dv: grid (B*NKV, key tiles), the first keys (most queries) first.
template <int D, class In>
__global__ void __launch_bounds__(DkvTiles<D>::kThreads)
    dkv_kernel(float* dk, float* dv, const float* dout, const In* out, const float* lse,
               const In* q, const In* k, const In* v, ops::AttentionShape s, float scale) {
  using L = DkvTiles<D>;
  constexpr int R = L::kRows, BQ = L::kQ, C = D / 32;
  DENDRITE_DYNAMIC_SHARED(float4, smem4);
  float* smem = reinterpret_cast<float*>(smem4);
  float* Ks = smem + L::k;
  float* Vs = smem + L::v;
  float* Qs = smem + L::q;
  float* dOs = smem + L::dout;
  float* lse_s = smem + L::lse;
  float* D_s = smem + L::dd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bg = blockIdx.x, b = bg / s.NKV, g = bg % s.NKV;
  const int group = s.NH / s.NKV;
  const int k0 = blockIdx.y * L::kK;
  const int nk = min(L::kK, s.T - k0);
  const int64_t row0 = int64_t(b) * s.T;
  const int64_t kv0 = (row0 + k0) * s.kv_stride + g * s.hs;
  load_rows<L::kK, D, D, L::kThreads>(Ks, k + kv0, s.kv_stride, nk, s.hs, 1.0f);
  load_rows<L::kK, D, D, L::kThreads>(Vs, v + kv0, s.kv_stride, nk, s.hs, 1.0f);
  const float* Kw = Ks + warp * R * D;
  const float* Vw = Vs + warp * R * D;
  float* Pw = smem + L::p + warp * R * BQ;
  float* dSw = smem + L::ds + warp * R * BQ;
  const int j0 = k0 + warp * R;  // the warp's first key

  float dk_acc[R][C], dv_acc[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) dk_acc[r][c] = dv_acc[r][c] = 0.0f;
  // Query heads of g in order, then query tiles from the one holding key k0 on.
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const int64_t bh = int64_t(b) * s.NH + h;
    const In* qh = q + row0 * s.q_stride + h * s.hs;
    const float* douth = dout + row0 * s.out_stride + h * s.hs;
    const In* outh = out + row0 * s.out_stride + h * s.hs;
    for (int q0 = k0 / BQ * BQ; q0 < s.T; q0 += BQ) {
      const int nq = min(BQ, s.T - q0);
      __syncthreads();  // the previous tile's Q, dout, P and dS are consumed (and Ks, Vs written)
      load_rows<BQ, D, D + 1, L::kThreads>(Qs, qh + int64_t(q0) * s.q_stride, s.q_stride, nq, s.hs,
                                           scale);
      load_rows<BQ, D, D + 1, L::kThreads>(dOs, douth + int64_t(q0) * s.out_stride, s.out_stride,
                                           nq, s.hs, 1.0f);
      for (int rr = warp; rr < BQ; rr += L::kWarps) {
        const int i = q0 + rr;
        float dd = 0.0f, ls = 0.0f;
        if (i < s.T) {
          const int64_t at = int64_t(i) * s.out_stride;
          dd = row_dot(douth + at, outh + at, s.hs, lane);
          ls = lse[bh * s.T + i];
        }
        if (lane == 0) {
          D_s[rr] = dd;
          lse_s[rr] = ls;
        }
      }
      __syncthreads();
      float sc[R][1], dp[R][1];
      tile_dots<R, 1, D, D, D + 1>(sc, Kw, Qs, lane);  // s^T: the warp's keys x the lane's query
      tile_dots<R, 1, D, D, D + 1>(dp, Vw, dOs, lane);
      const int i = q0 + lane;
      const float ls = lse_s[lane], dd = D_s[lane];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float p = i >= j0 + r && i < s.T ? expf(sc[r][0] - ls) : 0.0f;
        Pw[r * BQ + lane] = p;
        dSw[r * BQ + lane] = p * (dp[r][0] - dd);
      }
      __syncwarp();
      tile_accumulate<R, BQ, C, D + 1>(dv_acc, Pw, dOs, lane);
      tile_accumulate<R, BQ, C, D + 1>(dk_acc, dSw, Qs, lane);  // Qs is scaled
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= nk - warp * R) break;
    const int64_t at = kv0 + int64_t(warp * R + r) * s.kv_stride;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (c * 32 + lane < s.hs) {
        dk[at + c * 32 + lane] = dk_acc[r][c];
        dv[at + c * 32 + lane] = dv_acc[r][c];
      }
  }
}

// ---- rope: one thread per (row, i < hs/2), every head of the row. In place
// (Out = float, y = x, width = nheads * hs), or into bf16 rows of `width`
// values (Out = bf16): the turned heads, then the rest of the row rounded
// as it is, `half` columns per step.
template <class Out>
__global__ void rope_kernel(Out* y, const float* x, int B, int T, int nheads, int hs,
                            int64_t stride, int width, ops::RopeSpec rope, float sign, int pos0) {
  const int half = hs / 2;
  const int64_t n = int64_t(B) * T * half;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(e % half);
    const int64_t row = e / half;
    const int t = pos0 + int(row % T);
    // The angle in double and cos/sin rounded to float, as the CPU table.
    const double angle = t * ops::rope_frequency(rope, i, hs);
    const float c = static_cast<float>(cos(angle));
    const float sn = sign * static_cast<float>(sin(angle));
    const float* p = x + row * stride + i;
    Out* q = y + row * stride + i;
    for (int h = 0; h < nheads; ++h, p += hs, q += hs) {
      const float a = p[0], bb = p[half];
      // Each product and sum rounded on its own (no contraction into fma).
      const float lo = __fsub_rn(__fmul_rn(a, c), __fmul_rn(bb, sn));
      const float hi = __fadd_rn(__fmul_rn(bb, c), __fmul_rn(a, sn));
      if constexpr (std::is_same_v<Out, float>) {
        q[0] = lo, q[half] = hi;
      } else {
        q[0] = round_bf16(lo), q[half] = round_bf16(hi);
      }
    }
    if constexpr (!std::is_same_v<Out, float>) {
      for (int col = nheads * hs + i; col < width; col += half)
        y[row * stride + col] = round_bf16(x[row * stride + col]);
    }
  }
}

// ---- attention over a cache (generation)

// Writes the new keys and values into the caches: one thread per float.
__global__ void cache_write_kernel(float* k_cache, float* v_cache, const float* k_new,
                                   const float* v_new, ops::CachedAttentionShape s) {
  const int kvd = s.NKV * s.hs;
  const int64_t n = int64_t(s.B) * s.Tq * kvd;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / kvd, i = e % kvd;  // row b*Tq + t of the new ones
    const int64_t at = ((r / s.Tq) * s.T_cache + s.pos + r % s.Tq) * kvd + i;
    k_cache[at] = k_new[r * s.kv_stride + i];
    v_cache[at] = v_new[r * s.kv_stride + i];
  }
}

constexpr int kCachedWarps = 4;  // warps per block of the cached attention

// One warp per query (b, h, t) at position pos + t, over keys 0 .. pos+t in
// runs of 32: lane j scores key s0 + j (the whole dot product over hs, q from
// shared memory), the run's maximum and sum come from fixed-order warp
// reductions (butterflies, which leave every lane the same bits), and the
// running output (lane owns head columns lane, lane+32, ..) is rescaled and
// accumulated key by key in order. C = ceil(hs / 32) columns per lane.
template <int C>
__global__ void cached_attention_kernel(float* out, const float* q, const float* k_cache,
                                        const float* v_cache, ops::CachedAttentionShape s,
                                        float scale) {
  // [kCachedWarps][C * 32]
  DENDRITE_DYNAMIC_SHARED(float, cached_q);
  const int warp_in_block = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t w = int64_t(blockIdx.x) * kCachedWarps + warp_in_block;
  if (w >= int64_t(s.B) * s.NH * s.Tq) return;  // the whole warp
  const int t = int(w % s.Tq);
  const int64_t bh = w / s.Tq;
  const int h = int(bh % s.NH), b = int(bh / s.NH);
  const int g = h / (s.NH / s.NKV);
  const int64_t kvd = int64_t(s.NKV) * s.hs;
  const float* qrow = q + (int64_t(b) * s.Tq + t) * s.q_stride + int64_t(h) * s.hs;
  float* qw = cached_q + warp_in_block * C * 32;
#pragma unroll
  for (int c = 0; c < C; ++c)
    qw[c * 32 + lane] = c * 32 + lane < s.hs ? qrow[c * 32 + lane] * scale : 0.0f;
  __syncwarp();
  const float* kb = k_cache + int64_t(b) * s.T_cache * kvd + int64_t(g) * s.hs;
  const float* vb = v_cache + int64_t(b) * s.T_cache * kvd + int64_t(g) * s.hs;
  const int nkeys = s.pos + t + 1;
  float m = -INFINITY, l = 0.0f, acc[C];
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  for (int s0 = 0; s0 < nkeys; s0 += 32) {
    const int key = s0 + lane;
    float score = -INFINITY;
    if (key < nkeys) {
      const float* krow = kb + int64_t(key) * kvd;
      float dot = 0.0f;
      for (int i = 0; i < s.hs; ++i) dot += qw[i] * krow[i];
      score = dot;
    }
    float run_max = score;
    for (int o = 16; o > 0; o >>= 1) run_max = fmaxf(run_max, __shfl_xor_sync(0xffffffffu, run_max, o));
    const float m_new = fmaxf(m, run_max);  // finite: key s0 < nkeys
    const float corr = expf(m - m_new);     // 0 on the first run (m = -inf)
    const float p = key < nkeys ? expf(score - m_new) : 0.0f;
    float run_sum = p;
    for (int o = 16; o > 0; o >>= 1) run_sum += __shfl_xor_sync(0xffffffffu, run_sum, o);
    l = l * corr + run_sum;
#pragma unroll
    for (int c = 0; c < C; ++c) acc[c] *= corr;
    const int n = min(32, nkeys - s0);
    for (int j = 0; j < n; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const float* vrow = vb + int64_t(s0 + j) * kvd;
#pragma unroll
      for (int c = 0; c < C; ++c)
        if (c * 32 + lane < s.hs) acc[c] += pj * vrow[c * 32 + lane];
    }
    m = m_new;
  }
  float* orow = out + (int64_t(b) * s.Tq + t) * s.out_stride + int64_t(h) * s.hs;
  const float inv = 1.0f / l;
#pragma unroll
  for (int c = 0; c < C; ++c)
    if (c * 32 + lane < s.hs) orow[c * 32 + lane] = acc[c] * inv;
}

// ---- host side

// The kernels' head-size and grid limits. The shape itself was checked by
// Backend (backend.h: ops::check_attention, check_cached_attention).
void check_limits(const ops::AttentionShape& s, const char* op) {
  DENDRITE_CHECK(s.hs <= kMaxHeadSize, op, ": head size hs=", s.hs,
                 " exceeds the CUDA kernels' limit of ", kMaxHeadSize,
                 "; use more, smaller heads (or the CPU backend)");
  DENDRITE_CHECK(int64_t(s.T) <= int64_t(65535) * 32, op, ": T=", s.T,
                 " exceeds the CUDA kernels' limit of ", 65535 * 32, " positions");
}

float inv_sqrt_hs(int hs) { return 1.0f / std::sqrt(static_cast<float>(hs)); }

template <int D, class In>
void forward_launch(float* out, float* lse, const In* q, const In* k, const In* v,
                    const ops::AttentionShape& s, cudaStream_t stream) {
  using L = ForwardTiles<D>;
  allow_shared<forward_kernel<D, In>>(L::bytes, "attention_forward");
  const dim3 grid(unsigned(s.B * s.NH), unsigned((s.T + L::kQ - 1) / L::kQ));
  DENDRITE_LAUNCH(grid, L::kThreads, L::bytes, stream, forward_kernel<D, In>)(
      out, lse, q, k, v, s, inv_sqrt_hs(s.hs));
  check_launch("attention_forward");
}

template <int D, class In>
void backward_launch(float* dq, float* dk, float* dv, const float* dout, const In* out,
                     const float* lse, const In* q, const In* k, const In* v,
                     const ops::AttentionShape& s, cudaStream_t stream) {
  const float scale = inv_sqrt_hs(s.hs);
  using Q = DqTiles<D>;
  allow_shared<dq_kernel<D, In>>(Q::bytes, "attention_backward_dq");
  const dim3 qgrid(unsigned(s.B * s.NH), unsigned((s.T + Q::kQ - 1) / Q::kQ));
  DENDRITE_LAUNCH(qgrid, Q::kThreads, Q::bytes, stream, dq_kernel<D, In>)(
      dq, dout, out, lse, q, k, v, s, scale);
  check_launch("attention_backward_dq");
  using K = DkvTiles<D>;
  allow_shared<dkv_kernel<D, In>>(K::bytes, "attention_backward_dkv");
  const dim3 kgrid(unsigned(s.B * s.NKV), unsigned((s.T + K::kK - 1) / K::kK));
  DENDRITE_LAUNCH(kgrid, K::kThreads, K::bytes, stream, dkv_kernel<D, In>)(
      dk, dv, dout, out, lse, q, k, v, s, scale);
  check_launch("attention_backward_dkv");
}

template <class In>
void forward_any(float* out, float* lse, const In* q, const In* k, const In* v,
                 const ops::AttentionShape& s, cudaStream_t stream) {
  check_limits(s, "attention_forward");
  if (s.hs <= 64)
    forward_launch<64>(out, lse, q, k, v, s, stream);
  else
    forward_launch<128>(out, lse, q, k, v, s, stream);
}

template <class In>
void backward_any(float* dq, float* dk, float* dv, const float* dout, const In* out,
                  const float* lse, const In* q, const In* k, const In* v,
                  const ops::AttentionShape& s, cudaStream_t stream) {
  check_limits(s, "attention_backward");
  if (s.hs <= 64)
    backward_launch<64>(dq, dk, dv, dout, out, lse, q, k, v, s, stream);
  else
    backward_launch<128>(dq, dk, dv, dout, out, lse, q, k, v, s, stream);
}

template <int C>
void cached_launch(float* out, const float* q, const float* k_cache, const float* v_cache,
                   const ops::CachedAttentionShape& s, cudaStream_t stream) {
  const int64_t warps = int64_t(s.B) * s.NH * s.Tq;
  const int64_t blocks = (warps + kCachedWarps - 1) / kCachedWarps;
  DENDRITE_CHECK(blocks <= int64_t(0x7fffffff), "attention_cached: ", warps,
                 " query rows exceed the kernel's grid");
  const size_t shared = sizeof(float) * kCachedWarps * C * 32;
  DENDRITE_LAUNCH(unsigned(blocks), kCachedWarps * 32, shared, stream,
                  cached_attention_kernel<C>)(
      out, q, k_cache, v_cache, s, inv_sqrt_hs(s.hs));
  check_launch("attention_cached");
}

// The shape and the spec were checked by Backend (backend.h: ops::check_rope).
template <class Out>
void rope_launch(Out* y, const float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
                 float sign, int width, const char* op, cudaStream_t stream) {
  const int64_t n = int64_t(s.B) * s.T * (s.hs / 2);
  DENDRITE_LAUNCH(blocks_for(n), kThreads, 0, stream, rope_kernel<Out>)
  (y, x, s.B, s.T, s.nheads, s.hs, s.stride, width, rope, sign, s.pos0);
  check_launch(op);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const ops::AttentionShape& s, cudaStream_t stream) {
  forward_any(out, lse, q, k, v, s, stream);
}

void attention_forward(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                       const ops::AttentionShape& s, cudaStream_t stream) {
  check_limits(s, "attention_forward");
  flash::forward(out, lse, q, k, v, s, stream);
}

void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                       const ops::AttentionShape& s, cudaStream_t stream) {
  check_limits(s, "attention_forward_bf16");
  flash::forward(out, lse, q, k, v, s, stream);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const ops::AttentionShape& s, cudaStream_t stream) {
  backward_any(dq, dk, dv, dout, out, lse, q, k, v, s, stream);
}

size_t attention_backward_scratch_bytes(const ops::AttentionShape& s) {
  return flash::backward_scratch_bytes(s);
}

namespace {

// The tensor-core backward's limits and scratch, checked before its launches.
void check_backward_scratch(const ops::AttentionShape& s, size_t scratch_bytes, const char* op) {
  check_limits(s, op);
  DENDRITE_CHECK(scratch_bytes >= flash::backward_scratch_bytes(s), op, ": the scratch holds ",
                 scratch_bytes, " bytes; B=", s.B, " T=", s.T, " NH=", s.NH, " hs=", s.hs, " need ",
                 flash::backward_scratch_bytes(s), " (attention_backward_scratch_bytes)");
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const bf16* out,
                        const float* lse, const bf16* q, const bf16* k, const bf16* v,
                        const ops::AttentionShape& s, void* scratch, size_t scratch_bytes,
                        cudaStream_t stream) {
  check_backward_scratch(s, scratch_bytes, "attention_backward");
  flash::backward(dq, dk, dv, dout, out, lse, q, k, v, s, scratch, stream);
}

void attention_backward(const ops::AttentionGradsBf16& g, const float* dout, const bf16* out,
                        const float* lse, const bf16* q, const bf16* k, const bf16* v,
                        const ops::AttentionShape& s, void* scratch, size_t scratch_bytes,
                        cudaStream_t stream) {
  check_backward_scratch(s, scratch_bytes, "attention_backward_bf16");
  flash::backward(g, dout, out, lse, q, k, v, s, scratch, stream);
}

void attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                      float* k_cache, float* v_cache, const ops::CachedAttentionShape& s,
                      cudaStream_t stream) {
  const ops::AttentionShape keys{s.B, s.pos + s.Tq, s.NH, s.NKV, s.hs, s.q_stride, s.kv_stride,
                                 s.out_stride};
  check_limits(keys, "attention_cached");
  const int64_t n = int64_t(s.B) * s.Tq * s.NKV * s.hs;
  DENDRITE_LAUNCH(blocks_for(n), kThreads, 0, stream, cache_write_kernel)(
      k_cache, v_cache, k_new, v_new, s);
  check_launch("attention_cached (cache write)");
  switch ((s.hs + 31) / 32) {
    case 1: cached_launch<1>(out, q, k_cache, v_cache, s, stream); break;
    case 2: cached_launch<2>(out, q, k_cache, v_cache, s, stream); break;
    case 3: cached_launch<3>(out, q, k_cache, v_cache, s, stream); break;
    default: cached_launch<4>(out, q, k_cache, v_cache, s, stream); break;
  }
}

void rope_forward(float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
                  cudaStream_t stream) {
  rope_launch(x, x, s, rope, 1.0f, s.nheads * s.hs, "rope_forward", stream);
}

void rope_backward(float* dx, const ops::RopeShape& s, const ops::RopeSpec& rope,
                   cudaStream_t stream) {
  rope_launch(dx, dx, s, rope, -1.0f, s.nheads * s.hs, "rope_backward", stream);
}

void rope_bf16(bf16* low, const float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
               bool inverse, cudaStream_t stream) {
  rope_launch(low, x, s, rope, inverse ? -1.0f : 1.0f, s.stride,
              inverse ? "rope_backward_bf16" : "rope_forward_bf16", stream);
}

}  // namespace dendrite::cuda
