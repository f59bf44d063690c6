// The op harness: every op of the Backend seam (backend/backend.h), forward
// and backward, on every backend this build has (the CPU always; CUDA when
// built with it, as the `gpu` tests that run where a GPU is found; the CUDA
// backend's code on the CPU emulator of emulated_cuda/ always), in fp32
// and with bf16 operands, against the double-precision oracles of
// ops/reference/ (or the formula, for data movement). Inputs go in with
// upload and results come out with download, as the model moves them.
// Tolerances, as |got - want| <= tol (|want| + rms(want)):
//   fp32 elementwise and norms 1e-5; GEMMs and attention 1e-4 (fp32 sums
//   over up to a few hundred terms; GPUs run them in full fp32 here, no
//   TF32); bf16 operands are rounded on the host first and the oracle reads
//   the rounded values, so the same bounds hold (the rounding is the
//   precision's, not an error); conversions and data movement are exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"
#include "dendrite/ops/reference/attention.h"
#include "dendrite/ops/reference/basic.h"
#include "emulated_cuda/emulated_backend.h"
#include "op_test_support.h"

namespace dendrite::test {
namespace {

using Vb = std::vector<bf16>;

Vb rounded(const Vf& x) {
  Vb out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(x[i]);
  return out;
}
Vf widened(const Vb& x) {
  Vf out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_float(x[i]);
  return out;
}

// Where the ops run: a device's backend, or the CUDA backend on the emulator
// (reversed: its threads, lanes and blocks run from the last, which exposes
// a read of what another thread wrote without a barrier between; blocks > 1:
// that many blocks run together, their threads interleaved at barriers, which
// exposes a block that writes what another block reads or writes).
struct Target {
  Device device;
  bool emulated;
  bool reversed = false;
  int blocks = 1;
};

void PrintTo(const Target& t, std::ostream* os) {
  if (t.emulated)
    *os << "the CUDA backend on the emulator" << (t.reversed ? ", threads reversed" : "")
        << (t.blocks > 1 ? ", blocks interleaved" : "");
  else
    *os << (t.device == Device::kCuda ? "cuda" : "cpu");
}

class BackendOps : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    BackendOptions o;
    o.tf32 = false;  // full fp32 GEMMs: the tolerances above
    if (GetParam().emulated) {
      emu::set_reverse_order(GetParam().reversed);
      emu::set_interleaved_blocks(GetParam().blocks);
    }
    be_ = GetParam().emulated ? make_emulated_cuda_backend(o) : make_backend(GetParam().device, o);
  }
  void TearDown() override {
    if (GetParam().emulated) {
      emu::set_reverse_order(false);
      emu::set_interleaved_blocks(1);
    }
  }
  Backend& be() { return *be_; }
  template <class T>
  Buffer<T> put(const std::vector<T>& h) {
    Buffer<T> b = be_->alloc<T>(int64_t(h.size()));
    be_->upload(b.data(), h.data(), h.size() * sizeof(T));
    return b;
  }
  // Attention forward and backward against the oracle for one shape and precision.
  void check_attention(const ops::AttentionShape& s, bool low) {
    const int rows = s.B * s.T;
    Vf q = randn(rows * s.q_stride, 15), k = randn(rows * s.kv_stride, 16),
       v = randn(rows * s.kv_stride, 17);
    Vf dout = randn(rows * s.out_stride, 18);
    if (low) q = widened(rounded(q)), k = widened(rounded(k)), v = widened(rounded(v));
    // CUDA's bf16 attention runs on the tensor cores: it rounds dO to bf16 (the
    // oracle reads the rounded values), and P and dS too, so its output is
    // within 1e-2 of |want| + rms(want), not 1e-4.
    const bool tensor_cores = low && GetParam().device == Device::kCuda;
    if (tensor_cores) dout = widened(rounded(dout));
    Vf out_want(rows * s.out_stride), lse_want(s.B * s.NH * s.T);
    ref::attention_forward(out_want.data(), lse_want.data(), q.data(), k.data(), v.data(), s);
    Vf dq_want(q.size()), dk_want(k.size()), dv_want(v.size());
    ref::attention_backward(dq_want.data(), dk_want.data(), dv_want.data(), dout.data(), q.data(),
                            k.data(), v.data(), s);
    Buffer<float> Qf = put(q), Kf = put(k), Vf_ = put(v), DO = put(dout);
    Buffer<bf16> Qh = put(rounded(q)), Kh = put(rounded(k)), Vh = put(rounded(v));
    Buffer<float> O = zeros<float>(out_want.size()), L = zeros<float>(lse_want.size());
    Buffer<float> DQ = put(q), DK = put(k), DV = put(v);  // heads' columns overwritten
    const Operand Q = low ? Operand(Qh.data()) : Operand(Qf.data());
    const Operand K = low ? Operand(Kh.data()) : Operand(Kf.data());
    const Operand V = low ? Operand(Vh.data()) : Operand(Vf_.data());
    be().attention_forward(O.data(), L.data(), Q, K, V, s);
    const Vf out = get(O);
    // The backward reads the saved output in the operands' precision (the
    // oracle recomputes it in double).
    Buffer<bf16> Oh = put(rounded(out));
    be().attention_backward(DQ.data(), DK.data(), DV.data(), DO.data(),
                            low ? Operand(Oh.data()) : Operand(O.data()), L.data(), Q, K, V, s);
    const std::string p = str(low ? " bf16" : " fp32", " B", s.B, " T", s.T, " hs", s.hs);
    auto heads = [&](const Vf& got, const Vf& want, int stride, int width, double tol,
                     const std::string& w) {
      Vf g, wv;
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < width; ++j) g.push_back(got[r * stride + j]), wv.push_back(want[r * stride + j]);
      expect_close(g, to_d(wv), tol, w + p);
      if (low) expect_close_norm(g, to_d(wv), 5e-3, w + p);
    };
    heads(out, out_want, s.out_stride, s.NH * s.hs, tensor_cores ? 1e-2 : 1e-4, "attention out");
    expect_close(get(L), to_d(lse_want), 1e-5, "attention lse" + p);
    // bf16: the saved output is rounded (2^-9 relative), and so is D = dO·O
    // with it; D is subtracted from dP, of the same size, so the gradients'
    // few elements that are small differences of such terms lose more than
    // the rest: each element within 4e-2 of |want| + rms(want), and every
    // gradient within 5e-3 as a whole.
    const double tol = low ? 4e-2 : 1e-4;
    heads(get(DQ), dq_want, s.q_stride, s.NH * s.hs, tol, "attention dq");
    heads(get(DK), dk_want, s.kv_stride, s.NKV * s.hs, tol, "attention dk");
    heads(get(DV), dv_want, s.kv_stride, s.NKV * s.hs, tol, "attention dv");
  }
  template <class T>
  Buffer<T> zeros(size_t n) {
    return be_->alloc<T>(int64_t(n));
  }
  template <class T>
  std::vector<T> get(const Buffer<T>& b) {
    std::vector<T> h(b.size());
    be_->download(h.data(), b.data(), h.size() * sizeof(T));
    return h;
  }
  std::unique_ptr<Backend> be_;
};

std::string name(const ::testing::TestParamInfo<Target>& p) {
  if (p.param.emulated)
    return p.param.blocks > 1 ? "emulated_interleaved"
                              : p.param.reversed ? "emulated_reversed" : "emulated";
  return p.param.device == Device::kCuda ? "cuda" : "cpu";
}

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

// Sums over more rows than one block takes (a GPU splits 1100 rows into
// blocks of 512, whose partial sums are added in block order): the norms'
// backwards and the bias gradient against the oracle, dgamma, dbeta and db
// added to (from ones), and the same bits when run again.
TEST_P(BackendOps, ColumnSumsOverManyRowsAreDeterministic) {
  const int m = 1100, c = 20;
  const Vf x = randn(m * c, 61, 2.0, 0.5), g = randn(c, 62, 0.2, 1.0), dy = randn(m * c, 63);
  const Vd xd = to_d(x), gd = to_d(g), dyd = to_d(dy);
  Vd y(m * c), mean(m), rstd(m), dx(m * c), dg(c, 1.0), db(c, 1.0), rdx(m * c), rdg(c, 1.0);
  ref::layernorm_forward(y.data(), mean.data(), rstd.data(), xd.data(), gd.data(), gd.data(), m, c,
                         1e-5);
  ref::layernorm_backward(dx.data(), dg.data(), db.data(), dyd.data(), xd.data(), mean.data(),
                          rstd.data(), gd.data(), m, c);
  Vd rr(m), col(c, 1.0);
  ref::rmsnorm_forward(y.data(), rr.data(), xd.data(), gd.data(), m, c, 1e-5);
  ref::rmsnorm_backward(rdx.data(), rdg.data(), dyd.data(), xd.data(), rr.data(), gd.data(), m, c);
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < c; ++j) col[j] += dyd[r * c + j];
  Buffer<float> X = put(x), G = put(g), DY = put(dy), Y = zeros<float>(m * c);
  Buffer<float> Mean = zeros<float>(m), Rstd = zeros<float>(m), R = zeros<float>(m);
  Buffer<double> S = zeros<double>(2 * m);
  be().layernorm_row_sums(S.data(), X.data(), {m, c, c});
  be().layernorm_apply(Y.data(), Mean.data(), Rstd.data(), S.data(), X.data(), G.data(), G.data(),
                       {m, c, c}, 1e-5f);
  be().layernorm_backward_sums(S.data(), DY.data(), X.data(), Mean.data(), Rstd.data(), G.data(),
                               {m, c, c});
  Buffer<double> RS = zeros<double>(m);
  be().rmsnorm_row_sums(RS.data(), X.data(), {m, c, c});
  be().rmsnorm_apply(Y.data(), R.data(), RS.data(), X.data(), G.data(), {m, c, c}, 1e-5f);
  be().rmsnorm_backward_sums(RS.data(), DY.data(), X.data(), G.data(), {m, c, c});
  std::vector<Vf> runs;
  for (int run = 0; run < 2; ++run) {
    Buffer<float> DX = zeros<float>(m * c), RDX = zeros<float>(m * c);
    Buffer<float> DG = put(Vf(c, 1.0f)), DB = put(Vf(c, 1.0f)), RDG = put(Vf(c, 1.0f)),
                  COL = put(Vf(c, 1.0f));
    be().layernorm_backward_apply(DX.data(), DG.data(), DB.data(), S.data(), DY.data(), X.data(),
                                  Mean.data(), Rstd.data(), G.data(), {m, c, c});
    be().rmsnorm_backward_apply(RDX.data(), RDG.data(), RS.data(), DY.data(), X.data(), R.data(),
                                G.data(), {m, c, c});
    be().add_column_sums(COL.data(), DY.data(), m, c);
    expect_close(get(DX), dx, 1e-5, "layernorm dx, many rows");
    expect_close(get(DG), dg, 1e-5, "layernorm dgamma, many rows");
    expect_close(get(DB), db, 1e-5, "layernorm dbeta, many rows");
    expect_close(get(RDX), rdx, 1e-5, "rmsnorm dx, many rows");
    expect_close(get(RDG), rdg, 1e-5, "rmsnorm dgamma, many rows");
    expect_close(get(COL), col, 1e-5, "column sums, many rows");
    Vf all = get(DG);
    for (const Buffer<float>* b : {&DB, &RDG, &COL}) {
      const Vf v = get(*b);
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4), 0);
}

TEST_P(BackendOps, LayerNormAndRmsNormWholeAndSplit) {
  const int m = 33, c = 96;
  const Vf x = randn(m * c, 8, 2.0, 0.5), g = randn(c, 9, 0.2, 1.0), bt = randn(c, 10, 0.1),
           dy = randn(m * c, 11);
  const Vd xd = to_d(x), gd = to_d(g), btd = to_d(bt), dyd = to_d(dy);
  // LayerNorm
  Vd y(m * c), mean(m), rstd(m), dx(m * c), dg(c, 0.0), db(c, 0.0);
  ref::layernorm_forward(y.data(), mean.data(), rstd.data(), xd.data(), gd.data(), btd.data(), m, c,
                         1e-5);
  ref::layernorm_backward(dx.data(), dg.data(), db.data(), dyd.data(), xd.data(), mean.data(),
                          rstd.data(), gd.data(), m, c);
  Buffer<float> X = put(x), G = put(g), Bt = put(bt), DY = put(dy);
  Buffer<float> Y = zeros<float>(m * c), Mean = zeros<float>(m), Rstd = zeros<float>(m);
  Buffer<float> DX = zeros<float>(m * c), DG = zeros<float>(c), DB = zeros<float>(c);
  Buffer<double> S = zeros<double>(2 * m);
  be().layernorm_row_sums(S.data(), X.data(), {m, c, c});
  be().layernorm_apply(Y.data(), Mean.data(), Rstd.data(), S.data(), X.data(), G.data(), Bt.data(),
                       {m, c, c}, 1e-5f);
  be().layernorm_backward_sums(S.data(), DY.data(), X.data(), Mean.data(), Rstd.data(), G.data(),
                               {m, c, c});
  be().layernorm_backward_apply(DX.data(), DG.data(), DB.data(), S.data(), DY.data(), X.data(),
                                Mean.data(), Rstd.data(), G.data(), {m, c, c});
  expect_close(get(Y), y, 1e-5, "layernorm y");
  expect_close(get(DX), dx, 1e-5, "layernorm dx");
  expect_close(get(DG), dg, 1e-5, "layernorm dgamma");
  expect_close(get(DB), db, 1e-5, "layernorm dbeta");

  // RMSNorm, its width split in two column halves as over X = 2: the row sums
  // of each half added (the all-reduce), then each half applied.
  Vd ry(m * c), rr(m), rdx(m * c), rdg(c, 0.0);
  ref::rmsnorm_forward(ry.data(), rr.data(), xd.data(), gd.data(), m, c, 1e-5);
  ref::rmsnorm_backward(rdx.data(), rdg.data(), dyd.data(), xd.data(), rr.data(), gd.data(), m, c);
  const int h = c / 2;
  Vf got_y(m * c), got_dx(m * c), got_dg(c);
  std::vector<Vf> halves_x(2, Vf(m * h)), halves_dy(2, Vf(m * h));
  for (int p = 0; p < 2; ++p)
    for (int r = 0; r < m; ++r)
      for (int j = 0; j < h; ++j) {
        halves_x[p][r * h + j] = x[r * c + p * h + j];
        halves_dy[p][r * h + j] = dy[r * c + p * h + j];
      }
  std::vector<Buffer<float>> HX, HDY, HG, HY, HDX, HDG;
  Buffer<float> R = zeros<float>(m);
  std::vector<double> sum(m, 0.0), bsum(m, 0.0);
  for (int p = 0; p < 2; ++p) {
    HX.push_back(put(halves_x[p]));
    HDY.push_back(put(halves_dy[p]));
    HG.push_back(put(Vf(g.begin() + p * h, g.begin() + (p + 1) * h)));
    HY.push_back(zeros<float>(m * h));
    HDX.push_back(zeros<float>(m * h));
    HDG.push_back(zeros<float>(h));
    Buffer<double> s = zeros<double>(m);
    be().rmsnorm_row_sums(s.data(), HX[p].data(), {m, h, h});
    const std::vector<double> part = get(s);
    for (int r = 0; r < m; ++r) sum[r] += part[r];
  }
  Buffer<double> S1 = put(sum);
  for (int p = 0; p < 2; ++p) {
    be().rmsnorm_apply(HY[p].data(), R.data(), S1.data(), HX[p].data(), HG[p].data(), {m, h, c},
                       1e-5f);
    Buffer<double> s = zeros<double>(m);
    be().rmsnorm_backward_sums(s.data(), HDY[p].data(), HX[p].data(), HG[p].data(), {m, h, h});
    const std::vector<double> part = get(s);
    for (int r = 0; r < m; ++r) bsum[r] += part[r];
  }
  Buffer<double> S2 = put(bsum);
  for (int p = 0; p < 2; ++p) {
    be().rmsnorm_backward_apply(HDX[p].data(), HDG[p].data(), S2.data(), HDY[p].data(),
                                HX[p].data(), R.data(), HG[p].data(), {m, h, c});
    const Vf yh = get(HY[p]), dxh = get(HDX[p]), dgh = get(HDG[p]);
    for (int r = 0; r < m; ++r)
      for (int j = 0; j < h; ++j) {
        got_y[r * c + p * h + j] = yh[r * h + j];
        got_dx[r * c + p * h + j] = dxh[r * h + j];
      }
    for (int j = 0; j < h; ++j) got_dg[p * h + j] = dgh[j];
  }
  expect_close(got_y, ry, 1e-5, "rmsnorm y (split)");
  expect_close(get(R), rr, 1e-5, "rmsnorm rstd (split)");
  expect_close(got_dx, rdx, 1e-5, "rmsnorm dx (split)");
  expect_close(got_dg, rdg, 1e-5, "rmsnorm dgamma (split)");
}

TEST_P(BackendOps, ActivationsAndSums) {
  const long n = 5000;
  const Vf x = randn(n, 12, 2.0), u = randn(n, 13), dy = randn(n, 14);
  const Vd xd = to_d(x), ud = to_d(u), dyd = to_d(dy);
  Vd gy(n), gdx(n), sy(n), sdg(n), sdu(n);
  ref::gelu_forward(gy.data(), xd.data(), n);
  ref::gelu_backward(gdx.data(), dyd.data(), xd.data(), n);
  ref::swiglu_forward(sy.data(), xd.data(), ud.data(), n);
  ref::swiglu_backward(sdg.data(), sdu.data(), dyd.data(), xd.data(), ud.data(), n);
  Buffer<float> X = put(x), U = put(u), DY = put(dy), Y = zeros<float>(n), D1 = zeros<float>(n),
                D2 = zeros<float>(n);
  be().gelu_forward(Y.data(), X.data(), n);
  expect_close(get(Y), gy, 1e-5, "gelu");
  be().gelu_backward(D1.data(), DY.data(), X.data(), n);
  expect_close(get(D1), gdx, 1e-5, "gelu backward");
  be().swiglu_forward(Y.data(), X.data(), U.data(), n);
  expect_close(get(Y), sy, 1e-5, "swiglu");
  be().swiglu_backward(D1.data(), D2.data(), DY.data(), X.data(), U.data(), n);
  expect_close(get(D1), sdg, 1e-5, "swiglu dgate");
  expect_close(get(D2), sdu, 1e-5, "swiglu dup");
  Vd sum(n), acc(n);
  for (long i = 0; i < n; ++i) sum[i] = xd[i] + ud[i], acc[i] = sum[i] + dyd[i];
  be().add(Y.data(), X.data(), U.data(), n);
  expect_close(get(Y), sum, 1e-6, "add");
  be().add_inplace(Y.data(), DY.data(), n);
  expect_close(get(Y), acc, 1e-6, "add_inplace");
  double sq = 0;
  for (double v : xd) sq += v * v;
  EXPECT_NEAR(be().sum_squares(X.data(), n), sq, 1e-9 * sq);
  be().scale(X.data(), 0.5f, n);
  Vd half(n);
  for (long i = 0; i < n; ++i) half[i] = 0.5 * xd[i];
  expect_close(get(X), half, 0, "scale");
}

TEST_P(BackendOps, AttentionAndRopeInEitherPrecision) {
  // GQA: 4 query heads share 2 KV heads; rows with strides wider than the heads.
  // Then three tiles of 64 positions (the last partial) at head size 64, and
  // head size 96 (CUDA pads it to 128), with strides that allow 16-byte loads.
  const ops::AttentionShape shapes[] = {{2, 37, 4, 2, 16, 4 * 16 + 8, 2 * 16 + 4, 4 * 16},
                                        {1, 150, 4, 2, 64, 4 * 64, 2 * 64, 4 * 64},
                                        {1, 70, 2, 1, 96, 2 * 96, 96, 2 * 96}};
  for (const ops::AttentionShape& s : shapes)
    for (bool low : {false, true}) check_attention(s, low);
  // Rope: forward then backward is the identity; forward is the oracle's.
  const int B = 2, T = 9, nh = 3, hs = 8, stride = nh * hs + 5;
  const Vf x = randn(B * T * stride, 19);
  Vf want = x;
  ref::rope_forward(want.data(), B, T, nh, hs, stride, {10000.0f});
  Buffer<float> X = put(x);
  be().rope_forward(X.data(), {B, T, nh, hs, stride}, {10000.0f});
  expect_close(get(X), to_d(want), 1e-5, "rope");
  be().rope_backward(X.data(), {B, T, nh, hs, stride}, {10000.0f});
  expect_close(get(X), to_d(x), 1e-5, "rope backward of rope");
}

// The scaled rotary embeddings (Llama 3's and linear), from a position as in
// generation: the oracle's rows, and the CPU op's to the last bit where the
// device rounds as it does (the angles come from one function, ops/rope.h).
TEST_P(BackendOps, ScaledRopeMatchesTheOracle) {
  const ops::RopeSpec specs[] = {{500000.0f, ops::RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 16},
                                 {10000.0f, ops::RopeScaling::kLinear, 4.0f},
                                 {10000.0f}};
  const int B = 2, T = 40, pos0 = 7, nh = 3, hs = 16, stride = nh * hs + 4;
  for (const ops::RopeSpec& r : specs) {
    const Vf x = randn(B * (pos0 + T) * stride, 23);
    Vf want = x;
    ref::rope_forward(want.data(), B, pos0 + T, nh, hs, stride, r);
    Vf tail, tail_want;
    for (int b = 0; b < B; ++b) {
      const int from = (b * (pos0 + T) + pos0) * stride, to = (b + 1) * (pos0 + T) * stride;
      tail.insert(tail.end(), x.begin() + from, x.begin() + to);
      tail_want.insert(tail_want.end(), want.begin() + from, want.begin() + to);
    }
    Buffer<float> X = put(tail);
    be().rope_forward(X.data(), {B, T, nh, hs, stride, pos0}, r);
    const std::string what = "rope " + std::to_string(int(r.scaling));
    expect_close(get(X), to_d(tail_want), 1e-5, what);
    Vf cpu = tail;
    cpu_ops().rope_forward(cpu.data(), {B, T, nh, hs, stride, pos0}, r);
    expect_close(get(X), to_d(cpu), 1e-6, what + " against the CPU op");
    be().rope_backward(X.data(), {B, T, nh, hs, stride}, r);
    cpu_ops().rope_backward(cpu.data(), {B, T, nh, hs, stride}, r);
    expect_close(get(X), to_d(cpu), 1e-6, what + " backward against the CPU op");
  }
}

// Generation: the prompt's rows, then one row at a time, through the cache
// equal the oracle's attention over the whole sequence (the rows at those
// positions), and the cache holds every key and value written.
TEST_P(BackendOps, AttentionOverACacheEqualsTheWholeSequence) {
  const int B = 2, T = 23, NH = 4, NKV = 2, hs = 16, T_cache = 30, p = 17;
  const int qs = NH * hs + 8, kvs = NKV * hs + 4, kvd = NKV * hs;
  const ops::AttentionShape whole{B, T, NH, NKV, hs, qs, kvs, NH * hs};
  const Vf q = randn(B * T * qs, 31), k = randn(B * T * kvs, 32), v = randn(B * T * kvs, 33);
  Vf want(B * T * NH * hs), lse(B * NH * T);
  ref::attention_forward(want.data(), lse.data(), q.data(), k.data(), v.data(), whole);
  Buffer<float> KC = zeros<float>(B * T_cache * kvd), VC = zeros<float>(B * T_cache * kvd);
  Vf got_all(want.size());
  // Rows [t0, t0 + n) of every sequence: the prompt (t0 = 0, n = p), then one at a time.
  for (int t0 = 0; t0 < T; t0 += t0 == 0 ? p : 1) {
    const int n = t0 == 0 ? p : 1;
    auto rows = [&](const Vf& x, int stride) {
      Vf out;
      for (int b = 0; b < B; ++b)
        out.insert(out.end(), x.begin() + (b * T + t0) * stride, x.begin() + (b * T + t0 + n) * stride);
      return out;
    };
    Buffer<float> Q = put(rows(q, qs)), K = put(rows(k, kvs)), V = put(rows(v, kvs));
    Buffer<float> O = zeros<float>(B * n * NH * hs);
    const ops::CachedAttentionShape s{B, n, t0, T_cache, NH, NKV, hs, qs, kvs, NH * hs};
    be().attention_cached(O.data(), Q.data(), K.data(), V.data(), KC.data(), VC.data(), s);
    const Vf o = get(O);
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < n * NH * hs; ++r)
        got_all[(b * T + t0) * NH * hs + r] = o[b * n * NH * hs + r];
  }
  expect_close(got_all, to_d(want), 1e-4, "cached attention");
  const Vf kc = get(KC), vc = get(VC);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < kvd; ++i) {
        ASSERT_EQ(kc[(b * T_cache + t) * kvd + i], k[(b * T + t) * kvs + i]) << b << " " << t;
        ASSERT_EQ(vc[(b * T_cache + t) * kvd + i], v[(b * T + t) * kvs + i]) << b << " " << t;
      }
  // More rows than the cache holds are refused.
  Buffer<float> Q1 = put(randn(B * qs, 34)), K1 = put(randn(B * kvs, 35)), O1 = zeros<float>(B * NH * hs);
  EXPECT_THROW(be().attention_cached(O1.data(), Q1.data(), K1.data(), K1.data(), KC.data(), VC.data(),
                                     {B, 1, T_cache, T_cache, NH, NKV, hs, qs, kvs, NH * hs}),
               Error);
  // Rope from position pos0 rotates as the rows at those positions of a longer sequence.
  const int Tr = 11, pos0 = 6, n = Tr - pos0, nh = 3, rs = nh * hs + 2;
  const Vf x = randn(B * Tr * rs, 36);
  Vf long_want = x;
  ref::rope_forward(long_want.data(), B, Tr, nh, hs, rs, {10000.0f});
  Vf tail, tail_want;
  for (int b = 0; b < B; ++b) {
    tail.insert(tail.end(), x.begin() + (b * Tr + pos0) * rs, x.begin() + (b * Tr + Tr) * rs);
    tail_want.insert(tail_want.end(), long_want.begin() + (b * Tr + pos0) * rs,
                     long_want.begin() + (b * Tr + Tr) * rs);
  }
  Buffer<float> X = put(tail);
  be().rope_forward(X.data(), {B, n, nh, hs, rs, pos0}, {10000.0f});
  expect_close(get(X), to_d(tail_want), 1e-5, "rope from a position");
}

TEST_P(BackendOps, ConversionsAreExactToTheRoundingRule) {
  Vf x = randn(3000, 20, 100.0);
  const float specials[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* a tie */, 1.01171875f /* a tie */,
                            1e-40f /* denormal */, -1e-40f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 3.4e38f};
  for (float f : specials) x.push_back(f);
  Buffer<float> X = put(x), Back = zeros<float>(x.size());
  Buffer<bf16> H = zeros<bf16>(x.size());
  be().to_bf16(H.data(), X.data(), int64_t(x.size()));
  be().to_float(Back.data(), H.data(), int64_t(x.size()));
  const Vb got = get(H);
  const Vf back = get(Back);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(got[i].bits, to_bf16(x[i]).bits) << "to_bf16 of " << x[i];
    const float w = to_float(got[i]);
    ASSERT_EQ(std::memcmp(&back[i], &w, 4), 0) << "to_float of " << x[i];
  }
}

// The fused ops against the separate ops they stand for, on the same
// backend: the same bits (the separate ops are checked against the oracles
// above). c = 20 takes the GPU's 4-wide path, 22 the scalar one; 1100 rows
// span three blocks of a column sum.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST_P(BackendOps, FusedOpsGiveTheBitsOfTheSeparateOps) {
  const int m = 1100;
  for (int c : {20, 22}) {
    const std::string p = str(" c=", c);
    const Vf x = randn(m * c, 71, 2.0, 0.5), g = randn(c, 72, 0.2, 1.0), b = randn(c, 73, 0.1);
    const Vf dy = randn(m * c, 74), res = randn(m * c, 75), ones(c, 1.0f);
    Buffer<float> X = put(x), G = put(g), Bt = put(b), DY = put(dy), Mean = zeros<float>(m),
                  Rstd = zeros<float>(m), Y = zeros<float>(m * c), Scratch = zeros<float>(m * c);
    Buffer<double> S = zeros<double>(2 * m);
    Buffer<bf16> Yh = zeros<bf16>(m * c), Want = zeros<bf16>(m * c);
    be().layernorm_row_sums(S.data(), X.data(), {m, c, c});
    be().layernorm_apply(Y.data(), Mean.data(), Rstd.data(), S.data(), X.data(), G.data(),
                         Bt.data(), {m, c, c}, 1e-5f);
    be().to_bf16(Want.data(), Y.data(), int64_t(m) * c);
    be().layernorm_apply_bf16(Yh.data(), Scratch.data(), Mean.data(), Rstd.data(), S.data(),
                              X.data(), G.data(), Bt.data(), {m, c, c}, 1e-5f);
    EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "layernorm_apply_bf16" << p;
    Buffer<double> RowS = zeros<double>(2 * m);
    Buffer<float> RMean = zeros<float>(m), RRstd = zeros<float>(m);
    be().layernorm_rows_bf16(RowS.data(), Yh.data(), Scratch.data(), RMean.data(), RRstd.data(),
                             X.data(), G.data(), Bt.data(), {m, c, c}, 1e-5f);
    EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "layernorm_rows_bf16 y" << p;
    EXPECT_TRUE(same_bits(get(RowS), get(S))) << "layernorm_rows_bf16 sums" << p;
    EXPECT_TRUE(same_bits(get(RMean), get(Mean))) << "layernorm_rows_bf16 mean" << p;
    EXPECT_TRUE(same_bits(get(RRstd), get(Rstd))) << "layernorm_rows_bf16 rstd" << p;

    // the backward added to a residual's gradient, gain and bias gradients from ones
    be().layernorm_backward_sums(S.data(), DY.data(), X.data(), Mean.data(), Rstd.data(), G.data(),
                                 {m, c, c});
    Buffer<float> DX = zeros<float>(m * c), Res = put(res), Fused = put(res);
    Buffer<float> DG = put(ones), DB = put(ones), FDG = put(ones), FDB = put(ones);
    be().layernorm_backward_apply(DX.data(), DG.data(), DB.data(), S.data(), DY.data(), X.data(),
                                  Mean.data(), Rstd.data(), G.data(), {m, c, c});
    be().add_inplace(Res.data(), DX.data(), long(m) * c);
    be().layernorm_backward_apply_add(Fused.data(), Scratch.data(), FDG.data(), FDB.data(),
                                      S.data(), DY.data(), X.data(), Mean.data(), Rstd.data(),
                                      G.data(), {m, c, c});
    EXPECT_TRUE(same_bits(get(Fused), get(Res))) << "layernorm_backward_apply_add dres" << p;
    EXPECT_TRUE(same_bits(get(FDG), get(DG))) << "layernorm_backward_apply_add dgamma" << p;
    EXPECT_TRUE(same_bits(get(FDB), get(DB))) << "layernorm_backward_apply_add dbeta" << p;

    // a bias gradient with its output gradient rounded
    Buffer<float> Col = put(ones), FCol = put(ones);
    be().to_bf16(Want.data(), DY.data(), int64_t(m) * c);
    be().add_column_sums(Col.data(), DY.data(), m, c);
    be().to_bf16_column_sums(Yh.data(), FCol.data(), DY.data(), m, c);
    EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "to_bf16_column_sums out" << p;
    EXPECT_TRUE(same_bits(get(FCol), get(Col))) << "to_bf16_column_sums db" << p;
  }
  // dlogits rounded to bf16, over a vocabulary part with padding ids and a zero weight
  const int rows = 19, V = 61, Vloc = 32, v0 = 32;
  const Vf logits = randn(rows * Vloc, 76, 3.0), lse = randn(rows, 77, 0.5, 4.0);
  Vf weight(rows, 1.0f);
  weight[3] = 0.0f, weight[7] = 0.5f;
  Buffer<float> Lg = put(logits), Lf = put(logits), Lse = put(lse), Wt = put(weight);
  Buffer<int32_t> Tg = put(random_tokens(rows, V, 78));
  Buffer<bf16> Dh = zeros<bf16>(rows * Vloc), Want = zeros<bf16>(rows * Vloc);
  be().ce_dlogits(Lg.data(), Lse.data(), Tg.data(), Wt.data(), 17.5, {rows, Vloc, v0, V});
  be().to_bf16(Want.data(), Lg.data(), int64_t(rows) * Vloc);
  be().ce_dlogits_bf16(Dh.data(), Lf.data(), Lse.data(), Tg.data(), Wt.data(), 17.5,
                       {rows, Vloc, v0, V});
  EXPECT_TRUE(same_bits(get(Dh), get(Want))) << "ce_dlogits_bf16";

  // attention's output in bf16: 2 sequences of 37 (a partial tile), 4 heads of 16 over 2 kv heads
  const ops::AttentionShape s{2, 37, 4, 2, 16, 64, 32, 64};
  const int qkv_rows = s.B * s.T;
  Buffer<bf16> Q = put(rounded(randn(qkv_rows * s.q_stride, 79))),
               K = put(rounded(randn(qkv_rows * s.kv_stride, 80))),
               Vv = put(rounded(randn(qkv_rows * s.kv_stride, 81)));
  Buffer<float> O = zeros<float>(qkv_rows * s.out_stride),
                Os = zeros<float>(qkv_rows * s.out_stride), L = zeros<float>(s.B * s.NH * s.T),
                Ls = zeros<float>(s.B * s.NH * s.T);
  Buffer<bf16> Oh = zeros<bf16>(qkv_rows * s.out_stride),
               OWant = zeros<bf16>(qkv_rows * s.out_stride);
  be().attention_forward(O.data(), L.data(), Q.data(), K.data(), Vv.data(), s);
  be().to_bf16(OWant.data(), O.data(), int64_t(qkv_rows) * s.out_stride);
  be().attention_forward_bf16(Oh.data(), Os.data(), Ls.data(), Q.data(), K.data(), Vv.data(), s);
  EXPECT_TRUE(same_bits(get(Oh), get(OWant))) << "attention_forward_bf16 out";
  EXPECT_TRUE(same_bits(get(Ls), get(L))) << "attention_forward_bf16 lse";
}

TEST_P(BackendOps, CrossEntropyPiecesMatchTheSoftmaxLoss) {
  const int rows = 19, V = 61, Vp = 64;
  const Vf logits = randn(rows * Vp, 21, 3.0);
  std::vector<int32_t> targets = random_tokens(rows, V, 22);
  Vf weight(rows, 1.0f);
  weight[3] = 0.0f, weight[7] = 0.5f;
  Vd lg(rows * V);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < V; ++j) lg[r * V + j] = logits[r * Vp + j];
  Vd dl(rows * V);
  const double denom = 17.5;
  const double loss =
      ref::softmax_cross_entropy(dl.data(), lg.data(), targets.data(), weight.data(), denom, rows, V);
  // The vocabulary in two parts of 32 (as over Y = 2), stats combined.
  Buffer<float> Lg = put(logits), Wt = put(weight);
  Buffer<int32_t> Tg = put(targets);
  Vf gathered(2 * rows * 2);
  std::vector<Buffer<float>> parts;
  for (int p = 0; p < 2; ++p) {
    Vf part(rows * 32);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < 32; ++j) part[r * 32 + j] = logits[r * Vp + p * 32 + j];
    parts.push_back(put(part));
    Buffer<float> st = zeros<float>(2 * rows);
    be().ce_local_stats(st.data(), parts[p].data(), Tg.data(), Wt.data(), {rows, 32, p * 32, V});
    const Vf sv = get(st);
    std::copy(sv.begin(), sv.end(), gathered.begin() + p * rows * 2);
  }
  Buffer<float> Ga = put(gathered), Lse = zeros<float>(rows);
  // The loss is added to an accumulator in the backend's memory: twice here.
  const double before = 7.25;
  Buffer<double> Total = put(std::vector<double>{before});
  be().ce_combine(Lse.data(), Ga.data(), Wt.data(), rows, 2, Total.data());
  const double got = (get(Total)[0] - before) / denom;
  EXPECT_NEAR(got, loss, 1e-5 * std::fabs(loss));
  be().ce_combine(Lse.data(), Ga.data(), Wt.data(), rows, 2, Total.data());
  EXPECT_NEAR((get(Total)[0] - before) / denom, 2 * loss, 2e-5 * std::fabs(loss));
  for (int p = 0; p < 2; ++p) {
    be().ce_dlogits(parts[p].data(), Lse.data(), Tg.data(), Wt.data(), denom,
                    {rows, 32, p * 32, V});
    const Vf d = get(parts[p]);
    Vd want(rows * 32, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < 32; ++j)
        if (p * 32 + j < V) want[r * 32 + j] = dl[r * V + p * 32 + j];
    expect_close(d, want, 1e-5, str("ce dlogits part ", p));
  }
  // The gathered parts in id order, padding dropped.
  Buffer<float> Out = zeros<float>(rows * V);
  Vf part_major(rows * Vp);
  for (int p = 0; p < 2; ++p)
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < 32; ++j) part_major[p * rows * 32 + r * 32 + j] = logits[r * Vp + p * 32 + j];
  Buffer<float> PM = put(part_major);
  be().interleave_vocab_parts(Out.data(), PM.data(), {2, rows, 32, V});
  expect_close(get(Out), lg, 0, "interleave_vocab_parts");
}

TEST_P(BackendOps, EmbeddingsInRangesChunksAndPositions) {
  const int B = 3, T = 7, C = 24, V = 40, m = B * T;
  const Vf wte = randn(V * C, 23), wpe = randn(T * C, 24), dout = randn(m * C, 25);
  const std::vector<int32_t> tokens = random_tokens(m, V, 26);
  Vd want(m * C), dwte(V * C, 0.0), dwpe(T * C, 0.0);
  const Vd wted = to_d(wte), wped = to_d(wpe), doutd = to_d(dout);
  ref::embedding_forward(want.data(), tokens.data(), wted.data(), wped.data(), B, T, C);
  ref::embedding_backward(dwte.data(), dwpe.data(), doutd.data(), tokens.data(), B, T, C);
  Buffer<int32_t> Tk = put(tokens);
  Buffer<float> Out = zeros<float>(m * C), Wpe = put(wpe), Do = put(dout);
  // The vocabulary in two ranges of 20 rows, summed (as over Y = 2).
  Vf sum(m * C, 0.0f), dw(V * C);
  for (int p = 0; p < 2; ++p) {
    Buffer<float> W = put(Vf(wte.begin() + p * 20 * C, wte.begin() + (p + 1) * 20 * C));
    be().embedding_range_forward(Out.data(), Tk.data(), W.data(), {p * 20, 20, m, C});
    const Vf o = get(Out);
    for (int i = 0; i < m * C; ++i) sum[i] += o[i];
    Buffer<float> DW = zeros<float>(20 * C);
    be().embedding_range_backward(DW.data(), Do.data(), Tk.data(), {p * 20, 20, m, C});
    const Vf d = get(DW);
    std::copy(d.begin(), d.end(), dw.begin() + p * 20 * C);
  }
  Buffer<float> Sum = put(sum);
  be().position_add(Sum.data(), Wpe.data(), {m, T, C});
  expect_close(get(Sum), want, 1e-6, "embedding + positions");
  expect_close(dw, dwte, 1e-6, "embedding backward");
  Buffer<float> DP = zeros<float>(T * C);
  be().position_backward(DP.data(), Do.data(), {m, T, C});
  expect_close(get(DP), dwpe, 1e-6, "position backward");
  // The whole table in three uneven chunks (as over Z = 3), bf16 storage.
  const Vb low = rounded(wte);
  const Vf lw = widened(low);
  const Vd lwd = to_d(lw);
  Vd want_low(m * C);
  ref::embedding_forward(want_low.data(), tokens.data(), lwd.data(), nullptr, B, T, C);
  const int64_t bounds[] = {0, 301, 650, int64_t(V) * C};
  Vf csum(m * C, 0.0f), cdw(V * C, 0.0f);
  for (int p = 0; p < 3; ++p) {
    const int64_t c0 = bounds[p], n = bounds[p + 1] - bounds[p];
    Buffer<bf16> Ch = put(Vb(low.begin() + c0, low.begin() + c0 + n));
    be().embedding_chunk_forward(Out.data(), Tk.data(), Ch.data(), {c0, n}, {0, V, m, C});
    const Vf o = get(Out);
    for (int i = 0; i < m * C; ++i) csum[i] += o[i];
    Buffer<float> DC = zeros<float>(n);
    be().embedding_chunk_backward(DC.data(), Do.data(), Tk.data(), {c0, n}, {0, V, m, C});
    const Vf d = get(DC);
    std::copy(d.begin(), d.end(), cdw.begin() + c0);
  }
  expect_close(csum, want_low, 0, "embedding in chunks (bf16)");
  expect_close(cdw, dwte, 1e-6, "embedding backward in chunks");
}

// The LM head's chunk rows: 256 on the CPU; on a GPU a multiple of 256 from
// 256 to 8192, fewer for wider rows, from the device's memory.
TEST_P(BackendOps, LmHeadChunkRowsFollowTheDevicesMemory) {
  const int64_t narrow = 64, wide = int64_t(1) << 40;
  if (GetParam().device == Device::kCpu && !GetParam().emulated) {
    EXPECT_EQ(be().lm_head_chunk_rows(narrow), 256);
    EXPECT_EQ(be().lm_head_chunk_rows(wide), 256);
    return;
  }
  const int64_t budget = be().device_capacity_bytes() / 64;
  ASSERT_GT(budget, 0);
  for (int64_t row : {narrow, int64_t(201236), int64_t(301828), wide}) {
    const int rows = be().lm_head_chunk_rows(row);
    EXPECT_EQ(rows % 256, 0) << row;
    EXPECT_GE(rows, 256) << row;
    EXPECT_LE(rows, 8192) << row;
    if (rows > 256) {
      EXPECT_LE(int64_t(rows) * row, budget) << row;
    }
    if (rows < 8192) {
      EXPECT_GT(int64_t(rows + 256) * row, budget) << row;
    }
  }
  EXPECT_EQ(be().lm_head_chunk_rows(wide), 256);
}

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

TEST_P(BackendOps, BackwardsAreDeterministic) {
  // The same inputs twice give the same bits (no atomics in any sum).
  const ops::AttentionShape s{2, 64, 4, 2, 32, 128, 64, 128};
  const int rows = s.B * s.T;
  const Vf q = randn(rows * 128, 35), k = randn(rows * 64, 36), v = randn(rows * 64, 37),
           dout = randn(rows * 128, 38);
  Buffer<float> Q = put(q), K = put(k), V = put(v), DO = put(dout), O = zeros<float>(rows * 128),
                L = zeros<float>(s.B * s.NH * s.T);
  be().attention_forward(O.data(), L.data(), Q.data(), K.data(), V.data(), s);
  std::vector<Vf> runs;
  for (int i = 0; i < 2; ++i) {
    Buffer<float> DQ = zeros<float>(rows * 128), DK = zeros<float>(rows * 64),
                  DV = zeros<float>(rows * 64);
    be().attention_backward(DQ.data(), DK.data(), DV.data(), DO.data(), O.data(), L.data(),
                            Q.data(), K.data(), V.data(), s);
    Vf all = get(DQ), dk = get(DK), dv = get(DV);
    all.insert(all.end(), dk.begin(), dk.end());
    all.insert(all.end(), dv.begin(), dv.end());
    const int C = 32, Vv = 50;
    const std::vector<int32_t> tokens = random_tokens(rows, 5, 39);  // many repeats
    Buffer<int32_t> Tk = put(tokens);
    Buffer<float> DW = zeros<float>(Vv * C), Dout = put(randn(rows * C, 40));
    be().embedding_range_backward(DW.data(), Dout.data(), Tk.data(), {0, Vv, rows, C});
    const Vf dw = get(DW);
    all.insert(all.end(), dw.begin(), dw.end());
    runs.push_back(all);
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(Target{Device::kCpu, false, false}), name);
INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps,
                         ::testing::Values(Target{Device::kCuda, true, false},
                                           Target{Device::kCuda, true, true},
                                           Target{Device::kCuda, true, false, 64}),
                         name);
#ifdef DENDRITE_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(Target{Device::kCuda, false, false}), name);
#endif

}  // namespace
}  // namespace dendrite::test
