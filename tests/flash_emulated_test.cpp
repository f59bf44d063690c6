// The CUDA backend's tensor-core attention kernels (backend/cuda/flash_mma.cuh)
// run on the CPU through tests/cuda_emulator.h, against the double-precision
// oracles of ops/reference/: the fragment layouts, masking, tile edges,
// grouped-query heads and both load paths, checked where no GPU is. The same
// kernels on a GPU are checked by backend_ops_test's Cuda instances (label
// gpu). Tolerances are those of bf16 operands in backend_ops_test: P, dS and
// dO are rounded to bf16 inside the kernels.
#include "cuda_emulator.h"
// (the emulator first: it defines what the kernel header needs)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dendrite/backend/cuda/flash_mma.cuh"
#include "dendrite/core/check.h"
#include "dendrite/ops/reference/attention.h"
#include "op_test_support.h"

namespace dendrite::test {
namespace {

namespace fl = dendrite::cuda::flash;

struct Case {
  ops::AttentionShape s;
  bool vec;  // 16-byte loads (hs and strides multiples of 8)
};

std::string name(const Case& c) {
  const auto& s = c.s;
  return str("B", s.B, " T", s.T, " NH", s.NH, " NKV", s.NKV, " hs", s.hs, c.vec ? " vec" : "");
}

std::vector<bf16> rounded(const Vf& x) {
  std::vector<bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(x[i]);
  return out;
}
Vf widened(const std::vector<bf16>& x) {
  Vf out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_float(x[i]);
  return out;
}
// The heads' columns of rows of `stride` values.
Vf heads(const Vf& x, int rows, int stride, int width) {
  Vf out;
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < width; ++j) out.push_back(x[size_t(r) * stride + j]);
  return out;
}

template <int D>
void run(const Case& c) {
  const ops::AttentionShape& s = c.s;
  const int rows = s.B * s.T, tiles = (s.T + fl::kRows - 1) / fl::kRows;
  const auto qh = rounded(randn(long(rows) * s.q_stride, 31));
  const auto kh = rounded(randn(long(rows) * s.kv_stride, 32));
  const auto vh = rounded(randn(long(rows) * s.kv_stride, 33));
  const Vf q = widened(qh), k = widened(kh), v = widened(vh);
  // dO arrives in fp32 and the kernels round it to bf16: the oracle reads the rounded values.
  const Vf dout = widened(rounded(randn(long(rows) * s.out_stride, 34)));

  Vf out_want(size_t(rows) * s.out_stride), lse_want(size_t(s.B) * s.NH * s.T);
  ref::attention_forward(out_want.data(), lse_want.data(), q.data(), k.data(), v.data(), s);
  Vf dq_want(q.size()), dk_want(k.size()), dv_want(v.size());
  ref::attention_backward(dq_want.data(), dk_want.data(), dv_want.data(), dout.data(), q.data(),
                          k.data(), v.data(), s);

  // Outputs start as NaN: an element the kernels should write and do not fails.
  Vf out(out_want.size(), NAN), lse(lse_want.size(), NAN);
  emu::launch(
      dim3{unsigned(s.B * s.NH), unsigned(tiles), 1}, fl::kThreads, fl::shared_bytes<D>(3, 0), [&] {
        fl::forward_kernel<D>(out.data(), lse.data(), qh.data(), kh.data(), vh.data(), s, c.vec);
      });
  const std::string what = " (" + name(c) + ")";
  // Each output: relative error within 5e-3 as a whole; each element within
  // 1e-2 (out) or 4e-2 (gradients: dS, of the size of dP, is rounded to bf16
  // before dS K and dS^T Q, and a few elements of dq and dk are much smaller
  // differences of such terms) of |want| + rms(want).
  auto check = [&](const Vf& got, const Vf& want, int stride, int width, double tol,
                   const std::string& w) {
    const Vf g = heads(got, rows, stride, width), x = heads(want, rows, stride, width);
    expect_close(g, to_d(x), tol, w + what);
    expect_close_norm(g, to_d(x), 5e-3, w + what);
  };
  check(out, out_want, s.out_stride, s.NH * s.hs, 1e-2, "out");
  expect_close(lse, to_d(lse_want), 1e-5, "lse" + what);

  const auto outh = rounded(out);  // the saved output, in bf16 as the model keeps it
  Vf dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN);
  emu::launch(dim3{unsigned(s.B * s.NH), unsigned(tiles), 1}, fl::kThreads,
              fl::shared_bytes<D>(4, fl::kRows), [&] {
                fl::dq_kernel<D>(dq.data(), dout.data(), outh.data(), lse.data(), qh.data(),
                                 kh.data(), vh.data(), s, c.vec);
              });
  emu::launch(dim3{unsigned(s.B * s.NKV), unsigned(tiles), 1}, fl::kThreads,
              fl::shared_bytes<D>(4, 2 * fl::kCols), [&] {
                fl::dkv_kernel<D>(dk.data(), dv.data(), dout.data(), outh.data(), lse.data(),
                                  qh.data(), kh.data(), vh.data(), s, c.vec);
              });
  check(dq, dq_want, s.q_stride, s.NH * s.hs, 4e-2, "dq");
  check(dk, dk_want, s.kv_stride, s.NKV * s.hs, 4e-2, "dk");
  check(dv, dv_want, s.kv_stride, s.NKV * s.hs, 4e-2, "dv");
}

// Shapes small enough for the emulator (a host thread per GPU thread), each
// with grouped-query heads (2 query heads per KV head).
TEST(FlashEmulated, HeadSize64AcrossTiles) {
  // Three tiles of 64 positions, the last partial; 16-byte loads.
  run<64>({{1, 130, 2, 1, 64, 2 * 64, 64, 2 * 64}, true});
}

TEST(FlashEmulated, SmallHeadsWithOddStrides) {
  // hs 16 padded to 64, two sequences; strides that allow only 2-byte loads.
  run<64>({{2, 37, 2, 1, 16, 2 * 16 + 8, 16 + 4, 2 * 16}, false});
}

TEST(FlashEmulated, HeadSize96PaddedTo128) {
  run<128>({{1, 70, 2, 1, 96, 2 * 96, 96, 2 * 96}, true});
}

}  // namespace
}  // namespace dendrite::test
