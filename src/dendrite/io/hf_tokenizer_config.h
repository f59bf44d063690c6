// The special tokens a Hugging Face tokenizer folder names outside the
// tokenizer itself: tokenizer_config.json (eos_token, the other *_token keys,
// added_tokens_decoder, additional_special_tokens, add_bos_token,
// add_eos_token), special_tokens_map.json, and a model folder's config.json
// (bos_token_id, eos_token_id: the first of a list).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dendrite {

struct HfTokenizerConfig {
  std::string eos_token;                    // "" when neither file names one
  std::string eos_file;                     // the file that named it, for messages
  std::string bos_token;                    // "" when neither file names one
  int add_bos_token = -1, add_eos_token = -1;  // tokenizer_config.json's: 1, 0, -1 unset
  int bos_token_id = -1, eos_token_id = -1;    // config.json's, -1 when absent
  std::vector<std::string> special_tokens;  // every token either file names, in order
  std::vector<std::string> files;           // the config files present (full paths)
};

// Reads whichever of the two files dir holds; errors name the file and key.
HfTokenizerConfig read_hf_tokenizer_config(const std::string& dir);

// A JSON file, or an error naming it ("open_tokenizer: FILE is not valid JSON ...").
nlohmann::json read_tokenizer_json(const std::string& path);

}  // namespace dendrite
