// tokenizer.json pre-tokenizers (hf_pre_tokenizer.h). Splitting follows the
// library's NormalizedString::split: the matches and the text between them
// cover the piece; the behavior decides which become pieces of their own and
// which join a neighbour; empty pieces are dropped.
#include "dendrite/io/hf_pre_tokenizer.h"

#include "dendrite/io/byte_level.h"
#include "dendrite/io/unicode_classes.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

using json = nlohmann::json;

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Unit {
  size_t begin, end;
  bool match;  // for kRemoved: dropped
};

// The library's split: matches and gaps in order, then merged per behavior.
std::vector<Unit> split_units(const std::vector<MatchSpan>& matches, size_t n, bool invert,
                              Behavior behavior) {
  std::vector<Unit> seg;
  size_t prev = 0;
  for (const MatchSpan& m : matches) {
    if (m.begin > prev) seg.push_back({prev, m.begin, invert});
    seg.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev < n) seg.push_back({prev, n, invert});
  std::vector<Unit> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (Unit u : seg) out.push_back({u.begin, u.end, false});
      return out;
    case Behavior::kRemoved:
      return seg;
    case Behavior::kContiguous:
    case Behavior::kMergedWithPrevious:
      for (const Unit& u : seg) {
        const bool join = behavior == Behavior::kContiguous ? u.match == previous_match
                                                            : u.match && !previous_match;
        if (join && !out.empty())
          out.back().end = u.end;
        else
          out.push_back({u.begin, u.end, false});
        previous_match = u.match;
      }
      return out;
    case Behavior::kMergedWithNext:
      for (auto it = seg.rbegin(); it != seg.rend(); ++it) {
        if (it->match && !previous_match && !out.empty())
          out.back().begin = it->begin;
        else
          out.push_back({it->begin, it->end, false});
        previous_match = it->match;
      }
      return {out.rbegin(), out.rend()};
  }
  return out;
}

// Emits the units of in as pieces; with context, whether one ends at in's end.
bool emit_units(const PreToken& in, const std::vector<Unit>& units, std::vector<PreToken>& out) {
  const size_t n = in.text.size();
  bool boundary = in.context == 0 || n == 0;
  for (const Unit& u : units) {
    if (u.begin >= n) break;
    if (u.end > n) return false;  // runs across the cut
    if (u.end == n) boundary = true;
    if (u.match || u.end == u.begin) continue;  // removed, or empty
    out.push_back({in.text.substr(u.begin, u.end - u.begin), true, in.input_start && u.begin == 0});
  }
  return boundary;
}

Behavior read_behavior(const json& j, const JsonWhere& where) {
  const std::string b = json_get<std::string>(j, "behavior", "Isolated", where);
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  fail("open_tokenizer: ", where.file, ": key ", where.at("behavior").key, " is \"", b,
       "\"; expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous");
}

class Split final : public PreTokenizer {
 public:
  Split(const json& j, const JsonWhere& where)
      : behavior_(read_behavior(j, where)), invert_(json_get<bool>(j, "invert", false, where)) {
    const json& pattern = json_need(j, "pattern", json::value_t::object, where);
    read_pattern(pattern, where.at("pattern"), regex_, string_);
  }
  bool split(const PreToken& in, std::vector<PreToken>& out, PreTokenizeState& st) const override {
    const std::string_view all(in.text.data(), in.text.size() + in.context);
    st.matches.clear();
    if (regex_) {
      regex_->find_all(all, std::string::npos, st.regex, st.matches);
    } else if (!string_.empty()) {
      for (size_t p = all.find(string_); p != std::string_view::npos;
           p = all.find(string_, p + string_.size()))
        st.matches.push_back({p, p + string_.size()});
    }
    return emit_units(in, split_units(st.matches, all.size(), invert_, behavior_), out);
  }
  CutRule cut_rule() const override { return CutRule::kNewline; }

 private:
  Behavior behavior_;
  bool invert_;
  std::unique_ptr<Regex> regex_;
  std::string string_;
};

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(const json& j, const JsonWhere& where)
      : add_prefix_space_(json_get<bool>(j, "add_prefix_space", true, where)),
        use_regex_(json_get<bool>(j, "use_regex", true, where)) {}
  bool split(const PreToken& in, std::vector<PreToken>& out, PreTokenizeState& st) const override {
    std::string_view text = in.text;
    if (text.empty()) return true;
    if (add_prefix_space_ && in.split_start && text[0] != ' ') {
      std::string spaced(1, ' ');
      spaced += text;
      st.arena.push_back(std::move(spaced));
      text = st.arena.back();
    }
    if (!use_regex_) {
      out.push_back({text, true, in.input_start});
      return true;
    }
    bool first = true;
    for (std::string_view w : split_gpt2_words(text)) {
      out.push_back({w, true, in.input_start && first});
      first = false;
    }
    return true;  // GPT-2's regex restarts after "\n" + non-space (independent_cuts)
  }
  CutRule cut_rule() const override { return use_regex_ ? CutRule::kNewline : CutRule::kNone; }
  bool keeps_whole() const override { return !use_regex_; }
  bool passes_through() const override { return !use_regex_ && !add_prefix_space_; }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_, use_regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const json& j, const JsonWhere& where) {
    replacement_ = json_get<std::string>(j, "replacement", "\xE2\x96\x81", where);
    DENDRITE_CHECK(!replacement_.empty() &&
                       size_t(read_code_point(replacement_, 0).length) == replacement_.size(),
                   "open_tokenizer: ", where.file, ": key ", where.at("replacement").key,
                   " must be one character, not \"", replacement_, "\"");
    // Older files: add_prefix_space (true: always) instead of prepend_scheme.
    const bool add_prefix = json_get<bool>(j, "add_prefix_space", true, where);
    scheme_ = json_get<std::string>(j, "prepend_scheme", add_prefix ? "always" : "never", where);
    DENDRITE_CHECK(scheme_ == "always" || scheme_ == "first" || scheme_ == "never",
                   "open_tokenizer: ", where.file, ": key ", where.at("prepend_scheme").key,
                   " is \"", scheme_, "\"; expected always, first or never");
    split_ = json_get<bool>(j, "split", true, where);
  }
  bool split(const PreToken& in, std::vector<PreToken>& out, PreTokenizeState& st) const override {
    if (in.text.empty()) return true;
    std::string s;
    for (char c : in.text) {
      if (c == ' ')
        s += replacement_;
      else
        s += c;
    }
    const bool prepend =
        (scheme_ == "always" && in.split_start) || (scheme_ == "first" && in.input_start);
    if (prepend && s.compare(0, replacement_.size(), replacement_) != 0) s.insert(0, replacement_);
    st.arena.push_back(std::move(s));
    const std::string_view text = st.arena.back();
    const PreToken whole{text, true, in.input_start};
    if (!split_) {
      out.push_back(whole);
      return true;
    }
    st.matches.clear();
    for (size_t p = text.find(replacement_); p != std::string_view::npos;
         p = text.find(replacement_, p + replacement_.size()))
      st.matches.push_back({p, p + replacement_.size()});
    return emit_units(whole, split_units(st.matches, text.size(), false, Behavior::kMergedWithNext),
                      out);
  }
  CutRule cut_rule() const override { return split_ ? CutRule::kSpace : CutRule::kNone; }
  bool keeps_whole() const override { return !split_; }

 private:
  std::string replacement_, scheme_;
  bool split_;
};

class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  bool split(const PreToken& in, std::vector<PreToken>& out, PreTokenizeState& st) const override {
    st.matches.clear();
    for (size_t pos = 0; pos < in.text.size();) {
      const CodePoint cp = read_code_point(in.text, pos);
      if (cp.valid && char_class(cp.value) == CharClass::kNumber)
        st.matches.push_back({pos, pos + cp.length});
      pos += cp.length;
    }
    const Behavior b = individual_ ? Behavior::kIsolated : Behavior::kContiguous;
    return emit_units(in, split_units(st.matches, in.text.size(), false, b), out);
  }
  CutRule cut_rule() const override { return CutRule::kNone; }

 private:
  bool individual_;
};

class Sequence final : public PreTokenizer {
 public:
  // Parts that pass pieces on unchanged (Llama 3's ByteLevel) are kept only
  // for what they tell: the model maps bytes, pieces may stay whole.
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : byte_level_(!parts.empty() && parts.back()->byte_level()) {
    keeps_whole_ = true;
    for (auto& p : parts) {
      keeps_whole_ = keeps_whole_ && p->keeps_whole();
      (p->passes_through() ? inert_ : parts_).push_back(std::move(p));
    }
  }
  bool split(const PreToken& in, std::vector<PreToken>& out, PreTokenizeState& st) const override {
    if (parts_.empty()) {
      out.push_back(in);
      return true;
    }
    std::vector<PreToken> pieces, next;
    bool ok = parts_[0]->split(in, pieces, st);
    for (size_t i = 1; i < parts_.size(); ++i) {
      next.clear();
      for (const PreToken& p : pieces) parts_[i]->split(p, next, st);
      pieces.swap(next);
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
    return ok;
  }
  CutRule cut_rule() const override {
    return parts_.empty() ? CutRule::kNone : parts_[0]->cut_rule();
  }
  bool byte_level() const override { return byte_level_; }
  bool keeps_whole() const override { return keeps_whole_; }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_, inert_;
  bool byte_level_, keeps_whole_;
};

constexpr const char* kSupported = "Split, ByteLevel, Metaspace, Digits, Sequence";

std::unique_ptr<PreTokenizer> read_one(const json& j, const JsonWhere& where) {
  const std::string type = json_type(j, where);
  if (type == "Split") return std::make_unique<Split>(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(j, where);
  if (type == "Metaspace") return std::make_unique<Metaspace>(j, where);
  if (type == "Digits")
    return std::make_unique<Digits>(json_get<bool>(j, "individual_digits", false, where));
  if (type == "Sequence") {
    const json& list = json_need(j, "pretokenizers", json::value_t::array, where);
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      const JsonWhere w = where.at("pretokenizers").index(i);
      parts.push_back(read_one(list[i], w));
      DENDRITE_CHECK(i + 1 == list.size() || !parts.back()->byte_level(),
                     "open_tokenizer: ", where.file, ": key ", w.key,
                     ": a ByteLevel pre-tokenizer before others is not supported (it must be "
                     "the last, as in GPT-2, Llama 3 and Qwen2)");
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  unsupported_kind(where, type, kSupported);
}

}  // namespace

std::unique_ptr<PreTokenizer> read_pre_tokenizer(const json& j, const JsonWhere& where) {
  if (j.is_null()) return nullptr;
  return read_one(j, where);
}

}  // namespace dendrite
