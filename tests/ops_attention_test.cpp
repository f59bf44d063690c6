// Tests of the CPU attention, rotary embedding and LM-head cross-entropy ops
// against the naive oracles in dendrite/ops/reference and by central finite
// differences. The LM head runs as the model runs it on one rank: the GEMM
// ops and the cross-entropy pieces in chunks of rows (test::lm_head_loss).
// B batch, T sequence, NH/NKV query/KV heads, hs head size; m rows,
// C channels, V vocabulary, Vp padded vocabulary.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"
#include "dendrite/ops/attention.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/reference/attention.h"
#include "op_test_support.h"

namespace dendrite {
namespace {

using ops::AttentionShape;

std::vector<float> randn(long n, uint64_t stream, float std = 1.0f) {
  std::vector<float> v(n);
  for (long i = 0; i < n; ++i) v[i] = std * static_cast<float>(random_normal(1234, stream, i));
  return v;
}

// Runs the enclosing scope on n OpenMP threads. Finite differences call the
// ops thousands of times on tiny inputs, where a parallel region per call on a
// busy machine costs more than the arithmetic.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ---------------------------------------------------------------- attention

struct AttnCase {
  int B, T, NH, NKV, hs;
  bool fused;  // q, k, v as slices of one [rows, (NH+2NKV)hs + pad] buffer
  int pad;     // extra floats at the end of each qkv / out row
};

std::string case_name(const testing::TestParamInfo<AttnCase>& info) {
  const AttnCase& c = info.param;
  return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "NH" + std::to_string(c.NH) +
         "NKV" + std::to_string(c.NKV) + "hs" + std::to_string(c.hs) + (c.fused ? "fused" : "") +
         "pad" + std::to_string(c.pad);
}

constexpr float kSentinel = 777.0f;

// Inputs and layout of one case. In the fused layout q, k and v live in one
// buffer; otherwise in three, each row followed by `pad` unused floats.
struct AttnData {
  AttentionShape s;
  long rows;
  std::vector<float> q, k, v;  // storage (k, v empty when fused)
  long k_off = 0, v_off = 0;   // offsets of k and v inside their storage
  std::vector<float> dout;     // [rows, out_stride]

  explicit AttnData(const AttnCase& c) {
    rows = static_cast<long>(c.B) * c.T;
    s = {c.B, c.T, c.NH, c.NKV, c.hs, 0, 0, c.NH * c.hs + c.pad};
    if (c.fused) {
      s.q_stride = s.kv_stride = (c.NH + 2 * c.NKV) * c.hs + c.pad;
      k_off = static_cast<long>(c.NH) * c.hs;
      v_off = static_cast<long>(c.NH + c.NKV) * c.hs;
      q = randn(rows * s.q_stride, 1);
    } else {
      s.q_stride = c.NH * c.hs + c.pad;
      s.kv_stride = c.NKV * c.hs + c.pad;
      q = randn(rows * s.q_stride, 1);
      k = randn(rows * s.kv_stride, 2);
      v = randn(rows * s.kv_stride, 3);
    }
    dout = randn(rows * s.out_stride, 4);
  }
  bool fused() const { return k.empty(); }
  float* qp() { return q.data(); }
  float* kp() { return (fused() ? q.data() : k.data()) + k_off; }
  float* vp() { return (fused() ? q.data() : v.data()) + v_off; }
  // A gradient buffer shaped like the inputs, full of sentinels.
  std::vector<float> grad_like(const std::vector<float>& x) const {
    return std::vector<float>(x.size(), kSentinel);
  }
};

// Columns used..stride-1 of every row (past all heads) still hold the sentinel.
void expect_untouched(const std::vector<float>& buf, int stride, int used, long rows) {
  for (long r = 0; r < rows; ++r)
    for (int j = used; j < stride; ++j) ASSERT_EQ(buf[r * stride + j], kSentinel) << r << "," << j;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size());
  const float scale = std::max(1.0f, max_abs(want));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * scale) << what << " element " << i;
}

class AttentionTest : public testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, ForwardMatchesReference) {
  AttnData d(GetParam());
  const AttentionShape& s = d.s;
  std::vector<float> out(d.rows * s.out_stride, kSentinel), lse(s.B * s.NH * s.T);
  std::vector<float> out_ref(out.size(), kSentinel), lse_ref(lse.size());
  test::cpu_ops().attention_forward(out.data(), lse.data(), d.qp(), d.kp(), d.vp(), s);
  ref::attention_forward(out_ref.data(), lse_ref.data(), d.qp(), d.kp(), d.vp(), s);
  expect_near_all(out, out_ref, 2e-5f, "out");
  expect_near_all(lse, lse_ref, 2e-5f, "lse");
  expect_untouched(out, s.out_stride, s.NH * s.hs, d.rows);
}

TEST_P(AttentionTest, BackwardMatchesReference) {
  AttnData d(GetParam());
  const AttentionShape& s = d.s;
  std::vector<float> out(d.rows * s.out_stride), lse(s.B * s.NH * s.T);
  test::cpu_ops().attention_forward(out.data(), lse.data(), d.qp(), d.kp(), d.vp(), s);
  // Gradients in the same layout as the inputs (fused or three buffers).
  std::vector<float> gq = d.grad_like(d.q), gk = d.grad_like(d.k), gv = d.grad_like(d.v);
  std::vector<float> rq = gq, rk = gk, rv = gv;
  auto ptrs = [&](std::vector<float>& a, std::vector<float>& b, std::vector<float>& c) {
    return std::vector<float*>{a.data(), (d.fused() ? a.data() : b.data()) + d.k_off,
                               (d.fused() ? a.data() : c.data()) + d.v_off};
  };
  auto g = ptrs(gq, gk, gv), r = ptrs(rq, rk, rv);
  test::cpu_ops().attention_backward(g[0], g[1], g[2], d.dout.data(), out.data(), lse.data(),
                                     d.qp(), d.kp(), d.vp(), s);
  ref::attention_backward(r[0], r[1], r[2], d.dout.data(), d.qp(), d.kp(), d.vp(), s);
  expect_near_all(gq, rq, 5e-5f, "dq (or fused dqkv)");
  expect_near_all(gk, rk, 5e-5f, "dk");
  expect_near_all(gv, rv, 5e-5f, "dv");
  if (d.fused()) {
    expect_untouched(gq, s.q_stride, (s.NH + 2 * s.NKV) * s.hs, d.rows);
  } else {
    expect_untouched(gq, s.q_stride, s.NH * s.hs, d.rows);
    expect_untouched(gk, s.kv_stride, s.NKV * s.hs, d.rows);
  }
}

// Large scores: nearly one-hot softmax rows, most exponentials underflow.
TEST(Attention, PeakedScoresMatchReference) {
  AttnData d({2, 37, 4, 2, 32, false, 0});
  for (float& x : d.q) x *= 25.0f;
  const AttentionShape& s = d.s;
  std::vector<float> out(d.rows * s.out_stride), lse(s.B * s.NH * s.T);
  std::vector<float> out_ref(out.size()), lse_ref(lse.size());
  test::cpu_ops().attention_forward(out.data(), lse.data(), d.qp(), d.kp(), d.vp(), s);
  ref::attention_forward(out_ref.data(), lse_ref.data(), d.qp(), d.kp(), d.vp(), s);
  expect_near_all(out, out_ref, 2e-5f, "out");
  expect_near_all(lse, lse_ref, 2e-6f, "lse");  // relative to max |lse| (~100)
  std::vector<float> dq(d.q.size()), dk(d.k.size()), dv(d.v.size());
  std::vector<float> rq(dq.size()), rk(dk.size()), rv(dv.size());
  test::cpu_ops().attention_backward(dq.data(), dk.data(), dv.data(), d.dout.data(), out.data(),
                                     lse.data(), d.qp(), d.kp(), d.vp(), s);
  ref::attention_backward(rq.data(), rk.data(), rv.data(), d.dout.data(), d.qp(), d.kp(), d.vp(),
                          s);
  expect_near_all(dq, rq, 1e-4f, "dq");
  expect_near_all(dk, rk, 1e-4f, "dk");
  expect_near_all(dv, rv, 1e-4f, "dv");
}

// Every (b, h) pair and every KV head is owned by one thread, so the result
// must not depend on the thread count, bit for bit.
TEST_P(AttentionTest, DeterministicAcrossThreadCounts) {
  AttnData d(GetParam());
  const AttentionShape& s = d.s;
  auto run = [&](int threads) {
    ThreadCount guard(threads);
    std::vector<float> out(d.rows * s.out_stride), lse(s.B * s.NH * s.T);
    test::cpu_ops().attention_forward(out.data(), lse.data(), d.qp(), d.kp(), d.vp(), s);
    std::vector<float> gq = d.grad_like(d.q), gk = d.grad_like(d.k), gv = d.grad_like(d.v);
    float* dk = (d.fused() ? gq.data() : gk.data()) + d.k_off;
    float* dv = (d.fused() ? gq.data() : gv.data()) + d.v_off;
    test::cpu_ops().attention_backward(gq.data(), dk, dv, d.dout.data(), out.data(), lse.data(),
                                       d.qp(), d.kp(), d.vp(), s);
    out.insert(out.end(), gq.begin(), gq.end());
    out.insert(out.end(), gk.begin(), gk.end());
    out.insert(out.end(), gv.begin(), gv.end());
    return out;
  };
  EXPECT_EQ(run(1), run(3));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    testing::Values(AttnCase{2, 16, 3, 3, 16, false, 0},  // MHA, T one column block
                    AttnCase{2, 13, 2, 2, 64, false, 3},  // MHA, GPT-2 hs, odd T, padded rows
                    AttnCase{2, 13, 4, 2, 8, true, 0},    // GQA 2:1, fused qkv, hs padded to 16
                    AttnCase{1, 13, 6, 1, 64, true, 5},   // GQA 6:1 (MQA), fused, padded
                    AttnCase{1, 9, 4, 2, 128, false, 0},  // Llama hs
                    AttnCase{3, 1, 2, 1, 6, true, 2}),    // T = 1, hs 6
    case_name);

// L = sum(dout * out) in double; central differences on q, k and v.
double attention_loss(AttnData& d) {
  std::vector<float> out(d.rows * d.s.out_stride), lse(d.s.B * d.s.NH * d.s.T);
  test::cpu_ops().attention_forward(out.data(), lse.data(), d.qp(), d.kp(), d.vp(), d.s);
  double L = 0.0;
  for (long r = 0; r < d.rows; ++r)
    for (int j = 0; j < d.s.NH * d.s.hs; ++j)
      L += static_cast<double>(d.dout[r * d.s.out_stride + j]) * out[r * d.s.out_stride + j];
  return L;
}

void check_attention_finite_differences(const AttnCase& c) {
  AttnData d(c);
  ASSERT_TRUE(d.fused());
  const AttentionShape& s = d.s;
  std::vector<float> out(d.rows * s.out_stride), lse(s.B * s.NH * s.T);
  test::cpu_ops().attention_forward(out.data(), lse.data(), d.qp(), d.kp(), d.vp(), s);
  std::vector<float> g(d.q.size(), kSentinel);
  test::cpu_ops().attention_backward(g.data(), g.data() + d.k_off, g.data() + d.v_off,
                                     d.dout.data(), out.data(), lse.data(), d.qp(), d.kp(), d.vp(),
                                     s);
  const int used = (s.NH + 2 * s.NKV) * s.hs;
  ThreadCount one(1);
  for (long r = 0; r < d.rows; ++r) {
    for (int j = 0; j < used; ++j) {
      float& x = d.q[r * s.q_stride + j];
      const float x0 = x;
      x = x0 + 2e-2f;
      const float xp = x;
      const double Lp = attention_loss(d);
      x = x0 - 2e-2f;
      const float xm = x;
      const double Lm = attention_loss(d);
      x = x0;
      const double fd = (Lp - Lm) / (static_cast<double>(xp) - xm);
      const float an = g[r * s.q_stride + j];
      ASSERT_NEAR(an, fd, 2e-3 + 1e-2 * std::fabs(fd)) << "row " << r << " column " << j;
    }
  }
}

TEST(AttentionGradient, FiniteDifferencesGqa) {
  check_attention_finite_differences({2, 5, 4, 2, 8, true, 1});
}

TEST(AttentionGradient, FiniteDifferencesHs64) {
  check_attention_finite_differences({1, 4, 2, 1, 64, true, 0});
}

TEST(Attention, RejectsBadShapes) {
  std::vector<float> buf(1024), lse(64);
  AttentionShape s{1, 4, 3, 2, 8, 24, 16, 24};  // NH not a multiple of NKV
  EXPECT_THROW(test::cpu_ops().attention_forward(buf.data(), lse.data(), buf.data(), buf.data(),
                                                 buf.data(), s),
               Error);
  s = {1, 4, 4, 2, 8, 16, 16, 32};  // q_stride < NH*hs
  EXPECT_THROW(test::cpu_ops().attention_forward(buf.data(), lse.data(), buf.data(), buf.data(),
                                                 buf.data(), s),
               Error);
}

// --------------------------------------------------------------------- rope

struct RopeCase {
  int B, T, nheads, hs, stride;
  ops::RopeSpec theta;
};

// Llama 3's scaling (its published factors, with a short original context so
// that the test's positions reach the scaled and the smoothed frequencies),
// and linear scaling.
constexpr ops::RopeSpec kLlama3Rope{500000.0f, ops::RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 64};
constexpr ops::RopeSpec kLinearRope{10000.0f, ops::RopeScaling::kLinear, 4.0f};

TEST(Rope, ForwardMatchesReference) {
  for (const RopeCase& c :
       {RopeCase{2, 7, 3, 8, 24, {10000.0f}}, RopeCase{1, 300, 2, 64, 131, {10000.0f}},
        RopeCase{2, 5, 1, 128, 128, {500000.0f}}, RopeCase{2, 40, 2, 32, 70, kLlama3Rope},
        RopeCase{1, 33, 3, 16, 48, kLinearRope}}) {
    const long n = static_cast<long>(c.B) * c.T * c.stride;
    std::vector<float> x = randn(n, 11), x_ref = x;
    test::cpu_ops().rope_forward(x.data(), {c.B, c.T, c.nheads, c.hs, c.stride}, c.theta);
    ref::rope_forward(x_ref.data(), c.B, c.T, c.nheads, c.hs, c.stride, c.theta);
    // Angles reach T rad, so float rounding of the angle itself is ~T * 6e-8.
    expect_near_all(x, x_ref, 2e-6f * c.T, "rope");
    for (long r = 0; r < static_cast<long>(c.B) * c.T; ++r)  // padding columns untouched
      for (int j = c.nheads * c.hs; j < c.stride; ++j)
        ASSERT_EQ(x[r * c.stride + j], x_ref[r * c.stride + j]);
  }
}

// rope_backward is the adjoint: <rope(x), y> == <x, rope_backward(y)>, and
// since the rotation is orthogonal also its inverse.
TEST(Rope, BackwardIsAdjointAndInverse) {
  for (const RopeCase& c :
       {RopeCase{2, 33, 3, 16, 50, {10000.0f}}, RopeCase{2, 33, 3, 16, 50, kLlama3Rope}}) {
    const long n = static_cast<long>(c.B) * c.T * c.stride;
    std::vector<float> x = randn(n, 12), y = randn(n, 13);
    std::vector<float> rx = x, ry = y;
    test::cpu_ops().rope_forward(rx.data(), {c.B, c.T, c.nheads, c.hs, c.stride}, c.theta);
    test::cpu_ops().rope_backward(ry.data(), {c.B, c.T, c.nheads, c.hs, c.stride}, c.theta);
    double lhs = 0.0, rhs = 0.0, norm = 0.0;
    for (long i = 0; i < n; ++i) {
      lhs += static_cast<double>(rx[i]) * y[i];
      rhs += static_cast<double>(x[i]) * ry[i];
      norm += std::fabs(static_cast<double>(x[i]) * y[i]);
    }
    EXPECT_NEAR(lhs, rhs, 1e-6 * norm);
    test::cpu_ops().rope_backward(rx.data(), {c.B, c.T, c.nheads, c.hs, c.stride}, c.theta);
    expect_near_all(rx, x, 1e-6f, "rope_backward(rope_forward(x))");
  }
}

// The unscaled frequencies are the bits Dendrite always used, so models
// without scaling keep their results; the scalings follow transformers'
// _compute_llama3_parameters and _compute_linear_scaling_rope_parameters.
TEST(Rope, FrequenciesOfEachScaling) {
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(ops::rope_frequency({10000.0f}, i, 32), std::pow(10000.0, -2.0 * i / 32)) << i;
  for (int i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(ops::rope_frequency(kLinearRope, i, 16), std::pow(10000.0, -2.0 * i / 16) / 4);
  // hs 32, theta 500000, L = 64: wavelengths 2 pi / f; below 64/4 = 16 kept,
  // above 64 divided by 8, smoothed between.
  int kept = 0, divided = 0, smoothed = 0;
  for (int i = 0; i < 16; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 32), w = 2 * M_PI / f;
    const double got = ops::rope_frequency(kLlama3Rope, i, 32);
    if (w < 16) {
      EXPECT_EQ(got, f);
      ++kept;
    } else if (w > 64) {
      EXPECT_DOUBLE_EQ(got, f / 8);
      ++divided;
    } else {
      const double s = (64 / w - 1) / (4 - 1);
      EXPECT_DOUBLE_EQ(got, (1 - s) * f / 8 + s * f);
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(Rope, RejectsOddHeadSize) {
  std::vector<float> x(64);
  EXPECT_THROW(test::cpu_ops().rope_forward(x.data(), {1, 2, 2, 7, 14}, {10000.0f}), Error);
  EXPECT_THROW(test::cpu_ops().rope_backward(x.data(), {1, 2, 2, 8, 15}, {10000.0f}), Error);
  ops::RopeSpec bad = kLlama3Rope;
  bad.high_freq_factor = 0.5f;  // below low_freq_factor
  EXPECT_THROW(test::cpu_ops().rope_forward(x.data(), {1, 2, 2, 8, 16}, bad), Error);
}

// ------------------------------------------------------------ cross-entropy

struct CeData {
  int m, C, V, Vp, chunk_rows;
  std::vector<float> x, w, weight;  // [m, C], [Vp, C], [m]
  std::vector<int32_t> targets;     // [m]

  CeData(int m_, int C_, int V_, int Vp_, int chunk)
      : m(m_), C(C_), V(V_), Vp(Vp_), chunk_rows(chunk) {
    x = randn(static_cast<long>(m) * C, 21);
    w = randn(static_cast<long>(Vp) * C, 22, 0.5f);
    // Large padding rows: counting them in the softmax would change everything.
    for (long i = static_cast<long>(V) * C; i < static_cast<long>(Vp) * C; ++i) w[i] = 40.0f;
    for (int r = 0; r < m; ++r) {
      targets.push_back(static_cast<int32_t>(random_bits(5, 23, r) % V));
      const float choices[] = {1.0f, 0.0f, 0.5f, 2.0f, 1.0f};
      weight.push_back(choices[r % 5]);
    }
  }
  double loss(float* dx, float* dw, const float* wt, double denom) {
    return test::lm_head_loss(dx, dw, x.data(), w.data(), targets.data(), wt, denom, m, C, V, Vp,
                              chunk_rows);
  }
};

TEST(CrossEntropy, MatchesReference) {
  // chunk_rows not dividing m, larger than m, and 1; padded vocabulary.
  for (int chunk : {4, 1, 64}) {
    for (bool weighted : {true, false}) {
      CeData d(13, 24, 37, 48, chunk);
      const float* wt = weighted ? d.weight.data() : nullptr;
      const double denom = 9.5;
      std::vector<float> dx(d.x.size(), kSentinel), dw0 = randn(d.w.size(), 24), dw = dw0;
      std::vector<float> dx_ref(dx.size()), dw_ref(dw.size());
      const double loss = d.loss(dx.data(), dw.data(), wt, denom);
      const double loss_ref =
          ref::cross_entropy(dx_ref.data(), dw_ref.data(), d.x.data(), d.w.data(), d.targets.data(),
                             wt, denom, 13, 24, 37, 48);
      EXPECT_NEAR(loss, loss_ref, 1e-5 * std::fabs(loss_ref));
      EXPECT_EQ(d.loss(nullptr, nullptr, wt, denom), loss);    // loss alone: same value
      for (size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];  // dw accumulates
      expect_near_all(dx, dx_ref, 1e-5f, "dx");
      expect_near_all(dw, dw_ref, 1e-5f, "dw");
      for (size_t i = 37 * 24; i < dw.size(); ++i) ASSERT_EQ(dw[i], 0.0f) << "padding row of dw";
      if (weighted) {
        for (int c = 0; c < 24; ++c) ASSERT_EQ(dx[1 * 24 + c], 0.0f) << "zero-weight row of dx";
      }
    }
  }
}

// Central differences of the returned loss with respect to x and w.
TEST(CrossEntropy, FiniteDifferences) {
  const int m = 7, C = 6, V = 11, Vp = 16;
  CeData d(m, C, V, Vp, 3);
  const double denom = 4.0;
  std::vector<float> dx(d.x.size()), dw(d.w.size(), 0.0f);
  d.loss(dx.data(), dw.data(), d.weight.data(), denom);
  ThreadCount one(1);
  auto check = [&](std::vector<float>& param, const std::vector<float>& grad, const char* what) {
    for (size_t i = 0; i < param.size(); ++i) {
      const float x0 = param[i];
      param[i] = x0 + 1e-2f;
      const float xp = param[i];
      const double Lp = d.loss(nullptr, nullptr, d.weight.data(), denom);
      param[i] = x0 - 1e-2f;
      const float xm = param[i];
      const double Lm = d.loss(nullptr, nullptr, d.weight.data(), denom);
      param[i] = x0;
      const double fd = (Lp - Lm) / (static_cast<double>(xp) - xm);
      ASSERT_NEAR(grad[i], fd, 5e-4 + 1e-2 * std::fabs(fd)) << what << " element " << i;
    }
  };
  check(d.x, dx, "dx");
  check(d.w, dw, "dw");  // includes padding rows: gradient and effect both exactly 0
}

TEST(CrossEntropy, OutOfRangeTargetThrows) {
  CeData d(6, 4, 10, 16, 4);
  for (int32_t bad : {10, 15, -1}) {
    d.targets[3] = bad;
    try {
      d.loss(nullptr, nullptr, d.weight.data(), 6.0);
      FAIL() << "target " << bad << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
    }
  }
}

// The head's logits over the real ids: x times the first V rows of w (padding rows unread).
TEST(CrossEntropy, LogitsMatchDirectProduct) {
  const int m = 5, C = 9, V = 13;
  std::vector<float> x = randn(m * C, 31), w = randn(16 * C, 32), logits(m * V);
  test::cpu_ops().linear_forward(logits.data(), x.data(), w.data(), nullptr, {m, C, V});
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < V; ++j) {
      double d = 0.0;
      for (int c = 0; c < C; ++c) d += static_cast<double>(x[r * C + c]) * w[j * C + c];
      ASSERT_NEAR(logits[r * V + j], d, 1e-5 * (1.0 + std::fabs(d)));
    }
}

}  // namespace
}  // namespace dendrite
