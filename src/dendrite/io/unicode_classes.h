// Unicode character classes as the GPT-2 pre-tokenization regex sees them:
// \p{L} (letters), \p{N} (numbers), \s (the White_Space property), and the
// rest. From tables of general categories, not the C library's locale
// classes: glibc's iswalpha also takes combining vowel signs (Indic scripts),
// letter-like numbers and non-ASCII digits, which would split words
// differently from the tokenizers library.
#pragma once

namespace dendrite {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass char_class(char32_t cp);
bool is_unicode_whitespace(char32_t cp);

}  // namespace dendrite
