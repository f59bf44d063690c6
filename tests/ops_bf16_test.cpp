// bf16 ops of the CPU backend: the conversions (round to nearest-even, NaN,
// infinities, denormals, the vector path against the scalar rule) and the
// bf16 GEMM against the double-precision reference on the same bf16 values,
// for every transpose, leading dimensions, alpha and beta.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "dendrite/ops/convert.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/optim.h"
#include "dendrite/ops/reference/basic.h"
#include "op_test_support.h"

namespace dendrite {
namespace {

using test::Vd;
using test::Vf;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, ScalarRoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bf16(-2.0f).bits, 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even (1).
  EXPECT_EQ(to_bf16(from_bits(0x3f808000)).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even.
  EXPECT_EQ(to_bf16(from_bits(0x3f818000)).bits, 0x3f82);
  EXPECT_EQ(to_bf16(from_bits(0x3f808001)).bits, 0x3f81);  // just above half: up
  EXPECT_EQ(to_bf16(from_bits(0x3f807fff)).bits, 0x3f80);  // just below: down
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(to_bf16(from_bits(0x7f7fffff)).bits, 0x7f80);  // the largest float rounds to inf
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(to_float(to_bf16(from_bits(0x7f800001)))));  // a signalling NaN stays NaN
  EXPECT_EQ(to_bf16(from_bits(0x00000001)).bits, 0x0000);  // denormals: zero of their sign
  EXPECT_EQ(to_bf16(from_bits(0x80400000)).bits, 0x8000);
  for (float f : {0.15625f, -3.5f, 65280.0f}) EXPECT_EQ(to_float(to_bf16(f)), f);  // exact ones
}

TEST(Bf16, ArraysMatchTheScalarRule) {
  Vf x = test::randn(10007, 1, 3.0);
  const uint32_t specials[] = {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0x00000001,
                               0x807fffff, 0x3f808000, 0x3f818000, 0x7f7fffff, 0x00800000};
  for (size_t i = 0; i < std::size(specials); ++i) x[100 + 17 * i] = from_bits(specials[i]);
  std::vector<bf16> b(x.size());
  test::cpu_ops().to_bf16(b.data(), x.data(), int64_t(x.size()));
  Vf back(x.size());
  test::cpu_ops().to_float(back.data(), b.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(b[i].bits, to_bf16(x[i]).bits) << i << ": " << x[i];
    if (!std::isnan(x[i])) {
      ASSERT_EQ(back[i], to_float(b[i])) << i;
    }
    if (std::isnormal(x[i]) && std::isfinite(back[i])) {
      ASSERT_LE(std::fabs(back[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << i;  // half an ulp
    }
  }
}

TEST(Bf16, GemmMatchesTheReferenceOnBf16Values) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        const int M = 37, N = 53, K = 67, lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const Vf Af = test::randn(long(ta ? K : M) * lda, 1), Bf = test::randn(long(tb ? N : K) * ldb, 2);
        std::vector<bf16> A(Af.size()), B(Bf.size());
        test::cpu_ops().to_bf16(A.data(), Af.data(), int64_t(A.size()));
        test::cpu_ops().to_bf16(B.data(), Bf.data(), int64_t(B.size()));
        Vd Ad(A.size()), Bd(B.size());
        for (size_t i = 0; i < A.size(); ++i) Ad[i] = to_float(A[i]);
        for (size_t i = 0; i < B.size(); ++i) Bd[i] = to_float(B[i]);
        Vf C = test::randn(long(M) * ldc, 3);
        Vd Cd = test::to_d(C);
        ref::gemm(ta, tb, M, N, K, 0.75, Ad.data(), lda, Bd.data(), ldb, beta, Cd.data(), ldc);
        test::cpu_ops().gemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, C.data(),
                             ldc);
        // Exact products of bf16 values summed in fp32: K roundings of fp32.
        test::expect_close(C, Cd, 1e-5, "gemm (bf16) ta=" + std::to_string(ta) +
                                            " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
        // The same call again gives the same bits (a cached primitive, fixed algorithm).
        Vf again = test::randn(long(M) * ldc, 3);
        test::cpu_ops().gemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta,
                             again.data(), ldc);
        ASSERT_EQ(std::memcmp(again.data(), C.data(), C.size() * 4), 0);
      }
}

// AdamW writing the bf16 copy in the same pass: the fp32 update is unchanged
// (same bits as without the copy), and the copy is the rounding of it.
TEST(Bf16, AdamWWritesTheRoundedCopy) {
  for (long n : {37L, 100003L}) {
    const Vf p0 = test::randn(n, 1), g = test::randn(n, 2, 0.1), m0 = test::randn(n, 3, 0.01);
    Vf v0 = test::randn(n, 4, 0.001);
    for (float& x : v0) x = std::fabs(x);
    Vf p1 = p0, m1 = m0, v1 = v0, p2 = p0, m2 = m0, v2 = v0;
    std::vector<bf16> low(n);
    const ops::AdamWConfig c{0.9f, 0.95f, 1e-8f, 0.1f};
    test::cpu_ops().adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, 1e-3f, 3, true, c,
                                 0.5f, nullptr);
    test::cpu_ops().adamw_update(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-3f, 3, true, c,
                                 0.5f, low.data());
    ASSERT_EQ(std::memcmp(p1.data(), p2.data(), n * 4), 0) << n;
    ASSERT_EQ(std::memcmp(m1.data(), m2.data(), n * 4), 0) << n;
    ASSERT_EQ(std::memcmp(v1.data(), v2.data(), n * 4), 0) << n;
    for (long i = 0; i < n; ++i) ASSERT_EQ(low[i].bits, to_bf16(p2[i]).bits) << n << " " << i;
  }
}

}  // namespace
}  // namespace dendrite
