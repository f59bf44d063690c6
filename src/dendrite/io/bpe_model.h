// The BPE model of a tokenizer.json as the tokenizers library runs it on one
// word: the word's characters (or, byte-level, its bytes as GPT-2's byte map
// characters) looked up in the vocabulary, a character that is not there
// becoming its <0xXX> byte tokens (byte_fallback) or the unknown token (fused
// with a neighbouring unknown one when fuse_unk); then the merges, lowest rank
// first. With ignore_merges a word that is itself a token is taken whole.
// Dropout and subword prefixes / suffixes are refused.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dendrite/io/hf_json.h"

namespace dendrite {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The merges of a BPE model: a pair of adjacent ids -> its rank and the
// merged token's id. Merging follows tokenizers' Word::merge_all: a queue of
// adjacent pairs ordered by (rank, position); popping the lowest merges it if
// the pair is still there, then queues the pairs the new symbol forms with
// its neighbours.
class BpeMerges {
 public:
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged);  // a repeat: the last rank
  void reserve(size_t n) { map_.reserve(n); }
  void apply(std::vector<int32_t>& ids) const;  // merges the word's ids in place

 private:
  struct Merge {
    int32_t rank, id;
  };
  int32_t find(int32_t left, int32_t right, int32_t* rank) const;  // the merged id, -1 if none
  std::unordered_map<uint64_t, Merge> map_;                        // key: left id << 32 | right id
};

class BpeModel {
 public:
  // model: the "model" object; byte_level: words are bytes (ByteLevel pre-tokenizer).
  BpeModel(const nlohmann::json& model, const JsonWhere& where, bool byte_level);

  // Appends the ids of one word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t token_id(std::string_view token) const;  // -1 if none
  const TokenMap& vocab() const { return vocab_; }
  // Whether no token holds `c` after a character other than c, so that a word
  // cut before a run of c encodes as its two sides (SentencePiece-style vocabularies, c = "▁").
  bool cuts_before(const std::string& c) const;

 private:
  void read_merges(const nlohmann::json& merges, const JsonWhere& where);
  void add_merge(const std::string& left, const std::string& right, int32_t rank,
                 const JsonWhere& where);
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;

  TokenMap vocab_;
  BpeMerges merges_;
  std::array<int32_t, 256> byte_id_{};  // byte-level: each byte's token; byte fallback: <0xXX>
  bool byte_level_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t unk_id_ = -1;
};

}  // namespace dendrite
