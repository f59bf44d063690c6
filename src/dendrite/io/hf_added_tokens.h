// The added tokens of a tokenizer.json, split out of the text as the
// tokenizers library's AddedVocabulary does: tokens with normalized = false
// are found in the raw text first; the text between them is normalized and
// the tokens with normalized = true (their content normalized too) are found
// in that. Matching is leftmost-longest; a single_word token only counts
// between non-word characters; lstrip / rstrip take the whitespace around it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dendrite {

class Normalizer;
class RegexScratch;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = false;
};

// A stretch of text: an added token (id >= 0) or text to encode (id -1).
struct TextSpan {
  size_t begin, end;
  int32_t id;
};

class AddedTokenSet {
 public:
  // The tokens of one kind (normalized or not); a repeated content keeps the last.
  void add(AddedToken token);
  // Orders them for matching; contents normalized with normalizer (nullable).
  void finish(const Normalizer* normalizer, RegexScratch& scratch);
  // text as spans, in order, covering it; empty text gives none.
  void split(std::string_view text, std::vector<TextSpan>& out) const;
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  size_t longest_at(std::string_view text, size_t pos, const AddedToken** match) const;
  std::vector<AddedToken> tokens_;  // longest first after finish()
  std::vector<std::string> match_;  // the text each is matched as
  std::array<bool, 256> first_byte_{};
};

}  // namespace dendrite
