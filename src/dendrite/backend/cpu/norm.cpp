// CPU LayerNorm and RMSNorm over the last dimension c of an [m, c] buffer.
// m: rows (B*T), c: features (C). Rows are independent, so forward and the dx
// part of backward run one row per iteration of an OpenMP loop; each row sits
// in L1, so the extra passes over it are cheap next to the one read from memory.
// dgamma/dbeta are sums over rows: fixed chunks of kChunkRows rows each write a
// private partial, then the partials are added in chunk order. The result is
// therefore bit-identical on every run and for every thread count.
#include "dendrite/ops/norm.h"

#include <cmath>
#include <memory>

#include "dendrite/core/check.h"

namespace dendrite::ops {

namespace {

constexpr int kChunkRows = 16;    // rows per dgamma/dbeta partial
constexpr int kColumnBlock = 64;  // columns per task when reducing partials

int num_chunks(int m) { return (m + kChunkRows - 1) / kChunkRows; }

void check_shapes(const char* op, int m, int c) {
  DENDRITE_CHECK(m >= 0 && c > 0, op, ": need m >= 0 rows and c > 0 columns, got m=", m, " c=", c);
}

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

// One row of LayerNorm backward. dx [c] overwritten; dgamma, dbeta [c] accumulated.
inline void layernorm_backward_row(float* __restrict dx, float* __restrict dgamma,
                                   float* __restrict dbeta, const float* __restrict dy,
                                   const float* __restrict x, float mean, float rstd,
                                   const float* __restrict gamma, int c) {
  float sum_d = 0.0f, sum_dxhat = 0.0f;  // sums of dnorm and dnorm * xhat
#pragma omp simd reduction(+ : sum_d, sum_dxhat)
  for (int j = 0; j < c; ++j) {
    float xhat = (x[j] - mean) * rstd;
    float d = dy[j] * gamma[j];
    sum_d += d;
    sum_dxhat += d * xhat;
    dgamma[j] += dy[j] * xhat;
    dbeta[j] += dy[j];
  }
  float mean_d = sum_d / c, mean_dxhat = sum_dxhat / c;
#pragma omp simd
  for (int j = 0; j < c; ++j) {
    float xhat = (x[j] - mean) * rstd;
    dx[j] = rstd * (dy[j] * gamma[j] - mean_d - xhat * mean_dxhat);
  }
}

// One row of RMSNorm backward. dx [c] overwritten; dgamma [c] accumulated.
inline void rmsnorm_backward_row(float* __restrict dx, float* __restrict dgamma,
                                 const float* __restrict dy, const float* __restrict x, float rstd,
                                 const float* __restrict gamma, int c) {
  float sum_dgx = 0.0f;  // sum of dy * gamma * x
#pragma omp simd reduction(+ : sum_dgx)
  for (int j = 0; j < c; ++j) {
    sum_dgx += dy[j] * gamma[j] * x[j];
    dgamma[j] += dy[j] * x[j] * rstd;
  }
  float k = rstd * rstd * rstd * sum_dgx / c;  // y = x r g, dr/dx_j = -r^3 x_j / c
#pragma omp simd
  for (int j = 0; j < c; ++j) dx[j] = rstd * dy[j] * gamma[j] - k * x[j];
}

}  // namespace

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int m, int c, float eps) {
  check_shapes("layernorm_forward", m, c);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < m; ++r) {
    const float* __restrict xr = x + static_cast<long>(r) * c;
    float* __restrict yr = y + static_cast<long>(r) * c;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < c; ++j) sum += xr[j];
    float mu = sum / c;
    float sq = 0.0f;  // centred second pass: no cancellation for rows with a large mean
#pragma omp simd reduction(+ : sq)
    for (int j = 0; j < c; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    float rs = 1.0f / std::sqrt(sq / c + eps);
#pragma omp simd
    for (int j = 0; j < c; ++j) yr[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* mean, const float* rstd, const float* gamma, int m, int c) {
  check_shapes("layernorm_backward", m, c);
  const int chunks = num_chunks(m);
  const long stride = 2L * c;  // per chunk: dgamma partial [c], then dbeta partial [c]
  std::unique_ptr<float[]> parts(new float[chunks * stride]);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int k = 0; k < chunks; ++k) {
      float* pg = parts.get() + k * stride;
      float* pb = pg + c;
      for (int j = 0; j < 2 * c; ++j) pg[j] = 0.0f;
      int r1 = (k + 1) * kChunkRows < m ? (k + 1) * kChunkRows : m;
      for (int r = k * kChunkRows; r < r1; ++r) {
        long off = static_cast<long>(r) * c;
        layernorm_backward_row(dx + off, pg, pb, dy + off, x + off, mean[r], rstd[r], gamma, c);
      }
    }
    add_partials(dgamma, parts.get(), chunks, stride, c);
    add_partials(dbeta, parts.get() + c, chunks, stride, c);
  }
}

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int m, int c,
                     float eps) {
  check_shapes("rmsnorm_forward", m, c);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < m; ++r) {
    const float* __restrict xr = x + static_cast<long>(r) * c;
    float* __restrict yr = y + static_cast<long>(r) * c;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int j = 0; j < c; ++j) sq += xr[j] * xr[j];
    float rs = 1.0f / std::sqrt(sq / c + eps);
#pragma omp simd
    for (int j = 0; j < c; ++j) yr[j] = xr[j] * rs * gamma[j];
    rstd[r] = rs;
  }
}

void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* rstd,
                      const float* gamma, int m, int c) {
  check_shapes("rmsnorm_backward", m, c);
  const int chunks = num_chunks(m);
  std::unique_ptr<float[]> parts(new float[static_cast<long>(chunks) * c]);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int k = 0; k < chunks; ++k) {
      float* pg = parts.get() + static_cast<long>(k) * c;
      for (int j = 0; j < c; ++j) pg[j] = 0.0f;
      int r1 = (k + 1) * kChunkRows < m ? (k + 1) * kChunkRows : m;
      for (int r = k * kChunkRows; r < r1; ++r) {
        long off = static_cast<long>(r) * c;
        rmsnorm_backward_row(dx + off, pg, dy + off, x + off, rstd[r], gamma, c);
      }
    }
    add_partials(dgamma, parts.get(), chunks, c, c);
  }
}

}  // namespace dendrite::ops
