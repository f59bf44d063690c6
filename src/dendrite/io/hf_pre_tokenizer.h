// The pre-tokenizers of a tokenizer.json, as the tokenizers library runs them:
// each cuts every piece the one before produced into smaller pieces (words),
// which the model then encodes one by one.
//   Split      a Regex (hf_regex.h) or String pattern; behavior Isolated,
//              Removed, MergedWithPrevious, MergedWithNext or Contiguous; invert
//   ByteLevel  GPT-2's regex when use_regex (byte_level.h), a space before a
//              piece when add_prefix_space; its byte -> character map is left
//              to the model (BpeModel's byte-level mode), so it must come last
//   Metaspace  spaces to the replacement (U+2581), prepended per
//              prepend_scheme (always / first / never), split before each one
//   Digits     numbers apart, each digit apart when individual_digits
//   Sequence   each in turn
// Any other kind is refused naming it.
#pragma once

#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "dendrite/io/hf_json.h"
#include "dendrite/io/hf_regex.h"

namespace dendrite {

// A piece of text on its way through the pre-tokenizers.
struct PreToken {
  std::string_view text;
  bool split_start;  // starts a piece the library hands over whole (add_prefix_space, "always")
  bool input_start;  // starts the input text (prepend_scheme "first")
  // Bytes readable after text that the whole text has there (a long text is
  // cut into pieces; a lookahead at the end of one sees the next).
  size_t context = 0;
};

// The per-call state of pre-tokenization: rewritten text, PCRE2's scratch.
struct PreTokenizeState {
  std::deque<std::string> arena;
  RegexScratch regex;
  std::vector<MatchSpan> matches;
};

// Where a long text may be cut so that pre-tokenization finds a boundary there.
enum class CutRule {
  kNone,
  kNewline,  // after a "\n" that a non-space follows (checked against the context)
  kSpace,    // before a " " that a non-space precedes (Metaspace: a piece starts there)
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the pieces of in to out. With in.context, returns false when the
  // whole text would have no boundary at the end of in.text.
  virtual bool split(const PreToken& in, std::vector<PreToken>& out,
                     PreTokenizeState& state) const = 0;
  virtual CutRule cut_rule() const = 0;
  // Whether every piece comes out whole (Metaspace without split, ByteLevel
  // without its regex): the model then sees stretches of text, not words.
  virtual bool keeps_whole() const { return false; }
  // Whether every piece comes out as it went in (the byte map aside).
  virtual bool passes_through() const { return false; }
  // The ByteLevel pre-tokenizer ends the chain: words are bytes to map.
  virtual bool byte_level() const { return false; }
};

// The pre-tokenizer j describes (nullptr for JSON null).
std::unique_ptr<PreTokenizer> read_pre_tokenizer(const nlohmann::json& j, const JsonWhere& where);

}  // namespace dendrite
