// libFuzzer target: arbitrary bytes as a token file. TokenFile must reject a
// bad file with a dendrite::Error; on a valid one, check_vocab and the batch
// sampler must stay inside the file. Letters: B batch, T sequence length.
#include <cstdint>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/io/token_file.h"
#include "fuzz_file.h"

namespace {

// Draws a training batch and every validation batch of [B, T] tokens.
void sample(const dendrite::TokenFile& file, int T) {
  const int B = 3, eval_batches = 2;
  dendrite::BatchSampler sampler(file, B, T, /*seed=*/file.size());
  std::vector<int32_t> inputs(B * T), targets(B * T);  // [B, T]
  for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{1} << 40})
    sampler.batch(step, inputs.data(), targets.data());
  for (int j = 0; j < eval_batches; ++j)
    sampler.eval_batch(j, eval_batches, inputs.data(), targets.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dendrite::fuzz::write_input(data, size, ".bin");
  try {
    dendrite::TokenFile file(path);
    if (file.size() > 0) (void)file.at(file.size() - 1);
    try {
      file.check_vocab(50257);
    } catch (const dendrite::Error&) {  // ids past the vocabulary: still sample
    }
    const int T = 1 + static_cast<int>(size % 8);
    if (file.size() > static_cast<uint64_t>(T) + 1) sample(file, T);
  } catch (const dendrite::Error&) {
  }
  return 0;
}
