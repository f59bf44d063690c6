// The op harness (backend_ops_support.h) on the norms and the elementwise
// ops: LayerNorm and RMSNorm whole and split over columns, their backwards'
// column sums over many rows, the activations (GELU, SwiGLU), sums and
// scaling, and the conversions between fp32 and bf16.
// Letters: m rows, c channels, n elements.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "backend_ops_support.h"
#include "dendrite/ops/reference/basic.h"

namespace dendrite::test {
namespace {

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

TEST_P(BackendOps, ConversionsAreExactToTheRoundingRule) {
  Vf x = randn(3000, 20, 100.0);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            1.00390625f /* a tie */,
                            1.01171875f /* a tie */,
                            1e-40f /* denormal */,
                            -1e-40f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            3.4e38f};
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

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(kCpuTarget), target_name);
INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps, ::testing::ValuesIn(kEmulatedTargets), target_name);
#ifdef DENDRITE_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(kCudaTarget), target_name);
#endif

}  // namespace
}  // namespace dendrite::test
