// A Hugging Face model folder as `save_pretrained` writes it: config.json, and
// the weights in model.safetensors or in shards that
// model.safetensors.index.json lists. The config of a GPT2LMHeadModel or a
// LlamaForCausalLM (and the family's MistralForCausalLM, Qwen2ForCausalLM and
// Qwen3ForCausalLM) becomes Dendrite's ModelConfig; anything the model cannot
// represent (another architecture, a rope_type other than default, linear and
// llama3, biases on o or the MLP, ...) is refused by name. Weights of F32, BF16 or F16 are read as
// fp32, each shard memory-mapped when first needed.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dendrite/io/safetensors.h"
#include "dendrite/model/config.h"

namespace dendrite {

// The ModelConfig of a Hugging Face config.json (`where` names it in errors).
ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& where);
// The inverse: the config.json of a GPT2LMHeadModel or LlamaForCausalLM of
// this model, with the token ids that begin and end text (-1: none).
nlohmann::json hf_config(const ModelConfig& m, int bos_id, int eos_id);

class HfFolder {
 public:
  // Reads config.json and the index (or finds model.safetensors); errors name
  // the folder, the file and the key.
  explicit HfFolder(const std::string& dir);
  HfFolder(HfFolder&&) = default;
  ~HfFolder();

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const nlohmann::json& raw_config() const { return raw_; }
  // Refuses a run over sequences of T tokens longer than the model's sliding
  // window (Mistral's; Qwen2's with use_sliding_window), naming the folder:
  // Dendrite attends to every earlier position.
  void check_sequence(int T) const;
  // Whether the weights hold `name`, or the same name without GPT-2's
  // "transformer." prefix (the original GPT-2 files lack it).
  bool has(const std::string& name) const { return !resolve(name).empty(); }
  // The tensor as fp32 into out, after checking its shape.
  void read(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // Its elements at flat indices idx[0..n) (SafetensorsReader::gather_float).
  void gather(const std::string& name, const std::vector<int64_t>& shape, const int64_t* idx,
              int64_t n, float* out) const;
  // Bytes of weights read so far, over the shards opened.
  int64_t bytes_read() const;

 private:
  std::string resolve(const std::string& name) const;  // the stored name, or ""
  // The reader of the shard holding `name` (which must exist), and its stored name.
  const SafetensorsReader& holder(const std::string& name, std::string& stored) const;
  const SafetensorsReader& reader(const std::string& file) const;

  std::string dir_;
  nlohmann::json raw_;
  ModelConfig config_;
  std::map<std::string, std::string> file_of_;  // tensor -> shard file name
  mutable std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

}  // namespace dendrite
