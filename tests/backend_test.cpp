// The Backend seam (backend/backend.h) on the CPU: the factory, the memory it
// owns (Buffers it allocates, uploads and downloads), its events, and its ops,
// which must give the same bits as the CPU kernels they dispatch to for fp32
// and bf16 operands, and refuse operands of mixed precision.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/core/check.h"
#include "dendrite/ops/attention.h"
#include "dendrite/ops/convert.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/matmul.h"
#include "op_test_support.h"

namespace dendrite::test {
namespace {

std::vector<bf16> rounded(const Vf& x) {
  std::vector<bf16> out(x.size());
  cpu_ops().to_bf16(out.data(), x.data(), int64_t(x.size()));
  return out;
}

bool same_bits(const Vf& a, const Vf& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Backend, TheFactoryMakesTheCpuBackendAndNamesTheMissingCudaOption) {
  std::unique_ptr<Backend> be = make_backend(Device::kCpu);
  EXPECT_EQ(be->device(), Device::kCpu);
  EXPECT_NE(be->describe().find("cpu"), std::string::npos);
#ifndef DENDRITE_HAVE_CUDA
  try {
    make_backend(Device::kCuda);
    ADD_FAILURE() << "a build without CUDA made a CUDA backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-DDENDRITE_CUDA=ON"), std::string::npos) << e.what();
  }
#endif
}

TEST(Backend, BuffersComeFromItsMemoryZeroedAndMoveThroughUploadAndDownload) {
  std::unique_ptr<Backend> be = make_backend(Device::kCpu);
  Buffer<float> b = be->alloc<float>(1000);
  ASSERT_EQ(b.size(), 1000u);
  EXPECT_EQ(b.allocator(), be.get());
  std::vector<float> host(1000, 1.0f);
  be->download(host.data(), b.data(), 1000 * sizeof(float));
  for (float v : host) ASSERT_EQ(v, 0.0f);
  const Vf x = randn(1000, 1);
  be->upload(b.data(), x.data(), x.size() * sizeof(float));
  Buffer<float> c = be->alloc<float>(1000);
  be->copy(c.data(), b.data(), 1000 * sizeof(float));
  be->download(host.data(), c.data(), 1000 * sizeof(float));
  EXPECT_TRUE(same_bits(host, x));
  c.zero();  // through the backend
  be->download(host.data(), c.data(), 1000 * sizeof(float));
  for (float v : host) ASSERT_EQ(v, 0.0f);
  c.resize(10);  // a new allocation from the same backend
  EXPECT_EQ(c.allocator(), be.get());
  Buffer<float> moved = std::move(c);
  EXPECT_EQ(moved.allocator(), be.get());
  const Event e1 = be->record(), e2 = be->record();
  EXPECT_LT(e1.seq, e2.seq);
  be->wait(e2);  // the CPU's work is done when issued
}

TEST(Backend, GemmsGiveTheKernelsBitsInEitherPrecisionAndRefuseMixedOperands) {
  std::unique_ptr<Backend> be = make_backend(Device::kCpu);
  const int m = 24, k = 40, n = 56;
  const Vf x = randn(m * k, 2), w = randn(n * k, 3), bias = randn(n, 4), dy = randn(m * n, 5);
  const std::vector<bf16> xh = rounded(x), wh = rounded(w), dyh = rounded(dy);

  Vf got(m * n), want(m * n);
  be->linear_forward(got.data(), x.data(), w.data(), bias.data(), {m, k, n});
  cpu_ops().linear_forward(want.data(), x.data(), w.data(), bias.data(), {m, k, n});
  EXPECT_TRUE(same_bits(got, want));
  be->linear_forward(got.data(), xh.data(), wh.data(), bias.data(), {m, k, n});
  cpu_ops().linear_forward(want.data(), xh.data(), wh.data(), nullptr, {m, k, n});
  cpu_ops().add_bias(want.data(), bias.data(), m, n);
  EXPECT_TRUE(same_bits(got, want));

  Vf dx(m * k), dx_want(m * k);
  be->linear_backward_input(dx.data(), dyh.data(), wh.data(), {m, k, n}, false);
  cpu_ops().linear_backward_input(dx_want.data(), dyh.data(), wh.data(), {m, k, n}, false);
  EXPECT_TRUE(same_bits(dx, dx_want));
  Vf dw(n * k, 0.5f), dw_want(n * k, 0.5f);
  be->linear_backward_weight(dw.data(), dy.data(), x.data(), {m, k, n}, true);
  cpu_ops().linear_backward_weight(dw_want.data(), dy.data(), x.data(), {m, k, n}, true);
  EXPECT_TRUE(same_bits(dw, dw_want));

  Vf c(m * n), c_want(m * n);
  be->gemm(false, true, m, n, k, 1.0f, xh.data(), k, wh.data(), k, 0.0f, c.data(), n);
  cpu_ops().gemm(false, true, m, n, k, 1.0f, xh.data(), k, wh.data(), k, 0.0f, c_want.data(), n);
  EXPECT_TRUE(same_bits(c, c_want));

  EXPECT_THROW(be->linear_forward(got.data(), x.data(), wh.data(), nullptr, {m, k, n}), Error);
  EXPECT_THROW(be->gemm(false, true, m, n, k, 1.0f, xh.data(), k, w.data(), k, 0.0f, c.data(), n),
               Error);
}

TEST(Backend, AttentionAndLookupsTakeOperandsOfEitherPrecision) {
  std::unique_ptr<Backend> be = make_backend(Device::kCpu);
  const ops::AttentionShape s{2, 8, 4, 2, 8, 32, 16, 32};
  const int rows = s.B * s.T;
  const Vf q = randn(rows * 32, 6), k = randn(rows * 16, 7), v = randn(rows * 16, 8);
  const std::vector<bf16> qh = rounded(q), kh = rounded(k), vh = rounded(v);
  Vf out(rows * 32), lse(s.B * s.NH * s.T), out_w(out.size()), lse_w(lse.size());
  be->attention_forward(out.data(), lse.data(), qh.data(), kh.data(), vh.data(), s);
  cpu_ops().attention_forward(out_w.data(), lse_w.data(), qh.data(), kh.data(), vh.data(), s);
  EXPECT_TRUE(same_bits(out, out_w));
  EXPECT_TRUE(same_bits(lse, lse_w));
  EXPECT_THROW(be->attention_forward(out.data(), lse.data(), q.data(), kh.data(), vh.data(), s),
               Error);

  const int V = 30, C = 12, m = 10;
  const Vf table = randn(V * C, 9);
  const std::vector<bf16> table_h = rounded(table);
  const std::vector<int32_t> tokens = random_tokens(m, V, 10);
  Vf e(m * C), e_want(m * C);
  be->embedding_range_forward(e.data(), tokens.data(), table_h.data(), {0, V, m, C});
  cpu_ops().embedding_range_forward(e_want.data(), tokens.data(), table_h.data(), {0, V, m, C});
  EXPECT_TRUE(same_bits(e, e_want));
  be->embedding_range_forward(e.data(), tokens.data(), table.data(), {0, V, m, C});
  cpu_ops().embedding_range_forward(e_want.data(), tokens.data(), table.data(), {0, V, m, C});
  EXPECT_TRUE(same_bits(e, e_want));
}

}  // namespace
}  // namespace dendrite::test
