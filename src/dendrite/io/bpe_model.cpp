// The BPE model of a tokenizer.json and its merging (bpe_model.h).
#include "dendrite/io/bpe_model.h"

#include <cstdio>
#include <queue>

#include "dendrite/io/byte_level.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

using json = nlohmann::json;

constexpr int64_t kMaxId = 1 << 26;  // bounds the id tables of a corrupt file

std::string byte_token(int b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

}  // namespace

BpeModel::BpeModel(const json& model, const JsonWhere& where, bool byte_level)
    : byte_level_(byte_level) {
  const double dropout = json_get<double>(model, "dropout", 0.0, where);
  DENDRITE_CHECK(dropout == 0.0, "open_tokenizer: ", where.file, ": key ", where.key,
                 ".dropout = ", dropout, " makes encoding random; only dropout null is supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    DENDRITE_CHECK(json_get<std::string>(model, key, "", where).empty(),
                   "open_tokenizer: ", where.file, ": key ", where.at(key).key,
                   " is set; BPE with subword prefixes or suffixes is not supported");
  byte_fallback_ = json_get<bool>(model, "byte_fallback", false, where);
  fuse_unk_ = json_get<bool>(model, "fuse_unk", false, where);
  ignore_merges_ = json_get<bool>(model, "ignore_merges", false, where);
  const json& vocab = json_need(model, "vocab", json::value_t::object, where);
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    DENDRITE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxId,
                   "open_tokenizer: ", where.file, ": key ", where.at("vocab").key,
                   " gives token \"", token, "\" the id ", id.dump(),
                   "; ids must be integers in [0, ", kMaxId, ")");
    vocab_[token] = id.get<int32_t>();
  }
  const std::string unk = json_get<std::string>(model, "unk_token", "", where);
  if (!unk.empty()) {
    unk_id_ = token_id(unk);
    DENDRITE_CHECK(unk_id_ >= 0, "open_tokenizer: ", where.file, ": key ",
                   where.at("unk_token").key, " \"", unk, "\" is not in the vocabulary");
  }
  for (int b = 0; b < 256; ++b)
    byte_id_[b] = token_id(byte_level_ ? byte_to_unicode()[b] : byte_token(b));
  read_merges(json_need(model, "merges", json::value_t::array, where), where.at("merges"));
}

// merges: ["left", "right"] pairs, or "left right" strings (older files).
void BpeModel::read_merges(const json& merges, const JsonWhere& where) {
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const JsonWhere w = where.index(i);
    const json& m = merges[i];
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      add_merge(m[0].get<std::string>(), m[1].get<std::string>(), int32_t(i), w);
      continue;
    }
    const std::string s = m.is_string() ? m.get<std::string>() : "";
    const size_t space = s.find(' ');
    DENDRITE_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                   "open_tokenizer: ", w.file, ": key ", w.key, " is ", m.dump(),
                   "; expected [\"left\", \"right\"] or \"left right\"");
    add_merge(s.substr(0, space), s.substr(space + 1), int32_t(i), w);
  }
}

void BpeModel::add_merge(const std::string& left, const std::string& right, int32_t rank,
                         const JsonWhere& where) {
  auto find = [&](const std::string& token) {
    const int32_t id = token_id(token);
    DENDRITE_CHECK(id >= 0, "open_tokenizer: ", where.file, ": key ", where.key, ": the merge \"",
                   left, " ", right, "\" uses \"", token, "\", which is not in the vocabulary");
    return id;
  };
  const int32_t l = find(left), r = find(right), merged = find(left + right);
  merges_.add(l, r, rank, merged);
}

int32_t BpeModel::token_id(std::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

bool BpeModel::cuts_before(const std::string& c) const {
  if (token_id(c) < 0) return false;
  for (const auto& [token, id] : vocab_) {
    size_t run = 0;  // the leading run of c
    while (token.compare(run, c.size(), c) == 0) run += c.size();
    if (token.find(c, run) != std::string::npos) return false;
  }
  return true;
}

void BpeMerges::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  map_[uint64_t(uint32_t(left)) << 32 | uint32_t(right)] = {rank, merged};
}

int32_t BpeMerges::find(int32_t left, int32_t right, int32_t* rank) const {
  auto it = map_.find(uint64_t(uint32_t(left)) << 32 | uint32_t(right));
  if (it == map_.end()) return -1;
  *rank = it->second.rank;
  return it->second.id;
}

// The library's BPE::merge_word before merging: note that byte-fallback
// tokens go in before an unknown token still pending, as there.
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  int32_t pending_unk = -1;
  auto unknown = [&](const char* what, std::string_view piece) {
    DENDRITE_CHECK(unk_id_ >= 0, "BpeModel::encode: the ", what, " \"", std::string(piece),
                   "\" has no token in the vocabulary and the model has no unk_token");
    if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
    pending_unk = unk_id_;
  };
  if (byte_level_) {
    for (char c : word) {
      const int32_t id = byte_id_[static_cast<unsigned char>(c)];
      if (id < 0) {
        unknown("byte", std::string_view(&c, 1));
        continue;
      }
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(id);
    }
  } else {
    for (size_t pos = 0; pos < word.size();) {
      const size_t len = read_code_point(word, pos).length;
      const std::string_view ch = word.substr(pos, len);
      pos += len;
      if (const int32_t id = token_id(ch); id >= 0) {
        if (pending_unk >= 0) ids.push_back(pending_unk);
        pending_unk = -1;
        ids.push_back(id);
        continue;
      }
      bool all_bytes = byte_fallback_;
      for (char c : ch) all_bytes = all_bytes && byte_id_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        for (char c : ch) ids.push_back(byte_id_[static_cast<unsigned char>(c)]);
        continue;
      }
      unknown("character", ch);
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // a word in the vocabulary is taken whole
    int32_t id = -1;
    if (byte_level_) {
      std::string mapped;
      for (char c : word) mapped += byte_to_unicode()[static_cast<unsigned char>(c)];
      id = token_id(mapped);
    } else {
      id = token_id(word);
    }
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  merges_.apply(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeMerges::apply(std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int prev, next;  // neighbours still in the word, -1 at the ends
    bool removed;
  };
  const int n = static_cast<int>(ids.size());
  std::vector<Symbol> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, false};
  struct Candidate {  // a pair to merge: the lowest rank first, then the leftmost
    int32_t rank;
    int pos;
    int32_t id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int left) {
    int32_t rank = 0;
    const int32_t id = sym[left].next < 0 ? -1 : find(sym[left].id, sym[sym[left].next].id, &rank);
    if (id >= 0) queue.push({rank, left, id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& s = sym[top.pos];
    int32_t rank = 0;
    if (s.removed || s.next < 0 || find(s.id, sym[s.next].id, &rank) != top.id)
      continue;  // a stale entry: the pair has changed since
    Symbol& right = sym[s.next];
    right.removed = true;
    s.id = top.id;
    s.next = right.next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0) push_pair(s.prev);
    push_pair(top.pos);
  }
  ids.clear();
  for (const Symbol& s : sym)
    if (!s.removed) ids.push_back(s.id);
}

}  // namespace dendrite
