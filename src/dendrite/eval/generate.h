// Text generation from a trained model: greedy, temperature and top-k
// sampling, for a batch of sequences on any grid.
//
// With the key/value cache (the default) the prompts run through the model
// once, and then each new token runs one position, attending to the cached
// keys and values of the earlier ones. Without it, each new token runs the
// model over the whole sequence again. Once a sequence is longer than the
// model's max_T positions, each token runs the window of its last max_T
// tokens whole (the positions shift, so the cache cannot be reused), in both
// modes: the two give the same tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dendrite/model/transformer.h"

namespace dendrite {

using Ids = std::vector<int32_t>;

struct SampleOptions {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 1337;
};

// Picks a token from logits [V]; `counter` indexes the random stream.
int32_t sample_token(const float* logits, int V, const SampleOptions& opt, uint64_t counter);

// The random-stream counter of sequence b's token at `position`: the
// position itself for sequence 0, so one sequence samples as it always has.
uint64_t sample_counter(int b, int64_t position);

// Chooses sequence b's token at `position` from its logits [V].
using TokenPicker = std::function<int32_t(const float* logits, int b, int64_t position)>;
TokenPicker greedy_picker(int V);
TokenPicker sampling_picker(int V, const SampleOptions& opt);

// Continues B = prompts.size() prompts of one length by n_new tokens each.
// Every rank of the model's grid calls it; B must be divisible by Gd * Gz
// and at most the batch the model was sized for. Every rank returns all B
// sequences (prompt, then the new tokens). on_step(i, next) runs on every
// rank after step i with the B new tokens.
std::vector<Ids> generate_batch(Transformer& model, const std::vector<Ids>& prompts, int n_new,
                                const TokenPicker& pick, bool use_cache = true,
                                const std::function<void(int, const Ids&)>& on_step = {});

}  // namespace dendrite
