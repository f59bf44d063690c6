// tokenizer.json decoders (hf_decoder.h).
#include "dendrite/io/hf_decoder.h"

#include "dendrite/io/byte_level.h"
#include "dendrite/io/hf_regex.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

using json = nlohmann::json;

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all_mapped = true;
      for (size_t pos = 0; pos < t.size() && all_mapped;) {
        const CodePoint cp = read_code_point(t, pos);
        const int b = cp.valid ? unicode_to_byte(cp.value) : -1;
        all_mapped = b >= 0;
        mapped += static_cast<char>(b);
        pos += cp.length;
      }
      bytes += all_mapped ? mapped : t;
    }
    tokens = {repair_utf8(bytes, Utf8Repair::kMaximalSubpart)};
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const json& j, const JsonWhere& where) {
    const json& pattern = json_need(j, "pattern", json::value_t::object, where);
    content_ = json_get<std::string>(j, "content", "", where);
    if (pattern.contains("Regex"))
      regex_ =
          std::make_unique<Regex>(json_get<std::string>(pattern, "Regex", "", where.at("pattern")),
                                  where.at("pattern").at("Regex"));
    else
      string_ = json_get<std::string>(pattern, "String", "", where.at("pattern"));
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    RegexScratch scratch;
    std::vector<MatchSpan> matches;
    for (std::string& t : tokens) {
      matches.clear();
      if (regex_) {
        regex_->find_all(t, std::string::npos, scratch, matches);
      } else if (!string_.empty()) {
        for (size_t p = t.find(string_); p != std::string::npos;
             p = t.find(string_, p + string_.size()))
          matches.push_back({p, p + string_.size()});
      }
      std::string out;
      size_t done = 0;
      for (const MatchSpan& m : matches) {
        out.append(t, done, m.begin - done);
        out += content_;
        done = m.end;
      }
      out.append(t, done, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string string_, content_;
};

// The byte of a "<0xXX>" token (Rust's u8::from_str_radix: a '+' may lead), -1 if none.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int value = 0;
  for (size_t i = t[3] == '+' ? 4 : 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (repair_utf8(bytes, Utf8Repair::kPerByte) == bytes)
        out.push_back(bytes);
      else
        for (size_t i = 0; i < count; ++i) out.push_back("\xEF\xBF\xBD");
      bytes.clear();
      count = 0;
    };
    for (std::string& t : tokens) {
      const int b = fallback_byte(t);
      if (b >= 0) {
        bytes += static_cast<char>(b);
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens = {all};
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const size_t n = content_.size();
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t i = 0; i < start_ && n > 0 && t.compare(begin, n, content_) == 0; ++i) begin += n;
      for (size_t i = 0;
           i < stop_ && n > 0 && end >= begin + n && t.compare(end - n, n, content_) == 0; ++i)
        end -= n;
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> read_decoder(const json& j, const JsonWhere& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    const bool add_prefix = json_get<bool>(j, "add_prefix_space", true, where);
    const std::string scheme =
        json_get<std::string>(j, "prepend_scheme", add_prefix ? "always" : "never", where);
    return std::make_unique<MetaspaceDecoder>(
        json_get<std::string>(j, "replacement", "\xE2\x96\x81", where), scheme != "never");
  }
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j, where);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const int64_t start = json_get<int64_t>(j, "start", 0, where);
    const int64_t stop = json_get<int64_t>(j, "stop", 0, where);
    DENDRITE_CHECK(start >= 0 && stop >= 0 && start < (1 << 20) && stop < (1 << 20),
                   "open_tokenizer: ", where.file, ": key ", where.key,
                   ": Strip needs start and stop in [0, 2^20), not ", start, " and ", stop);
    return std::make_unique<StripDecoder>(json_get<std::string>(j, "content", " ", where),
                                          size_t(start), size_t(stop));
  }
  if (type == "Sequence") {
    const json& list = json_need(j, "decoders", json::value_t::array, where);
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto d = read_decoder(list[i], where.at("decoders").index(i));
      if (d) parts.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  unsupported_kind(where, type,
                   "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence");
}

std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens) {
  std::string out;
  if (decoder == nullptr) {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder->decode_chain(tokens);
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace dendrite
