// The op harness (backend_ops_support.h) on the GEMMs and the linear layers:
// the GEMM in every layout and precision, one split over a long sum, the
// linear forward and backward, the input gradient with GELU's backward in its
// product, and the forward's epilogues (bias, GELU, residual, bf16 output).
// Letters: M, N, K a GEMM's rows, columns and sum; m rows, k inputs, n outputs
// of a linear layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend_ops_support.h"
#include "dendrite/ops/reference/basic.h"

namespace dendrite::test {
namespace {

TEST_P(BackendOps, GemmInEveryLayoutAndPrecision) {
  const int M = 37, N = 29, K = 83;
  for (bool low : {false, true})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Vf a = randn(M * K, 1), b = randn(K * N, 2), c = randn(M * N, 3);
        if (low) a = widened(rounded(a)), b = widened(rounded(b));
        const int lda = ta ? M : K, ldb = tb ? K : N;
        Vd want = to_d(c);
        const Vd ad = to_d(a), bd = to_d(b);
        ref::gemm(ta, tb, M, N, K, 0.5, ad.data(), lda, bd.data(), ldb, 0.25, want.data(), N);
        Buffer<float> C = put(c);
        if (low) {
          Buffer<bf16> A = put(rounded(a)), B = put(rounded(b));
          be().gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), N);
        } else {
          Buffer<float> A = put(a), B = put(b);
          be().gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), N);
        }
        expect_close(get(C), want, 1e-4,
                     str("gemm ", ta ? "T" : "N", tb ? "T" : "N", low ? " bf16" : " fp32"));
      }
}

// GELU's backward in the input gradient's product (cuBLASLt's DGELU where
// the columns k are a multiple of 8, else the gelu_backward kernel after it).
TEST_P(BackendOps, LinearInputGradientWithGeluBackward) {
  const int m = 24, n = 48;
  for (int k : {40, 36})
    for (bool low : {false, true}) {
      Vf dy = randn(m * n, 71), w = randn(n * k, 72, 0.2);
      const Vf pre = randn(m * k, 73);
      if (low) dy = widened(rounded(dy)), w = widened(rounded(w));
      Vd want(m * k);
      ref::linear_backward_input_dgelu(want.data(), to_d(dy).data(), to_d(w).data(),
                                       to_d(pre).data(), m, k, n);
      Buffer<float> DYf = put(dy), Wf = put(w), P = put(pre), DX = zeros<float>(m * k);
      Buffer<bf16> DYh = put(rounded(dy)), Wh = put(rounded(w));
      be().linear_backward_input_dgelu(DX.data(), low ? Operand(DYh.data()) : Operand(DYf.data()),
                                       low ? Operand(Wh.data()) : Operand(Wf.data()), P.data(),
                                       {m, k, n});
      expect_close(get(DX), want, 1e-4,
                   str("linear dx with gelu'", low ? " bf16" : " fp32", " k", k));
    }
}

// A weight gradient's shape: a small output over a long sum (K: the rows).
// cuBLASLt may split the sum over K (the emulator does, into 16 slices),
// adding the slices in a fixed order: within the GEMM tolerance of the
// oracle, and the same bits when run again.
TEST_P(BackendOps, GemmSplitOverALongSumIsDeterministic) {
  const int M = 24, N = 40, K = 4096;
  for (bool low : {false, true}) {
    Vf dy = randn(K * M, 51), x = randn(K * N, 52);  // dW [M, N] = dy^T x
    if (low) dy = widened(rounded(dy)), x = widened(rounded(x));
    Vd want(M * N);
    ref::gemm(true, false, M, N, K, 1.0, to_d(dy).data(), M, to_d(x).data(), N, 0.0, want.data(),
              N);
    Buffer<float> Df = put(dy), Xf = put(x);
    Buffer<bf16> Dh = put(rounded(dy)), Xh = put(rounded(x));
    std::vector<Vf> runs;
    for (int run = 0; run < 2; ++run) {
      Buffer<float> C = zeros<float>(M * N);
      be().gemm(true, false, M, N, K, 1.0f, low ? Operand(Dh.data()) : Operand(Df.data()), M,
                low ? Operand(Xh.data()) : Operand(Xf.data()), N, 0.0f, C.data(), N);
      runs.push_back(get(C));
    }
    const std::string p = low ? " bf16" : " fp32";
    expect_close(runs[0], want, 1e-4, "split gemm" + p);
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4), 0) << p;
    if (GetParam().emulated) {
      EXPECT_EQ(emu::last_gemm_splits(), 16) << p;
    }
  }
}

TEST_P(BackendOps, LinearForwardAndBackward) {
  const int m = 48, k = 64, n = 40;
  for (bool low : {false, true}) {
    Vf x = randn(m * k, 4), w = randn(n * k, 5), dy = randn(m * n, 6);
    const Vf b = randn(n, 7);
    if (low) x = widened(rounded(x)), w = widened(rounded(w)), dy = widened(rounded(dy));
    const Vd xd = to_d(x), wd = to_d(w), bd = to_d(b), dyd = to_d(dy);
    Vd y(m * n), dx(m * k), dw(n * k, 1.0), db(n, 0.0);
    ref::linear_forward(y.data(), xd.data(), wd.data(), bd.data(), m, k, n);
    ref::linear_backward(dx.data(), dw.data(), db.data(), dyd.data(), xd.data(), wd.data(), m, k,
                         n);
    Buffer<float> Y = zeros<float>(m * n), DX = zeros<float>(m * k), DW = put(Vf(n * k, 1.0f));
    Buffer<float> Bb = put(b), DB = zeros<float>(n), DYf = put(dy);
    Buffer<float> Xf = put(x), Wf = put(w);
    Buffer<bf16> Xh = put(rounded(x)), Wh = put(rounded(w)), DYh = put(rounded(dy));
    const Operand X = low ? Operand(Xh.data()) : Operand(Xf.data());
    const Operand W = low ? Operand(Wh.data()) : Operand(Wf.data());
    const Operand DY = low ? Operand(DYh.data()) : Operand(DYf.data());
    be().linear_forward(Y.data(), X, W, Bb.data(), {m, k, n});
    be().linear_backward_input(DX.data(), DY, W, {m, k, n}, false);
    be().linear_backward_weight(DW.data(), DY, X, {m, k, n}, true);
    be().add_column_sums(DB.data(), DYf.data(), m, n);
    const std::string p = low ? " bf16" : " fp32";
    expect_close(get(Y), y, 1e-4, "linear y" + p);
    expect_close(get(DX), dx, 1e-4, "linear dx" + p);
    expect_close(get(DW), dw, 1e-4, "linear dw" + p);
    expect_close(get(DB), db, 1e-5, "linear db" + p);
  }
}

// Every combination of the epilogue's steps, in both precisions: y, the GELU
// input and the bf16 output against the oracle (the bf16 output within its
// rounding, 2^-8 relative, of the oracle's value). Columns n = 40 (a multiple
// of 8) let cuBLASLt fuse the GELU; n = 36 leaves it to the kernels; fp32
// operands with a bf16 output leave the rounding to a kernel.
TEST_P(BackendOps, LinearForwardWithEpilogues) {
  const int m = 24, k = 64;
  for (int n : {40, 36})
    for (bool low : {false, true})
      for (int steps = 0; steps < 16; ++steps) {
        const bool bias = steps & 1, gelu = steps & 2, out_bf16 = steps & 4, plus = steps & 8;
        if (gelu && plus) continue;  // refused (matmul.h)
        Vf x = randn(m * k, 41), w = randn(n * k, 42, 0.2);
        const Vf b = randn(n, 43), res = randn(m * n, 44);
        if (low) x = widened(rounded(x)), w = widened(rounded(w));
        // A bf16 output alone after the bias takes the bias in bf16 (matmul.h: adds_bf16_bias).
        const bool low_bias = bias && out_bf16 && !gelu && !plus;
        const Vd bd = to_d(low_bias ? widened(rounded(b)) : b);
        Vd y(m * n), pre(m * n);
        ref::linear_forward_epilogue(y.data(), pre.data(), to_d(x).data(), to_d(w).data(),
                                     bias ? bd.data() : nullptr, gelu, m, k, n);
        if (plus)
          for (int i = 0; i < m * n; ++i) y[i] += res[i];
        Buffer<float> Xf = put(x), Wf = put(w), Bb = put(b), Res = put(res);
        Buffer<bf16> Xh = put(rounded(x)), Wh = put(rounded(w)), Bh = put(rounded(b));
        Buffer<float> Y = zeros<float>(m * n), P = zeros<float>(m * n);
        Buffer<bf16> Yh = zeros<bf16>(m * n);
        ops::LinearEpilogue e;
        e.bias = bias ? Bb.data() : nullptr;
        e.gelu = gelu;
        e.pre_gelu = gelu ? P.data() : nullptr;
        e.y_bf16 = out_bf16 ? Yh.data() : nullptr;
        e.residual = plus ? Res.data() : nullptr;
        e.bias_bf16 = bias ? Bh.data() : nullptr;  // used only where low_bias
        // On the emulator the bias (and the GELU after it, where n allows)
        // runs inside cuBLASLt's product: an add_bias kernel would fault.
        // (fp32 operands with a bf16 output are no product cuBLASLt offers: kernels.)
        const bool bias_fused =
            GetParam().emulated && bias && (!gelu || n % 8 == 0) && (low || !low_bias);
        if (bias_fused) emu::fault_next_launch("add_bias");
        be().linear_forward_fused(Y.data(), low ? Operand(Xh.data()) : Operand(Xf.data()),
                                  low ? Operand(Wh.data()) : Operand(Wf.data()), {m, k, n}, e);
        if (bias_fused) emu::fault_next_launch("");  // disarmed, had it not fired
        const std::string p =
            str(low ? " bf16" : " fp32", " n", n, bias ? " +bias" : "", gelu ? " +gelu" : "",
                plus ? " +residual" : "", out_bf16 ? " ->bf16" : "");
        if (out_bf16)
          expect_close(widened(get(Yh)), y, 4e-3, "linear epilogue y_bf16" + p);
        else
          expect_close(get(Y), y, 1e-4, "linear epilogue y" + p);
        if (gelu) expect_close(get(P), pre, 1e-4, "linear epilogue pre_gelu" + p);
      }
}

// GEMM tuning (Backend::set_gemm_tuning): the first product of each shape
// tries the backend's ways (on a GPU, cuBLASLt's picks) and keeps the fastest
// that gives the default's bits. A tuned backend gives an untuned one's bits,
// at its trial and after it, in products that overwrite their output, one
// that adds into it (its C put back for every way tried), a long sum the
// default splits, and the forward that writes GELU's input too; each shape
// is reported with its ways, the default and the way kept timed.
TEST_P(BackendOps, GemmTuningKeepsTheBits) {
  struct Case {
    bool ta, low;
    int M, N, K;
    float beta;
  };
  const Case cases[] = {{false, false, 37, 29, 83, 0.0f},
                        {true, true, 24, 40, 4096, 1.0f},  // a weight gradient added into
                        {true, false, 24, 40, 4096, 0.0f}};
  // One case's product on backend b: C, and for the last "case", the
  // forward's y and GELU input.
  auto product = [](Backend& b, const Case& c) {
    Vf a = randn(c.M * c.K, 61), w = randn(c.K * c.N, 62), init = randn(c.M * c.N, 63);
    if (c.low) a = widened(rounded(a)), w = widened(rounded(w));
    auto up = [&b](const auto& h) {
      auto d = b.alloc<typename std::decay_t<decltype(h)>::value_type>(int64_t(h.size()));
      b.upload(d.data(), h.data(), h.size() * sizeof(h[0]));
      return d;
    };
    Buffer<float> Af = up(a), Wf = up(w), C = up(init);
    Buffer<bf16> Ah = up(rounded(a)), Wh = up(rounded(w));
    b.gemm(c.ta, false, c.M, c.N, c.K, 1.0f, c.low ? Operand(Ah.data()) : Operand(Af.data()),
           c.ta ? c.M : c.K, c.low ? Operand(Wh.data()) : Operand(Wf.data()), c.N, c.beta, C.data(),
           c.N);
    Vf out(init.size());
    b.download(out.data(), C.data(), out.size() * 4);
    return out;
  };
  auto forward = [](Backend& b) {
    const int m = 48, k = 64, n = 40;
    const Vf x = randn(m * k, 64), w = randn(n * k, 65, 0.2), bias = randn(n, 66);
    Buffer<float> X = b.alloc<float>(m * k), W = b.alloc<float>(n * k), Bias = b.alloc<float>(n),
                  Y = b.alloc<float>(m * n), P = b.alloc<float>(m * n);
    b.upload(X.data(), x.data(), x.size() * 4);
    b.upload(W.data(), w.data(), w.size() * 4);
    b.upload(Bias.data(), bias.data(), bias.size() * 4);
    ops::LinearEpilogue e;
    e.bias = Bias.data();
    e.gelu = true;
    e.pre_gelu = P.data();
    b.linear_forward_fused(Y.data(), X.data(), W.data(), {m, k, n}, e);
    Vf out(2 * m * n);
    b.download(out.data(), Y.data(), m * n * 4);
    b.download(out.data() + m * n, P.data(), m * n * 4);
    return out;
  };
  auto same = [](const Vf& x, const Vf& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
  };
  std::unique_ptr<Backend> plain = another_backend();
  be().set_gemm_tuning(true);
  for (const Case& c : cases) {
    const Vf want = product(*plain, c);
    const std::string p = str(c.ta ? " T" : " N", c.M, "x", c.N, "x", c.K, c.low ? " bf16" : "",
                              c.beta != 0.0f ? " added into" : "");
    EXPECT_TRUE(same(product(be(), c), want)) << "at the trial" << p;
    EXPECT_TRUE(same(product(be(), c), want)) << "after the trial" << p;
  }
  const Vf want = forward(*plain);
  EXPECT_TRUE(same(forward(be()), want)) << "the forward with GELU, at the trial";
  EXPECT_TRUE(same(forward(be()), want)) << "the forward with GELU, after the trial";

  const std::vector<ops::GemmChoice> choices = be().gemm_choices();
  int rejected = 0;
  for (const ops::GemmChoice& c : choices) {
    const std::string p = str(" ", c.ta, c.tb, " ", c.M, "x", c.N, "x", c.K);
    ASSERT_FALSE(c.ways.empty()) << p;
    ASSERT_EQ(c.ms.size(), c.ways.size()) << p;
    EXPECT_GE(c.ms[0], 0.0) << "the default is timed" << p;
    const auto kept = std::find(c.ways.begin(), c.ways.end(), c.way);
    ASSERT_NE(kept, c.ways.end()) << p;
    EXPECT_GE(c.ms[size_t(kept - c.ways.begin())], 0.0) << "the way kept is timed" << p;
    rejected += int(std::count(c.ms.begin(), c.ms.end(), -1.0));
  }
  if (GetParam().emulated) {
    // Every shape tried (the forward's among them), each run once more since;
    // the emulated heuristic's picks past the first: other tiles (the same
    // bits), and the long sums unsplit (other bits: rejected).
    EXPECT_EQ(choices.size(), std::size(cases) + 1);
    for (const ops::GemmChoice& c : choices) {
      EXPECT_EQ(c.calls, 1) << c.M << "x" << c.N << "x" << c.K;
      EXPECT_GE(c.ways.size(), 3u) << c.M << "x" << c.N << "x" << c.K;
    }
    EXPECT_EQ(rejected, 2) << "the two long sums' unsplit picks";
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(kCpuTarget), target_name);
INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps, ::testing::ValuesIn(kEmulatedTargets), target_name);
#ifdef DENDRITE_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(kCudaTarget), target_name);
#endif

}  // namespace
}  // namespace dendrite::test
