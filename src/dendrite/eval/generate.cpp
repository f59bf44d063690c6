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

std::vector<int32_t> generate(Transformer& model, std::vector<int32_t> tokens, int n_new,
                              const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
  DENDRITE_CHECK(!tokens.empty(), "generate: the prompt is empty; give at least one token");
  const int V = model.config().vocab_size, T_max = model.config().block_size;
  std::vector<float> logits(V);
  for (int i = 0; i < n_new; ++i) {
    int T = std::min<int>(int(tokens.size()), T_max);
    model.last_logits(tokens.data() + tokens.size() - T, T, logits.data());
    int32_t next = sample_token(logits.data(), V, opt, tokens.size());
    tokens.push_back(next);
    if (on_token) on_token(next);
  }
  return tokens;
}

}  // namespace dendrite
