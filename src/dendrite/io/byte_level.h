// GPT-2's byte-level pre-tokenization, as the tokenizers library's ByteLevel
// pre-tokenizer does it:
//  - the text is split into words by GPT-2's regex
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//    (split_gpt2_words, a hand-written scanner with the regex's semantics);
//  - each byte of a word becomes one printable character (bytes_to_unicode),
//    so that every vocabulary entry is a string of such characters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dendrite {

// GPT-2's byte -> character map, each character as UTF-8: printable Latin-1
// bytes map to themselves, the other 68 to U+0100 onwards in byte order.
const std::array<std::string, 256>& byte_to_unicode();

// The inverse map: byte of a character of byte_to_unicode, -1 for others.
int unicode_to_byte(char32_t cp);

// The words of text, in order; their concatenation is text. Bytes that are
// not valid UTF-8 count as punctuation (neither letter, number nor space).
std::vector<std::string_view> split_gpt2_words(std::string_view text);

// Positions at which text can be cut into pieces that split_gpt2_words
// treats independently (a word always ends there and scanning restarts there
// the same way): right after a "\n" that a non-space character follows.
// Returns cut positions, increasing, about `target` bytes apart.
std::vector<size_t> independent_cuts(std::string_view text, size_t target);

}  // namespace dendrite
