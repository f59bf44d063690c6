// The regular expressions of a tokenizer.json ({"Regex": ...} patterns of
// Split, Replace), run by PCRE2 (JIT, UTF, Unicode properties) as the
// tokenizers library runs them with Oniguruma (Ruby syntax). Escapes whose
// meaning differs between the two are rewritten before compiling:
//   \s \S   Oniguruma: the White_Space property (PCRE2's \s also takes U+180E)
//   \w \W   Oniguruma: letters, marks, decimal numbers, connector punctuation
//   \h \H   Oniguruma: a hexadecimal digit (PCRE2: horizontal space)
// and ^ $ match at line ends, as in Ruby. What cannot be rewritten (a negated
// class escape or a nested class inside [...], Oniguruma's && intersection)
// is refused with the pattern's text. PCRE2 10.42 knows Unicode 15,
// Oniguruma in tokenizers 0.23 Unicode 16: a character new in 16 (a letter,
// a number) may be classed differently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dendrite/io/hf_json.h"

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_jit_stack_8;
struct pcre2_real_match_context_8;

namespace dendrite {

// PCRE2's per-matching state: one per thread (an encode call owns one).
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;

 private:
  friend class Regex;
  bool grow_stack();  // false when already grown
  pcre2_real_match_data_8* match_ = nullptr;
  pcre2_real_jit_stack_8* stack_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
};

struct MatchSpan {
  size_t begin, end;
};

class Regex {
 public:
  // where: the key that holds the pattern, for errors.
  Regex(const std::string& pattern, const JsonWhere& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-overlapping matches in subject, leftmost first, as Oniguruma's
  // find_iter gives them (after an empty match the search moves on one
  // character; an empty one may sit at the very end), appended to out, up
  // to the first that starts at or after `stop` (npos: all). The subject
  // must be valid UTF-8.
  void find_all(std::string_view subject, size_t stop, RegexScratch& scratch,
                std::vector<MatchSpan>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
};

// A tokenizer.json "pattern" object, {"Regex": ...} or {"String": ...} (where:
// the key that holds it): the compiled regex into `regex`, or the string into
// `text`; anything else is an error naming the key.
void read_pattern(const nlohmann::json& pattern, const JsonWhere& where,
                  std::unique_ptr<Regex>& regex, std::string& text);

// The pattern with Oniguruma's escapes in PCRE2's terms (above); exposed for tests.
std::string pcre2_pattern(const std::string& oniguruma, const JsonWhere& where);

}  // namespace dendrite
