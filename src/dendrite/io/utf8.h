// UTF-8 for the tokenizers: reading code points, and turning byte streams
// that may split or break characters back into valid text, the way each
// library does it (tokenizers: Rust's from_utf8_lossy; SentencePiece: one
// U+FFFD per bad byte), incrementally so that streamed text matches decode().
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dendrite {

struct CodePoint {
  char32_t value;  // the byte itself for a byte that starts no valid character
  int length;      // bytes read, 1..4
  bool valid;
};

// The code point that starts at text[pos] (pos < text.size()).
CodePoint read_code_point(std::string_view text, size_t pos);

void append_utf8(std::string& out, char32_t cp);

// How a broken sequence becomes U+FFFD.
enum class Utf8Repair {
  kMaximalSubpart,  // one U+FFFD per maximal valid prefix of a character (Rust, WHATWG)
  kPerByte,         // one U+FFFD per byte not part of a valid character (SentencePiece)
};

// Incremental lossy UTF-8 decoding: push() appends to `out` every character
// the bytes so far complete, holding back the start of a character that more
// bytes may complete; flush() writes what is held as U+FFFD. Concatenated
// output equals the one-shot repair of all bytes.
class Utf8Stream {
 public:
  explicit Utf8Stream(Utf8Repair repair) : repair_(repair) {}
  void push(std::string_view bytes, std::string& out);
  void flush(std::string& out);

 private:
  void drain(bool final, std::string& out);
  Utf8Repair repair_;
  std::string held_;
};

// Whether bytes are well-formed UTF-8 throughout.
bool is_valid_utf8(std::string_view bytes);

// One-shot: bytes as valid UTF-8, broken sequences replaced.
std::string repair_utf8(std::string_view bytes, Utf8Repair repair);

}  // namespace dendrite
