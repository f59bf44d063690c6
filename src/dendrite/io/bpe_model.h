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
  struct Merge {
    int32_t rank, id;  // the pair's rank, the merged token's id
  };
  void read_merges(const nlohmann::json& merges, const JsonWhere& where);
  void add_merge(const std::string& left, const std::string& right, int32_t rank,
                 const JsonWhere& where);
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;
  int32_t merge_id(int32_t left, int32_t right, int32_t* rank) const;

  TokenMap vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  std::array<int32_t, 256> byte_id_{};  // byte-level: each byte's token; byte fallback: <0xXX>
  bool byte_level_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t unk_id_ = -1;
};

}  // namespace dendrite
