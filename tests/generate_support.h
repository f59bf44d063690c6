// Shared by the generation tests: one sequence generated through the batched
// generation of eval/generate.h, as a batch of one.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "dendrite/eval/generate.h"

namespace dendrite::test {

// Appends n_new tokens to the prompt (non-empty), calling on_token for each
// as it comes, sampled as opt says.
inline Ids generate(Transformer& model, Ids tokens, int n_new, const SampleOptions& opt,
                    const std::function<void(int32_t)>& on_token = {}, bool use_cache = true) {
  std::vector<Ids> out = generate_batch(model, {std::move(tokens)}, n_new,
                                        sampling_picker(model.config().vocab_size, opt), use_cache,
                                        [&](int, const Ids& next) {
                                          if (on_token) on_token(next[0]);
                                        });
  return std::move(out[0]);
}

}  // namespace dendrite::test
