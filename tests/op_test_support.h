// Shared by the op tests: seeded random inputs and an element-wise closeness
// check whose tolerance is relative for large values and scaled by the
// tensor's rms for small ones.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/core/rng.h"

namespace dendrite::test {

using Vf = std::vector<float>;
using Vd = std::vector<double>;

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

// Sets the OpenMP thread count for a scope, then restores it.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

}  // namespace dendrite::test
