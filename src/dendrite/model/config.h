// Model configuration: architecture, sizes, presets and validation.
// Letters: V vocabulary, Vp V padded to a multiple of 64, C width (n_embd),
// NH query heads, NKV key/value heads, hs head size (C/NH unless head_dim
// says otherwise), F MLP hidden width, L layers, T_max block size (longest
// sequence).
//
// The Llama family: Llama (2, 3.x), Mistral, Qwen2 (2.5) and Qwen3 share one
// block (RMSNorm, rotary attention, SwiGLU); each differs by the flags below,
// and its Arch names it (Hugging Face's architecture on export).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "dendrite/ops/rope.h"

namespace dendrite {

enum class Arch { kGpt2, kLlama, kMistral, kQwen2, kQwen3 };

struct ModelConfig {
  Arch arch = Arch::kGpt2;
  int vocab_size = 50257;  // V
  int n_layer = 12;        // L
  int n_embd = 768;        // C
  int n_head = 12;         // NH
  int n_kv_head = 12;      // NKV (GPT-2: equal to NH)
  int ffn_hidden = 3072;   // F
  int block_size = 1024;   // T_max
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Rotary scaling (ops/rope.h), Hugging Face's rope_scaling / rope_parameters.
  ops::RopeScaling rope_scaling = ops::RopeScaling::kNone;
  float rope_factor = 1.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int rope_original_max_positions = 8192;
  int head_dim = 0;       // hs when it is not C/NH (Qwen3); 0: C/NH
  bool qkv_bias = false;  // biases on q, k and v (Qwen2)
  bool qk_norm = false;   // RMSNorm over each head of q and k before RoPE (Qwen3)
  // Mistral's (and Qwen2's) sliding window of attention, kept for export:
  // Dendrite attends to every earlier position, which is the same function
  // for sequences no longer than the window, and refuses longer ones. 0: none.
  int sliding_window = 0;
  float init_std = 0.02f;
  // Whether the LM head is the token embedding (GPT-2 always; Llama by choice,
  // JSON key tie_embeddings, Hugging Face's tie_word_embeddings).
  bool tie_embeddings = true;

  int head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  ops::RopeSpec rope() const {
    return {rope_theta,           rope_scaling,          rope_factor,
            rope_low_freq_factor, rope_high_freq_factor, rope_original_max_positions};
  }
  // V rounded up to a multiple of 64 and of the Y extent that splits it.
  int padded_vocab(int gy = 1) const {
    int unit = 64;
    while (unit % gy != 0) unit += 64;
    return (vocab_size + unit - 1) / unit * unit;
  }
  bool gpt2() const { return arch == Arch::kGpt2; }
  bool tied_embeddings() const { return tie_embeddings; }

  // Throws dendrite::Error naming the problem and the fix.
  void validate() const;
  // Parameters a Hugging Face checkpoint of this model holds (no padding).
  int64_t num_parameters() const;
  // Training flops per token of a sequence of length T: 6 per weight of
  // every matrix product (LM head once, embeddings' lookups excluded) plus
  // attention's QK^T and AV, 12 * L * T * NH * hs, counted over the full T x T square
  // as in the PaLM paper's MFU (Chowdhery et al., 2022, appendix B).
  double train_flops_per_token(int T) const;
};

std::string arch_name(Arch a);
std::string rope_scaling_name(ops::RopeScaling s);  // "none", "linear", "llama3"
ops::RopeScaling parse_rope_scaling(const std::string& name);
Arch parse_arch(const std::string& name);

// Presets: gpt2-tiny (tests), gpt2-mini (README demo), gpt2-124m, gpt2-350m,
// llama-tiny (tests), llama-small.
std::vector<std::string> preset_names();
// A preset name, or a path to a JSON file of model keys (see to_json); an
// unknown name or key is an error.
ModelConfig load_model_config(const std::string& name_or_path);
ModelConfig model_config_from_json(const nlohmann::json& j);
nlohmann::json to_json(const ModelConfig& c);

}  // namespace dendrite
