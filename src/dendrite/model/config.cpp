#include "dendrite/model/config.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "dendrite/core/check.h"
#include "dendrite/core/json_number.h"

namespace dendrite {

namespace {
const std::pair<Arch, const char*> kArchNames[] = {{Arch::kGpt2, "gpt2"},
                                                   {Arch::kLlama, "llama"},
                                                   {Arch::kMistral, "mistral"},
                                                   {Arch::kQwen2, "qwen2"},
                                                   {Arch::kQwen3, "qwen3"}};
const std::pair<ops::RopeScaling, const char*> kScalingNames[] = {
    {ops::RopeScaling::kNone, "none"},
    {ops::RopeScaling::kLinear, "linear"},
    {ops::RopeScaling::kLlama3, "llama3"}};
}  // namespace

std::string arch_name(Arch a) {
  for (auto& [arch, name] : kArchNames)
    if (arch == a) return name;
  return "unknown";
}

Arch parse_arch(const std::string& name) {
  for (auto& [arch, n] : kArchNames)
    if (name == n) return arch;
  fail("model config: unknown arch '", name,
       "'; use \"gpt2\", \"llama\", \"mistral\", \"qwen2\" or \"qwen3\"");
}

std::string rope_scaling_name(ops::RopeScaling s) {
  for (auto& [scaling, name] : kScalingNames)
    if (scaling == s) return name;
  return "unknown";
}

ops::RopeScaling parse_rope_scaling(const std::string& name) {
  for (auto& [scaling, n] : kScalingNames)
    if (name == n) return scaling;
  fail("model config: unknown rope_scaling '", name, "'; use \"none\", \"linear\" or \"llama3\"");
}

void ModelConfig::validate() const {
  auto positive = [](int v, const char* key) {
    DENDRITE_CHECK(v > 0, "model config: ", key, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(n_layer, "n_layer");
  positive(n_embd, "n_embd");
  positive(n_head, "n_head");
  positive(n_kv_head, "n_kv_head");
  positive(ffn_hidden, "ffn_hidden");
  positive(block_size, "block_size");
  // Bounds far above any real model that keep every derived size (padded
  // vocabulary, 4 x n_embd, tensor element counts, the parameter count) inside
  // the integer types that hold them.
  auto at_most = [](int v, int limit, const char* key) {
    DENDRITE_CHECK(v <= limit, "model config: ", key, " is ", v, ", above the limit of ", limit,
                   "; use a smaller value");
  };
  constexpr int kMaxWidth = 1 << 24, kMaxCount = 1 << 16;
  at_most(vocab_size, kMaxWidth, "vocab_size");
  at_most(n_embd, kMaxWidth, "n_embd");
  at_most(ffn_hidden, kMaxWidth, "ffn_hidden");
  at_most(block_size, kMaxWidth, "block_size");
  at_most(n_layer, kMaxCount, "n_layer");
  at_most(n_head, kMaxCount, "n_head");
  DENDRITE_CHECK(head_dim >= 0 && head_dim <= kMaxWidth, "model config: head_dim ", head_dim,
                 " must be between 0 (n_embd / n_head) and ", kMaxWidth);
  DENDRITE_CHECK(head_dim > 0 || n_embd % n_head == 0, "model config: n_embd ", n_embd,
                 " is not divisible by n_head ", n_head,
                 "; choose a width that is a multiple of the head count");
  DENDRITE_CHECK(n_head % n_kv_head == 0, "model config: n_head ", n_head,
                 " is not divisible by n_kv_head ", n_kv_head,
                 "; grouped-query attention needs whole groups");
  DENDRITE_CHECK(!gpt2() || n_kv_head == n_head, "model config: gpt2 has n_kv_head == n_head (",
                 n_head, "), got ", n_kv_head);
  DENDRITE_CHECK(!gpt2() || tie_embeddings, "model config: gpt2 ties its LM head to the token ",
                 "embedding; tie_embeddings false is for llama");
  DENDRITE_CHECK(gpt2() || head_size() % 2 == 0, "model config: rotary embedding needs an even ",
                 "head size, got ", head_size());
  DENDRITE_CHECK(norm_eps > 0 && rope_theta > 0 && init_std > 0,
                 "model config: norm_eps, rope_theta and init_std must be positive");
  DENDRITE_CHECK(!gpt2() || (head_dim == 0 && !qkv_bias && !qk_norm && sliding_window == 0 &&
                             rope_scaling == ops::RopeScaling::kNone),
                 "model config: head_dim, qkv_bias, qk_norm, sliding_window and rope_scaling are ",
                 "for the llama family, not gpt2");
  DENDRITE_CHECK(sliding_window >= 0, "model config: sliding_window ", sliding_window,
                 " must be 0 (none) or positive");
  // Each member of the family is its own structure, so an export is the
  // architecture transformers builds with the same tensors.
  DENDRITE_CHECK(qkv_bias == (arch == Arch::kQwen2), "model config: qkv_bias ", qkv_bias,
                 " with arch ", arch_name(arch), "; q, k and v have biases in qwen2 (only)");
  DENDRITE_CHECK(qk_norm == (arch == Arch::kQwen3), "model config: qk_norm ", qk_norm,
                 " with arch ", arch_name(arch), "; per-head q and k norms are qwen3's (only)");
  DENDRITE_CHECK(
      sliding_window == 0 || arch == Arch::kMistral || arch == Arch::kQwen2 || arch == Arch::kQwen3,
      "model config: sliding_window is for arch mistral, qwen2 or qwen3, not ", arch_name(arch));
  const char* rope_problem = ops::rope_spec_problem(rope());
  DENDRITE_CHECK(!rope_problem, "model config: rope_scaling ", rope_scaling_name(rope_scaling),
                 " (rope_factor ", rope_factor, ", rope_low_freq_factor ", rope_low_freq_factor,
                 ", rope_high_freq_factor ", rope_high_freq_factor,
                 ", rope_original_max_positions ", rope_original_max_positions,
                 "): ", rope_problem ? rope_problem : "");
  // The parameter count in floating point: each term of num_parameters() is
  // positive and at most the total, so below 2^50 its int64 sums cannot overflow.
  const double C = n_embd, F = ffn_hidden;
  const double attn = 2.0 * C * (double(n_head) + n_kv_head) * head_size();
  const double per_layer = 8 * C + attn + 3 * F * C + F + C + 6.0 * n_head * head_size();
  const double total = 2.0 * vocab_size * C + double(block_size) * C + n_layer * per_layer + 2 * C;
  DENDRITE_CHECK(total < 0x1p50, "model config: ", total, " parameters is beyond what Dendrite ",
                 "can hold (2^50); reduce n_layer, n_embd, ffn_hidden or vocab_size");
}

int64_t ModelConfig::num_parameters() const {
  const int64_t C = n_embd, F = ffn_hidden, V = vocab_size, hs = head_size();
  const int64_t q = C * n_head * hs, kv = 2 * C * n_kv_head * hs, o = n_head * hs * C;
  int64_t per_layer;
  int64_t total;
  if (gpt2()) {
    per_layer = 4 * C + (q + kv + o) + 4 * C + 2 * F * C + F + C;  // norms, attn + biases, mlp
    total = V * C + int64_t(block_size) * C + int64_t(n_layer) * per_layer + 2 * C;
  } else {
    per_layer = 2 * C + (q + kv + o) + 3 * F * C;
    if (qkv_bias) per_layer += int64_t(n_head + 2 * n_kv_head) * hs;
    if (qk_norm) per_layer += 2 * hs;
    total = (tie_embeddings ? 1 : 2) * V * C + int64_t(n_layer) * per_layer + C;
  }
  return total;
}

double ModelConfig::train_flops_per_token(int T) const {
  const double C = n_embd, F = ffn_hidden, hs = head_size();
  double attn_proj = C * n_head * hs * 2 + C * n_kv_head * hs * 2;
  double mlp = (gpt2() ? 2 : 3) * C * F;
  double matmul_weights = n_layer * (attn_proj + mlp) + double(vocab_size) * C;
  return 6.0 * matmul_weights + 12.0 * n_layer * T * (double(n_head) * hs);
}

namespace {

ModelConfig gpt2(int L, int C, int NH, int V = 50257, int T = 1024) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.n_layer = L;
  c.n_embd = C;
  c.n_head = c.n_kv_head = NH;
  c.ffn_hidden = 4 * C;
  c.vocab_size = V;
  c.block_size = T;
  return c;
}

ModelConfig llama(int L, int C, int NH, int NKV, int F, int V, int T) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.tie_embeddings = false;
  c.n_layer = L;
  c.n_embd = C;
  c.n_head = NH;
  c.n_kv_head = NKV;
  c.ffn_hidden = F;
  c.vocab_size = V;
  c.block_size = T;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> p = {
      {"gpt2-tiny", gpt2(2, 32, 4, 96, 16)},
      {"gpt2-mini", gpt2(4, 256, 4, 8192, 256)},
      {"gpt2-124m", gpt2(12, 768, 12)},
      {"gpt2-350m", gpt2(24, 1024, 16)},
      {"llama-tiny", llama(2, 32, 4, 2, 64, 96, 16)},
      {"llama-small", llama(8, 512, 8, 4, 1376, 8192, 512)},
  };
  return p;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (auto& [k, v] : presets()) names.push_back(k);
  return names;
}

// Floats as the shortest decimal that reads back the same (1e-05, not 9.99999974e-06).
static double tidy(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", f);
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, f);
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

// The keys of the llama family's variants are written where they differ
// from the defaults, so a plain GPT-2 or Llama config (and the checkpoints
// that hold one) reads as it did before they existed.
nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json j = {{"arch", arch_name(c.arch)},    {"vocab_size", c.vocab_size},
                      {"n_layer", c.n_layer},         {"n_embd", c.n_embd},
                      {"n_head", c.n_head},           {"n_kv_head", c.n_kv_head},
                      {"ffn_hidden", c.ffn_hidden},   {"block_size", c.block_size},
                      {"norm_eps", tidy(c.norm_eps)}, {"rope_theta", tidy(c.rope_theta)},
                      {"init_std", tidy(c.init_std)}, {"tie_embeddings", c.tie_embeddings}};
  if (c.rope_scaling != ops::RopeScaling::kNone) {
    j["rope_scaling"] = rope_scaling_name(c.rope_scaling);
    j["rope_factor"] = tidy(c.rope_factor);
    if (c.rope_scaling == ops::RopeScaling::kLlama3) {
      j["rope_low_freq_factor"] = tidy(c.rope_low_freq_factor);
      j["rope_high_freq_factor"] = tidy(c.rope_high_freq_factor);
      j["rope_original_max_positions"] = c.rope_original_max_positions;
    }
  }
  if (c.head_dim > 0) j["head_dim"] = c.head_dim;
  if (c.qkv_bias) j["qkv_bias"] = true;
  if (c.qk_norm) j["qk_norm"] = true;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  return j;
}

// A size or count: a JSON integer that fits in an int (json_number.h).
static int json_int(const std::string& key, const nlohmann::json& v) {
  DENDRITE_CHECK(v.is_number_integer() && json_number_fits<int>(v), "model config: key '", key,
                 "' must be ", json_number_kind<int>(), ", not ", v.dump());
  return v.get<int>();
}

// A float: a JSON number within a float's range.
static float json_float(const std::string& key, const nlohmann::json& v) {
  DENDRITE_CHECK(v.is_number() && json_number_fits<float>(v), "model config: key '", key,
                 "' must be ", json_number_kind<float>(), ", not ", v.dump());
  return v.get<float>();
}

// The keys of the llama family's variants (to_json): whether key was one.
static bool read_family_key(ModelConfig& c, const std::string& key, const nlohmann::json& value) {
  if (key == "rope_scaling")
    c.rope_scaling = parse_rope_scaling(value.get<std::string>());
  else if (key == "rope_factor")
    c.rope_factor = json_float(key, value);
  else if (key == "rope_low_freq_factor")
    c.rope_low_freq_factor = json_float(key, value);
  else if (key == "rope_high_freq_factor")
    c.rope_high_freq_factor = json_float(key, value);
  else if (key == "rope_original_max_positions")
    c.rope_original_max_positions = json_int(key, value);
  else if (key == "head_dim")
    c.head_dim = json_int(key, value);
  else if (key == "qkv_bias")
    c.qkv_bias = value.get<bool>();
  else if (key == "qk_norm")
    c.qk_norm = value.get<bool>();
  else if (key == "sliding_window")
    c.sliding_window = json_int(key, value);
  else
    return false;
  return true;
}

ModelConfig model_config_from_json(const nlohmann::json& j) {
  DENDRITE_CHECK(j.is_object(), "model config: expected a JSON object");
  ModelConfig c;
  if (j.contains("arch")) {
    const Arch arch = parse_arch(j.at("arch").get<std::string>());
    c = arch == Arch::kGpt2 ? gpt2(12, 768, 12) : llama(8, 512, 8, 4, 1376, 8192, 512);
    // The llama family's members share Llama's defaults; each has its own structure.
    c.arch = arch;
    c.qkv_bias = arch == Arch::kQwen2;
    c.qk_norm = arch == Arch::kQwen3;
  }
  bool kv_given = false, ffn_given = false;
  for (auto& [key, value] : j.items()) {
    try {
      if (key == "arch") continue;
      else if (key == "vocab_size") c.vocab_size = json_int(key, value);
      else if (key == "n_layer") c.n_layer = json_int(key, value);
      else if (key == "n_embd") c.n_embd = json_int(key, value);
      else if (key == "n_head") c.n_head = json_int(key, value);
      else if (key == "n_kv_head") c.n_kv_head = json_int(key, value), kv_given = true;
      else if (key == "ffn_hidden") c.ffn_hidden = json_int(key, value), ffn_given = true;
      else if (key == "block_size") c.block_size = json_int(key, value);
      else if (key == "norm_eps")
        c.norm_eps = json_float(key, value);
      else if (key == "rope_theta")
        c.rope_theta = json_float(key, value);
      else if (key == "init_std")
        c.init_std = json_float(key, value);
      else if (key == "tie_embeddings") c.tie_embeddings = value.get<bool>();
      else if (read_family_key(c, key, value))
        continue;
      else
        fail("model config: unknown key '", key, "'; known keys: arch, vocab_size, n_layer, ",
             "n_embd, n_head, n_kv_head, ffn_hidden, block_size, norm_eps, rope_theta, init_std, ",
             "tie_embeddings, rope_scaling, rope_factor, rope_low_freq_factor, ",
             "rope_high_freq_factor, rope_original_max_positions, head_dim, qkv_bias, qk_norm, ",
             "sliding_window");
    } catch (const nlohmann::json::exception& e) {
      fail("model config: key '", key, "' has the wrong type (", e.what(), ")");
    }
  }
  if (!kv_given && c.gpt2()) c.n_kv_head = c.n_head;
  // 4 n_embd, saturated: validate() names an n_embd above its limit.
  if (!ffn_given && c.gpt2()) c.ffn_hidden = int(std::min<int64_t>(4 * int64_t(c.n_embd), INT_MAX));
  c.validate();
  return c;
}

ModelConfig load_model_config(const std::string& name_or_path) {
  auto it = presets().find(name_or_path);
  if (it != presets().end()) return it->second;
  if (!std::filesystem::exists(name_or_path)) {
    std::string names;
    for (auto& n : preset_names()) names += " " + n;
    fail("model: '", name_or_path, "' is neither a preset nor a config file; presets:", names);
  }
  std::ifstream in(name_or_path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    fail("model config ", name_or_path, ": not valid JSON (", e.what(), ")");
  }
  return model_config_from_json(j);
}

}  // namespace dendrite
