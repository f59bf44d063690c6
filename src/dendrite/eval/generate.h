// Text generation from a trained model: greedy, temperature and top-k
// sampling. Each step runs the model over the last block_size tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dendrite/model/transformer.h"

namespace dendrite {

struct SampleOptions {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 1337;
};

// Picks a token from logits [V]; `counter` indexes the random stream.
int32_t sample_token(const float* logits, int V, const SampleOptions& opt, uint64_t counter);

// Appends n_new tokens to prompt (non-empty), calling on_token for each as it comes.
std::vector<int32_t> generate(Transformer& model, std::vector<int32_t> tokens, int n_new,
                              const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace dendrite
