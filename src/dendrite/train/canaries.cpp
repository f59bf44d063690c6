// Canary passages: splitting a canary file, seeded insertion into a token
// stream, and canaries.json (format in canaries.h).
#include "dendrite/train/canaries.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"

namespace dendrite {

namespace {

constexpr uint64_t kCanaryStream = 0x63616e6172790001ULL;  // "canary"
constexpr const char* kSeparator = "lines that are empty or hold only '%' separate passages";

bool is_separator(const std::string& line) {
  if (line == "%") return true;
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

std::vector<std::string> split_passages(const std::string& text) {
  std::vector<std::string> out;
  std::string current, line;
  std::istringstream in(text);
  auto flush = [&] {
    while (!current.empty() && current.back() == '\n') current.pop_back();
    if (!current.empty()) out.push_back(current);
    current.clear();
  };
  while (std::getline(in, line)) {
    if (is_separator(line)) {
      flush();
    } else {
      current += line;
      current += '\n';
    }
  }
  flush();
  return out;
}

std::vector<CanaryOccurrence> insert_canaries(std::vector<int32_t>& tokens,
                                              const std::vector<std::vector<int32_t>>& passages,
                                              int repeat, uint64_t seed, int32_t newline_id) {
  return insert_canaries(tokens, passages, std::vector<int>(passages.size(), repeat), seed,
                         newline_id);
}

std::vector<CanaryOccurrence> insert_canaries(std::vector<int32_t>& tokens,
                                              const std::vector<std::vector<int32_t>>& passages,
                                              const std::vector<int>& repeats, uint64_t seed,
                                              int32_t newline_id) {
  DENDRITE_CHECK(repeats.size() == passages.size(), "insert_canaries: ", repeats.size(),
                 " repeat counts for ", passages.size(), " passages");
  int rounds = 0;
  for (int r : repeats) {
    DENDRITE_CHECK(r >= 1, "tokenize: --canary-repeat ", r, " must be at least 1");
    rounds = std::max(rounds, r);
  }
  const int P = int(passages.size());
  struct Insert {
    uint64_t pos;  // in the original stream: before tokens[pos]
    int copy, passage;
  };
  std::vector<Insert> inserts;
  int j = 0;
  for (int r = 0; r < rounds; ++r)
    for (int i = 0; i < P; ++i) {
      if (r >= repeats[i]) continue;
      uint64_t pos = random_bits(seed, kCanaryStream, j) % (tokens.size() + 1);
      while (newline_id >= 0 && pos > 0 && pos < tokens.size() && tokens[pos - 1] != newline_id)
        ++pos;
      inserts.push_back({pos, j++, i});
    }
  std::sort(inserts.begin(), inserts.end(), [](const Insert& a, const Insert& b) {
    return a.pos != b.pos ? a.pos < b.pos : a.copy < b.copy;
  });
  std::vector<int32_t> out;
  std::vector<CanaryOccurrence> where;
  uint64_t next = 0;
  for (const Insert& ins : inserts) {
    out.insert(out.end(), tokens.begin() + next, tokens.begin() + ins.pos);
    next = ins.pos;
    const std::vector<int32_t>& ids = passages[ins.passage];
    where.push_back({ins.passage, out.size(), int64_t(ids.size())});
    out.insert(out.end(), ids.begin(), ids.end());
    if (newline_id >= 0) out.push_back(newline_id);
  }
  out.insert(out.end(), tokens.begin() + next, tokens.end());
  tokens.swap(out);
  return where;
}

void write_canaries_json(const std::string& path, const std::vector<std::string>& texts,
                         const std::vector<CanaryOccurrence>& where,
                         const std::vector<int>& repeats, uint64_t seed) {
  const bool same = std::all_of(repeats.begin(), repeats.end(),
                                [&](int r) { return r == repeats.front(); });
  const nlohmann::json repeat = same && !repeats.empty() ? nlohmann::json(repeats.front())
                                                         : nlohmann::json(repeats);
  nlohmann::json list = nlohmann::json::array();
  for (const CanaryOccurrence& c : where)
    list.push_back({{"index", c.index}, {"offset", c.offset}, {"length", c.length},
                    {"text", texts[c.index]}});
  nlohmann::json j = {{"repeat", repeat}, {"seed", seed}, {"passages", texts.size()},
                      {"separator", kSeparator}, {"canaries", list}};
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  DENDRITE_CHECK(out.good(), "tokenize: writing ", path, " failed; check disk space and permissions");
}

std::vector<int> CanaryFile::copies() const {
  std::vector<int> n(texts.size(), 0);
  for (const CanaryOccurrence& o : where) ++n[o.index];
  return n;
}

CanaryFile read_canaries_json(const std::string& path) {
  std::ifstream in(path);
  DENDRITE_CHECK(in.good(), "canaries: cannot open ", path,
                 "; it is written by `dendrite tokenize --canaries FILE`");
  CanaryFile f;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& c : j.at("canaries")) {
      CanaryOccurrence o{c.at("index").get<int>(), c.at("offset").get<uint64_t>(),
                         c.at("length").get<int64_t>()};
      DENDRITE_CHECK(o.index >= 0 && o.length >= 0, "canaries: ", path, " has a negative index or length");
      if (size_t(o.index) >= f.texts.size()) f.texts.resize(o.index + 1);
      f.texts[o.index] = c.at("text").get<std::string>();
      f.where.push_back(o);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("canaries: ", path, " is not a canaries.json of `dendrite tokenize` (", e.what(), ")");
  }
  return f;
}

}  // namespace dendrite
