// CPU LayerNorm and RMSNorm over the last dimension of an [m, c] buffer.
// m: rows (B*T); c: the columns this rank holds of the full width c_total
// (c == c_total unless the width is split over ranks, DESIGN.md section 4).
//
// Each norm is row kernels: per-row sums (double) and an apply step that
// reads the sums (for the backward: the parameter-gradient terms, then dx).
// The sums and the apply are separate ops over all rows, so the caller can
// sum the row sums over the ranks of a width split in between (nothing to
// sum when c == c_total).
//
// Precision: the forward sums are exact products summed in double, so the
// variance E[x^2] - mean^2 keeps its digits even for rows with a large mean.
// The backward sums' terms are float products: summed in float within blocks
// of columns, in double across blocks and ranks.
// Determinism: row sums use a fixed number of lanes, each summing every
// kLanes-th column, then a fixed tree over the lanes, so the result does not depend on
// vectorisation, alignment or threads. dgamma/dbeta are sums over rows: fixed
// chunks of kChunkRows rows each write a private partial, then the partials
// are added in chunk order. Bit-identical on every run and thread count.
#include <cmath>
#include <memory>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/core/check.h"

namespace dendrite::cpu {

using ops::NormShape;

namespace {

constexpr int kChunkRows = 16;    // rows per dgamma/dbeta partial
constexpr int kColumnBlock = 64;  // columns per task when reducing partials
constexpr int kLanes = 16;        // accumulators per row sum (one or two 512-bit vectors)
constexpr int kBlockCols = 256;   // columns per block of a row sum

int num_chunks(int m) { return (m + kChunkRows - 1) / kChunkRows; }

// {sum_j f(j), sum_j h(j)} over j in [0, c), returned in double, in a fixed
// order: lane l sums the columns l, l + kLanes, ... of each block of
// kBlockCols columns in type Acc and adds that into its double lane; the
// columns past the last multiple of kLanes are summed in order into lane 0;
// then the lanes are added as a fixed pairwise tree. Acc = double keeps every
// bit of float products; Acc = float suits terms that are float products
// anyway and saves the conversions. (Only constant lane indices, so the lanes
// stay in registers; always inlined, as the forward measured 15% slower with
// a call per row.)
template <typename Acc, typename F, typename H>
[[gnu::always_inline]] inline void lane_sums(double* out, int c, F f, H h) {
  static_assert(kBlockCols % kLanes == 0);
  double a[kLanes] = {}, b[kLanes] = {};
  const int full = c / kLanes * kLanes;
  for (int b0 = 0; b0 < full; b0 += kBlockCols) {
    const int b1 = b0 + kBlockCols < full ? b0 + kBlockCols : full;
    Acc pa[kLanes] = {}, pb[kLanes] = {};
    for (int j0 = b0; j0 < b1; j0 += kLanes) {
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        pa[l] += static_cast<Acc>(f(j0 + l));
        pb[l] += static_cast<Acc>(h(j0 + l));
      }
    }
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      a[l] += pa[l];
      b[l] += pb[l];
    }
  }
  double ta = 0.0, tb = 0.0;
  for (int j = full; j < c; ++j) {
    ta += static_cast<double>(f(j));
    tb += static_cast<double>(h(j));
  }
  a[0] += ta;
  b[0] += tb;
#pragma GCC unroll 8
  for (int w = kLanes / 2; w > 0; w /= 2) {  // pairwise, a fixed tree
#pragma omp simd
    for (int l = 0; l < w; ++l) {
      a[l] += a[l + w];
      b[l] += b[l + w];
    }
  }
  out[0] = a[0];
  out[1] = b[0];
}

// sum_j f(j), as lane_sums
template <typename Acc, typename F>
[[gnu::always_inline]] inline double lane_sum(int c, F f) {
  double out[2];
  lane_sums<Acc>(out, c, f, [](int) { return Acc(0); });
  return out[0];
}

// ---- row kernels: one row of c columns, no threading. Backward: the sums,
// the parameter-gradient terms and dx are separate kernels; the apply step
// runs the terms as their own pass before dx (the terms and dx in one loop
// would be slower: dx's stores to memory hold up the partials'
// read-modify-writes).

// s [2] = {sum x, sum x^2}
inline void ln_sums_row(double* s, const float* __restrict x, int c) {
  lane_sums<double>(
      s, c, [&](int j) { return x[j]; }, [&](int j) { return static_cast<double>(x[j]) * x[j]; });
}

// mean, rstd from the summed s [2]; y = (x - mean) rstd gamma + beta
inline void ln_apply_row(float* __restrict y, float* mean, float* rstd, const double* s,
                         const float* __restrict x, const float* __restrict gamma,
                         const float* __restrict beta, int c, int c_total, float eps) {
  const double mu = s[0] / c_total;
  const double var = s[1] / c_total - mu * mu;  // exact enough in double; clamp rounding below 0
  const float mu_f = static_cast<float>(mu);
  const float rs = static_cast<float>(1.0 / std::sqrt((var > 0.0 ? var : 0.0) + eps));
#pragma omp simd
  for (int j = 0; j < c; ++j) y[j] = (x[j] - mu_f) * rs * gamma[j] + beta[j];
  *mean = mu_f;
  *rstd = rs;
}

// s [2] = {sum g, sum g xhat},  g = dy gamma, xhat = (x - mean) rstd
inline void ln_backward_sums_row(double* s, const float* __restrict dy, const float* __restrict x,
                                 float mean, float rstd, const float* __restrict gamma, int c) {
  lane_sums<float>(
      s, c, [&](int j) { return dy[j] * gamma[j]; },
      [&](int j) { return dy[j] * gamma[j] * ((x[j] - mean) * rstd); });
}

// dgamma += dy xhat, dbeta += dy;  dgamma, dbeta [c]
inline void ln_param_grads_row(float* __restrict dgamma, float* __restrict dbeta,
                               const float* __restrict dy, const float* __restrict x, float mean,
                               float rstd, int c) {
#pragma omp simd
  for (int j = 0; j < c; ++j) {
    dgamma[j] += dy[j] * ((x[j] - mean) * rstd);
    dbeta[j] += dy[j];
  }
}

// dx [c] overwritten from the summed s [2]:  dx = rstd (g - (S1 + xhat S2) / c_total)
inline void ln_dx_row(float* __restrict dx, const double* s, const float* __restrict dy,
                      const float* __restrict x, float mean, float rstd,
                      const float* __restrict gamma, int c, int c_total) {
  const float mean_g = static_cast<float>(s[0] / c_total);
  const float mean_gxhat = static_cast<float>(s[1] / c_total);
#pragma omp simd
  for (int j = 0; j < c; ++j) {
    const float xhat = (x[j] - mean) * rstd;
    dx[j] = rstd * (dy[j] * gamma[j] - mean_g - xhat * mean_gxhat);
  }
}

// s [1] = sum x^2
inline void rms_sums_row(double* s, const float* __restrict x, int c) {
  s[0] = lane_sum<double>(c, [&](int j) { return static_cast<double>(x[j]) * x[j]; });
}

inline void rms_apply_row(float* __restrict y, float* rstd, const double* s,
                          const float* __restrict x, const float* __restrict gamma, int c,
                          int c_total, float eps) {
  const float rs = static_cast<float>(1.0 / std::sqrt(s[0] / c_total + eps));
#pragma omp simd
  for (int j = 0; j < c; ++j) y[j] = x[j] * rs * gamma[j];
  *rstd = rs;
}

// s [1] = sum dy gamma x
inline void rms_backward_sums_row(double* s, const float* __restrict dy, const float* __restrict x,
                                  const float* __restrict gamma, int c) {
  s[0] = lane_sum<float>(c, [&](int j) { return dy[j] * gamma[j] * x[j]; });
}

// dgamma += dy x rstd;  dgamma [c]
inline void rms_param_grads_row(float* __restrict dgamma, const float* __restrict dy,
                                const float* __restrict x, float rstd, int c) {
#pragma omp simd
  for (int j = 0; j < c; ++j) dgamma[j] += dy[j] * x[j] * rstd;
}

// dx [c] overwritten.  y = x r g, dr/dx_j = -r^3 x_j / c_total
inline void rms_dx_row(float* __restrict dx, const double* s, const float* __restrict dy,
                       const float* __restrict x, float rstd, const float* __restrict gamma, int c,
                       int c_total) {
  const float k = static_cast<float>(static_cast<double>(rstd) * rstd * rstd * s[0] / c_total);
#pragma omp simd
  for (int j = 0; j < c; ++j) dx[j] = rstd * dy[j] * gamma[j] - k * x[j];
}

// ---- parameter-gradient partials

// dst[j] += sum over chunks k (in order) of parts[k * stride + j];  dst [c]
void add_partials(float* dst, const float* parts, int chunks, long stride, int c) {
#pragma omp for schedule(static)
  for (int j0 = 0; j0 < c; j0 += kColumnBlock) {
    int j1 = j0 + kColumnBlock < c ? j0 + kColumnBlock : c;
    for (int k = 0; k < chunks; ++k) {
      const float* __restrict part = parts + k * stride;
#pragma omp simd
      for (int j = j0; j < j1; ++j) dst[j] += part[j];
    }
  }
}

// Runs row_fn(r, partial) for every row, chunk by chunk in parallel, where
// partial points at the chunk's zeroed [n_params * c] slice; then adds the
// partials into params[p] (p < n_params, null entries skipped) in chunk order.
template <typename RowFn>
void rows_with_param_grads(int m, int c, int n_params, float* const* params, RowFn row_fn) {
  const int chunks = num_chunks(m);
  const long stride = static_cast<long>(n_params) * c;
  std::unique_ptr<float[]> parts(new float[chunks * stride]);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int k = 0; k < chunks; ++k) {
      float* part = parts.get() + k * stride;
      for (long j = 0; j < stride; ++j) part[j] = 0.0f;
      const int r1 = (k + 1) * kChunkRows < m ? (k + 1) * kChunkRows : m;
      for (int r = k * kChunkRows; r < r1; ++r) row_fn(r, part);
    }
    for (int p = 0; p < n_params; ++p) {
      if (params[p]) add_partials(params[p], parts.get() + p * c, chunks, stride, c);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- LayerNorm

void CpuBackend::do_layernorm_row_sums(double* sums, const float* x, const NormShape& s) {
  const int c = s.c;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.m; ++r) ln_sums_row(sums + 2L * r, x + static_cast<long>(r) * c, c);
}

void CpuBackend::do_layernorm_apply(float* y, float* mean, float* rstd, const double* sums,
                                    const float* x, const float* gamma, const float* beta,
                                    const NormShape& s, float eps) {
  const int c = s.c, c_total = s.c_total;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.m; ++r) {
    const long off = static_cast<long>(r) * c;
    ln_apply_row(y + off, mean + r, rstd + r, sums + 2L * r, x + off, gamma, beta, c, c_total, eps);
  }
}

void CpuBackend::do_layernorm_backward_sums(double* sums, const float* dy, const float* x,
                                            const float* mean, const float* rstd,
                                            const float* gamma, const NormShape& s) {
  const int c = s.c;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.m; ++r) {
    const long off = static_cast<long>(r) * c;
    ln_backward_sums_row(sums + 2L * r, dy + off, x + off, mean[r], rstd[r], gamma, c);
  }
}

void CpuBackend::do_layernorm_backward_apply(float* dx, float* dgamma, float* dbeta,
                                             const double* sums, const float* dy, const float* x,
                                             const float* mean, const float* rstd,
                                             const float* gamma, const NormShape& s) {
  const int c = s.c, c_total = s.c_total;
  float* params[2] = {dgamma, dbeta};
  rows_with_param_grads(s.m, c, 2, params, [&](int r, float* part) {
    const long off = static_cast<long>(r) * c;
    ln_param_grads_row(part, part + c, dy + off, x + off, mean[r], rstd[r], c);
    ln_dx_row(dx + off, sums + 2L * r, dy + off, x + off, mean[r], rstd[r], gamma, c, c_total);
  });
}

// ---------------------------------------------------------------- RMSNorm

void CpuBackend::do_rmsnorm_row_sums(double* sums, const float* x, const NormShape& s) {
  const int c = s.c;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.m; ++r) rms_sums_row(sums + r, x + static_cast<long>(r) * c, c);
}

void CpuBackend::do_rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x,
                                  const float* gamma, const NormShape& s, float eps) {
  const int c = s.c, c_total = s.c_total;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.m; ++r) {
    const long off = static_cast<long>(r) * c;
    rms_apply_row(y + off, rstd + r, sums + r, x + off, gamma, c, c_total, eps);
  }
}

void CpuBackend::do_rmsnorm_backward_sums(double* sums, const float* dy, const float* x,
                                          const float* gamma, const NormShape& s) {
  const int c = s.c;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.m; ++r) {
    const long off = static_cast<long>(r) * c;
    rms_backward_sums_row(sums + r, dy + off, x + off, gamma, c);
  }
}

void CpuBackend::do_rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums,
                                           const float* dy, const float* x, const float* rstd,
                                           const float* gamma, const NormShape& s) {
  const int c = s.c, c_total = s.c_total;
  rows_with_param_grads(s.m, c, 1, &dgamma, [&](int r, float* part) {
    const long off = static_cast<long>(r) * c;
    rms_param_grads_row(part, dy + off, x + off, rstd[r], c);
    rms_dx_row(dx + off, sums + r, dy + off, x + off, rstd[r], gamma, c, c_total);
  });
}

// The fused forms: the separate ops in order, so the bits are theirs.
void CpuBackend::do_layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd,
                                         const double* sums, const float* x, const float* gamma,
                                         const float* beta, const NormShape& s, float eps) {
  do_layernorm_apply(y, mean, rstd, sums, x, gamma, beta, s, eps);
  do_to_bf16(y_bf16, y, int64_t(s.m) * s.c);
}

void CpuBackend::do_layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean,
                                        float* rstd, const float* x, const float* gamma,
                                        const float* beta, const NormShape& s, float eps) {
  do_layernorm_row_sums(sums, x, s);
  do_layernorm_apply_bf16(y_bf16, y, mean, rstd, sums, x, gamma, beta, s, eps);
}

void CpuBackend::do_rmsnorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* rstd,
                                      const float* x, const float* gamma, const NormShape& s,
                                      float eps) {
  do_rmsnorm_row_sums(sums, x, s);
  do_rmsnorm_apply(y, rstd, sums, x, gamma, s, eps);
  do_to_bf16(y_bf16, y, int64_t(s.m) * s.c);
}

void CpuBackend::do_rmsnorm_backward_rows_add(const ops::ResidualGradBf16* next, double* sums,
                                              float* dres, float* scratch, float* dgamma,
                                              const float* dy, const float* x, const float* rstd,
                                              const float* gamma, const NormShape& s) {
  do_rmsnorm_backward_sums(sums, dy, x, gamma, s);
  do_rmsnorm_backward_apply(scratch, dgamma, sums, dy, x, rstd, gamma, s);
  do_add_inplace(dres, scratch, long(s.m) * s.c);
  if (next && next->db)
    do_to_bf16_column_sums(next->low, next->db, dres, s.m, s.c);
  else if (next)
    do_to_bf16(next->low, dres, int64_t(s.m) * s.c);
}

void CpuBackend::do_layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma,
                                                 float* dbeta, const double* sums, const float* dy,
                                                 const float* x, const float* mean,
                                                 const float* rstd, const float* gamma,
                                                 const NormShape& s) {
  do_layernorm_backward_apply(scratch, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s);
  do_add_inplace(dres, scratch, long(s.m) * s.c);
}

void CpuBackend::do_layernorm_backward_rows_add(double* sums, float* dres, float* scratch,
                                                float* dgamma, float* dbeta, const float* dy,
                                                const float* x, const float* mean,
                                                const float* rstd, const float* gamma,
                                                const NormShape& s) {
  do_layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, s);
  do_layernorm_backward_apply_add(dres, scratch, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s);
}

// The separate ops in turn: the bits of layernorm_backward_rows_add, to_bf16
// and add_column_sums.
void CpuBackend::do_layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next,
                                                     double* sums, float* dres, float* scratch,
                                                     float* dgamma, float* dbeta, const float* dy,
                                                     const float* x, const float* mean,
                                                     const float* rstd, const float* gamma,
                                                     const NormShape& s) {
  do_layernorm_backward_rows_add(sums, dres, scratch, dgamma, dbeta, dy, x, mean, rstd, gamma, s);
  if (next.db)
    do_to_bf16_column_sums(next.low, next.db, dres, s.m, s.c);
  else
    do_to_bf16(next.low, dres, int64_t(s.m) * s.c);
}

}  // namespace dendrite::cpu
