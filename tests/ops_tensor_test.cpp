// Data-movement ops (ops/tensor.h) and the bias add: each against the loop
// it replaces, at sizes below and above the parallel threshold.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dendrite/ops/matmul.h"
#include "dendrite/ops/tensor.h"
#include "op_test_support.h"

namespace dendrite {
namespace {

TEST(Tensor, FillAndCopyRows) {
  for (int64_t n : {5L, 200000L}) {
    std::vector<float> x(n, 1.0f);
    test::cpu_ops().fill(x.data(), -2.5f, n);
    for (float v : x) ASSERT_EQ(v, -2.5f);
  }
  // The last row of each of 3 sequences of 4 rows of 5 columns.
  const test::Vf src = test::randn(3 * 4 * 5, 1);
  std::vector<float> dst(3 * 5);
  test::cpu_ops().copy_rows(dst.data(), src.data() + 3 * 5, 3, 5, 4 * 5);
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(dst[b * 5 + j], src[(b * 4 + 3) * 5 + j]);
}

TEST(Tensor, InterleavesVocabularyPartsAndDropsPadding) {
  const int parts = 3, m = 4, Vloc = 5, V = 13;  // ids 13, 14 are padding
  const test::Vf all = test::randn(int64_t(parts) * m * Vloc, 2);
  std::vector<float> out(m * V, 0.0f);
  test::cpu_ops().interleave_vocab_parts(out.data(), all.data(), {parts, m, Vloc, V});
  for (int r = 0; r < m; ++r)
    for (int id = 0; id < V; ++id)
      EXPECT_EQ(out[r * V + id], all[(int64_t(id / Vloc) * m + r) * Vloc + id % Vloc]) << r << " " << id;
}

TEST(Tensor, CountsNonFiniteValues) {
  for (int64_t n : {7L, 300000L}) {
    std::vector<float> x(n, 0.5f);
    EXPECT_EQ(test::cpu_ops().count_nonfinite(x.data(), n), 0);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    x[n / 2] = std::numeric_limits<float>::infinity();
    x[n - 1] = -std::numeric_limits<float>::infinity();
    x[1] = std::numeric_limits<float>::max();  // finite
    EXPECT_EQ(test::cpu_ops().count_nonfinite(x.data(), n), 3);
  }
}

TEST(Tensor, AddBiasToEveryRow) {
  const int m = 7, n = 19;
  const test::Vf y0 = test::randn(m * n, 3), b = test::randn(n, 4);
  test::Vf y = y0;
  test::cpu_ops().add_bias(y.data(), b.data(), m, n);
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < n; ++j) ASSERT_EQ(y[r * n + j], y0[r * n + j] + b[j]);
}

}  // namespace
}  // namespace dendrite
