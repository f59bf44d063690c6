// Added tokens split out of the text (hf_added_tokens.h).
#include "dendrite/io/hf_added_tokens.h"

#include <algorithm>
#include <numeric>

#include "dendrite/io/hf_normalizer.h"
#include "dendrite/io/unicode_classes.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

// The regex crate's \w, near enough: letters, numbers, marks, '_'.
bool is_word_char(char32_t c) {
  const CharClass k = char_class(c);
  return k == CharClass::kLetter || k == CharClass::kNumber || c == U'_' ||
         (c >= 0x300 && c <= 0x36F);
}

size_t char_start_before(std::string_view text, size_t p) {
  size_t start = p - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

}  // namespace

void AddedTokenSet::add(AddedToken token) {
  for (AddedToken& t : tokens_)
    if (t.content == token.content) {
      t = std::move(token);
      return;
    }
  tokens_.push_back(std::move(token));
}

void AddedTokenSet::finish(const Normalizer* normalizer, RegexScratch& scratch) {
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  match_.clear();
  for (const AddedToken& t : tokens_) {
    std::string m = t.content;
    if (t.normalized && normalizer) normalizer->normalize(m, true, true, scratch);
    match_.push_back(m);
  }
  // Longest (as matched) first: leftmost-longest picks the first that fits.
  std::vector<size_t> order(tokens_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return match_[a].size() > match_[b].size(); });
  std::vector<AddedToken> tokens;
  std::vector<std::string> match;
  for (size_t i : order) {
    if (match_[i].empty()) continue;
    tokens.push_back(tokens_[i]);
    match.push_back(match_[i]);
  }
  tokens_.swap(tokens);
  match_.swap(match);
  first_byte_.fill(false);
  for (const std::string& m : match_) first_byte_[static_cast<unsigned char>(m[0])] = true;
}

size_t AddedTokenSet::longest_at(std::string_view text, size_t pos,
                                 const AddedToken** match) const {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (text.compare(pos, match_[i].size(), match_[i]) == 0) {
      *match = &tokens_[i];
      return match_[i].size();
    }
  return 0;
}

void AddedTokenSet::split(std::string_view text, std::vector<TextSpan>& out) const {
  size_t seg = 0;  // start of the text not yet in a span
  for (size_t pos = 0; pos < text.size() && !tokens_.empty(); ++pos) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
    const AddedToken* tok = nullptr;
    const size_t len = longest_at(text, pos, &tok);
    if (len == 0) continue;
    size_t begin = pos, end = pos + len;
    if (tok->single_word) {
      const bool word_before =
          begin > 0 && is_word_char(read_code_point(text, char_start_before(text, begin)).value);
      const bool word_after = end < text.size() && is_word_char(read_code_point(text, end).value);
      if (word_before || word_after) {
        pos = end - 1;  // the match is consumed, as the automaton's find_iter does
        continue;
      }
    }
    while (tok->lstrip && begin > seg) {
      const size_t start = char_start_before(text, begin);
      const CodePoint cp = read_code_point(text, start);
      if (!cp.valid || !is_unicode_whitespace(cp.value)) break;
      begin = start;
    }
    while (tok->rstrip && end < text.size()) {
      const CodePoint cp = read_code_point(text, end);
      if (!cp.valid || !is_unicode_whitespace(cp.value)) break;
      end += cp.length;
    }
    if (begin > seg) out.push_back({seg, begin, -1});
    out.push_back({begin, end, tok->id});
    seg = end;
    pos = end - 1;
  }
  if (seg < text.size()) out.push_back({seg, text.size(), -1});
}

}  // namespace dendrite
