// Shared by the op tests: seeded random inputs, an element-wise closeness
// check whose tolerance is relative for large values and scaled by the
// tensor's rms for small ones, and the ops composed as the model's layers
// compose them on one rank (the unsplit norms, the LM head with its loss), so
// the tests check the product's path against the whole-tensor references.
// Letters: m rows, c / C channels, V vocabulary, Vp padded vocabulary.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/core/rng.h"

namespace dendrite::test {

using Vf = std::vector<float>;
using Vd = std::vector<double>;

// The CPU backend the op tests run the ops on, made once per test program:
// its methods are the ops' one entry point (backend.h), checks included.
inline Backend& cpu_ops() {
  static const std::unique_ptr<Backend> cpu = make_backend(Device::kCpu);
  return *cpu;
}

inline Vf randn(long n, uint64_t stream, double scale = 1.0, double shift = 0.0,
                uint64_t seed = 7) {
  Vf v(n);
  for (long i = 0; i < n; ++i)
    v[i] = static_cast<float>(shift + scale * random_normal(seed, stream, i));
  return v;
}

inline std::vector<int32_t> random_tokens(long n, int vocab, uint64_t stream, uint64_t seed = 7) {
  std::vector<int32_t> t(n);
  for (long i = 0; i < n; ++i) t[i] = static_cast<int32_t>(random_bits(seed, stream, i) % vocab);
  return t;
}

template <typename T>
Vd to_d(const std::vector<T>& v) {
  return Vd(v.begin(), v.end());
}

// Expects |got - want| <= tol * (|want| + rms(want)) for every element (NaN fails).
template <typename T>
void expect_close(const std::vector<T>& got, const Vd& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double ms = 0.0;
  for (double w : want) ms += w * w;
  const double rms = want.empty() ? 0.0 : std::sqrt(ms / want.size());
  long bad = 0, worst = -1;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double ratio = err / (tol * (std::fabs(want[i]) + rms) + 1e-300);
    const double key = std::isnan(ratio) ? INFINITY : ratio;
    if (key > 1.0) ++bad;
    if (key > worst_ratio) {
      worst_ratio = key;
      worst = static_cast<long>(i);
    }
  }
  if (worst < 0) return;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements off; worst at "
                    << worst << ": got " << got[worst] << " want " << want[worst] << " (rms " << rms
                    << ", tol " << tol << ")";
}

// Expects ||got - want|| <= tol ||want|| (2-norms): the bound for results whose
// inputs were rounded inside the op (bf16 tensor-core products), where a few
// elements that are small differences of large terms lose more than the rest.
template <typename T>
void expect_close_norm(const std::vector<T>& got, const Vd& want, double tol,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += want[i] * want[i];
  }
  EXPECT_LE(std::sqrt(err), tol * std::sqrt(norm)) << what << ": relative error "
                                                    << std::sqrt(err / norm) << ", tol " << tol;
}

// Sets the OpenMP thread count for a scope, then restores it.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// The norms over an unsplit width, as ParallelNorm runs them on one X rank:
// the row sums, then the apply with c == c_total (no sum over ranks between).
// x, y, dy, dx [m, c]; gamma, beta, dgamma, dbeta [c] (gradients accumulated;
// dbeta may be null); mean, rstd [m].
inline void layernorm_whole_forward(float* y, float* mean, float* rstd, const float* x,
                                    const float* gamma, const float* beta, int m, int c,
                                    float eps) {
  std::vector<double> sums(2L * m);
  cpu_ops().layernorm_row_sums(sums.data(), x, {m, c, c});
  cpu_ops().layernorm_apply(y, mean, rstd, sums.data(), x, gamma, beta, {m, c, c}, eps);
}

inline void layernorm_whole_backward(float* dx, float* dgamma, float* dbeta, const float* dy,
                                     const float* x, const float* mean, const float* rstd,
                                     const float* gamma, int m, int c) {
  std::vector<double> sums(2L * m);
  cpu_ops().layernorm_backward_sums(sums.data(), dy, x, mean, rstd, gamma, {m, c, c});
  cpu_ops().layernorm_backward_apply(dx, dgamma, dbeta, sums.data(), dy, x, mean, rstd, gamma,
                                     {m, c, c});
}

inline void rmsnorm_whole_forward(float* y, float* rstd, const float* x, const float* gamma, int m,
                                  int c, float eps) {
  std::vector<double> sums(m);
  cpu_ops().rmsnorm_row_sums(sums.data(), x, {m, c, c});
  cpu_ops().rmsnorm_apply(y, rstd, sums.data(), x, gamma, {m, c, c}, eps);
}

inline void rmsnorm_whole_backward(float* dx, float* dgamma, const float* dy, const float* x,
                                   const float* rstd, const float* gamma, int m, int c) {
  std::vector<double> sums(m);
  cpu_ops().rmsnorm_backward_sums(sums.data(), dy, x, gamma, {m, c, c});
  cpu_ops().rmsnorm_backward_apply(dx, dgamma, sums.data(), dy, x, rstd, gamma, {m, c, c});
}

// The LM head and its loss as VocabCrossEntropy runs them with the vocabulary
// in one part (Gx = Gy = 1): per chunk of chunk_rows rows, logits [rows, Vp] =
// x w^T, the local stats combined over the one part, then dlogits and the two
// GEMMs of the backward. x [m, C], w [Vp, C], targets [m], weight [m] (may be
// null). Returns sum_r weight[r] CE_r / denominator; with dx non-null also
// dx [m, C] (overwritten) and dw [Vp, C] (accumulated).
inline double lm_head_loss(float* dx, float* dw, const float* x, const float* w,
                           const int32_t* targets, const float* weight, double denominator, int m,
                           int C, int V, int Vp, int chunk_rows) {
  std::vector<float> logits(static_cast<size_t>(chunk_rows) * Vp), stats(2L * chunk_rows),
      lse(chunk_rows);
  double loss = 0.0;
  for (int r0 = 0; r0 < m; r0 += chunk_rows) {
    const int rows = std::min(chunk_rows, m - r0);
    const float* xc = x + static_cast<long>(r0) * C;  // [rows, C]
    const float* wc = weight ? weight + r0 : nullptr;
    cpu_ops().linear_forward(logits.data(), xc, w, nullptr, {rows, C, Vp});
    cpu_ops().ce_local_stats(stats.data(), logits.data(), targets + r0, wc, {rows, Vp, 0, V});
    cpu_ops().ce_combine(lse.data(), stats.data(), wc, rows, 1, &loss);
    if (!dx) continue;
    cpu_ops().ce_dlogits(logits.data(), lse.data(), targets + r0, wc, denominator,
                         {rows, Vp, 0, V});
    cpu_ops().linear_backward_input(dx + static_cast<long>(r0) * C, logits.data(), w, {rows, C, Vp},
                                    false);
    cpu_ops().linear_backward_weight(dw, logits.data(), xc, {rows, C, Vp}, true);
  }
  return loss / denominator;
}

}  // namespace dendrite::test
