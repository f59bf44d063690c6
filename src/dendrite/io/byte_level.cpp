// GPT-2's byte-level pre-tokenization (byte_level.h).
//
// The scanner reproduces the regex's leftmost-first alternation at each
// position: a contraction ('s 't 're 've 'm 'll 'd, lower case only), else an
// optional single space before a run of letters, of numbers or of other
// characters, else a run of whitespace (all of it at the end of the text; all
// but its last character when more than one and a non-space follows, since
// \s+(?!\S) backtracks one character; the single character otherwise).
#include "dendrite/io/byte_level.h"

#include "dendrite/io/unicode_classes.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

// Printable bytes that GPT-2 keeps as themselves: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF.
bool printable_byte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<char32_t, 256> byte_code_points() {
  std::array<char32_t, 256> cps{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) cps[b] = printable_byte(b) ? char32_t(b) : next++;
  return cps;
}

CharClass class_at(std::string_view text, size_t pos, int* length) {
  const CodePoint cp = read_code_point(text, pos);
  *length = cp.length;
  return cp.valid ? char_class(cp.value) : CharClass::kOther;
}

// End of the run of characters of class cls that starts at pos.
size_t run_end(std::string_view text, size_t pos, CharClass cls) {
  int len = 0;
  while (pos < text.size() && class_at(text, pos, &len) == cls) pos += len;
  return pos;
}

// Length of the contraction after an apostrophe at text[pos - 1], 0 if none.
size_t contraction_length(std::string_view text, size_t pos) {
  const std::string_view rest = text.substr(pos);
  for (std::string_view c : {"s", "t", "re", "ve", "m", "ll", "d"})
    if (rest.substr(0, c.size()) == c) return c.size();
  return 0;
}

// End of the word that starts at pos.
size_t word_end(std::string_view text, size_t pos) {
  if (text[pos] == '\'') {
    if (size_t n = contraction_length(text, pos + 1)) return pos + 1 + n;
  }
  int len = 0;
  if (text[pos] == ' ' && pos + 1 < text.size()) {  // " ?X+" with the space
    const CharClass next = class_at(text, pos + 1, &len);
    if (next != CharClass::kSpace) return run_end(text, pos + 1, next);
  }
  const CharClass cls = class_at(text, pos, &len);
  if (cls != CharClass::kSpace) return run_end(text, pos, cls);
  // Whitespace: find the run's end and where its last character starts.
  size_t last = pos, end = pos;
  while (end < text.size() && class_at(text, end, &len) == CharClass::kSpace) {
    last = end;
    end += len;
  }
  if (end == text.size()) return end;  // \s+(?!\S) takes all of a final run
  return last > pos ? last : end;      // \s+(?!\S) leaves the last one, else \s+
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    const std::array<char32_t, 256> cps = byte_code_points();
    for (int b = 0; b < 256; ++b) append_utf8(t[b], cps[b]);
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  if (cp < 0x100) return printable_byte(int(cp)) ? int(cp) : -1;
  static const std::array<char32_t, 256> cps = byte_code_points();
  for (int b = 0; b < 256; ++b)
    if (cps[b] == cp) return b;
  return -1;
}

std::vector<std::string_view> split_gpt2_words(std::string_view text) {
  std::vector<std::string_view> words;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = word_end(text, pos);
    words.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return words;
}

std::vector<size_t> independent_cuts(std::string_view text, size_t target) {
  // After "\n" + non-space the whitespace run before has ended (a "\n" is no
  // optional " " prefix), and no alternative of the regex looks behind.
  std::vector<size_t> cuts;
  size_t pos = target;
  while (pos < text.size()) {
    pos = text.find('\n', pos);
    if (pos == std::string_view::npos || pos + 1 >= text.size()) break;
    int len = 0;
    if (class_at(text, pos + 1, &len) != CharClass::kSpace) {
      cuts.push_back(pos + 1);
      pos += 1 + target;
    } else {
      pos += 1;
    }
  }
  return cuts;
}

}  // namespace dendrite
