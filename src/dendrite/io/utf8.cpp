// UTF-8 reading and lossy repair (utf8.h). Well-formed means RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF; both libraries
// accept exactly these sequences and differ only in how many U+FFFD they
// write for the rest.
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Bytes in the sequence a lead byte starts; 0 for a byte that starts none.
int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether b may follow lead as the second byte: the narrowed ranges after
// E0, ED, F0 and F4 exclude overlong forms, surrogates and > U+10FFFF.
bool valid_second(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

// How many leading bytes of s are a well-formed character or the start of
// one (0: s[0] starts none); *complete tells which.
int well_formed_prefix(std::string_view s, bool* complete) {
  const auto lead = static_cast<unsigned char>(s[0]);
  const int need = sequence_length(lead);
  *complete = false;
  if (need == 0) return 0;
  int have = 1;
  while (have < need && have < static_cast<int>(s.size())) {
    const auto b = static_cast<unsigned char>(s[have]);
    if (!(have == 1 ? valid_second(lead, b) : (b >= 0x80 && b <= 0xBF))) break;
    ++have;
  }
  *complete = have == need;
  return have;
}

}  // namespace

CodePoint read_code_point(std::string_view text, size_t pos) {
  bool complete = false;
  const int n = well_formed_prefix(text.substr(pos), &complete);
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (!complete) return {lead, 1, false};
  if (n == 1) return {lead, 1, true};
  char32_t cp = lead & (0x7F >> n);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  return {cp, n, true};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Writes the held bytes out character by character. Not final: stops at a
// valid but unfinished character, which more bytes may complete.
void Utf8Stream::drain(bool final, std::string& out) {
  size_t pos = 0;
  while (pos < held_.size()) {
    const std::string_view rest = std::string_view(held_).substr(pos);
    bool complete = false;
    const int n = well_formed_prefix(rest, &complete);
    if (complete) {
      out.append(rest.data(), n);
      pos += n;
    } else if (n == static_cast<int>(rest.size()) && !final) {
      break;  // the start of a character: wait for its other bytes
    } else {
      out += kReplacement;
      pos += (repair_ == Utf8Repair::kMaximalSubpart && n > 0) ? n : 1;
    }
  }
  held_.erase(0, pos);
}

void Utf8Stream::push(std::string_view bytes, std::string& out) {
  held_.append(bytes);
  drain(false, out);
}

void Utf8Stream::flush(std::string& out) { drain(true, out); }

bool is_valid_utf8(std::string_view bytes) {
  for (size_t pos = 0; pos < bytes.size();) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const CodePoint cp = read_code_point(bytes, pos);
    if (!cp.valid) return false;
    pos += cp.length;
  }
  return true;
}

std::string repair_utf8(std::string_view bytes, Utf8Repair repair) {
  Utf8Stream stream(repair);
  std::string out;
  out.reserve(bytes.size());
  stream.push(bytes, out);
  stream.flush(out);
  return out;
}

}  // namespace dendrite
