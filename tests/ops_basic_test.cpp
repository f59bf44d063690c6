// Basic ops of the CPU backend (gemm/linear, LayerNorm, RMSNorm, GELU, SwiGLU,
// add, embedding, AdamW, gradient norm, lr schedule) against the naive double
// references of ops/reference/basic.h. The norms run as the model runs them
// on an unsplit width (row sums, then apply, with c == c_total); the embedding
// as the range lookup over the whole vocabulary plus the position add. Each op
// is checked on odd sizes and a GPT-2-like size (C = 768). Gradients are
// checked by central differences of the double reference loss L = sum(dy * y)
// with a random dy, both for the reference backward (tight) and the fast
// backward (float tolerance). Letters: m rows, c / C channels, k in and n out
// features, B sequences, T positions, V vocab.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dendrite/backend/exact_math.h"
#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/optim.h"
#include "dendrite/ops/reference/basic.h"
#include "op_test_support.h"

namespace dendrite {
namespace {

using namespace dendrite::test;  // randn, random_tokens, to_d, expect_close, ThreadCount, Vf, Vd,
                                 // the whole-width norms

double dot(const Vd& a, const Vd& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of loss() in every element of x.
Vd numeric_grad(const std::function<double()>& loss, Vd& x, double h = 1e-5) {
  Vd g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + h;
    double up = loss();
    x[i] = keep - h;
    double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}


constexpr double kFwdTol = 1e-5;  // fast forward vs double reference
constexpr double kBwdTol = 1e-5;  // fast backward vs reference or finite differences
constexpr double kFdTol = 1e-6;   // double reference backward vs finite differences

// ---------------------------------------------------------------- gemm, linear

TEST(Gemm, AllTransposesStridesAndBeta) {
  const int M = 37, N = 29, K = 53, pad = 5;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (float beta : {0.0f, 1.0f}) {
        int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
        int lda = a_cols + pad, ldb = b_cols + pad + 2, ldc = N + pad + 1;
        Vf A = randn(static_cast<long>(a_rows) * lda, 1),
           B = randn(static_cast<long>(b_rows) * ldb, 2);
        Vf C = randn(static_cast<long>(M) * ldc, 3);
        if (beta == 0.0f) {  // C must not be read: poison the entries, keep the padding
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) C[static_cast<long>(i) * ldc + j] = NAN;
        }
        Vd Cd = to_d(C);
        ref::gemm(ta, tb, M, N, K, 0.75, to_d(A).data(), lda, to_d(B).data(), ldb, beta, Cd.data(),
                  ldc);
        cpu_ops().gemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        std::string what = "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                           " beta=" + std::to_string(beta);
        expect_close(C, Cd, kFwdTol, what);  // includes the padding, which must be untouched
      }
    }
  }
}

// Tuning times every way of computing a shape at its first call and keeps only
// ways with the default's bits: results with and without tuning are identical,
// padding untouched, the choice cached and reused.
TEST(Gemm, TuningKeepsTheBitsAndCachesTheChoice) {
  const int M = 160, N = 144, K = 96, pad = 3;
  const std::unique_ptr<Backend> tuning = make_backend(Device::kCpu);  // untuned: cpu_ops()
  tuning->set_gemm_tuning(true);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 1.0f}) {
        const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
        const int lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
        Vf A = randn(long(a_rows) * lda, 5), B = randn(long(b_rows) * ldb, 6);
        Vf C0 = randn(long(M) * ldc, 7), want = C0, tuned = C0, again = C0;
        cpu_ops().gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
        tuning->gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, tuned.data(), ldc);
        tuning->gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, again.data(), ldc);
        EXPECT_EQ(0, std::memcmp(want.data(), tuned.data(), sizeof(float) * want.size()));
        EXPECT_EQ(0, std::memcmp(want.data(), again.data(), sizeof(float) * want.size()));
      }
  const std::vector<ops::GemmChoice> choices = tuning->gemm_choices();
  ASSERT_EQ(choices.size(), 8u);  // 4 transposes x 2 betas, each tried once
  for (const ops::GemmChoice& c : choices) {
    EXPECT_EQ(c.calls, 1);  // the second product reused the choice
    EXPECT_GE(c.ways.size(), 2u);
    EXPECT_GE(c.ms[0], 0.0);  // the default way always qualifies
    EXPECT_NE(std::find(c.ways.begin(), c.ways.end(), c.way), c.ways.end());
  }
  EXPECT_GT(tuning->gemm_tuning_seconds(), 0.0);
}

void check_linear(int m, int k, int n, bool finite_differences) {
  Vf x = randn(static_cast<long>(m) * k, 1), w = randn(static_cast<long>(n) * k, 2, 0.2);
  Vf b = randn(n, 3), dy = randn(static_cast<long>(m) * n, 4);
  Vd xd = to_d(x), wd = to_d(w), bd = to_d(b), dyd = to_d(dy);
  Vf y(static_cast<long>(m) * n), y_nobias(y.size());
  Vd yr(y.size()), yr_nobias(y.size());
  cpu_ops().linear_forward(y.data(), x.data(), w.data(), b.data(), {m, k, n});
  cpu_ops().linear_forward(y_nobias.data(), x.data(), w.data(), nullptr, {m, k, n});
  ref::linear_forward(yr.data(), xd.data(), wd.data(), bd.data(), m, k, n);
  ref::linear_forward(yr_nobias.data(), xd.data(), wd.data(), nullptr, m, k, n);
  expect_close(y, yr, kFwdTol, "linear y");
  expect_close(y_nobias, yr_nobias, kFwdTol, "linear y without bias");

  // Backward: dw and db accumulate into a non-zero start; dx both overwritten and accumulated.
  Vf dx(x.size()), dx_acc = randn(x.size(), 5), dw = randn(w.size(), 6), db = randn(n, 7);
  Vd dxr(x.size()), dwr = to_d(dw), dbr = to_d(db), dx_acc_r = to_d(dx_acc);
  cpu_ops().linear_backward_input(dx.data(), dy.data(), w.data(), {m, k, n}, false);
  cpu_ops().linear_backward_input(dx_acc.data(), dy.data(), w.data(), {m, k, n}, true);
  cpu_ops().linear_backward_weight(dw.data(), dy.data(), x.data(), {m, k, n}, true);
  cpu_ops().add_column_sums(db.data(), dy.data(), m, n);
  ref::linear_backward(dxr.data(), dwr.data(), dbr.data(), dyd.data(), xd.data(), wd.data(), m, k,
                       n);
  for (size_t i = 0; i < dxr.size(); ++i) dx_acc_r[i] += dxr[i];
  expect_close(dx, dxr, kBwdTol, "linear dx");
  expect_close(dx_acc, dx_acc_r, kBwdTol, "linear dx accumulated");
  expect_close(dw, dwr, kBwdTol, "linear dw");
  expect_close(db, dbr, kBwdTol, "linear db");
  if (!finite_differences) return;

  Vf dw0(w.size()), db0(n);  // from zero, and the null-db path
  Vf dw_nodb(w.size());
  cpu_ops().linear_backward_weight(dw0.data(), dy.data(), x.data(), {m, k, n}, true);
  cpu_ops().add_column_sums(db0.data(), dy.data(), m, n);
  cpu_ops().linear_backward_weight(dw_nodb.data(), dy.data(), x.data(), {m, k, n}, true);
  Vd dwr0(w.size()), dbr0(n);
  ref::linear_backward(dxr.data(), dwr0.data(), dbr0.data(), dyd.data(), xd.data(), wd.data(), m, k,
                       n);
  auto loss = [&] {
    ref::linear_forward(yr.data(), xd.data(), wd.data(), bd.data(), m, k, n);
    return dot(dyd, yr);
  };
  Vd gx = numeric_grad(loss, xd), gw = numeric_grad(loss, wd), gb = numeric_grad(loss, bd);
  expect_close(dxr, gx, kFdTol, "ref linear dx vs FD");
  expect_close(dwr0, gw, kFdTol, "ref linear dw vs FD");
  expect_close(dbr0, gb, kFdTol, "ref linear db vs FD");
  expect_close(dx, gx, kBwdTol, "linear dx vs FD");
  expect_close(dw0, gw, kBwdTol, "linear dw vs FD");
  expect_close(dw_nodb, gw, kBwdTol, "linear dw (no db) vs FD");
  expect_close(db0, gb, kBwdTol, "linear db vs FD");
}

TEST(Linear, OddSizesWithFiniteDifferences) { check_linear(13, 17, 11, true); }
TEST(Linear, OddSizes) { check_linear(37, 53, 29, false); }
TEST(Linear, Gpt2Size) { check_linear(128, 768, 768, false); }

// ---------------------------------------------------------------- LayerNorm, RMSNorm

void check_layernorm(int m, int c, bool finite_differences) {
  const float eps = 1e-5f;
  Vf x = randn(static_cast<long>(m) * c, 1, 2.0, 0.7), gamma = randn(c, 2, 0.2, 1.0);
  Vf beta = randn(c, 3, 0.2), dy = randn(x.size(), 4);
  Vd xd = to_d(x), gd = to_d(gamma), bd = to_d(beta), dyd = to_d(dy);
  Vf y(x.size()), mean(m), rstd(m), dx(x.size()), dgamma = randn(c, 5), dbeta = randn(c, 6);
  Vd yr(x.size()), meanr(m), rstdr(m), dxr(x.size()), dgr = to_d(dgamma), dbr = to_d(dbeta);
  layernorm_whole_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(),
                          m, c, eps);
  ref::layernorm_forward(yr.data(), meanr.data(), rstdr.data(), xd.data(), gd.data(), bd.data(), m,
                         c, eps);
  expect_close(y, yr, kFwdTol, "layernorm y");
  expect_close(mean, meanr, kFwdTol, "layernorm mean");
  expect_close(rstd, rstdr, kFwdTol, "layernorm rstd");
  layernorm_whole_backward(dx.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(),
                           mean.data(), rstd.data(), gamma.data(), m, c);
  ref::layernorm_backward(dxr.data(), dgr.data(), dbr.data(), dyd.data(), xd.data(), meanr.data(),
                          rstdr.data(), gd.data(), m, c);
  expect_close(dx, dxr, kBwdTol, "layernorm dx");
  expect_close(dgamma, dgr, kBwdTol, "layernorm dgamma accumulated");
  expect_close(dbeta, dbr, kBwdTol, "layernorm dbeta accumulated");
  if (!finite_differences) return;

  Vf dg0(c), db0(c);
  layernorm_whole_backward(dx.data(), dg0.data(), db0.data(), dy.data(), x.data(), mean.data(),
                           rstd.data(), gamma.data(), m, c);
  Vd dgr0(c), dbr0(c);
  ref::layernorm_backward(dxr.data(), dgr0.data(), dbr0.data(), dyd.data(), xd.data(), meanr.data(),
                          rstdr.data(), gd.data(), m, c);
  auto loss = [&] {
    ref::layernorm_forward(yr.data(), meanr.data(), rstdr.data(), xd.data(), gd.data(), bd.data(),
                           m, c, eps);
    return dot(dyd, yr);
  };
  Vd gx = numeric_grad(loss, xd), gg = numeric_grad(loss, gd), gb = numeric_grad(loss, bd);
  expect_close(dxr, gx, kFdTol, "ref layernorm dx vs FD");
  expect_close(dgr0, gg, kFdTol, "ref layernorm dgamma vs FD");
  expect_close(dbr0, gb, kFdTol, "ref layernorm dbeta vs FD");
  expect_close(dx, gx, kBwdTol, "layernorm dx vs FD");
  expect_close(dg0, gg, kBwdTol, "layernorm dgamma vs FD");
  expect_close(db0, gb, kBwdTol, "layernorm dbeta vs FD");
}

TEST(LayerNorm, OddSizesWithFiniteDifferences) { check_layernorm(37, 53, true); }
TEST(LayerNorm, Gpt2Size) { check_layernorm(256, 768, false); }

void check_rmsnorm(int m, int c, bool finite_differences) {
  const float eps = 1e-5f;
  Vf x = randn(static_cast<long>(m) * c, 1, 1.5, 0.3), gamma = randn(c, 2, 0.2, 1.0);
  Vf dy = randn(x.size(), 4);
  Vd xd = to_d(x), gd = to_d(gamma), dyd = to_d(dy);
  Vf y(x.size()), rstd(m), dx(x.size()), dgamma = randn(c, 5);
  Vd yr(x.size()), rstdr(m), dxr(x.size()), dgr = to_d(dgamma);
  rmsnorm_whole_forward(y.data(), rstd.data(), x.data(), gamma.data(), m, c, eps);
  ref::rmsnorm_forward(yr.data(), rstdr.data(), xd.data(), gd.data(), m, c, eps);
  expect_close(y, yr, kFwdTol, "rmsnorm y");
  expect_close(rstd, rstdr, kFwdTol, "rmsnorm rstd");
  rmsnorm_whole_backward(dx.data(), dgamma.data(), dy.data(), x.data(), rstd.data(), gamma.data(),
                         m, c);
  ref::rmsnorm_backward(dxr.data(), dgr.data(), dyd.data(), xd.data(), rstdr.data(), gd.data(), m,
                        c);
  expect_close(dx, dxr, kBwdTol, "rmsnorm dx");
  expect_close(dgamma, dgr, kBwdTol, "rmsnorm dgamma accumulated");
  if (!finite_differences) return;

  Vf dg0(c);
  Vd dgr0(c);
  rmsnorm_whole_backward(dx.data(), dg0.data(), dy.data(), x.data(), rstd.data(), gamma.data(), m,
                         c);
  ref::rmsnorm_backward(dxr.data(), dgr0.data(), dyd.data(), xd.data(), rstdr.data(), gd.data(), m,
                        c);
  auto loss = [&] {
    ref::rmsnorm_forward(yr.data(), rstdr.data(), xd.data(), gd.data(), m, c, eps);
    return dot(dyd, yr);
  };
  Vd gx = numeric_grad(loss, xd), gg = numeric_grad(loss, gd);
  expect_close(dxr, gx, kFdTol, "ref rmsnorm dx vs FD");
  expect_close(dgr0, gg, kFdTol, "ref rmsnorm dgamma vs FD");
  expect_close(dx, gx, kBwdTol, "rmsnorm dx vs FD");
  expect_close(dg0, gg, kBwdTol, "rmsnorm dgamma vs FD");
}

TEST(RmsNorm, OddSizesWithFiniteDifferences) { check_rmsnorm(37, 53, true); }
TEST(RmsNorm, Gpt2Size) { check_rmsnorm(256, 768, false); }

// Bit-identical dgamma/dbeta/dx (row sums and apply) on a rerun and for 1, 2 and 3 threads.
TEST(Norm, BackwardIsDeterministic) {
  const int m = 301, c = 768;
  Vf x = randn(static_cast<long>(m) * c, 1, 2.0, 0.5), gamma = randn(c, 2, 0.2, 1.0);
  Vf beta = randn(c, 3), dy = randn(x.size(), 4), y(x.size()), mean(m), rstd(m);
  layernorm_whole_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(),
                          m, c, 1e-5f);
  auto run = [&](int threads, Vf& dx, Vf& dg, Vf& db) {
    ThreadCount scope(threads);
    dx.assign(x.size(), 0.0f);
    dg.assign(c, 0.5f);
    db.assign(c, -0.5f);
    layernorm_whole_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(),
                             rstd.data(), gamma.data(), m, c);
  };
  Vf dx1, dg1, db1;
  run(2, dx1, dg1, db1);
  for (int threads : {2, 1, 3}) {
    Vf dx2, dg2, db2;
    run(threads, dx2, dg2, db2);
    EXPECT_EQ(0, std::memcmp(dg1.data(), dg2.data(), c * sizeof(float))) << threads << " threads";
    EXPECT_EQ(0, std::memcmp(db1.data(), db2.data(), c * sizeof(float))) << threads << " threads";
    EXPECT_EQ(0, std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float))) << threads;
  }
  Vf rstd2(m), dgr1(c), dgr2(c);
  rmsnorm_whole_forward(y.data(), rstd2.data(), x.data(), gamma.data(), m, c, 1e-5f);
  {
    ThreadCount scope(1);
    rmsnorm_whole_backward(y.data(), dgr1.data(), dy.data(), x.data(), rstd2.data(), gamma.data(),
                           m, c);
  }
  {
    ThreadCount scope(3);
    rmsnorm_whole_backward(y.data(), dgr2.data(), dy.data(), x.data(), rstd2.data(), gamma.data(),
                           m, c);
  }
  EXPECT_EQ(0, std::memcmp(dgr1.data(), dgr2.data(), c * sizeof(float))) << "rmsnorm dgamma";
}

// ---------------------------------------------------------------- GELU, SwiGLU, add

void check_gelu(long n, bool finite_differences) {
  Vf x = randn(n, 1, 2.5), dy = randn(n, 2), y(n), dx(n);
  const float extremes[] = {0.0f,  -0.0f,  1e-20f, -1e-8f, 5.0f, -5.0f,
                            10.0f, -10.0f, 30.0f,  -30.0f, 1e4f, -1e4f};
  for (size_t i = 0; i < std::size(extremes) && i < x.size(); ++i) x[i] = extremes[i];
  Vd xd = to_d(x), dyd = to_d(dy), yr(n), dxr(n);
  cpu_ops().gelu_forward(y.data(), x.data(), n);
  ref::gelu_forward(yr.data(), xd.data(), n);
  expect_close(y, yr, kFwdTol, "gelu y");
  cpu_ops().gelu_backward(dx.data(), dy.data(), x.data(), n);
  ref::gelu_backward(dxr.data(), dyd.data(), xd.data(), n);
  expect_close(dx, dxr, kBwdTol, "gelu dx");
  Vf inplace = dy;  // dx may alias dy
  cpu_ops().gelu_backward(inplace.data(), inplace.data(), x.data(), n);
  EXPECT_EQ(0, std::memcmp(inplace.data(), dx.data(), n * sizeof(float))) << "gelu dx aliasing dy";
  if (!finite_differences) return;
  auto loss = [&] {
    ref::gelu_forward(yr.data(), xd.data(), n);
    return dot(dyd, yr);
  };
  Vd gx = numeric_grad(loss, xd);
  expect_close(dxr, gx, kFdTol, "ref gelu dx vs FD");
  expect_close(dx, gx, kBwdTol, "gelu dx vs FD");
}

TEST(Gelu, OddSizeWithFiniteDifferences) { check_gelu(1001, true); }
TEST(Gelu, Gpt2Size) { check_gelu(256L * 3072, false); }

void check_swiglu(long n, bool finite_differences) {
  Vf gate = randn(n, 1, 3.0), up = randn(n, 2), dy = randn(n, 3), y(n), dgate(n), dup(n);
  const float extremes[] = {0.0f, 20.0f, -20.0f, 90.0f, -90.0f, 1e4f, -1e4f};
  for (size_t i = 0; i < std::size(extremes) && i < gate.size(); ++i) gate[i] = extremes[i];
  Vd gd = to_d(gate), ud = to_d(up), dyd = to_d(dy), yr(n), dgr(n), dur(n);
  cpu_ops().swiglu_forward(y.data(), gate.data(), up.data(), n);
  ref::swiglu_forward(yr.data(), gd.data(), ud.data(), n);
  expect_close(y, yr, kFwdTol, "swiglu y");
  cpu_ops().swiglu_backward(dgate.data(), dup.data(), dy.data(), gate.data(), up.data(), n);
  ref::swiglu_backward(dgr.data(), dur.data(), dyd.data(), gd.data(), ud.data(), n);
  expect_close(dgate, dgr, kBwdTol, "swiglu dgate");
  expect_close(dup, dur, kBwdTol, "swiglu dup");
  if (!finite_differences) return;
  auto loss = [&] {
    ref::swiglu_forward(yr.data(), gd.data(), ud.data(), n);
    return dot(dyd, yr);
  };
  Vd gg = numeric_grad(loss, gd), gu = numeric_grad(loss, ud);
  expect_close(dgr, gg, kFdTol, "ref swiglu dgate vs FD");
  expect_close(dur, gu, kFdTol, "ref swiglu dup vs FD");
  expect_close(dgate, gg, kBwdTol, "swiglu dgate vs FD");
  expect_close(dup, gu, kBwdTol, "swiglu dup vs FD");
}

// The exponential of GELU, SwiGLU and the loss (backend/exact_math.h): the
// form a GPU runs, each rounding spelled out, gives the bits of the form the
// CPU build compiles, in a vectorised loop as the kernels run it, over the
// whole clamped range and past it.
TEST(ExactMath, TheGpuExponentialHasTheCpuBits) {
  const long n = 1L << 21;
  Vf x(n), host(n), rounded(n);
  for (long i = 0; i < n; ++i) x[i] = -95.0f + 190.0f * float(i) / float(n);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = 88.0f, x[4] = -87.0f;
#pragma omp simd
  for (long i = 0; i < n; ++i) host[i] = exact::exp_approx(x[i]);
  for (long i = 0; i < n; ++i) rounded[i] = exact::exp_approx_rounded(x[i]);
  long differ = 0;
  double worst = 0;
  for (long i = 0; i < n; ++i) {
    differ += std::memcmp(&host[i], &rounded[i], sizeof(float)) != 0;
    worst = std::max(worst, std::fabs(double(host[i]) / rounded[i] - 1.0));
  }
#if defined(__FMA__)
  // The product's build (-march=native: FMA, contracted as the device form says).
  EXPECT_EQ(differ, 0) << "of " << n << " values";
#else
  // A build without FMA (the sanitizers'): each product rounded apart, so the
  // host form may differ from the device form by an ulp or two.
  EXPECT_LE(worst, 0x1p-22) << differ << " of " << n << " values differ";
#endif
  EXPECT_NEAR(host[n / 2 + 1000] / std::exp(x[n / 2 + 1000]), 1.0, 1e-6);
}

TEST(SwiGlu, OddSizeWithFiniteDifferences) { check_swiglu(1001, true); }
TEST(SwiGlu, LlamaSize) { check_swiglu(256L * 2048, false); }

TEST(Add, OutOfPlaceAliasedAndInPlace) {
  for (long n : {37L, 100003L}) {
    Vf a = randn(n, 1), b = randn(n, 2), y(n), alias = a, inplace = a;
    cpu_ops().add(y.data(), a.data(), b.data(), n);
    cpu_ops().add(alias.data(), alias.data(), b.data(), n);
    cpu_ops().add_inplace(inplace.data(), b.data(), n);
    for (long i = 0; i < n; ++i) {
      ASSERT_EQ(y[i], a[i] + b[i]) << i;
      ASSERT_EQ(alias[i], a[i] + b[i]) << i;
      ASSERT_EQ(inplace[i], a[i] + b[i]) << i;
    }
  }
}

// ---------------------------------------------------------------- embedding

// The model's lookup over an unsplit vocabulary (VocabEmbedding on one rank):
// the range form over all V ids, then the positions when wpe is given.
// out [m, C]; wte [V, C]; wpe [T, C] or null.
void embed(float* out, const std::vector<int32_t>& tokens, const Vf& wte, const float* wpe, int m,
           int T, int C, int V) {
  cpu_ops().embedding_range_forward(out, tokens.data(), wte.data(), {0, V, m, C});
  if (wpe) cpu_ops().position_add(out, wpe, {m, T, C});
}

// Its backward: dwte [V, C] and dwpe [T, C] (may be null) accumulated.
void embed_backward(float* dwte, float* dwpe, const Vf& dout, const std::vector<int32_t>& tokens,
                    int m, int T, int C, int V) {
  cpu_ops().embedding_range_backward(dwte, dout.data(), tokens.data(), {0, V, m, C});
  if (dwpe) cpu_ops().position_backward(dwpe, dout.data(), {m, T, C});
}

void check_embedding(int B, int T, int C, int V, bool finite_differences) {
  const int m = B * T;
  std::vector<int32_t> tokens = random_tokens(m, V, 1);  // small V: many repeated tokens
  Vf wte = randn(static_cast<long>(V) * C, 2), wpe = randn(static_cast<long>(T) * C, 3);
  Vf dout = randn(static_cast<long>(m) * C, 4), out(dout.size(), 9.0f), out_nopos = out;
  Vd wted = to_d(wte), wped = to_d(wpe), doutd = to_d(dout), outr(out.size()),
     outr_nopos(out.size());
  embed(out.data(), tokens, wte, wpe.data(), m, T, C, V);
  embed(out_nopos.data(), tokens, wte, nullptr, m, T, C, V);
  ref::embedding_forward(outr.data(), tokens.data(), wted.data(), wped.data(), B, T, C);
  ref::embedding_forward(outr_nopos.data(), tokens.data(), wted.data(), nullptr, B, T, C);
  expect_close(out, outr, kFwdTol, "embedding out");
  expect_close(out_nopos, outr_nopos, kFwdTol, "embedding out without wpe");

  Vf dwte = randn(wte.size(), 5), dwpe = randn(wpe.size(), 6), dwte_nopos = dwte;
  Vd dwter = to_d(dwte), dwper = to_d(dwpe), dwter_nopos = dwter;
  embed_backward(dwte.data(), dwpe.data(), dout, tokens, m, T, C, V);
  embed_backward(dwte_nopos.data(), nullptr, dout, tokens, m, T, C, V);
  ref::embedding_backward(dwter.data(), dwper.data(), doutd.data(), tokens.data(), B, T, C);
  ref::embedding_backward(dwter_nopos.data(), nullptr, doutd.data(), tokens.data(), B, T, C);
  expect_close(dwte, dwter, kBwdTol, "embedding dwte accumulated");
  expect_close(dwpe, dwper, kBwdTol, "embedding dwpe accumulated");
  expect_close(dwte_nopos, dwter_nopos, kBwdTol, "embedding dwte without wpe");
  if (!finite_differences) return;

  Vf dwte0(wte.size()), dwpe0(wpe.size());
  embed_backward(dwte0.data(), dwpe0.data(), dout, tokens, m, T, C, V);
  auto loss = [&] {
    ref::embedding_forward(outr.data(), tokens.data(), wted.data(), wped.data(), B, T, C);
    return dot(doutd, outr);
  };
  Vd gwte = numeric_grad(loss, wted), gwpe = numeric_grad(loss, wped);
  expect_close(dwte0, gwte, kBwdTol, "embedding dwte vs FD");
  expect_close(dwpe0, gwpe, kBwdTol, "embedding dwpe vs FD");

  // Same bits with 1 and 3 threads (columns, and positions, are split differently).
  Vf one(wte.size()), three(wte.size()), one_pos(wpe.size()), three_pos(wpe.size());
  {
    ThreadCount scope(1);
    embed_backward(one.data(), one_pos.data(), dout, tokens, m, T, C, V);
  }
  {
    ThreadCount scope(3);
    embed_backward(three.data(), three_pos.data(), dout, tokens, m, T, C, V);
  }
  EXPECT_EQ(0, std::memcmp(one.data(), three.data(), one.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(one_pos.data(), three_pos.data(), one_pos.size() * sizeof(float)));
}

TEST(Embedding, OddSizesWithFiniteDifferences) { check_embedding(5, 7, 53, 11, true); }
TEST(Embedding, Gpt2Size) { check_embedding(4, 64, 768, 1000, false); }

TEST(Embedding, NegativeTokenIsAnError) {
  std::vector<int32_t> tokens = {0, -1};
  Vf wte(2 * 4), out(2 * 4);
  EXPECT_THROW(embed(out.data(), tokens, wte, nullptr, 2, 2, 4, 2), Error);
}

// ---------------------------------------------------------------- AdamW, norms, schedule

TEST(AdamW, TwoStepsMatchDoublePrecision) {
  ops::AdamWConfig cfg;  // beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1
  for (long n : {37L, 100003L}) {
    for (bool decay : {false, true}) {
      Vf p = randn(n, 1), m(n), v(n);
      Vd pd = to_d(p), md(n), vd(n);
      const float lrs[] = {1e-2f, 8e-3f};
      for (int step = 1; step <= 2; ++step) {
        Vf g = randn(n, 10 + step, 0.1);
        g[0] = 0.0f;  // a zero gradient: the update must stay finite
        Vd gd = to_d(g);
        cpu_ops().adamw_update(p.data(), g.data(), m.data(), v.data(), n, lrs[step - 1], step,
                               decay, cfg, 1.0f, nullptr);
        ref::adamw_step(pd.data(), gd.data(), md.data(), vd.data(), n, lrs[step - 1], step, decay,
                        cfg);
      }
      std::string what = "adamw n=" + std::to_string(n) + (decay ? " decay" : " no decay");
      expect_close(m, md, 1e-6, what + " m");
      expect_close(v, vd, 1e-6, what + " v");
      // The update is ~lr per step against |p| ~ 1: allow float rounding of p plus 1e-4 of lr.
      for (long i = 0; i < n; ++i)
        ASSERT_NEAR(p[i], pd[i], 2e-7 * std::fabs(pd[i]) + 1e-4 * 1e-2)
            << what << " p[" << i << "]";
    }
  }
}

TEST(AdamW, DecayIsDecoupled) {
  // Zero gradient, decay on: p only shrinks by (1 - lr wd); decay off: p unchanged.
  ops::AdamWConfig cfg;
  Vf p = {2.0f, -3.0f}, g(2), m(2), v(2), q = p;
  cpu_ops().adamw_update(p.data(), g.data(), m.data(), v.data(), 2, 0.5f, 1, true, cfg, 1.0f,
                         nullptr);
  EXPECT_FLOAT_EQ(p[0], 2.0f * (1.0f - 0.5f * 0.1f));
  EXPECT_FLOAT_EQ(p[1], -3.0f * (1.0f - 0.5f * 0.1f));
  cpu_ops().adamw_update(q.data(), g.data(), m.data(), v.data(), 2, 0.5f, 1, false, cfg, 1.0f,
                         nullptr);
  EXPECT_EQ(q[0], 2.0f);
  EXPECT_EQ(q[1], -3.0f);
}

TEST(Optim, SumSquaresAndScale) {
  for (long n : {0L, 37L, 1000003L}) {
    Vf g = randn(n, 1, 3.0);
    double want = 0.0;
    for (float x : g) want += static_cast<double>(x) * x;
    double got = cpu_ops().sum_squares(g.data(), n);
    EXPECT_NEAR(got, want, 1e-12 * want) << n;
    double one = 0.0, three = 0.0;
    {
      ThreadCount scope(1);
      one = cpu_ops().sum_squares(g.data(), n);
    }
    {
      ThreadCount scope(3);
      three = cpu_ops().sum_squares(g.data(), n);
    }
    EXPECT_EQ(0, std::memcmp(&one, &got, sizeof one)) << "sum_squares differs with 1 thread";
    EXPECT_EQ(0, std::memcmp(&three, &got, sizeof one)) << "sum_squares differs with 3 threads";
    Vf s = g;
    cpu_ops().scale(s.data(), 0.37f, n);
    for (long i = 0; i < n; ++i) ASSERT_EQ(s[i], g[i] * 0.37f) << i;
  }
}

}  // namespace
}  // namespace dendrite
