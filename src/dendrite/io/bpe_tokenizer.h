// GPT-2 style byte-level BPE, as Hugging Face tokenizers runs a BPE model
// with the ByteLevel pre-tokenizer and decoder: added tokens are split out of
// the text first, the rest is cut into words by GPT-2's regex (byte_level.h),
// each word's bytes become characters of GPT-2's byte map and are merged pair
// by pair, lowest merge rank first, into vocabulary ids. Read from a
// tokenizer.json or from GPT-2's vocab.json + merges.txt.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dendrite/io/bpe_model.h"
#include "dendrite/io/hf_tokenizer_config.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite {

class ByteLevelBpe final : public TextTokenizer {
 public:
  // j: the parsed tokenizer.json at path; config: its folder's (for eos).
  static std::unique_ptr<ByteLevelBpe> from_tokenizer_json(const nlohmann::json& j,
                                                           const std::string& path,
                                                           const HfTokenizerConfig& config);
  // GPT-2's two files; the config's special tokens (and "<|endoftext|>")
  // found in the vocabulary are split out of the text as transformers does.
  static std::unique_ptr<ByteLevelBpe> from_vocab_merges(const std::string& vocab_path,
                                                         const std::string& merges_path,
                                                         const HfTokenizerConfig& config);
  // Whether a tokenizer.json is GPT-2's kind, which this class runs fast: model
  // BPE without byte fallback, ByteLevel pre-tokenizer (with its regex) and
  // decoder, no normalizer, no post-processor but ByteLevel. Others go to
  // HfTokenizer (hf_tokenizer.h).
  static bool reads(const nlohmann::json& j);

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::unique_ptr<TokenStream> stream(bool continuing = false) const override;
  int vocab_size() const override { return static_cast<int>(id_bytes_.size()); }
  int eos_id() const override { return eos_id_; }
  std::string format() const override { return "hf-bpe"; }
  std::vector<std::string> files() const override { return files_; }

  // The bytes id decodes to, before UTF-8 repair; an error for an unknown id.
  const std::string& id_bytes(int32_t id) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip = false, rstrip = false;  // also take the whitespace before / after
  };
  // A stretch of the text: an added token, or text to pre-tokenize.
  struct Span {
    size_t begin, end;
    int32_t added_id;    // -1: text
    bool segment_start;  // text that starts a segment between added tokens
  };
  using WordCache = std::unordered_map<std::string_view, std::vector<int32_t>>;

  ByteLevelBpe() = default;
  void read_json_merges(const nlohmann::json& merges, const std::string& path);
  void read_json_added_tokens(const nlohmann::json& added, const std::string& path);
  void add_merge(const std::string& left, const std::string& right, int32_t rank,
                 const std::string& where);
  void add_added_token(AddedToken token);
  void finish(const HfTokenizerConfig& config, const std::string& where);
  std::vector<Span> split_added(std::string_view text) const;
  std::vector<int32_t> encode_text(std::string_view text, bool segment_start) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out, WordCache& cache) const;
  std::vector<int32_t> merge_word(std::string_view word) const;

  std::unordered_map<std::string, int32_t> vocab_;  // model vocabulary, byte-map strings
  BpeMerges merges_;
  std::vector<AddedToken> added_;                   // matched longest first at each position
  std::array<int32_t, 256> byte_id_{};              // id of each byte's character, -1: none
  std::vector<std::string> id_bytes_;               // what each id decodes to
  std::vector<bool> id_known_;                      // false: a hole in the id range
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false, ignore_merges_ = false, add_prefix_space_ = false;
  int eos_id_ = -1;
  std::vector<std::string> files_;
};

}  // namespace dendrite
