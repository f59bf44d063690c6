// tokenizer.json regular expressions run by PCRE2 (hf_regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "dendrite/io/hf_regex.h"

#include <pcre2.h>

namespace dendrite {

namespace {

constexpr size_t kJitStackMax = 64 << 20;  // deep backtracking over long runs of one class

std::string pcre2_error(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// The PCRE2 text of escape `e` (the letter after the backslash); empty when
// it means the same in both.
std::string rewrite_escape(char e, bool in_class, const std::string& pattern,
                           const JsonWhere& where) {
  const char* set = nullptr;
  bool negated = false;
  switch (e) {
    case 's':
    case 'S':
      return e == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
    case 'w':
    case 'W':
      set = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
      negated = e == 'W';
      break;
    case 'h':
    case 'H':
      set = "0-9a-fA-F";
      negated = e == 'H';
      break;
    default:
      return "";
  }
  if (!in_class) return std::string(negated ? "[^" : "[") + set + "]";
  DENDRITE_CHECK(!negated, "open_tokenizer: ", where.file, ": key ", where.key, ": the pattern \"",
                 pattern, "\" uses \\", e, " inside [...], which PCRE2 cannot express as ",
                 "Oniguruma means it; not supported");
  return set;
}

}  // namespace

std::string pcre2_pattern(const std::string& p, const JsonWhere& where) {
  auto refuse = [&](const char* what) {
    fail("open_tokenizer: ", where.file, ": key ", where.key, ": the pattern \"", p, "\" uses ",
         what, ", which PCRE2 does not run as Oniguruma does; not supported");
  };
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const std::string r = rewrite_escape(p[i + 1], in_class, p, where);
      out += r.empty() ? p.substr(i, 2) : r;
      ++i;
    } else if (c == '[' && in_class) {
      if (p.compare(i, 2, "[:") != 0) refuse("a class nested inside [...]");
      const size_t end = p.find(":]", i + 2);
      if (end == std::string::npos) refuse("an unterminated [: class");
      out += p.substr(i, end + 2 - i);
      i = end + 1;
    } else if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ] first
    } else if (c == ']' && in_class) {
      in_class = false;
      out += c;
    } else if (c == '&' && in_class && i + 1 < p.size() && p[i + 1] == '&') {
      refuse("the && class intersection");
    } else {
      out += c;
    }
  }
  return out;
}

RegexScratch::RegexScratch()
    : match_(pcre2_match_data_create(1, nullptr)), context_(pcre2_match_context_create(nullptr)) {
  DENDRITE_CHECK(match_ && context_, "Regex: PCRE2 could not allocate its match state");
}

// PCRE2's own 32 KB JIT stack suffices but for deep backtracking: a larger
// one is made only then.
bool RegexScratch::grow_stack() {
  if (stack_ != nullptr) return false;
  stack_ = pcre2_jit_stack_create(1 << 20, kJitStackMax, nullptr);
  DENDRITE_CHECK(stack_ != nullptr, "Regex: PCRE2 could not allocate a JIT stack");
  pcre2_jit_stack_assign(context_, nullptr, stack_);
  return true;
}

RegexScratch::~RegexScratch() {
  pcre2_match_context_free(context_);
  if (stack_ != nullptr) pcre2_jit_stack_free(stack_);
  pcre2_match_data_free(match_);
}

Regex::Regex(const std::string& pattern, const JsonWhere& where) : pattern_(pattern) {
  const std::string translated = pcre2_pattern(pattern, where);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NO_UTF_CHECK, &error,
                        &offset, cc);
  pcre2_compile_context_free(cc);
  DENDRITE_CHECK(code_ != nullptr, "open_tokenizer: ", where.file, ": key ", where.key,
                 ": PCRE2 cannot compile the pattern \"", pattern, "\" (", pcre2_error(error),
                 " at offset ", offset, " of \"", translated, "\"); not supported");
  // JIT is a speed-up only: without it (an unsupported machine) the interpreter runs.
  (void)pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view subject, size_t stop, RegexScratch& scratch,
                     std::vector<MatchSpan>& out) const {
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  while (pos <= subject.size() && pos < stop) {  // an empty match may end the subject
    int rc = pcre2_match(code_, s, subject.size(), pos, PCRE2_NO_UTF_CHECK, scratch.match_,
                         scratch.context_);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && scratch.grow_stack())
      rc = pcre2_match(code_, s, subject.size(), pos, PCRE2_NO_UTF_CHECK, scratch.match_,
                       scratch.context_);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    DENDRITE_CHECK(rc > 0, "Regex: PCRE2 failed on the pattern \"", pattern_,
                   "\": ", pcre2_error(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match_);
    if (ov[0] >= stop) return;
    out.push_back({ov[0], ov[1]});
    if (ov[1] > ov[0]) {
      pos = ov[1];
    } else {  // an empty match: move on one character
      pos = ov[0] + 1;
      while (pos < subject.size() && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80)
        ++pos;
    }
  }
}

void read_pattern(const nlohmann::json& pattern, const JsonWhere& where,
                  std::unique_ptr<Regex>& regex, std::string& text) {
  if (pattern.contains("Regex")) {
    regex = std::make_unique<Regex>(json_get<std::string>(pattern, "Regex", "", where),
                                    where.at("Regex"));
    return;
  }
  DENDRITE_CHECK(pattern.contains("String"), "open_tokenizer: ", where.file, ": key ", where.key,
                 " is ", pattern.dump(), "; expected {\"String\": ...} or {\"Regex\": ...}");
  text = json_get<std::string>(pattern, "String", "", where);
}

}  // namespace dendrite
