// tokenizer.json normalizers (hf_normalizer.h). Unicode normal forms come
// from ICU's Normalizer2, which has the text checked first so that text
// already normalized (most of it) is not copied.
#include "dendrite/io/hf_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/ustring.h>

#include <vector>

#include "dendrite/io/unicode_classes.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

using json = nlohmann::json;

class UnicodeForm final : public Normalizer {
 public:
  UnicodeForm(const std::string& form, const JsonWhere& where) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC") norm_ = icu::Normalizer2::getNFCInstance(status);
    if (form == "NFD") norm_ = icu::Normalizer2::getNFDInstance(status);
    if (form == "NFKC") norm_ = icu::Normalizer2::getNFKCInstance(status);
    if (form == "NFKD") norm_ = icu::Normalizer2::getNFKDInstance(status);
    DENDRITE_CHECK(U_SUCCESS(status) && norm_ != nullptr, "open_tokenizer: ", where.file, ": key ",
                   where.key, ": ICU has no ", form, " normalizer (", u_errorName(status), ")");
  }
  void normalize(std::string& text, bool, bool, RegexScratch&) const override {
    UErrorCode status = U_ZERO_ERROR;
    if (norm_->isNormalizedUTF8(icu::StringPiece(text), status) && U_SUCCESS(status)) return;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
    status = U_ZERO_ERROR;
    norm_->normalizeUTF8(0, icu::StringPiece(text), sink, nullptr, status);
    DENDRITE_CHECK(U_SUCCESS(status), "Normalizer: ICU failed: ", u_errorName(status));
    text.swap(out);
  }

 private:
  const icu::Normalizer2* norm_ = nullptr;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text, bool, bool, RegexScratch&) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
      const CodePoint cp = read_code_point(text, pos);
      if (cp.value < 0x80) {
        const char c = text[pos];
        out += c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
      } else {
        append_lower(out, cp.value);  // one character alone: no final-sigma context
      }
      pos += cp.length;
    }
    text.swap(out);
  }

 private:
  static void append_lower(std::string& out, char32_t cp) {
    UChar in[2], lower[8];
    int32_t n = 0;
    U16_APPEND_UNSAFE(in, n, cp);
    UErrorCode status = U_ZERO_ERROR;
    const int32_t len = u_strToLower(lower, 8, in, n, "", &status);
    DENDRITE_CHECK(U_SUCCESS(status), "Normalizer: ICU lowercase failed: ", u_errorName(status));
    for (int32_t i = 0; i < len;) {
      UChar32 c;
      U16_NEXT(lower, i, len, c);
      append_utf8(out, static_cast<char32_t>(c));
    }
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text, bool seg_start, bool seg_end, RegexScratch&) const override {
    if (right_ && seg_end) {
      size_t end = text.size();
      while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        if (!is_unicode_whitespace(read_code_point(text, start).value)) break;
        end = start;
      }
      text.resize(end);
    }
    if (left_ && seg_start) {
      size_t begin = 0;
      while (begin < text.size()) {
        const CodePoint cp = read_code_point(text, begin);
        if (!is_unicode_whitespace(cp.value)) break;
        begin += cp.length;
      }
      text.erase(0, begin);
    }
  }

 private:
  bool left_, right_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text, bool seg_start, bool, RegexScratch&) const override {
    if (seg_start && !text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// Replaces every non-overlapping match, left to right, by content.
class Replace final : public Normalizer {
 public:
  Replace(const json& j, const JsonWhere& where) {
    const json& pattern = json_need(j, "pattern", json::value_t::object, where);
    content_ = json_get<std::string>(j, "content", "", where);
    read_pattern(pattern, where.at("pattern"), regex_, string_);
  }
  void normalize(std::string& text, bool, bool, RegexScratch& scratch) const override {
    std::vector<MatchSpan> matches;
    if (regex_) {
      regex_->find_all(text, std::string::npos, scratch, matches);
    } else if (!string_.empty()) {
      for (size_t p = text.find(string_); p != std::string::npos;
           p = text.find(string_, p + string_.size()))
        matches.push_back({p, p + string_.size()});
    }
    if (matches.empty()) return;
    std::string out;
    size_t done = 0;
    for (const MatchSpan& m : matches) {
      out.append(text, done, m.begin - done);
      out += content_;
      done = m.end;
    }
    out.append(text, done, std::string::npos);
    text.swap(out);
  }
  bool keeps_cuts() const override {
    if (regex_) return false;
    const bool one_char =
        !string_.empty() && size_t(read_code_point(string_, 0).length) == string_.size();
    return one_char ||
           (string_.find('\n') == std::string::npos && string_.find(' ') == std::string::npos);
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string string_, content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text, bool seg_start, bool seg_end,
                 RegexScratch& scratch) const override {
    for (const auto& p : parts_) p->normalize(text, seg_start, seg_end, scratch);
  }
  bool keeps_cuts() const override {
    for (const auto& p : parts_)
      if (!p->keeps_cuts()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> read_normalizer(const json& j, const JsonWhere& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, where);
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeForm>(type, where);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(json_get<bool>(j, "strip_left", true, where),
                                   json_get<bool>(j, "strip_right", true, where));
  if (type == "Prepend")
    return std::make_unique<Prepend>(json_get<std::string>(j, "prepend", "", where));
  if (type == "Replace") return std::make_unique<Replace>(j, where);
  if (type == "Sequence") {
    const json& list = json_need(j, "normalizers", json::value_t::array, where);
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = read_normalizer(list[i], where.at("normalizers").index(i));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  unsupported_kind(where, type,
                   "NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, Sequence");
}

}  // namespace dendrite
