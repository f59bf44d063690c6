// Goldfish loss (DESIGN.md section 7) on one process: the hash mask drops 1/k
// of random targets within statistical bounds, drops the same tokens of a
// passage wherever it appears (and others under another seed), keeps the
// first h-1 positions, follows the window's order; the static mask drops every
// k-th position; and dropped targets get exactly zero gradient: changing them
// changes nothing, their logit rows and their dx rows are exactly zero, and
// the loss is the mean cross-entropy of the kept tokens only.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"
#include "dendrite/model/transformer.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/train/goldfish.h"
#include "op_test_support.h"
#include "backend_support.h"

namespace dendrite {
namespace {

using Mode = GoldfishOptions::Mode;

std::vector<int32_t> random_ids(int n, uint64_t stream, int vocab = 8192) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = int32_t(random_bits(99, stream, i) % vocab);
  return v;
}

GoldfishOptions hash_mask(int k, int h, uint64_t seed = 0) {
  return GoldfishOptions::parse("k=" + std::to_string(k) + ",h=" + std::to_string(h) +
                                ",mode=hash,seed=" + std::to_string(seed));
}

TEST(Goldfish, HashDropsOneOverKOfRandomTargets) {
  const int B = 64, T = 512;
  for (int k : {2, 4, 8}) {
    const GoldfishOptions g = hash_mask(k, 13);
    std::vector<int32_t> targets = random_ids(B * T, k);
    std::vector<float> w(B * T);
    const int64_t kept = goldfish_weights(g, targets.data(), B, T, w.data());
    const double n = double(B) * (T - 12);  // positions with a full window
    const double dropped = double(B) * T - kept, p = 1.0 / k;
    // Within 5 standard deviations of a binomial(n, 1/k).
    EXPECT_NEAR(dropped / n, p, 5 * std::sqrt(p * (1 - p) / n)) << "k=" << k;
    double sum = 0;
    for (float x : w) sum += x;
    EXPECT_EQ(int64_t(sum), kept);
  }
}

TEST(Goldfish, SamePassageSameMaskAnywhereOtherMaskUnderOtherSeed) {
  const int T = 256, h = 13;
  const std::vector<int32_t> passage = random_ids(120, 7);
  auto mask_of_passage = [&](int offset, uint64_t seed) {
    std::vector<int32_t> seq = random_ids(T, 100 + offset);  // different surroundings
    std::copy(passage.begin(), passage.end(), seq.begin() + offset);
    std::vector<float> w(T);
    goldfish_weights(hash_mask(4, h, seed), seq.data(), 1, T, w.data());
    // The passage's own windows start h-1 tokens into it.
    return std::vector<float>(w.begin() + offset + h - 1, w.begin() + offset + passage.size());
  };
  const std::vector<float> a = mask_of_passage(3, 0);
  EXPECT_EQ(a, mask_of_passage(50, 0));
  EXPECT_EQ(a, mask_of_passage(130, 0));
  int dropped = 0;
  for (float x : a) dropped += x == 0;
  EXPECT_GT(dropped, 10);  // ~27 of 108 expected
  const std::vector<float> b = mask_of_passage(3, 1);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  EXPECT_GT(differ, 20);  // two independent masks differ at ~3/8 of 108 positions
}

TEST(Goldfish, FirstHMinusOnePositionsAreKept) {
  const int B = 200, T = 40, h = 13;
  std::vector<int32_t> targets = random_ids(B * T, 3);
  std::vector<float> w(B * T);
  goldfish_weights(hash_mask(2, h), targets.data(), B, T, w.data());
  int dropped_at_h1 = 0;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < h - 1; ++t) ASSERT_EQ(w[b * T + t], 1.0f) << "sequence " << b << " t " << t;
    dropped_at_h1 += w[b * T + h - 1] == 0;
  }
  EXPECT_GT(dropped_at_h1, 60);  // position h-1 is the first that can drop: ~100 of 200
}

TEST(Goldfish, WindowHashFollowsOrderAndEveryId) {
  const std::vector<int32_t> w = {5, 9, 2, 7};
  const std::vector<int32_t> swapped = {9, 5, 2, 7}, changed = {5, 9, 2, 8};
  const double a = goldfish_window_hash(w.data(), 4, 0);
  EXPECT_NE(a, goldfish_window_hash(swapped.data(), 4, 0));  // a product of ids would not see this
  EXPECT_NE(a, goldfish_window_hash(changed.data(), 4, 0));
  EXPECT_NE(a, goldfish_window_hash(w.data(), 4, 1));
  EXPECT_EQ(a, goldfish_window_hash(w.data(), 4, 0));
  EXPECT_GE(a, 0.0);
  EXPECT_LT(a, 1.0);
}

TEST(Goldfish, StaticDropsEveryKthPosition) {
  const int B = 3, T = 20;
  std::vector<int32_t> targets = random_ids(B * T, 4);
  std::vector<float> w(B * T);
  const int64_t kept =
      goldfish_weights(GoldfishOptions::parse("k=4,mode=static"), targets.data(), B, T, w.data());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) EXPECT_EQ(w[b * T + t], t % 4 == 3 ? 0.0f : 1.0f) << b << "," << t;
  EXPECT_EQ(kept, B * 15);
}

TEST(Goldfish, OptionsParseAndReportErrors) {
  EXPECT_FALSE(GoldfishOptions::parse("off").enabled());
  EXPECT_FALSE(GoldfishOptions::parse("").enabled());
  GoldfishOptions g = GoldfishOptions::parse("k=3,h=7,mode=hash,seed=11");
  EXPECT_EQ(g.mode, Mode::kHash);
  EXPECT_EQ(g.k, 3);
  EXPECT_EQ(g.h, 7);
  EXPECT_EQ(g.seed, 11u);
  EXPECT_EQ(GoldfishOptions::parse(g.str()).str(), g.str());
  EXPECT_EQ(GoldfishOptions::parse("k=4").str(), "k=4,h=13,mode=hash,seed=0");
  EXPECT_THROW(GoldfishOptions::parse("k=1"), Error);
  EXPECT_THROW(GoldfishOptions::parse("k=4,mode=random"), Error);
  EXPECT_THROW(GoldfishOptions::parse("k=4,w=3"), Error);
  EXPECT_THROW(GoldfishOptions::parse("k4"), Error);
}

// The mask by its definition, position by position: dropped where the hash of
// the h targets ending there is below 1/k; the first h-1 positions kept.
std::vector<float> reference_mask(const std::vector<int32_t>& targets, int B, int T, int k, int h) {
  std::vector<float> w(B * T, 1.0f);
  for (int b = 0; b < B; ++b)
    for (int t = h - 1; t < T; ++t)
      if (goldfish_window_hash(&targets[b * T + t - h + 1], h, 0) < 1.0 / k) w[b * T + t] = 0.0f;
  return w;
}

TEST(Goldfish, DroppedTargetsGetExactlyZeroGradient) {
  const int B = 4, T = 32, V = 96;
  ModelConfig cfg = model_config_from_json(nlohmann::json{
      {"arch", "gpt2"}, {"vocab_size", V}, {"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}, {"block_size", T}});
  auto grid = ProcessGrid::single();
  Transformer model(cfg, *grid, test::cpu_backend(), B, T);
  model.init(5);
  std::vector<int32_t> in = random_ids(B * T, 20, V), tg = random_ids(B * T, 21, V);
  std::vector<float> w(B * T);
  const GoldfishOptions g = hash_mask(4, 5);
  const int64_t kept = goldfish_weights(g, tg.data(), B, T, w.data());
  EXPECT_EQ(w, reference_mask(tg, B, T, 4, 5));
  ASSERT_LT(kept, B * T);

  model.zero_grads();
  const double loss = model.forward_backward(in.data(), tg.data(), w.data(), double(kept), B, T);
  const std::vector<float> grads(model.grads(), model.grads() + model.num_floats());
  // Other targets at the dropped positions (same weights): bit-identical loss and gradient.
  std::vector<int32_t> other = tg;
  for (int r = 0; r < B * T; ++r)
    if (w[r] == 0) other[r] = (tg[r] + 17) % V;
  model.zero_grads();
  EXPECT_EQ(model.forward_backward(in.data(), other.data(), w.data(), double(kept), B, T), loss);
  EXPECT_EQ(std::vector<float>(model.grads(), model.grads() + model.num_floats()), grads);

  // The loss is the mean cross-entropy over the kept tokens, from the logits.
  std::vector<float> logits(size_t(B) * T * V);
  model.logits(in.data(), B, T, logits.data());
  double sum = 0;
  for (int r = 0; r < B * T; ++r) {
    if (w[r] == 0) continue;
    const float* row = &logits[size_t(r) * V];
    double mx = row[0], z = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, double(row[j]));
    for (int j = 0; j < V; ++j) z += std::exp(row[j] - mx);
    sum += mx + std::log(z) - row[tg[r]];
  }
  EXPECT_NEAR(loss, sum / kept, 1e-5 * loss);
}

TEST(Goldfish, DroppedLogitRowsAndInputRowsHaveZeroGradient) {
  const int m = 40, C = 16, V = 50, Vp = 64;
  std::vector<float> x(m * C), w(Vp * C), dx(m * C), dw(Vp * C, 0.0f);
  for (int i = 0; i < m * C; ++i) x[i] = float(random_normal(1, 1, i));
  for (int i = 0; i < Vp * C; ++i) w[i] = float(random_normal(1, 2, i));
  std::vector<int32_t> tg = random_ids(m, 30, V);
  std::vector<float> weight(m);
  const int64_t kept = goldfish_weights(hash_mask(3, 2), tg.data(), 1, m, weight.data());
  // The head on one rank (the GEMMs around the pieces below): a dropped row's dx is exactly zero.
  test::lm_head_loss(dx.data(), dw.data(), x.data(), w.data(), tg.data(), weight.data(),
                     double(kept), m, C, V, Vp, m);
  int dropped = 0;
  for (int r = 0; r < m; ++r) {
    const bool zero_row =
        std::all_of(&dx[r * C], &dx[r * C] + C, [](float v) { return v == 0.0f; });
    EXPECT_EQ(zero_row, weight[r] == 0) << "row " << r;
    dropped += weight[r] == 0;
  }
  EXPECT_GT(dropped, 3);
  // The vocabulary-parallel pieces: a dropped row's dlogits are exactly zero.
  std::vector<float> logits(m * Vp), stats(2 * m), lse(m);
  for (int i = 0; i < m * Vp; ++i) logits[i] = float(random_normal(2, 3, i));
  test::cpu_ops().ce_local_stats(stats.data(), logits.data(), tg.data(), weight.data(),
                                 {m, Vp, 0, V});
  double total = 0.0;
  test::cpu_ops().ce_combine(lse.data(), stats.data(), weight.data(), m, 1, &total);
  test::cpu_ops().ce_dlogits(logits.data(), lse.data(), tg.data(), weight.data(), double(kept),
                             {m, Vp, 0, V});
  for (int r = 0; r < m; ++r) {
    if (weight[r] != 0) continue;
    for (int j = 0; j < Vp; ++j) ASSERT_EQ(logits[r * Vp + j], 0.0f) << r << "," << j;
  }
}

}  // namespace
}  // namespace dendrite
