// The split pieces of the norms, the embedding and the cross-entropy (the
// forms a parallel model runs with the width or the vocabulary split over
// ranks, DESIGN.md section 4), with the ranks simulated in one process: each
// part computes on its own slice, the test adds the row sums in double (or
// gathers the CE stats) as the collective would, and the concatenated result
// must equal the double reference (and, where every value comes from one
// part, the one-part result bit for bit). Splits into 1..4 parts, uneven
// widths, parts narrower than a vector, padding ids in the last vocabulary
// part and a part holding padding only.
// Letters: m rows, c / c_total local / full width, C channels, V vocabulary,
// Vp padded vocabulary, T positions, v0 a part's first vocabulary id.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/norm.h"
#include "dendrite/ops/reference/attention.h"
#include "dendrite/ops/reference/basic.h"
#include "op_test_support.h"

namespace dendrite {
namespace {

using namespace dendrite::test;  // randn, random_tokens, to_d, expect_close, ThreadCount, Vf, Vd,
                                 // lm_head_loss

bool same_bits(const Vf& a, const Vf& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}


// Part boundaries of n split into `parts` as evenly as possible: [b[p], b[p+1]).
std::vector<int> even_split(int n, int parts) {
  std::vector<int> b(parts + 1);
  for (int p = 0; p <= parts; ++p) b[p] = static_cast<int>(static_cast<long>(n) * p / parts);
  return b;
}

// Columns [c0, c1) of an [m, c] buffer, as a contiguous [m, c1 - c0] buffer.
Vf columns(const Vf& a, int m, int c, int c0, int c1) {
  Vf out(static_cast<size_t>(m) * (c1 - c0));
  for (int r = 0; r < m; ++r)
    for (int j = c0; j < c1; ++j) out[static_cast<size_t>(r) * (c1 - c0) + j - c0] = a[r * c + j];
  return out;
}

// Writes the [m, c1 - c0] part back as columns [c0, c1) of an [m, c] buffer.
void put_columns(Vf& a, const Vf& part, int m, int c, int c0, int c1) {
  for (int r = 0; r < m; ++r)
    for (int j = c0; j < c1; ++j) a[r * c + j] = part[static_cast<size_t>(r) * (c1 - c0) + j - c0];
}

constexpr double kTol = 1e-5;
constexpr float kEps = 1e-5f;

// ---------------------------------------------------------------- norms

// A width split of a norm: x, dy [m, c_total]; gamma, beta [c_total].
struct NormCase {
  int m, c_total;
  Vf x, dy, gamma, beta;
  NormCase(int m_, int c_, double shift)
      : m(m_),
        c_total(c_),
        x(randn(static_cast<long>(m_) * c_, 1, 1.5, shift)),
        dy(randn(static_cast<long>(m_) * c_, 2)),
        gamma(randn(c_, 3, 0.3, 1.0)),
        beta(randn(c_, 4)) {}
};

// Forward and backward of LayerNorm split into `parts` column blocks, the row
// sums added over the parts in double. dgamma/dbeta start at 0.25 / -0.5.
struct NormResult {
  Vf y, mean, rstd, dx, dgamma, dbeta;
};

NormResult layernorm_split(const NormCase& k, int parts) {
  const int m = k.m, ct = k.c_total;
  const std::vector<int> b = even_split(ct, parts);
  NormResult res{Vf(k.x.size()), Vf(m), Vf(m), Vf(k.x.size()), Vf(ct, 0.25f), Vf(ct, -0.5f)};
  Vd sums(2L * m, 0.0), part_sums(2L * m);
  for (int p = 0; p < parts; ++p) {  // forward: row sums, summed over parts
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]);
    cpu_ops().layernorm_row_sums(part_sums.data(), xp.data(),
                                 {m, b[p + 1] - b[p], b[p + 1] - b[p]});
    for (long i = 0; i < 2L * m; ++i) sums[i] += part_sums[i];
  }
  for (int p = 0; p < parts; ++p) {  // forward: apply per part
    const int c = b[p + 1] - b[p];
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]), yp(xp.size()), mean(m), rstd(m);
    cpu_ops().layernorm_apply(yp.data(), mean.data(), rstd.data(), sums.data(), xp.data(),
                              k.gamma.data() + b[p], k.beta.data() + b[p], {m, c, ct}, kEps);
    put_columns(res.y, yp, m, ct, b[p], b[p + 1]);
    if (p == 0) res.mean = mean, res.rstd = rstd;
    EXPECT_TRUE(same_bits(mean, res.mean) && same_bits(rstd, res.rstd)) << "part " << p;
  }
  std::fill(sums.begin(), sums.end(), 0.0);
  for (int p = 0; p < parts; ++p) {  // backward: row sums, summed over parts
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]), dyp = columns(k.dy, m, ct, b[p], b[p + 1]);
    cpu_ops().layernorm_backward_sums(part_sums.data(), dyp.data(), xp.data(), res.mean.data(),
                                      res.rstd.data(), k.gamma.data() + b[p],
                                      {m, b[p + 1] - b[p], b[p + 1] - b[p]});
    for (long i = 0; i < 2L * m; ++i) sums[i] += part_sums[i];
  }
  for (int p = 0; p < parts; ++p) {  // backward: apply per part
    const int c = b[p + 1] - b[p];
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]), dyp = columns(k.dy, m, ct, b[p], b[p + 1]);
    Vf dxp(xp.size(), 7.0f);
    cpu_ops().layernorm_backward_apply(
        dxp.data(), res.dgamma.data() + b[p], res.dbeta.data() + b[p], sums.data(), dyp.data(),
        xp.data(), res.mean.data(), res.rstd.data(), k.gamma.data() + b[p], {m, c, ct});
    put_columns(res.dx, dxp, m, ct, b[p], b[p + 1]);
  }
  return res;
}

void check_layernorm_split(int m, int c_total, double shift) {
  NormCase k(m, c_total, shift);
  Vd y(k.x.size()), mean(m), rstd(m), dx(k.x.size()), dg(c_total, 0.25), db(c_total, -0.5);
  const Vd xd = to_d(k.x), gd = to_d(k.gamma), bd = to_d(k.beta), dyd = to_d(k.dy);
  ref::layernorm_forward(y.data(), mean.data(), rstd.data(), xd.data(), gd.data(), bd.data(), m,
                         c_total, kEps);
  ref::layernorm_backward(dx.data(), dg.data(), db.data(), dyd.data(), xd.data(), mean.data(),
                          rstd.data(), gd.data(), m, c_total);
  for (int parts = 1; parts <= 4; ++parts) {
    SCOPED_TRACE("parts=" + std::to_string(parts));
    NormResult s = layernorm_split(k, parts);
    expect_close(s.y, y, kTol, "y");
    expect_close(s.mean, mean, kTol, "mean");
    expect_close(s.rstd, rstd, kTol, "rstd");
    expect_close(s.dx, dx, kTol, "dx");
    expect_close(s.dgamma, dg, kTol, "dgamma accumulated");
    expect_close(s.dbeta, db, kTol, "dbeta accumulated");
  }
}

TEST(LayerNormSplit, OddWidthsMatchReference) { check_layernorm_split(37, 53, 0.0); }
TEST(LayerNormSplit, Gpt2WidthMatchesReference) { check_layernorm_split(64, 768, 0.5); }
// A large mean: the variance E[x^2] - mean^2 from summed row sums must not cancel.
TEST(LayerNormSplit, LargeMeanKeepsVariance) { check_layernorm_split(16, 300, 200.0); }

NormResult rmsnorm_split(const NormCase& k, int parts) {
  const int m = k.m, ct = k.c_total;
  const std::vector<int> b = even_split(ct, parts);
  NormResult res{Vf(k.x.size()), {}, Vf(m), Vf(k.x.size()), Vf(ct, 0.25f), {}};
  Vd sums(m, 0.0), part_sums(m);
  for (int p = 0; p < parts; ++p) {
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]);
    cpu_ops().rmsnorm_row_sums(part_sums.data(), xp.data(), {m, b[p + 1] - b[p], b[p + 1] - b[p]});
    for (int r = 0; r < m; ++r) sums[r] += part_sums[r];
  }
  for (int p = 0; p < parts; ++p) {
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]), yp(xp.size()), rstd(m);
    cpu_ops().rmsnorm_apply(yp.data(), rstd.data(), sums.data(), xp.data(), k.gamma.data() + b[p],
                            {m, b[p + 1] - b[p], ct}, kEps);
    put_columns(res.y, yp, m, ct, b[p], b[p + 1]);
    if (p == 0) res.rstd = rstd;
    EXPECT_TRUE(same_bits(rstd, res.rstd)) << "part " << p;
  }
  std::fill(sums.begin(), sums.end(), 0.0);
  for (int p = 0; p < parts; ++p) {
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]), dyp = columns(k.dy, m, ct, b[p], b[p + 1]);
    cpu_ops().rmsnorm_backward_sums(part_sums.data(), dyp.data(), xp.data(), k.gamma.data() + b[p],
                                    {m, b[p + 1] - b[p], b[p + 1] - b[p]});
    for (int r = 0; r < m; ++r) sums[r] += part_sums[r];
  }
  for (int p = 0; p < parts; ++p) {
    Vf xp = columns(k.x, m, ct, b[p], b[p + 1]), dyp = columns(k.dy, m, ct, b[p], b[p + 1]);
    Vf dxp(xp.size(), 7.0f);
    cpu_ops().rmsnorm_backward_apply(dxp.data(), res.dgamma.data() + b[p], sums.data(), dyp.data(),
                                     xp.data(), res.rstd.data(), k.gamma.data() + b[p],
                                     {m, b[p + 1] - b[p], ct});
    put_columns(res.dx, dxp, m, ct, b[p], b[p + 1]);
  }
  return res;
}

void check_rmsnorm_split(int m, int c_total, double shift) {
  NormCase k(m, c_total, shift);
  Vd y(k.x.size()), rstd(m), dx(k.x.size()), dg(c_total, 0.25);
  const Vd xd = to_d(k.x), gd = to_d(k.gamma), dyd = to_d(k.dy);
  ref::rmsnorm_forward(y.data(), rstd.data(), xd.data(), gd.data(), m, c_total, kEps);
  ref::rmsnorm_backward(dx.data(), dg.data(), dyd.data(), xd.data(), rstd.data(), gd.data(), m,
                        c_total);
  for (int parts = 1; parts <= 4; ++parts) {
    SCOPED_TRACE("parts=" + std::to_string(parts));
    NormResult s = rmsnorm_split(k, parts);
    expect_close(s.y, y, kTol, "y");
    expect_close(s.rstd, rstd, kTol, "rstd");
    expect_close(s.dx, dx, kTol, "dx");
    expect_close(s.dgamma, dg, kTol, "dgamma accumulated");
  }
}

TEST(RmsNormSplit, OddWidthsMatchReference) { check_rmsnorm_split(37, 53, 0.0); }
TEST(RmsNormSplit, Gpt2WidthMatchesReference) { check_rmsnorm_split(64, 768, 0.5); }

// The split backward's dgamma/dbeta and dx: the same bits for 1, 2 and 3 threads.
TEST(NormSplit, BackwardApplyIsDeterministic) {
  NormCase k(301, 384, 0.5);
  const int m = k.m, c = k.c_total;
  Vd sums(2L * m);
  Vf y(k.x.size()), mean(m), rstd(m);
  cpu_ops().layernorm_row_sums(sums.data(), k.x.data(), {m, c, c});
  cpu_ops().layernorm_apply(y.data(), mean.data(), rstd.data(), sums.data(), k.x.data(),
                            k.gamma.data(), k.beta.data(), {m, c, c}, kEps);
  cpu_ops().layernorm_backward_sums(sums.data(), k.dy.data(), k.x.data(), mean.data(), rstd.data(),
                                    k.gamma.data(), {m, c, c});
  auto run = [&](int threads, Vf& dx, Vf& dg, Vf& db, Vf& dgr) {
    ThreadCount scope(threads);
    dx.assign(k.x.size(), 0.0f);
    dg.assign(c, 0.5f);
    db.assign(c, -0.5f);
    dgr.assign(c, 0.5f);
    cpu_ops().layernorm_backward_apply(dx.data(), dg.data(), db.data(), sums.data(), k.dy.data(),
                                       k.x.data(), mean.data(), rstd.data(), k.gamma.data(),
                                       {m, c, c});
    Vd rs(m);
    cpu_ops().rmsnorm_backward_sums(rs.data(), k.dy.data(), k.x.data(), k.gamma.data(), {m, c, c});
    Vf dxr(k.x.size());
    cpu_ops().rmsnorm_backward_apply(dxr.data(), dgr.data(), rs.data(), k.dy.data(), k.x.data(),
                                     rstd.data(), k.gamma.data(), {m, c, c});
  };
  Vf dx1, dg1, db1, dgr1;
  run(2, dx1, dg1, db1, dgr1);
  for (int threads : {1, 3, 2}) {
    Vf dx2, dg2, db2, dgr2;
    run(threads, dx2, dg2, db2, dgr2);
    EXPECT_TRUE(same_bits(dx1, dx2)) << threads << " threads: dx";
    EXPECT_TRUE(same_bits(dg1, dg2)) << threads << " threads: dgamma";
    EXPECT_TRUE(same_bits(db1, db2)) << threads << " threads: dbeta";
    EXPECT_TRUE(same_bits(dgr1, dgr2)) << threads << " threads: rmsnorm dgamma";
  }
  // dbeta may be null (LayerNorm without bias): the same dx and dgamma.
  Vf dx3(k.x.size()), dg3(c, 0.5f);
  cpu_ops().layernorm_backward_apply(dx3.data(), dg3.data(), nullptr, sums.data(), k.dy.data(),
                                     k.x.data(), mean.data(), rstd.data(), k.gamma.data(),
                                     {m, c, c});
  EXPECT_TRUE(same_bits(dx3, dx1) && same_bits(dg3, dg1)) << "null dbeta";
}

TEST(NormSplit, RejectsLocalWidthAboveTotal) {
  Vf x(4 * 8), y(x.size()), mean(4), rstd(4), g(8, 1.0f), b(8, 0.0f);
  Vd sums(8, 1.0);
  EXPECT_THROW(cpu_ops().layernorm_apply(y.data(), mean.data(), rstd.data(), sums.data(), x.data(),
                                         g.data(), b.data(), {4, 8, 7}, kEps),
               Error);
  EXPECT_THROW(cpu_ops().rmsnorm_apply(y.data(), rstd.data(), sums.data(), x.data(), g.data(),
                                       {4, 8, 4}, kEps),
               Error);
}

// ---------------------------------------------------------------- embedding

// Each part fills the rows of its own tokens, so the parts' sum is the lookup
// over the whole vocabulary bit for bit, and that matches the reference.
TEST(EmbeddingSplit, VocabularyPartsSumToWholeLookup) {
  const int B = 3, T = 9, m = B * T, C = 20, V = 37;
  Vf wte = randn(static_cast<long>(V) * C, 5);
  std::vector<int32_t> tokens = random_tokens(m, V, 6);
  tokens[0] = 0, tokens[1] = V - 1, tokens[2] = 12, tokens[3] = 13;  // part edges
  Vf whole(static_cast<size_t>(m) * C), dout = randn(whole.size(), 7);
  cpu_ops().embedding_range_forward(whole.data(), tokens.data(), wte.data(), {0, V, m, C});
  Vf dwte_whole = randn(wte.size(), 8);
  const Vf dwte0 = dwte_whole;
  cpu_ops().embedding_range_backward(dwte_whole.data(), dout.data(), tokens.data(), {0, V, m, C});
  Vd want(whole.size()), dwant = to_d(dwte0);
  ref::embedding_forward(want.data(), tokens.data(), to_d(wte).data(), nullptr, B, T, C);
  ref::embedding_backward(dwant.data(), nullptr, to_d(dout).data(), tokens.data(), B, T, C);
  expect_close(whole, want, kTol, "whole-vocabulary lookup");
  expect_close(dwte_whole, dwant, kTol, "whole-vocabulary backward");
  for (int parts = 1; parts <= 4; ++parts) {
    SCOPED_TRACE("parts=" + std::to_string(parts));
    const std::vector<int> b = even_split(V, parts);
    Vf sum(whole.size(), 0.0f), dwte = dwte0;
    for (int p = 0; p < parts; ++p) {
      const int v0 = b[p], rows = b[p + 1] - b[p];
      Vf out(whole.size(), 99.0f);  // overwritten: other parts' rows become 0
      cpu_ops().embedding_range_forward(out.data(), tokens.data(),
                                        wte.data() + static_cast<long>(v0) * C, {v0, rows, m, C});
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];
      cpu_ops().embedding_range_backward(dwte.data() + static_cast<long>(v0) * C, dout.data(),
                                         tokens.data(), {v0, rows, m, C});
    }
    EXPECT_TRUE(same_bits(sum, whole)) << "forward";
    EXPECT_TRUE(same_bits(dwte, dwte_whole)) << "backward";
  }
}

// The lookup from Z chunks: a block of rows [v0, v0 + rows) cut into flat
// chunks whose edges fall inside rows; the chunks' parts sum to the range
// lookup (one nonzero part per float: the same bits), and their backward,
// each into its own chunk, to the range backward (threads split columns).
TEST(EmbeddingSplit, ZChunkPartsSumToRangeLookup) {
  const int m = 29, C = 21, v0 = 5, rows = 17;
  Vf block = randn(static_cast<long>(rows) * C, 31);
  std::vector<int32_t> tokens = random_tokens(m, 30, 32);  // some outside the block
  tokens[0] = v0, tokens[1] = v0 + rows - 1, tokens[2] = v0 + 8, tokens[3] = v0 + 8;  // a repeat
  Vf want(static_cast<size_t>(m) * C), dout = randn(want.size(), 33);
  cpu_ops().embedding_range_forward(want.data(), tokens.data(), block.data(), {v0, rows, m, C});
  const Vf dblock0 = randn(block.size(), 34);
  Vf dwant = dblock0;
  cpu_ops().embedding_range_backward(dwant.data(), dout.data(), tokens.data(), {v0, rows, m, C});
  const long n = static_cast<long>(block.size());
  for (int gz : {1, 2, 3, 4}) {
    for (int threads : {1, 3}) {
      SCOPED_TRACE("gz=" + std::to_string(gz) + " threads=" + std::to_string(threads));
      ThreadCount scope(threads);
      Vf sum(want.size(), 0.0f), dblock = dblock0;
      for (int z = 0; z < gz; ++z) {
        const long c0 = n * z / gz, c1 = n * (z + 1) / gz;
        Vf part(want.size(), 99.0f);  // overwritten everywhere
        cpu_ops().embedding_chunk_forward(part.data(), tokens.data(), block.data() + c0,
                                          {c0, c1 - c0}, {v0, rows, m, C});
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
        cpu_ops().embedding_chunk_backward(dblock.data() + c0, dout.data(), tokens.data(),
                                           {c0, c1 - c0}, {v0, rows, m, C});
      }
      EXPECT_TRUE(same_bits(sum, want)) << "forward";
      EXPECT_TRUE(same_bits(dblock, dwant)) << "backward";
    }
  }
}

TEST(EmbeddingSplit, PositionsMatchNaiveLoop) {
  const int B = 4, T = 7, m = B * T, C = 37;
  Vf wpe = randn(static_cast<long>(T) * C, 9), base = randn(static_cast<long>(m) * C, 10);
  Vf dout = randn(base.size(), 11), out = base;
  cpu_ops().position_add(out.data(), wpe.data(), {m, T, C});
  Vf want = base;
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < C; ++j) want[r * C + j] += wpe[(r % T) * C + j];
  EXPECT_TRUE(same_bits(out, want)) << "position_add";
  Vf dwpe0 = randn(wpe.size(), 12), dwant = dwpe0;
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < C; ++j) dwant[(r % T) * C + j] += dout[r * C + j];
  for (int threads : {1, 2, 3}) {
    ThreadCount scope(threads);
    Vf dwpe = dwpe0;
    cpu_ops().position_backward(dwpe.data(), dout.data(), {m, T, C});
    EXPECT_TRUE(same_bits(dwpe, dwant)) << "position_backward, " << threads << " threads";
  }
  // The range lookup over the whole vocabulary, then the positions: the
  // reference's token plus position embedding.
  const int V = 11;
  Vf wte = randn(static_cast<long>(V) * C, 13), split(base.size());
  std::vector<int32_t> tokens = random_tokens(m, V, 14);
  Vd whole(base.size());
  ref::embedding_forward(whole.data(), tokens.data(), to_d(wte).data(), to_d(wpe).data(), B, T, C);
  cpu_ops().embedding_range_forward(split.data(), tokens.data(), wte.data(), {0, V, m, C});
  cpu_ops().position_add(split.data(), wpe.data(), {m, T, C});
  expect_close(split, whole, kTol, "range lookup + position_add");
}

TEST(EmbeddingSplit, NegativeTokenThrows) {
  const int m = 4, C = 8;
  Vf w(16 * C), out(m * C);
  std::vector<int32_t> tokens = {1, 2, -3, 4};
  EXPECT_THROW(
      cpu_ops().embedding_range_forward(out.data(), tokens.data(), w.data(), {0, 16, m, C}), Error);
  EXPECT_THROW(
      cpu_ops().embedding_range_backward(w.data(), out.data(), tokens.data(), {0, 16, m, C}),
      Error);
}

// ---------------------------------------------------------------- cross-entropy

struct CeCase {
  int m, C, V, Vp;
  Vf x, w, weight;               // [m, C], [Vp, C], [m]
  std::vector<int32_t> targets;  // [m]
  CeCase(int m_, int C_, int V_, int Vp_) : m(m_), C(C_), V(V_), Vp(Vp_) {
    x = randn(static_cast<long>(m) * C, 21);
    w = randn(static_cast<long>(Vp) * C, 22, 0.5);
    // Large padding rows: counting them in any softmax would change everything.
    for (long i = static_cast<long>(V) * C; i < static_cast<long>(Vp) * C; ++i) w[i] = 40.0f;
    targets = random_tokens(m, V, 23);
    targets[0] = V - 1;  // the last real id, in the last part
    const float choices[] = {1.0f, 0.0f, 0.5f, 2.0f, 1.0f};
    for (int r = 0; r < m; ++r) weight.push_back(choices[r % 5]);
  }
};

// The vocabulary-parallel loss over parts [b[p], b[p+1]) of [0, Vp): each part
// its own logits, local stats, the gathered stats combined, its dlogits.
// Returns the loss (sum / denominator); dlogits [m, Vp] assembled from the parts.
double ce_split(const CeCase& k, const std::vector<int>& b, const float* wt, double denom,
                Vf& dlogits) {
  const int parts = static_cast<int>(b.size()) - 1, m = k.m;
  std::vector<Vf> logits(parts);
  Vf gathered(2L * m * parts);  // [parts, m, 2], as the all-gather lays it out
  for (int p = 0; p < parts; ++p) {
    const int Vloc = b[p + 1] - b[p];
    logits[p].resize(static_cast<size_t>(m) * Vloc);
    cpu_ops().linear_forward(logits[p].data(), k.x.data(),
                             k.w.data() + static_cast<long>(b[p]) * k.C, nullptr, {m, k.C, Vloc});
    cpu_ops().ce_local_stats(gathered.data() + 2L * m * p, logits[p].data(), k.targets.data(), wt,
                             {m, Vloc, b[p], k.V});
  }
  Vf lse(m), lse_p(m);
  double sum = 0.0;
  dlogits.assign(static_cast<size_t>(m) * k.Vp, 0.0f);
  for (int p = 0; p < parts; ++p) {  // every part combines the same gathered stats
    double sum_p = 0.0;
    cpu_ops().ce_combine(lse_p.data(), gathered.data(), wt, m, parts, &sum_p);
    if (p == 0) sum = sum_p, lse = lse_p;
    EXPECT_EQ(sum_p, sum) << "part " << p;
    EXPECT_TRUE(same_bits(lse_p, lse)) << "part " << p;
    const int Vloc = b[p + 1] - b[p];
    cpu_ops().ce_dlogits(logits[p].data(), lse.data(), k.targets.data(), wt, denom,
                         {m, Vloc, b[p], k.V});
    put_columns(dlogits, logits[p], m, k.Vp, b[p], b[p + 1]);
  }
  return sum / denom;
}

void check_ce_split(const CeCase& k, const std::vector<int>& b, const float* wt, double denom) {
  Vd logits(static_cast<size_t>(k.m) * k.V), dref(logits.size());
  for (int r = 0; r < k.m; ++r)
    for (int j = 0; j < k.V; ++j) {
      double d = 0.0;
      for (int c = 0; c < k.C; ++c) d += static_cast<double>(k.x[r * k.C + c]) * k.w[j * k.C + c];
      logits[static_cast<size_t>(r) * k.V + j] = d;
    }
  const double want =
      ref::softmax_cross_entropy(dref.data(), logits.data(), k.targets.data(), wt, denom, k.m, k.V);
  Vd want_dlogits(static_cast<size_t>(k.m) * k.Vp, 0.0);  // padding columns: 0
  for (int r = 0; r < k.m; ++r)
    for (int j = 0; j < k.V; ++j) want_dlogits[r * k.Vp + j] = dref[r * k.V + j];
  Vf dlogits;
  const double loss = ce_split(k, b, wt, denom, dlogits);
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want));
  expect_close(dlogits, want_dlogits, kTol, "dlogits");
  for (int r = 0; r < k.m; ++r) {
    for (int j = k.V; j < k.Vp; ++j) ASSERT_EQ(dlogits[r * k.Vp + j], 0.0f) << "padding id " << j;
    if (wt && wt[r] == 0.0f) {
      for (int j = 0; j < k.Vp; ++j) ASSERT_EQ(dlogits[r * k.Vp + j], 0.0f) << "zero-weight row";
    }
  }
  // The same loss as the head on one part in chunks of 5 rows.
  const double one_part = lm_head_loss(nullptr, nullptr, k.x.data(), k.w.data(), k.targets.data(),
                                       wt, denom, k.m, k.C, k.V, k.Vp, 5);
  EXPECT_NEAR(loss, one_part, 1e-6 * std::fabs(one_part));
}

TEST(CrossEntropySplit, VocabularyPartsMatchReference) {
  CeCase k(13, 24, 37, 48);  // ids 37..47 are padding, in the last part
  for (bool weighted : {true, false}) {
    const float* wt = weighted ? k.weight.data() : nullptr;
    for (int parts = 1; parts <= 4; ++parts) {
      SCOPED_TRACE("parts=" + std::to_string(parts) + (weighted ? " weighted" : ""));
      check_ce_split(k, even_split(k.Vp, parts), wt, 9.5);
    }
  }
}

TEST(CrossEntropySplit, PartOfPaddingOnlyAndUnevenParts) {
  CeCase k(11, 16, 37, 64);
  {
    SCOPED_TRACE("[0,5) [5,37) [37,64)");  // the last part holds no real id
    check_ce_split(k, {0, 5, 37, 64}, k.weight.data(), 3.0);
  }
  {
    SCOPED_TRACE("[0,30) [30,31) [31,40) [40,64)");
    check_ce_split(k, {0, 30, 31, 40, 64}, nullptr, 17.25);
  }
}

TEST(CrossEntropySplit, OutOfRangeTargetThrows) {
  const int rows = 6, Vloc = 16, V = 10;
  Vf logits = randn(rows * Vloc, 31), stats(2 * rows);
  std::vector<int32_t> targets = random_tokens(rows, V, 32);
  for (int32_t bad : {V, Vloc - 1, Vloc + 5, -1}) {
    targets[3] = bad;
    try {
      cpu_ops().ce_local_stats(stats.data(), logits.data(), targets.data(), nullptr,
                               {rows, Vloc, 0, V});
      FAIL() << "target " << bad << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace dendrite
