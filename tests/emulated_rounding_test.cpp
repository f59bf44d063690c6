// The emulator's model of how a GPU's hardware rounds sums of products
// (emu::set_gpu_rounding; tests/emulated_cuda/gpu_rounding.cpp). The tests
// whose bounds are a GPU's run under it (the op harness's
// emulated_gpu_rounding instances, cuda_model_test's *_gpu_rounding), so
// it must round where the emulator's own sums do not: here, sums whose
// roundings tell the model's from nearest-even.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dendrite/backend/backend.h"
#include "emulated_cuda/cuda_runtime.h"
#include "emulated_cuda/emulated_backend.h"
#include "emulated_cuda/emulator.h"
#include "emulated_cuda/emulator_internal.h"

namespace dendrite {
namespace {

const float u = std::ldexp(1.0f, -23);  // fp32's spacing at 1

// Two values as bf16 in one 32-bit register of an m16n8k16 operand, the
// first in the low half.
uint32_t pair(float lo, float hi) {
  return uint32_t(to_bf16(lo).bits) | uint32_t(to_bf16(hi).bits) << 16;
}

float sum(float acc, std::vector<float> products) {
  return emu::tensor_core_sum(acc, products.data(), int(products.size()));
}

TEST(EmulatedGpuRounding, TensorCoresCutEachTermToTheLargestsGridAndTheSumTowardZero) {
  // Three quarters of a unit of the largest term is cut away, where the
  // nearest sum would keep a unit; so are eight of them, cut before adding.
  EXPECT_EQ(sum(1.0f, {0.75f * u}), 1.0f);
  EXPECT_EQ(sum(-1.0f, {-0.75f * u}), -1.0f);
  EXPECT_EQ(sum(1.0f, std::vector<float>(8, 0.75f * u)), 1.0f);
  // Terms on the grid whose sum is not: toward zero (nearest-even: 2.5 + 4u).
  EXPECT_EQ(sum(1.5f, {1.0f + 3 * u}), 2.5f + 2 * u);
  EXPECT_EQ(sum(-1.5f, {-1.0f - 3 * u}), -2.5f - 2 * u);
  // What fits stays exact; zeros, infinities and NaN as in any sum.
  EXPECT_EQ(sum(0.5f, {1.0f, 2.0f, -0.25f}), 3.25f);
  EXPECT_EQ(sum(0.0f, {0.0f, -0.0f}), 0.0f);
  EXPECT_EQ(sum(1.0f, {std::numeric_limits<float>::infinity()}),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(sum(1.0f, {std::numeric_limits<float>::quiet_NaN()})));
  // Past the largest finite float, toward zero stops at it.
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(sum(big, {big}), big);
}

// The emulated backend's GEMM (cuBLASLt), a row times a column of ones:
// with gpu_rounding, bf16 operands on tensor cores (8 products at a time,
// each group's small terms cut away) and fp32 ones as a chain of FMAs.
TEST(EmulatedGpuRounding, TheEmulatedCublasLtSumsAsTheModelSays) {
  BackendOptions o;
  o.tf32 = false;
  auto be = make_emulated_cuda_backend(o);
  auto dot = [&](const std::vector<float>& row, bool low, bool gpu) {
    const int K = int(row.size());
    emu::set_gpu_rounding(gpu);
    Buffer<float> C = be->alloc<float>(1);
    if (low) {
      std::vector<bf16> a(row.size()), b(row.size(), to_bf16(1.0f));
      for (size_t i = 0; i < row.size(); ++i) a[i] = to_bf16(row[i]);
      Buffer<bf16> A = be->alloc<bf16>(K), B = be->alloc<bf16>(K);
      be->upload(A.data(), a.data(), K * sizeof(bf16));
      be->upload(B.data(), b.data(), K * sizeof(bf16));
      be->gemm(false, false, 1, 1, K, 1.0f, A.data(), K, B.data(), 1, 0.0f, C.data(), 1);
    } else {
      std::vector<float> b(row.size(), 1.0f);
      Buffer<float> A = be->alloc<float>(K), B = be->alloc<float>(K);
      be->upload(A.data(), row.data(), K * sizeof(float));
      be->upload(B.data(), b.data(), K * sizeof(float));
      be->gemm(false, false, 1, 1, K, 1.0f, A.data(), K, B.data(), 1, 0.0f, C.data(), 1);
    }
    float c = 0;
    be->download(&c, C.data(), sizeof c);
    emu::set_gpu_rounding(false);
    return c;
  };
  // 1 and fifteen of 0.75u (bf16 holds them): 1 + 11.25u, nearest 1 + 11u;
  // on tensor cores each group of 8 cuts them away.
  std::vector<float> row(16, 0.75f * u);
  row[0] = 1.0f;
  EXPECT_EQ(dot(row, true, false), 1.0f + 11 * u);
  EXPECT_EQ(dot(row, true, true), 1.0f);
  // 1, 0.6u, 0.6u in fp32: 1 + 1.2u, nearest 1 + u; each FMA rounding, 1 + 2u.
  EXPECT_EQ(dot({1.0f, 0.6f * u, 0.6f * u}, false, false), 1.0f + u);
  EXPECT_EQ(dot({1.0f, 0.6f * u, 0.6f * u}, false, true), 1.0f + 2 * u);
}

// The attention kernels' tensor-core product (mma m16n8k16, emulator.h) of
// A, whose row 0 is 1 and fifteen of 0.75u (the rest zeros), and B of ones:
// row 0 of the result (lanes 0 to 3, their first two values).
TEST(EmulatedGpuRounding, TheTensorCoreProductSumsAsTheModelSays) {
  auto row0 = [](bool gpu) {
    emu::set_gpu_rounding(gpu);
    std::vector<float> got(32 * 4, -1.0f);
    const bool launched = emu::run(nullptr, dim3(1), dim3(32), 0, nullptr, "mma_m16n8k16", [&got] {
      const int l = int(threadIdx.x);
      auto A = [](int row, int k) { return row != 0 ? 0.0f : k == 0 ? 1.0f : 0.75f * u; };
      // Lane l's register r of A holds row l / 4 + 8 (r % 2), columns
      // 2 (l % 4) + 8 (r / 2) and the next (the PTX ISA's layout).
      uint32_t a[4], b[2] = {pair(1.0f, 1.0f), pair(1.0f, 1.0f)};
      for (int r = 0; r < 4; ++r) {
        const int row = l / 4 + 8 * (r % 2), k = 2 * (l % 4) + 8 * (r / 2);
        a[r] = pair(A(row, k), A(row, k + 1));
      }
      float d[4] = {0, 0, 0, 0};
      emu::mma_m16n8k16_bf16(d, a, b);
      for (int e = 0; e < 4; ++e) got[size_t(4 * l + e)] = d[e];
    });
    EXPECT_TRUE(launched);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    emu::set_gpu_rounding(false);
    std::vector<float> row;
    for (int l = 0; l < 4; ++l) row.insert(row.end(), {got[size_t(4 * l)], got[size_t(4 * l + 1)]});
    return row;
  };
  // In k order, nearest-even: each 0.75u adds a unit, 1 + 15u; as tensor
  // cores add (8 products at a time), none.
  EXPECT_EQ(row0(false), std::vector<float>(8, 1.0f + 15 * u));
  EXPECT_EQ(row0(true), std::vector<float>(8, 1.0f));
}

// The product as written (the default): two products in a row of random
// fragments, over values of many magnitudes so that the order of the sums
// shows, against each element's sum in k order made here (bf16 times bf16
// is exact in fp32); in every lane, from accumulators of its own. The two
// use the warp's two exchange sets, and their products, in turn.
TEST(EmulatedGpuRounding, TheTensorCoreProductAsWrittenSumsEachElementInKOrder) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto value = [&] { return to_float(to_bf16(std::ldexp(normal(rng), int(rng() % 24) - 12))); };
  float A[2][16][16], B[2][16][8], D0[16][8];
  for (int p = 0; p < 2; ++p) {
    for (auto& row : A[p])
      for (float& v : row) v = value();
    for (auto& row : B[p])
      for (float& v : row) v = value();
  }
  for (auto& row : D0)
    for (float& v : row) v = value();
  std::vector<float> got(32 * 4, -1.0f);
  const bool launched = emu::run(nullptr, dim3(1), dim3(32), 0, nullptr, "mma_m16n8k16", [&] {
    const int l = int(threadIdx.x), g = l / 4, t = l % 4;
    // Lane l's register r of A: row g + 8 (r % 2), k = 2t + 8 (r / 2) and
    // k + 1; of B: k = 2t + 8r and k + 1, column g; its d[e]: row
    // g + 8 (e / 2), column 2t + e % 2 (the PTX ISA's layouts).
    float d[4];
    for (int e = 0; e < 4; ++e) d[e] = D0[g + 8 * (e / 2)][2 * t + e % 2];
    for (int p = 0; p < 2; ++p) {
      uint32_t a[4], b[2];
      for (int r = 0; r < 4; ++r) {
        const int row = g + 8 * (r % 2), k = 2 * t + 8 * (r / 2);
        a[r] = pair(A[p][row][k], A[p][row][k + 1]);
      }
      for (int r = 0; r < 2; ++r) b[r] = pair(B[p][2 * t + 8 * r][g], B[p][2 * t + 8 * r + 1][g]);
      emu::mma_m16n8k16_bf16(d, a, b);
    }
    for (int e = 0; e < 4; ++e) got[size_t(4 * l + e)] = d[e];
  });
  ASSERT_TRUE(launched);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  int wrong = 0;
  for (int l = 0; l < 32; ++l)
    for (int e = 0; e < 4; ++e) {
      const int row = l / 4 + 8 * (e / 2), col = 2 * (l % 4) + e % 2;
      float want = D0[row][col];
      for (int p = 0; p < 2; ++p) {
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += A[p][row][k] * B[p][k][col];
        want += sum;
      }
      const float have = got[size_t(4 * l + e)];
      if (std::memcmp(&have, &want, sizeof want) != 0 && ++wrong <= 5)
        ADD_FAILURE() << "row " << row << " column " << col << ": " << have << ", want " << want;
    }
  EXPECT_EQ(wrong, 0) << "elements of 128 not the sums in k order";
}

}  // namespace
}  // namespace dendrite
