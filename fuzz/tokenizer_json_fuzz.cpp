// libFuzzer target: arbitrary bytes as a tokenizer.json (the reader of
// open_tokenizer: ByteLevelBpe for GPT-2's kind, HfTokenizer for the rest);
// what opens then encodes and decodes a fixed text. Bad input must end in a
// dendrite::Error or a nlohmann::json exception.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "dendrite/core/check.h"
#include "dendrite/io/bpe_tokenizer.h"
#include "dendrite/io/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  const std::string text =
      "Hello <s>world</s> 12345 DON'T \xE2\x96\x81x  \n\n\xE6\x97\xA5\xF0\x9F\x99\x82 e\xCC\x81 "
      "\xFF";
  try {
    std::unique_ptr<dendrite::TextTokenizer> tok;
    if (dendrite::ByteLevelBpe::reads(j))
      tok = dendrite::ByteLevelBpe::from_tokenizer_json(j, "fuzz.json", {});
    else
      tok = dendrite::HfTokenizer::from_tokenizer_json(j, "fuzz.json", {});
    const std::vector<int32_t> ids = tok->encode(text);
    (void)tok->decode(ids);
    auto stream = tok->stream(true);
    for (int32_t id : ids) (void)stream->next(id);
    (void)stream->finish();
  } catch (const dendrite::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}
