// The op harness (backend_ops_support.h) on attention and the rotary
// embeddings: attention forward and backward in either precision (grouped
// query heads, partial tiles, padded head sizes), over a generation cache,
// rope plain, scaled and from a position, and the backwards' determinism.
// Letters: B batch, T positions, NH query heads, NKV key/value heads, hs head
// size, C channels.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend_ops_support.h"
#include "dendrite/core/check.h"
#include "dendrite/ops/reference/attention.h"
#include "dendrite/ops/reference/basic.h"

namespace dendrite::test {

// Attention forward and backward against the oracle for one shape and precision.
void BackendOps::check_attention(const ops::AttentionShape& s, bool low) {
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
      for (int j = 0; j < width; ++j)
        g.push_back(got[r * stride + j]), wv.push_back(want[r * stride + j]);
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

namespace {

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
        out.insert(out.end(), x.begin() + (b * T + t0) * stride,
                   x.begin() + (b * T + t0 + n) * stride);
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
  Buffer<float> Q1 = put(randn(B * qs, 34)), K1 = put(randn(B * kvs, 35)),
                O1 = zeros<float>(B * NH * hs);
  EXPECT_THROW(
      be().attention_cached(O1.data(), Q1.data(), K1.data(), K1.data(), KC.data(), VC.data(),
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

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(kCpuTarget), target_name);
INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps, ::testing::ValuesIn(kEmulatedTargets), target_name);
#ifdef DENDRITE_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(kCudaTarget), target_name);
#endif

}  // namespace
}  // namespace dendrite::test
