// Generation with the key/value cache on one process: the logits of each new
// position equal those of the whole sequence run again, the tokens equal the
// ones generated without the cache (greedy and sampled, past the model's
// max_T too), and misuse is refused. Grids: generate_mpi_test.cpp.
#include "dendrite/eval/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend_support.h"
#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"
#include "dendrite/model/transformer.h"
#include "generate_support.h"

namespace dendrite {
namespace {

ModelConfig tiny(const std::string& arch) {
  nlohmann::json j = {{"arch", arch}, {"vocab_size", 96}, {"n_layer", 2}, {"n_embd", 32},
                      {"n_head", 4},  {"ffn_hidden", 64}, {"block_size", 32}};
  if (arch == "llama") j["n_kv_head"] = 2;
  return model_config_from_json(j);
}

Ids random_ids(int n, uint64_t seed) {
  Ids x(n);
  for (int i = 0; i < n; ++i) x[i] = int32_t(random_bits(seed, 7, i) % 96);
  return x;
}

// The largest |a - b| over the largest |b|.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return err / scale;
}

struct Case {
  const char* arch;
  Precision precision;
};

class Generation : public ::testing::TestWithParam<Case> {};

// The prompt, then one token at a time: the cached logits of the last
// position against last_position_logits over the whole sequence so far.
TEST_P(Generation, CachedLogitsEqualTheWholeSequence) {
  const ModelConfig cfg = tiny(GetParam().arch);
  ModelOptions mo;
  mo.precision = GetParam().precision;
  auto grid = ProcessGrid::single();
  const int B = 3, p = 5, T_max = 16, V = cfg.vocab_size;
  Transformer model(cfg, *grid, test::cpu_backend(), B, T_max, mo);
  model.init(3);
  std::vector<Ids> seqs;
  for (int b = 0; b < B; ++b) seqs.push_back(random_ids(p, 10 + b));
  std::vector<float> cached(size_t(B) * V), whole(cached.size());
  std::vector<int32_t> in;
  // A product over fewer rows may sum in another order (fp32 rounding); under
  // bf16 precision such a difference can move an activation's rounding to
  // bf16 by one unit, 2^-8 relative, and that carries to the logits.
  const double tol = GetParam().precision == Precision::kBF16 ? 0x1p-8 : 1e-5;
  model.start_generation();
  for (int len = p; len <= T_max; ++len) {
    const int T_new = len == p ? p : 1;
    in.clear();
    for (const Ids& x : seqs) in.insert(in.end(), x.end() - T_new, x.end());
    model.generation_logits(in.data(), B, T_new, cached.data());
    EXPECT_EQ(model.cached_positions(), len);
    in.clear();
    for (const Ids& x : seqs) in.insert(in.end(), x.begin(), x.end());
    model.last_position_logits(in.data(), B, len, whole.data());
    EXPECT_LE(relative_error(cached, whole), tol) << "at " << len << " tokens";
    for (int b = 0; b < B; ++b) seqs[b].push_back(int32_t(random_bits(20 + b, 8, len) % 96));
  }
}

// Greedy batches and a sampled sequence, from a prompt of 5 to 25 tokens on a
// model sized for 12: the cache, then the window of the last 12 run whole.
TEST_P(Generation, SameTokensWithAndWithoutTheCache) {
  const ModelConfig cfg = tiny(GetParam().arch);
  ModelOptions mo;
  mo.precision = GetParam().precision;
  auto grid = ProcessGrid::single();
  const int B = 4, p = 5, n_new = 20;
  Transformer model(cfg, *grid, test::cpu_backend(), B, 12, mo);
  model.init(5);
  std::vector<Ids> prompts;
  for (int b = 0; b < B; ++b) prompts.push_back(random_ids(p, 30 + b));
  const TokenPicker greedy = greedy_picker(cfg.vocab_size);
  const std::vector<Ids> with = generate_batch(model, prompts, n_new, greedy, true);
  const std::vector<Ids> without = generate_batch(model, prompts, n_new, greedy, false);
  ASSERT_EQ(with.size(), size_t(B));
  for (int b = 0; b < B; ++b) {
    EXPECT_EQ(with[b].size(), size_t(p + n_new));
    EXPECT_TRUE(std::equal(prompts[b].begin(), prompts[b].end(), with[b].begin()));
    EXPECT_EQ(with[b], without[b]) << "sequence " << b;
  }
  SampleOptions so;
  so.temperature = 0.9f;
  so.top_k = 20;
  so.seed = 77;
  Ids streamed;
  const Ids a =
      test::generate(model, prompts[0], n_new, so, [&](int32_t id) { streamed.push_back(id); });
  const Ids b = test::generate(model, prompts[0], n_new, so, {}, /*use_cache=*/false);
  EXPECT_EQ(a, b);
  EXPECT_EQ(streamed, Ids(a.begin() + p, a.end()));
  // Sequence b of a batch samples from its own stream (0 keeps the single one's).
  const std::vector<Ids> two =
      generate_batch(model, {prompts[0], prompts[0]}, n_new, sampling_picker(cfg.vocab_size, so));
  EXPECT_EQ(two[0], a);
  EXPECT_NE(two[1], a);
}

INSTANTIATE_TEST_SUITE_P(Tiny, Generation,
                         ::testing::Values(Case{"gpt2", Precision::kF32},
                                           Case{"llama", Precision::kF32},
                                           Case{"gpt2", Precision::kBF16},
                                           Case{"llama", Precision::kBF16}),
                         [](const auto& p) {
                           return std::string(p.param.arch) +
                                  (p.param.precision == Precision::kBF16 ? "_bf16" : "_fp32");
                         });

TEST(GenerationErrors, MisuseIsNamed) {
  const ModelConfig cfg = tiny("llama");
  auto grid = ProcessGrid::single();
  Transformer model(cfg, *grid, test::cpu_backend(), 2, 8);
  model.init(1);
  std::vector<float> logits(2 * 96);
  const Ids in = random_ids(12, 1);
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { model.generation_logits(in.data(), 2, 3, logits.data()); })
                .find("start_generation"),
            std::string::npos);
  model.start_generation();
  model.generation_logits(in.data(), 2, 6, logits.data());
  EXPECT_NE(message([&] { model.generation_logits(in.data(), 2, 3, logits.data()); })
                .find("exceed the 8"),
            std::string::npos);
  EXPECT_NE(message([&] { model.generation_logits(in.data(), 1, 1, logits.data()); })
                .find("batch of 2"),
            std::string::npos);
  const TokenPicker g = greedy_picker(96);
  EXPECT_NE(message([&] { generate_batch(model, {Ids{1, 2}, Ids{3}}, 2, g); }).find("differ"),
            std::string::npos);
  EXPECT_NE(message([&] { generate_batch(model, {Ids{1}, Ids{2}, Ids{3}}, 2, g); }).find("at most"),
            std::string::npos);
  EXPECT_NE(message([&] { generate_batch(model, {Ids{}}, 2, g); }).find("empty"), std::string::npos);
}

}  // namespace
}  // namespace dendrite
