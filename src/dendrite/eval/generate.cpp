#include "dendrite/eval/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"

namespace dendrite {

namespace {
constexpr uint64_t kSampleStream = 0x53414d504c45ULL;  // "SAMPLE"
}

int32_t sample_token(const float* logits, int V, const SampleOptions& opt, uint64_t counter) {
  if (opt.temperature <= 0) return int32_t(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  int k = opt.top_k > 0 && opt.top_k < V ? opt.top_k : V;
  if (k < V)
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  float mx = logits[ids[0]];
  for (int i = 0; i < k; ++i) mx = std::max(mx, logits[ids[i]]);
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[ids[i]] - mx) / opt.temperature);
  double u = random_uniform(opt.seed, kSampleStream, counter) * sum;
  for (int i = 0; i < k; ++i) {
    u -= p[i];
    if (u <= 0) return ids[i];
  }
  return ids[k - 1];
}

uint64_t sample_counter(int b, int64_t position) {
  return (uint64_t(b) << 40) + uint64_t(position);
}

TokenPicker greedy_picker(int V) {
  return [V](const float* logits, int, int64_t) {
    return int32_t(std::max_element(logits, logits + V) - logits);
  };
}

TokenPicker sampling_picker(int V, const SampleOptions& opt) {
  return [V, opt](const float* logits, int b, int64_t position) {
    return sample_token(logits, V, opt, sample_counter(b, position));
  };
}

std::vector<Ids> generate_batch(Transformer& model, const std::vector<Ids>& prompts, int n_new,
                                const TokenPicker& pick, bool use_cache,
                                const std::function<void(int, const Ids&)>& on_step) {
  const int B = int(prompts.size());
  DENDRITE_CHECK(B >= 1, "generate: no prompts");
  const size_t p = prompts[0].size();
  DENDRITE_CHECK(p >= 1, "generate: the prompt is empty; give at least one token");
  for (const Ids& x : prompts)
    DENDRITE_CHECK(x.size() == p, "generate: the prompts of a batch differ in length (", x.size(),
                   " and ", p, " tokens)");
  ProcessGrid& grid = model.grid();
  const int dz = grid.shape().d * grid.shape().z;
  DENDRITE_CHECK(B % dz == 0 && B <= model.max_batch(), "generate: a batch of ", B,
                 " sequences on grid ", grid.shape().str(), " (d*z = ", dz,
                 ") must be a multiple of d*z and at most the ", model.max_batch(),
                 " the model was sized for");
  const int V = model.config().vocab_size, T_max = model.max_sequence();
  const int B_loc = model.local_batch(B), first = model.first_sequence(B);
  std::vector<Ids> seqs = prompts;
  std::vector<int32_t> inputs;
  std::vector<float> logits(size_t(B_loc) * V);
  std::vector<double> next(B);
  Ids chosen(B);
  for (int i = 0; i < n_new; ++i) {
    const int len = int(seqs[0].size());
    // One new position when the cache holds all the tokens before the last
    // and there is room for it; else the (window of the) whole sequence.
    const bool one = use_cache && i > 0 && len <= T_max && model.cached_positions() == len - 1;
    const int T = one ? 1 : std::min(len, T_max);
    inputs.resize(size_t(B_loc) * T);
    for (int b = 0; b < B_loc; ++b)
      std::copy(seqs[first + b].end() - T, seqs[first + b].end(), inputs.begin() + size_t(b) * T);
    if (!use_cache) {
      model.last_position_logits(inputs.data(), B, T, logits.data());
    } else {
      if (!one) model.start_generation();
      model.generation_logits(inputs.data(), B, T, logits.data());
    }
    // Each rank picks the tokens of its sequences (the same on every X and Y
    // rank); a sum over the ranks of different data (Z and D) gives every
    // rank all of them.
    std::fill(next.begin(), next.end(), 0.0);
    for (int b = 0; b < B_loc; ++b) next[first + b] = pick(logits.data() + size_t(b) * V, first + b, len);
    grid.Z().all_reduce(next.data(), B);
    grid.D().all_reduce(next.data(), B);
    for (int b = 0; b < B; ++b) {
      chosen[b] = int32_t(next[b]);
      seqs[b].push_back(chosen[b]);
    }
    if (on_step) on_step(i, chosen);
  }
  return seqs;
}

}  // namespace dendrite
