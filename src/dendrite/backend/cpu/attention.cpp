// CPU causal self-attention (flash-style) and rotary position embedding.
// B batch, T sequence, NH query heads, NKV key/value heads (query head h uses
// KV head g = h / (NH/NKV)), hs head size. Row r = b*T + t of q/k/v/out holds
// the heads as consecutive blocks of hs floats, rows `stride` floats apart.
//
// Both passes walk a head in tiles of kR query rows: the scores of a tile are
// a [kR, T] block, so no [T,T] matrix is ever stored. The forward saves only
// lse [B,NH,T]; the backward recomputes the probabilities of each tile from q,
// k and lse, and uses D[t] = dout[t]·out[t] for the softmax Jacobian.
// Each head's k, v (and their transposes) are first copied into contiguous
// per-thread scratch with the head size padded to hsp, a multiple of kW with
// zeros, so the small products below are fixed-width register tiles
// (kR rows x kW columns) that the compiler vectorises for any hs.
// The forward is parallel over (b, h); the backward over (b, KV head): the
// thread owning a KV head runs its query heads in a fixed order, so dk and dv
// accumulate without races and the result does not depend on the thread count.
// Under bf16 precision q, k, v (and the forward's output, read back by the
// backward) are bf16: they are widened as they are copied into the fp32
// scratch, and everything after is the fp32 computation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/core/check.h"

namespace dendrite::cpu {

using ops::AttentionShape;
using ops::CachedAttentionShape;
using ops::RopeSpec;

namespace {

constexpr int kR = 4;   // query rows per tile
constexpr int kW = 16;  // columns per register block

int round_up(int n, int m) { return (n + m - 1) / m * m; }

inline float widen(float x) { return x; }
inline float widen(bf16 x) { return to_float(x); }

// ---- register-tile kernels; A, O, Acc rows are hsp apart, S, P, W rows Tp apart.
// A GCC/Clang vector of kW floats (one AVX-512 register, or two AVX2 ones)
// makes the accumulator tile a set of registers, whatever the loop bounds.
typedef float Vec __attribute__((vector_size(kW * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof(Vec));
  return v;
}
inline void store(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof(Vec)); }

// S[kR, ncols] = A[kR, hsp] * XT[hsp, ncols]   (ncols rounded up to kW; XT is zero
// past the sequence, so the extra columns are finite)
void tile_times_transposed(float* S, const float* A, const float* XT, int hsp, int ncols, int Tp) {
  for (int jc = 0; jc < ncols; jc += kW) {
    Vec acc[kR] = {};
    for (int i = 0; i < hsp; ++i) {
      const Vec x = load(XT + static_cast<long>(i) * Tp + jc);
      for (int r = 0; r < kR; ++r) acc[r] += A[r * hsp + i] * x;
    }
    for (int r = 0; r < kR; ++r) store(S + static_cast<long>(r) * Tp + jc, acc[r]);
  }
}

// O[kR, hsp] = P[kR, ncols] * X[ncols, hsp]
void tile_times_rows(float* O, const float* P, const float* X, int hsp, int ncols, int Tp) {
  for (int ic = 0; ic < hsp; ic += kW) {
    Vec acc[kR] = {};
    for (int j = 0; j < ncols; ++j) {
      const Vec x = load(X + static_cast<long>(j) * hsp + ic);
      for (int r = 0; r < kR; ++r) acc[r] += P[static_cast<long>(r) * Tp + j] * x;
    }
    for (int r = 0; r < kR; ++r) store(O + r * hsp + ic, acc[r]);
  }
}

// Acc[ncols, hsp] += W[kR, ncols]^T * A[kR, hsp]
void accumulate_outer(float* Acc, const float* W, const float* A, int hsp, int ncols, int Tp) {
  for (int ic = 0; ic < hsp; ic += kW) {
    Vec a[kR];
    for (int r = 0; r < kR; ++r) a[r] = load(A + r * hsp + ic);
    for (int j = 0; j < ncols; ++j) {
      float* y = Acc + static_cast<long>(j) * hsp + ic;
      Vec acc = load(y);
      for (int r = 0; r < kR; ++r) acc += W[static_cast<long>(r) * Tp + j] * a[r];
      store(y, acc);
    }
  }
}

// ---- per-thread scratch and the copies in and out of it

struct Scratch {
  int T, hs, Tp, hsp;
  std::vector<float> kt, vt;                     // [hsp, Tp]  transposed k, v (zero padded)
  std::vector<float> kc, vc;                     // [Tp, hsp]  contiguous k, v rows
  std::vector<float> dk, dv;                     // [Tp, hsp]  backward accumulators
  std::vector<float> q_tile, o_tile, dout_tile;  // [kR, hsp]
  std::vector<float> s, p;                       // [kR, Tp]   scores, probabilities (or dP, dS)

  Scratch(const AttentionShape& sh, bool backward)
      : T(sh.T), hs(sh.hs), Tp(round_up(sh.T, kW)), hsp(round_up(sh.hs, kW)) {
    const size_t big = static_cast<size_t>(Tp) * hsp, tile = static_cast<size_t>(kR) * hsp;
    kt.assign(big, 0.0f);
    kc.assign(big, 0.0f);
    if (backward) {
      vt.assign(big, 0.0f);
      dk.assign(big, 0.0f);
      dv.assign(big, 0.0f);
    } else {
      vc.assign(big, 0.0f);
    }
    q_tile.assign(tile, 0.0f);
    o_tile.assign(tile, 0.0f);
    dout_tile.assign(tile, 0.0f);
    s.assign(static_cast<size_t>(kR) * Tp, 0.0f);
    p.assign(s.size(), 0.0f);
  }

  // x: head g's row 0 (stride floats between rows) -> rows [T, hsp] and/or
  // transpose [hsp, Tp] (either may be null).
  template <typename In>
  void load(float* rows, float* transposed, const In* x, int stride) const {
    for (int t = 0; t < T; ++t) {
      const In* xt = x + static_cast<long>(t) * stride;
      for (int i = 0; i < hs; ++i) {
        const float value = widen(xt[i]);
        if (rows) rows[static_cast<long>(t) * hsp + i] = value;
        if (transposed) transposed[static_cast<long>(i) * Tp + t] = value;
      }
    }
  }

  // Rows t0..t0+n-1 of x (row stride) times mul into tile [kR, hsp]; rest zero.
  template <typename In>
  void load_tile(float* tile, const In* x, int stride, int t0, int n, float mul) const {
    std::fill(tile, tile + kR * hsp, 0.0f);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < hs; ++i)
        tile[r * hsp + i] = mul * widen(x[static_cast<long>(t0 + r) * stride + i]);
  }
};

// exp(x) for x <= ~0 (scores minus their max or their lse): Cephes' expf,
// n = round(x / ln 2), then a degree-7 polynomial on the remainder; within
// 2 ulp of std::exp, and 0 below -87 (where a float would go subnormal).
inline Vec exp_vec(Vec x) {
  typedef int32_t IVec __attribute__((vector_size(kW * sizeof(int32_t))));
  x = x < -87.0f ? Vec{} - 87.0f : x;
  x = x > 88.0f ? Vec{} + 88.0f : x;
  const Vec shifter = Vec{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const Vec n = (x * 1.44269504088896341f + shifter) - shifter;
  const Vec r = x - n * 0.693359375f + n * 2.12194440e-4f;
  Vec p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const IVec bits = (__builtin_convertvector(n, IVec) + 127) << 23;  // 2^n
  Vec scale;
  __builtin_memcpy(&scale, &bits, sizeof(Vec));
  return x <= -87.0f ? Vec{} : p * scale;
}

// Row of a tile for query position t over keys 0..ncols-1: P[j] = exp(S[j] - sub)
// for j <= t, 0 for the masked keys (up to ncols rounded up to kW; S is finite
// there). Returns the sum of P.
float exp_row(float* P, const float* S, float sub, int t, int ncols) {
  typedef int32_t IVec __attribute__((vector_size(kW * sizeof(int32_t))));
  const IVec lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static_assert(kW == 16, "lane indices are written out for kW = 16");
  Vec sum = {};
  for (int jc = 0; jc < ncols; jc += kW) {
    Vec e = exp_vec(load(S + jc) - sub);
    e = lane + jc <= t ? e : Vec{};
    store(P + jc, e);
    sum += e;
  }
  float total = 0.0f;
  for (int i = 0; i < kW; ++i) total += sum[i];
  return total;
}

float row_max(const float* S, int n) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = std::max(mx, S[j]);
  return mx;
}

// One (b, h): out rows and lse [Tq] of the queries at positions pos ..
// pos+Tq-1, over the w.T keys 0 .. pos+Tq-1 (the training forward: pos = 0,
// Tq = T); q, out at the head's row 0, k and v at its KV head's row 0. lse
// may be null (generation keeps none).
template <typename In>
void forward_head(float* out, float* lse, const In* q, const In* k, const In* v, int Tq, int pos,
                  int q_stride, int kv_stride, int out_stride, int hs, Scratch& w) {
  w.load(nullptr, w.kt.data(), k, kv_stride);
  w.load(w.vc.data(), nullptr, v, kv_stride);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int t0 = 0; t0 < Tq; t0 += kR) {
    const int n = std::min(kR, Tq - t0), ncols = pos + t0 + n;
    w.load_tile(w.q_tile.data(), q, q_stride, t0, n, scale);
    tile_times_transposed(w.s.data(), w.q_tile.data(), w.kt.data(), w.hsp, ncols, w.Tp);
    float inv_sum[kR] = {};
    for (int r = 0; r < kR; ++r) {
      float* P = w.p.data() + static_cast<long>(r) * w.Tp;
      const float* S = w.s.data() + static_cast<long>(r) * w.Tp;
      if (r >= n) {  // past the last query
        std::fill(P, P + ncols, 0.0f);
        continue;
      }
      const int t = pos + t0 + r;  // the query's position: keys 0..t
      const float mx = row_max(S, t + 1);
      const float sum = exp_row(P, S, mx, t, ncols);
      inv_sum[r] = 1.0f / sum;
      if (lse) lse[t0 + r] = mx + std::log(sum);
    }
    tile_times_rows(w.o_tile.data(), w.p.data(), w.vc.data(), w.hsp, ncols, w.Tp);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < hs; ++i)
        out[static_cast<long>(t0 + r) * out_stride + i] = w.o_tile[r * w.hsp + i] * inv_sum[r];
  }
}

template <typename In>
void forward_all(float* out, float* lse, const In* q, const In* k, const In* v,
                 const AttentionShape& s) {
  const int group = s.NH / s.NKV;
  const int pairs = s.B * s.NH;
#pragma omp parallel
  {
    Scratch w(s, false);
#pragma omp for schedule(static)
    for (int bh = 0; bh < pairs; ++bh) {
      const int b = bh / s.NH, h = bh % s.NH, g = h / group;
      const long row0 = static_cast<long>(b) * s.T;
      forward_head(out + row0 * s.out_stride + h * s.hs, lse + static_cast<long>(bh) * s.T,
                   q + row0 * s.q_stride + h * s.hs, k + row0 * s.kv_stride + g * s.hs,
                   v + row0 * s.kv_stride + g * s.hs, s.T, 0, s.q_stride, s.kv_stride,
                   s.out_stride, s.hs, w);
    }
  }
}

// Pointers of one query head h, each at the head's row 0.
template <typename In>
struct QueryHead {
  float* dq;
  const float* dout;
  const In* out;
  const float* lse;  // [T]
  const In* q;
};

// Probabilities P (w.p) and dS = P (dP - D) (w.s) of the tile at t0 with n rows.
template <typename In>
void tile_softmax_grad(const QueryHead<In>& a, const AttentionShape& s, Scratch& w, int t0, int n) {
  const int ncols = t0 + n;
  tile_times_transposed(w.s.data(), w.q_tile.data(), w.kt.data(), w.hsp, ncols, w.Tp);
  for (int r = 0; r < kR; ++r) {
    float* P = w.p.data() + static_cast<long>(r) * w.Tp;
    if (r < n)
      exp_row(P, w.s.data() + static_cast<long>(r) * w.Tp, a.lse[t0 + r], t0 + r, ncols);
    else
      std::fill(P, P + ncols, 0.0f);
  }
  tile_times_transposed(w.s.data(), w.dout_tile.data(), w.vt.data(), w.hsp, ncols, w.Tp);  // dP
  for (int r = 0; r < kR; ++r) {
    float D = 0.0f;
    if (r < n) {
      const float* go = a.dout + static_cast<long>(t0 + r) * s.out_stride;
      const In* o = a.out + static_cast<long>(t0 + r) * s.out_stride;
      for (int i = 0; i < s.hs; ++i) D += go[i] * widen(o[i]);
    }
    const float* P = w.p.data() + static_cast<long>(r) * w.Tp;
    float* dS = w.s.data() + static_cast<long>(r) * w.Tp;
    for (int j = 0; j < ncols; ++j) dS[j] = P[j] * (dS[j] - D);
  }
}

// Writes dq of query head a and adds its share to the KV accumulators w.dk, w.dv.
template <typename In>
void backward_head(const QueryHead<In>& a, const AttentionShape& s, Scratch& w) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
  for (int t0 = 0; t0 < s.T; t0 += kR) {
    const int n = std::min(kR, s.T - t0), ncols = t0 + n;
    w.load_tile(w.q_tile.data(), a.q, s.q_stride, t0, n, scale);
    w.load_tile(w.dout_tile.data(), a.dout, s.out_stride, t0, n, 1.0f);
    tile_softmax_grad(a, s, w, t0, n);
    tile_times_rows(w.o_tile.data(), w.s.data(), w.kc.data(), w.hsp, ncols, w.Tp);  // dS k
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < s.hs; ++i)
        a.dq[static_cast<long>(t0 + r) * s.q_stride + i] = scale * w.o_tile[r * w.hsp + i];
    accumulate_outer(w.dk.data(), w.s.data(), w.q_tile.data(), w.hsp, ncols, w.Tp);  // q is scaled
    accumulate_outer(w.dv.data(), w.p.data(), w.dout_tile.data(), w.hsp, ncols, w.Tp);
  }
}

template <typename In>
void backward_all(float* dq, float* dk, float* dv, const float* dout, const In* out,
                  const float* lse, const In* q, const In* k, const In* v,
                  const AttentionShape& s) {
  const int group = s.NH / s.NKV;
  const int pairs = s.B * s.NKV;
#pragma omp parallel
  {
    Scratch w(s, true);
#pragma omp for schedule(static)
    for (int bg = 0; bg < pairs; ++bg) {
      const int b = bg / s.NKV, g = bg % s.NKV;
      const long row0 = static_cast<long>(b) * s.T;
      const long kv0 = row0 * s.kv_stride + static_cast<long>(g) * s.hs;
      w.load(w.kc.data(), w.kt.data(), k + kv0, s.kv_stride);
      w.load(nullptr, w.vt.data(), v + kv0, s.kv_stride);
      std::fill(w.dk.begin(), w.dk.end(), 0.0f);
      std::fill(w.dv.begin(), w.dv.end(), 0.0f);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const long q0 = row0 * s.q_stride + static_cast<long>(h) * s.hs;
        const long o0 = row0 * s.out_stride + static_cast<long>(h) * s.hs;
        backward_head(QueryHead<In>{dq + q0, dout + o0, out + o0,
                                    lse + (static_cast<long>(b) * s.NH + h) * s.T, q + q0},
                      s, w);
      }
      for (int t = 0; t < s.T; ++t)
        for (int i = 0; i < s.hs; ++i) {
          dk[kv0 + static_cast<long>(t) * s.kv_stride + i] = w.dk[static_cast<long>(t) * w.hsp + i];
          dv[kv0 + static_cast<long>(t) * s.kv_stride + i] = w.dv[static_cast<long>(t) * w.hsp + i];
        }
    }
  }
}

// Rotates every head of every row by +angle (sign = 1) or -angle (sign = -1).
void rope_apply(float* x, int B, int T, int nheads, int hs, int stride, const RopeSpec& rope,
                float sign, int pos0) {
  const int half = hs / 2;
  std::vector<float> cos_t(static_cast<size_t>(T) * half), sin_t(cos_t.size());  // [T, hs/2]
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = (pos0 + t) * rope_frequency(rope, i, hs);
      cos_t[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      sin_t[static_cast<size_t>(t) * half + i] = sign * static_cast<float>(std::sin(angle));
    }
  }
  const long rows = static_cast<long>(B) * T;
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    const float* c = cos_t.data() + (r % T) * half;
    const float* sn = sin_t.data() + (r % T) * half;
    for (int h = 0; h < nheads; ++h) {
      float* x1 = x + r * stride + static_cast<long>(h) * hs;
      float* x2 = x1 + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float a = x1[i], b = x2[i];
        x1[i] = a * c[i] - b * sn[i];
        x2[i] = b * c[i] + a * sn[i];
      }
    }
  }
}

}  // namespace

void CpuBackend::do_attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                                      const AttentionShape& s) {
  if (q.is_bf16())
    forward_all(out, lse, q.b16, k.b16, v.b16, s);
  else
    forward_all(out, lse, q.f32, k.f32, v.f32, s);
}

void CpuBackend::do_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                       Operand out, const float* lse, Operand q, Operand k,
                                       Operand v, const AttentionShape& s) {
  if (q.is_bf16())
    backward_all(dq, dk, dv, dout, out.b16, lse, q.b16, k.b16, v.b16, s);
  else
    backward_all(dq, dk, dv, dout, out.f32, lse, q.f32, k.f32, v.f32, s);
}

namespace {

// db [n] += the column sums of x [B*T rows of `stride`] in
// ops::AttentionGradsBf16's order: runs of kAttentionSumRows rows of each
// sequence, each summed row by row, then the runs one after another.
// Columns split over threads; each thread keeps its columns' order.
void add_run_sums(float* db, const float* x, int64_t stride, int n, int B, int T) {
  if (!db) return;
  constexpr int kRun = ops::kAttentionSumRows;
#pragma omp parallel for schedule(static)
  for (int j0 = 0; j0 < n; j0 += 64) {
    const int j1 = std::min(n, j0 + 64);
    float total[64], run[64];
    bool first = true;
    for (int b = 0; b < B; ++b)
      for (int t0 = 0; t0 < T; t0 += kRun) {
        const float* row = x + (int64_t(b) * T + t0) * stride;
        for (int j = j0; j < j1; ++j) run[j - j0] = row[j];
        for (int t = t0 + 1; t < std::min(T, t0 + kRun); ++t) {
          row += stride;
          for (int j = j0; j < j1; ++j) run[j - j0] += row[j];
        }
        for (int j = j0; j < j1; ++j)
          total[j - j0] = first ? run[j - j0] : total[j - j0] + run[j - j0];
        first = false;
      }
    for (int j = j0; j < j1; ++j) db[j] += total[j - j0];
  }
}

// x [B*T rows of `stride`, n columns] rounded into low (the same layout).
void rows_to_bf16(bf16* low, const float* x, int64_t stride, int n, int64_t rows) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) low[r * stride + j] = dendrite::to_bf16(x[r * stride + j]);
}

}  // namespace

// attention_backward into the fp32 scratch, then each gradient rounded and
// its bias gradient summed (ops/attention.h).
void CpuBackend::do_attention_backward_bf16(const ops::AttentionGradsBf16& g, const float* dout,
                                            Operand out, const float* lse, Operand q, Operand k,
                                            Operand v, const AttentionShape& s) {
  do_attention_backward(g.fq, g.fk, g.fv, dout, out, lse, q, k, v, s);
  const int64_t rows = int64_t(s.B) * s.T;
  const int qd = s.NH * s.hs, kvd = s.NKV * s.hs;
  rows_to_bf16(g.dq, g.fq, s.q_stride, qd, rows);
  rows_to_bf16(g.dk, g.fk, s.kv_stride, kvd, rows);
  rows_to_bf16(g.dv, g.fv, s.kv_stride, kvd, rows);
  add_run_sums(g.db_q, g.fq, s.q_stride, qd, s.B, s.T);
  add_run_sums(g.db_k, g.fk, s.kv_stride, kvd, s.B, s.T);
  add_run_sums(g.db_v, g.fv, s.kv_stride, kvd, s.B, s.T);
}

void CpuBackend::do_attention_cached(float* out, const float* q, const float* k_new,
                                     const float* v_new, float* k_cache, float* v_cache,
                                     const CachedAttentionShape& s) {
  const AttentionShape keys{s.B,  s.pos + s.Tq, s.NH,        s.NKV,
                            s.hs, s.q_stride,   s.kv_stride, s.out_stride};
  const int kvd = s.NKV * s.hs;
  const long rows = static_cast<long>(s.B) * s.Tq;
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    const long at = (r / s.Tq * s.T_cache + s.pos + r % s.Tq) * kvd;
    std::copy_n(k_new + r * s.kv_stride, kvd, k_cache + at);
    std::copy_n(v_new + r * s.kv_stride, kvd, v_cache + at);
  }
  const int group = s.NH / s.NKV;
  const int pairs = s.B * s.NH;
  if (s.Tq == 1) {  // one new row (a generation step): straight from the cache rows
    const int n = s.pos + 1;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
#pragma omp parallel
    {
      std::vector<float> p(n), acc(s.hs);
#pragma omp for schedule(static)
      for (int bh = 0; bh < pairs; ++bh) {
        const int b = bh / s.NH, h = bh % s.NH, g = h / group;
        const float* qh = q + static_cast<long>(b) * s.q_stride + h * s.hs;
        const long c0 = static_cast<long>(b) * s.T_cache * kvd + g * s.hs;
        float mx = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const float* kj = k_cache + c0 + static_cast<long>(j) * kvd;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int i = 0; i < s.hs; ++i) dot += qh[i] * kj[i];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        float sum = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int j = 0; j < n; ++j) {
          const float e = std::exp(p[j] - mx);
          sum += e;
          const float* vj = v_cache + c0 + static_cast<long>(j) * kvd;
#pragma omp simd
          for (int i = 0; i < s.hs; ++i) acc[i] += e * vj[i];
        }
        float* o = out + static_cast<long>(b) * s.out_stride + h * s.hs;
        for (int i = 0; i < s.hs; ++i) o[i] = acc[i] / sum;
      }
    }
    return;
  }
#pragma omp parallel
  {
    Scratch w(keys, false);  // sized for the pos + Tq keys
#pragma omp for schedule(static)
    for (int bh = 0; bh < pairs; ++bh) {
      const int b = bh / s.NH, h = bh % s.NH, g = h / group;
      const long q0 = static_cast<long>(b) * s.Tq, c0 = static_cast<long>(b) * s.T_cache * kvd;
      forward_head(out + q0 * s.out_stride + h * s.hs, static_cast<float*>(nullptr),
                   q + q0 * s.q_stride + h * s.hs, k_cache + c0 + g * s.hs,
                   v_cache + c0 + g * s.hs, s.Tq, s.pos, s.q_stride, kvd, s.out_stride, s.hs, w);
    }
  }
}

void CpuBackend::do_rope_forward(float* x, const ops::RopeShape& s, const RopeSpec& rope) {
  rope_apply(x, s.B, s.T, s.nheads, s.hs, s.stride, rope, 1.0f, s.pos0);
}

void CpuBackend::do_rope_backward(float* dx, const ops::RopeShape& s, const RopeSpec& rope) {
  rope_apply(dx, s.B, s.T, s.nheads, s.hs, s.stride, rope, -1.0f, 0);
}

// The fused forms: the separate ops in order, so the bits are theirs.
void CpuBackend::do_rope_bf16(bf16* low, float* x, const ops::RopeShape& s, const RopeSpec& rope,
                              bool inverse) {
  if (inverse)
    do_rope_backward(x, s, rope);
  else
    do_rope_forward(x, s, rope);
  do_to_bf16(low, x, int64_t(s.B) * s.T * s.stride);
}

void CpuBackend::do_attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q,
                                           Operand k, Operand v, const AttentionShape& s) {
  do_attention_forward(out, lse, q, k, v, s);
  do_to_bf16(out_bf16, out, int64_t(s.B) * s.T * s.out_stride);
}

}  // namespace dendrite::cpu
