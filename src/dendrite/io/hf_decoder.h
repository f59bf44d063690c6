// The decoders of a tokenizer.json, as the library's decode(ids,
// skip_special_tokens=False) runs them on the ids' token strings:
//   ByteLevel     each token's characters back to GPT-2's bytes (a token with
//                 a character outside the map gives its own UTF-8), joined and
//                 repaired as Rust's from_utf8_lossy
//   Metaspace     the replacement back to " " (none in the first token unless
//                 prepend_scheme is never)
//   Replace       a String or Regex pattern, in each token
//   ByteFallback  runs of <0xXX> tokens to their bytes (one U+FFFD per token
//                 when they are not UTF-8)
//   Fuse          all tokens into one
//   Strip         up to `start` / `stop` copies of content off each token's ends
//   Sequence      each in turn
// Without a decoder the tokens are joined with spaces, as the library does.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dendrite/io/hf_json.h"

namespace dendrite {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// The decoder j describes (nullptr for JSON null).
std::unique_ptr<Decoder> read_decoder(const nlohmann::json& j, const JsonWhere& where);

// The text of tokens through decoder (nullable).
std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens);

}  // namespace dendrite
