// A tokenizer.json run as the Hugging Face tokenizers library runs it, for
// the BPE families fine-tuned today (Llama 3, Qwen2, Mistral / Llama 2, and
// GPT-2's too): added tokens split out (hf_added_tokens.h), the text between
// normalized (hf_normalizer.h), pre-tokenized (hf_pre_tokenizer.h), each word
// encoded by the BPE model (bpe_model.h); decoding through the decoder
// (hf_decoder.h). encode() is the library's encode(text,
// add_special_tokens=False); document_specials() the ids its post-processor
// (hf_post_processor.h) adds around a text with add_special_tokens=True.
//
// Text that is not valid UTF-8 is first repaired as Python's
// bytes.decode("utf-8", errors="replace") does (one U+FFFD per maximal
// invalid subpart), since the library's Python binding only takes str.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dendrite/io/bpe_model.h"
#include "dendrite/io/hf_added_tokens.h"
#include "dendrite/io/hf_decoder.h"
#include "dendrite/io/hf_normalizer.h"
#include "dendrite/io/hf_pre_tokenizer.h"
#include "dendrite/io/hf_tokenizer_config.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite {

class HfTokenizer final : public TextTokenizer {
 public:
  // j: the parsed tokenizer.json at path; config: its folder's (eos, bos).
  static std::unique_ptr<HfTokenizer> from_tokenizer_json(const nlohmann::json& j,
                                                          const std::string& path,
                                                          const HfTokenizerConfig& config);
  ~HfTokenizer() override;

  std::vector<int32_t> encode(const std::string& text) const override;
  // The same, long stretches cut about every chunk_bytes (0: never) for the
  // threads; the ids do not depend on it. redone: how many stretches had a
  // cut that was no boundary and were encoded again whole (a slow path).
  std::vector<int32_t> encode(const std::string& text, size_t chunk_bytes,
                              int* redone = nullptr) const;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::unique_ptr<TokenStream> stream(bool continuing = false) const override;
  int vocab_size() const override { return static_cast<int>(id_token_.size()); }
  int eos_id() const override { return eos_id_; }
  SpecialIds document_specials() const override { return specials_; }
  std::string format() const override { return "hf-bpe"; }
  std::vector<std::string> files() const override { return files_; }

  // The token string of an id (an added token's content), an error for an unknown id.
  const std::string& token(int32_t id) const;

 private:
  struct Job;  // a stretch of the text encoded as one task (hf_tokenizer.cpp)
  using WordCache = std::unordered_map<std::string_view, std::vector<int32_t>>;

  HfTokenizer() = default;
  void read_added_tokens(const nlohmann::json& added, const JsonWhere& where);
  void finish(const HfTokenizerConfig& config, const std::string& path);
  void build_id_tables(const std::string& path);
  void apply_folder_config(const HfTokenizerConfig& config, const std::string& path);
  int id_of(const std::string& token) const;  // -1 if none
  std::vector<Job> plan_jobs(std::string_view text, size_t chunk_bytes) const;
  std::vector<size_t> cuts(std::string_view text, size_t chunk_bytes) const;
  std::string normalized(std::string_view text, bool seg_start, bool seg_end,
                         PreTokenizeState& state) const;
  bool encode_normalized(const std::string& norm, size_t context, const Job& job,
                         std::vector<int32_t>& out, PreTokenizeState& state) const;
  bool encode_before(const std::string& norm, const std::string& next, const Job& job,
                     std::vector<int32_t>& out, PreTokenizeState& state) const;
  size_t encode_stretch_whole(std::string_view text, const std::vector<Job>& jobs, size_t i,
                              std::vector<std::vector<int32_t>>& ids) const;
  void encode_piece(const PreToken& piece, std::vector<int32_t>& out, PreTokenizeState& state,
                    WordCache& cache, bool* boundary) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out, WordCache& cache) const;
  std::vector<int32_t> encode_valid(std::string_view text, size_t chunk_bytes, int* redone) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  AddedTokenSet raw_added_, normalized_added_;
  std::vector<std::string> id_token_;  // each id's token string
  std::vector<bool> id_known_;         // false: a hole in the id range
  SpecialIds specials_;
  CutRule cut_rule_ = CutRule::kNone;
  bool words_at_metaspace_ = false;  // cut whole pieces into words before each "▁" run
  int eos_id_ = -1;
  int32_t anchor_id_ = -1;  // a token decoding to "a", for streams that continue a text
  std::vector<std::string> files_;
};

}  // namespace dendrite
