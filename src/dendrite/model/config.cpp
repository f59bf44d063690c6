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

namespace dendrite {

std::string arch_name(Arch a) { return a == Arch::kGpt2 ? "gpt2" : "llama"; }

Arch parse_arch(const std::string& name) {
  if (name == "gpt2") return Arch::kGpt2;
  if (name == "llama") return Arch::kLlama;
  fail("model config: unknown arch '", name, "'; use \"gpt2\" or \"llama\"");
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
  DENDRITE_CHECK(n_embd % n_head == 0, "model config: n_embd ", n_embd,
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
  // The parameter count in floating point: each term of num_parameters() is
  // positive and at most the total, so below 2^50 its int64 sums cannot overflow.
  const double C = n_embd, F = ffn_hidden;
  const double per_layer = 8 * C + 4 * C * C + 3 * F * C + F + C;
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
    total = (tie_embeddings ? 1 : 2) * V * C + int64_t(n_layer) * per_layer + C;
  }
  return total;
}

double ModelConfig::train_flops_per_token(int T) const {
  const double C = n_embd, F = ffn_hidden, hs = head_size();
  double attn_proj = C * n_head * hs * 2 + C * n_kv_head * hs * 2;
  double mlp = (gpt2() ? 2 : 3) * C * F;
  double matmul_weights = n_layer * (attn_proj + mlp) + double(vocab_size) * C;
  return 6.0 * matmul_weights + 12.0 * n_layer * T * C;
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

nlohmann::json to_json(const ModelConfig& c) {
  return {{"arch", arch_name(c.arch)},     {"vocab_size", c.vocab_size},
          {"n_layer", c.n_layer},          {"n_embd", c.n_embd},
          {"n_head", c.n_head},            {"n_kv_head", c.n_kv_head},
          {"ffn_hidden", c.ffn_hidden},    {"block_size", c.block_size},
          {"norm_eps", tidy(c.norm_eps)},  {"rope_theta", tidy(c.rope_theta)},
          {"init_std", tidy(c.init_std)},  {"tie_embeddings", c.tie_embeddings}};
}

// get<int>() of a JSON number outside int's range is undefined behaviour (found
// by fuzz/config_fuzz.cpp: {"n_layer": 1e30}), so sizes need a JSON integer that fits.
static int json_int(const std::string& key, const nlohmann::json& v) {
  const bool fits = v.is_number_unsigned() ? std::in_range<int>(v.get<uint64_t>())
                                           : v.is_number_integer() && std::in_range<int>(v.get<int64_t>());
  DENDRITE_CHECK(fits, "model config: key '", key, "' must be an integer that fits in 32 bits, not ",
                 v.dump());
  return v.get<int>();
}

ModelConfig model_config_from_json(const nlohmann::json& j) {
  DENDRITE_CHECK(j.is_object(), "model config: expected a JSON object");
  ModelConfig c;
  if (j.contains("arch")) c = parse_arch(j.at("arch").get<std::string>()) == Arch::kGpt2
                                  ? gpt2(12, 768, 12)
                                  : llama(8, 512, 8, 4, 1376, 8192, 512);
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
      else if (key == "norm_eps") c.norm_eps = value.get<float>();
      else if (key == "rope_theta") c.rope_theta = value.get<float>();
      else if (key == "init_std") c.init_std = value.get<float>();
      else if (key == "tie_embeddings") c.tie_embeddings = value.get<bool>();
      else
        fail("model config: unknown key '", key, "'; known keys: arch, vocab_size, n_layer, ",
             "n_embd, n_head, n_kv_head, ffn_hidden, block_size, norm_eps, rope_theta, init_std, ",
             "tie_embeddings");
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
