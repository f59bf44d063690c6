// The op harness (backend_ops_support.h) on the optimizer's ops and the data
// movement around them: AdamW with its bf16 copy, alone and over a table of
// tensors with the gradient's sum of squares, the count of non-finite values,
// fill, copy_rows and add_bias, and uploads that free the host's buffer at once.
// Letters: n values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backend_ops_support.h"
#include "dendrite/ops/reference/basic.h"

namespace dendrite::test {
namespace {

// An upload returns before the device has the bytes (CUDA: through a pinned
// ring, no wait): the host may write its buffer again at once. On the
// emulator the device's stream runs late, so a part of the ring written again
// before its copy ran would reach the device; the uploads wrap the ring
// several times.
TEST_P(BackendOps, UploadsLeaveTheHostBufferFreeAtOnce) {
  std::unique_ptr<Backend> late;
  if (GetParam().emulated) {
    emu::set_streams(emu::Streams::kComputeLate);
    BackendOptions o;
    o.tf32 = false;
    late = make_emulated_cuda_backend(o);
    emu::set_streams(emu::Streams::kAtOnce);
  }
  Backend& b = late ? *late : be();
  const int uploads = 12;
  const size_t n = size_t(3) << 18;  // 3 MiB of int32 each
  std::vector<Buffer<int32_t>> device;
  std::vector<int32_t> host(n);
  for (int u = 0; u < uploads; ++u) {
    for (size_t i = 0; i < n; ++i) host[i] = int32_t(u * 1000003 + i);
    device.push_back(b.alloc<int32_t>(int64_t(n)));
    b.upload(device.back().data(), host.data(), n * sizeof(int32_t));
  }
  std::fill(host.begin(), host.end(), -1);
  for (int u = 0; u < uploads; ++u) {
    b.download(host.data(), device[u].data(), n * sizeof(int32_t));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(host[i], int32_t(u * 1000003 + i)) << "upload " << u << ", value " << i;
  }
}

// The table forms of the optimizer ops (one launch on a GPU) against the
// oracle, over tensors with gaps between them, offsets not a multiple of 4,
// sizes from 1 up to several of the GPU's blocks, and a bf16 copy that ends
// between two tensors; values outside the tensors are left alone.
TEST_P(BackendOps, OptimizerOpsOverATableOfTensors) {
  std::vector<ops::FlatTensor> table = {
      {0, 1000, 0, 1}, {1003, 5, 0, 0}, {1010, 2900, 0, 1}, {3911, 1, 0, 0}, {3920, 1200, 0, 1}};
  const int count = int(table.size());
  const int64_t values = ops::number_tensors(table.data(), count), n = 5200;
  const int64_t low_count = 3911;  // the bf16 copy: the first three tensors
  const Vf p = randn(n, 41), g = randn(n, 42), m0 = randn(n, 43, 0.1), v0 = randn(n, 44, 0.0, 0.01);
  Vf v0abs(v0);
  for (float& x : v0abs) x = std::fabs(x);
  Buffer<ops::FlatTensor> Table = put(table);
  Buffer<float> G = put(g);
  Buffer<double> Total = zeros<double>(1);
  be().sum_squares_tensors(Total.data(), G.data(), Table.data(), count, values);
  const double want = ref::sum_squares_tensors(to_d(g).data(), table.data(), count);
  const double got = get(Total)[0];
  EXPECT_NEAR(got, want, 1e-12 * want);
  if (!GetParam().emulated &&
      GetParam().device == Device::kCpu) {  // tensor by tensor: the same bits
    double by_tensor = 0.0;
    for (const ops::FlatTensor& t : table) by_tensor += be().sum_squares(G.data() + t.offset, t.n);
    EXPECT_EQ(got, by_tensor);
  }
  const ops::AdamWConfig c{0.9f, 0.95f, 1e-8f, 0.1f};
  Vd pd = to_d(p), gd = to_d(g), md = to_d(m0), vd = to_d(v0abs);
  for (double& x : gd) x *= 0.5;  // the grad_scale
  ref::adamw_step_tensors(pd.data(), gd.data(), md.data(), vd.data(), table.data(), count, 3e-4, 3,
                          c);
  Buffer<float> P = put(p), M = put(m0), V = put(v0abs);
  Buffer<bf16> Low = zeros<bf16>(n);
  be().adamw_update_tensors(P.data(), G.data(), M.data(), V.data(), Table.data(), count, values,
                            3e-4f, 3, c, 0.5f, Low.data(), low_count);
  const Vf got_p = get(P);
  expect_close(got_p, pd, 1e-6, "adamw over a table: params");
  expect_close(get(M), md, 1e-6, "adamw over a table: m");
  expect_close(get(V), vd, 1e-6, "adamw over a table: v");
  const Vb low = get(Low);
  std::vector<bool> inside(n, false);
  for (const ops::FlatTensor& t : table)
    for (int64_t i = t.offset; i < t.offset + t.n; ++i) inside[i] = true;
  for (int64_t i = 0; i < n; ++i) {
    if (!inside[i]) {
      ASSERT_EQ(got_p[i], p[i]) << "value " << i << " outside the tensors changed";
    }
    const uint16_t want_low = inside[i] && i < low_count ? to_bf16(got_p[i]).bits : 0;
    ASSERT_EQ(low[i].bits, want_low) << "bf16 copy " << i;
  }
}

TEST_P(BackendOps, AdamWWithItsBf16CopyAndTheDataOps) {
  const long n = 3000;
  const Vf p = randn(n, 27), g = randn(n, 28), m0 = randn(n, 29, 0.1), v0 = randn(n, 30, 0.0, 0.01);
  Vf v0abs(v0);
  for (float& x : v0abs) x = std::fabs(x);
  const ops::AdamWConfig c{0.9f, 0.95f, 1e-8f, 0.1f};
  Vd pd = to_d(p), gd = to_d(g), md = to_d(m0), vd = to_d(v0abs);
  for (double& x : gd) x *= 0.5;  // the grad_scale
  ref::adamw_step(pd.data(), gd.data(), md.data(), vd.data(), n, 3e-4, 7, true, c);
  Buffer<float> P = put(p), G = put(g), M = put(m0), V = put(v0abs);
  Buffer<bf16> Low = zeros<bf16>(n);
  be().adamw_update(P.data(), G.data(), M.data(), V.data(), n, 3e-4f, 7, true, c, 0.5f, Low.data());
  const Vf got = get(P);
  expect_close(got, pd, 1e-6, "adamw params");
  expect_close(get(M), md, 1e-6, "adamw m");
  expect_close(get(V), vd, 1e-6, "adamw v");
  const Vb low = get(Low);
  for (long i = 0; i < n; ++i) ASSERT_EQ(low[i].bits, to_bf16(got[i]).bits) << "bf16 copy " << i;

  // fill, copy_rows, add_bias, count_nonfinite
  Buffer<float> F = zeros<float>(1000);
  be().fill(F.data(), 2.5f, 1000);
  expect_close(get(F), Vd(1000, 2.5), 0, "fill");
  const Vf src = randn(10 * 7, 31);
  Buffer<float> Src = put(src), Dst = zeros<float>(5 * 3);
  be().copy_rows(Dst.data(), Src.data() + 2, 5, 3, 14);
  Vd rows_want;
  for (int r = 0; r < 5; ++r)
    for (int j = 0; j < 3; ++j) rows_want.push_back(src[r * 14 + 2 + j]);
  expect_close(get(Dst), rows_want, 0, "copy_rows");
  const Vf y = randn(6 * 5, 32), b = randn(5, 33);
  Buffer<float> Y = put(y), Bb = put(b);
  be().add_bias(Y.data(), Bb.data(), 6, 5);
  Vd yb(30);
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 5; ++j) yb[r * 5 + j] = double(y[r * 5 + j]) + b[j];
  expect_close(get(Y), yb, 1e-7, "add_bias");
  Vf bad = randn(100000, 34);
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  bad[99999] = -std::numeric_limits<float>::infinity();
  bad[70000] = std::numeric_limits<float>::infinity();
  Buffer<float> Bad = put(bad);
  EXPECT_EQ(be().count_nonfinite(Bad.data(), int64_t(bad.size())), 3);
  EXPECT_EQ(be().count_nonfinite(Bad.data(), 5), 0);
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(kCpuTarget), target_name);
INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps, ::testing::ValuesIn(kEmulatedTargets), target_name);
#ifdef DENDRITE_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(kCudaTarget), target_name);
#endif

}  // namespace
}  // namespace dendrite::test
