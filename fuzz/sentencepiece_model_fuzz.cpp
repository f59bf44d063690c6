// libFuzzer target: arbitrary bytes as a SentencePiece .model file, opened
// as Dendrite's own (line encoding) and as a Hugging Face folder's (the whole
// text, with the dummy-prefix-free copy sentencepiece_model.h writes), then
// a fixed text encoded, decoded and streamed. Bad input must end in a
// dendrite::Error.
#include <cstdint>
#include <string>
#include <string_view>

#include "dendrite/core/check.h"
#include "dendrite/io/sentencepiece_model.h"
#include "dendrite/io/tokenizer.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  dendrite::SentencePieceSettings settings;
  if (dendrite::read_sentencepiece_settings(bytes, &settings))
    (void)dendrite::without_dummy_prefix(bytes);
  const std::string path = dendrite::fuzz::write_input(data, size, ".model");
  const std::string text = "Hello world 12345\n\n  \xE6\x97\xA5\xF0\x9F\x99\x82 \xFF end";
  for (auto encoding :
       {dendrite::SentencePieceEncoding::kLines, dendrite::SentencePieceEncoding::kWhole}) {
    try {
      dendrite::Tokenizer tok(path, encoding);
      const std::vector<int32_t> ids = tok.encode(text);
      (void)tok.decode(ids);
      auto stream = tok.stream();
      for (int32_t id : ids) (void)stream->next(id);
      (void)stream->finish();
    } catch (const dendrite::Error&) {
    }
  }
  return 0;
}
