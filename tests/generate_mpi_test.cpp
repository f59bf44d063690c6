// Generation with the key/value cache on every process grid of 1, 2, 4 and 8
// ranks (under `mpirun -np 8`, like parallel_mpi_test.cpp): a batch of 8
// sequences decoded greedily on the grid gives every rank the tokens one
// process gives, with the cache and without it, GPT-2 and Llama (GQA), and
// every logit each token was picked from within 1e-5 of one process's (small
// errors in the logits of a random model rarely change a greedy token, so the
// tokens alone would prove little).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backend_support.h"
#include "dendrite/comm/grid.h"
#include "dendrite/core/rng.h"
#include "dendrite/eval/generate.h"
#include "dendrite/model/transformer.h"
#include "grid_support.h"

namespace dendrite {
namespace {

class GenerateOnEveryGrid : public ::testing::TestWithParam<const char*> {};

// A greedy picker that keeps every logits row it is shown, by sequence and
// position (a rank of a grid with d or z above 1 picks only its sequences').
struct RecordingPicker {
  std::map<std::pair<int, int64_t>, std::vector<float>> seen;
  TokenPicker picker(int V) {
    return [this, V, greedy = greedy_picker(V)](const float* logits, int b, int64_t position) {
      seen[{b, position}].assign(logits, logits + V);
      return greedy(logits, b, position);
    };
  }
};

// Largest |got - want| / (1 + |want|) over the rows `got` saw (each must be
// one `want` saw too); 1e30 when got saw none.
double worst_logit_error(const RecordingPicker& got, const RecordingPicker& want) {
  double worst = got.seen.empty() ? 1e30 : 0;
  for (const auto& [key, row] : got.seen) {
    auto it = want.seen.find(key);
    if (it == want.seen.end() || it->second.size() != row.size()) return 1e30;
    for (size_t i = 0; i < row.size(); ++i)
      worst = std::max(
          worst, std::abs(double(row[i]) - it->second[i]) / (1 + std::abs(double(it->second[i]))));
  }
  return worst;
}

TEST_P(GenerateOnEveryGrid, TokensEqualOneProcess) {
  const std::string arch = GetParam();
  nlohmann::json j = {{"arch", arch}, {"vocab_size", 96}, {"n_layer", 2}, {"n_embd", 32},
                      {"n_head", 4},  {"ffn_hidden", 64}, {"block_size", 32}};
  if (arch == "llama") j["n_kv_head"] = 2;
  const ModelConfig c = model_config_from_json(j);
  const int B = 8, p = 6, n_new = 10, T_max = p + n_new - 1;
  std::vector<Ids> prompts;
  for (int b = 0; b < B; ++b) {
    Ids x(p);
    for (int i = 0; i < p; ++i) x[i] = int32_t(random_bits(40 + b, 3, i) % 96);
    prompts.push_back(x);
  }
  const TokenPicker greedy = greedy_picker(c.vocab_size);
  auto one = ProcessGrid::single();
  Transformer single(c, *one, test::cpu_backend(), B, T_max);
  single.init(9);
  RecordingPicker reference;
  const std::vector<Ids> want =
      generate_batch(single, prompts, n_new, reference.picker(c.vocab_size));
  ASSERT_EQ(reference.seen.size(), size_t(B) * n_new);
  ASSERT_EQ(want, generate_batch(single, prompts, n_new, greedy, /*use_cache=*/false));
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int tested = 0;
  for (int P : {1, 2, 4, 8}) {
    if (world % P != 0) continue;
    const auto sub = test::group_of(P);
    bool first_of_P = true;
    for (const GridShape& g : test::grids_of(P)) {
      if (c.n_embd % g.x || c.n_head % g.y || c.n_kv_head % g.y || c.ffn_hidden % g.y) continue;
      ProcessGrid grid(g, *sub);
      Transformer model(c, grid, test::cpu_backend(), B, T_max);
      model.init(9);
      RecordingPicker got;
      EXPECT_EQ(generate_batch(model, prompts, n_new, got.picker(c.vocab_size)), want)
          << arch << " on " << g.str();
      EXPECT_LT(worst_logit_error(got, reference), 1e-5) << arch << " on " << g.str();
      if (first_of_P) {  // and without the cache, once per size
        EXPECT_EQ(generate_batch(model, prompts, n_new, greedy, false), want)
            << arch << " on " << g.str() << " without the cache";
      }
      first_of_P = false;
      ++tested;
    }
  }
  EXPECT_GT(tested, 20);
}

INSTANTIATE_TEST_SUITE_P(Tiny, GenerateOnEveryGrid, ::testing::Values("gpt2", "llama"));

}  // namespace
}  // namespace dendrite
