// Hugging Face model folders (hf_folder.h).
#include "dendrite/io/hf_folder.h"

#include <filesystem>
#include <fstream>

#include "dendrite/core/check.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  DENDRITE_CHECK(in.good(), "hugging face folder: cannot open ", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("hugging face folder: ", path.string(), " is not valid JSON (", e.what(), ")");
  }
}

// config[key] as T, or fallback when absent or null; a value of the wrong type is an error.
template <class T>
T get(const nlohmann::json& c, const char* key, T fallback, const std::string& where) {
  if (!c.contains(key) || c.at(key).is_null()) return fallback;
  try {
    return c.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(where, ": key '", key, "' has the wrong type: ", c.at(key).dump());
  }
}

template <class T>
T need(const nlohmann::json& c, const char* key, const std::string& where) {
  DENDRITE_CHECK(c.contains(key) && !c.at(key).is_null(), where, ": key '", key,
                 "' is missing; the folder's config.json is incomplete");
  return get<T>(c, key, T{}, where);
}

// A key whose value the model cannot represent unless it equals `expected`.
template <class T>
void require(const nlohmann::json& c, const char* key, T fallback, T expected,
             const std::string& where, const char* why) {
  const T v = get<T>(c, key, fallback, where);
  DENDRITE_CHECK(v == expected, where, ": ", key, " = ", nlohmann::json(v).dump(),
                 " cannot be represented (", why, ")");
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& c, const std::string& where) {
  DENDRITE_CHECK(c.is_object(), where, ": expected a JSON object");
  std::string arch;
  if (c.contains("architectures") && c.at("architectures").is_array() &&
      !c.at("architectures").empty() && c.at("architectures")[0].is_string())
    arch = c.at("architectures")[0].get<std::string>();
  const std::string type = get<std::string>(c, "model_type", "", where);
  ModelConfig m;
  if (arch == "GPT2LMHeadModel" || (arch.empty() && type == "gpt2")) {
    m = model_config_from_json({{"arch", "gpt2"}});
    m.vocab_size = need<int>(c, "vocab_size", where);
    m.n_embd = need<int>(c, "n_embd", where);
    m.n_layer = need<int>(c, "n_layer", where);
    m.n_head = m.n_kv_head = need<int>(c, "n_head", where);
    m.ffn_hidden = get<int>(c, "n_inner", 4 * m.n_embd, where);
    m.block_size = get<int>(c, "n_positions", 1024, where);
    m.norm_eps = get<float>(c, "layer_norm_epsilon", 1e-5f, where);
    const std::string act = get<std::string>(c, "activation_function", "gelu_new", where);
    DENDRITE_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", where,
                   ": activation_function '", act, "' cannot be represented (Dendrite's GPT-2 ",
                   "uses the tanh GELU, gelu_new)");
    require(c, "tie_word_embeddings", true, true, where, "GPT-2's LM head is its token embedding");
    require(c, "scale_attn_weights", true, true, where, "attention scales by 1/sqrt(head size)");
    require(c, "scale_attn_by_inverse_layer_idx", false, false, where,
            "no per-layer attention scaling");
    require(c, "add_cross_attention", false, false, where, "a decoder without cross-attention");
  } else if (arch == "LlamaForCausalLM" || (arch.empty() && type == "llama")) {
    m = model_config_from_json({{"arch", "llama"}});
    m.vocab_size = need<int>(c, "vocab_size", where);
    m.n_embd = need<int>(c, "hidden_size", where);
    m.ffn_hidden = need<int>(c, "intermediate_size", where);
    m.n_layer = need<int>(c, "num_hidden_layers", where);
    m.n_head = need<int>(c, "num_attention_heads", where);
    m.n_kv_head = get<int>(c, "num_key_value_heads", m.n_head, where);
    m.block_size = get<int>(c, "max_position_embeddings", 2048, where);
    m.norm_eps = get<float>(c, "rms_norm_eps", 1e-6f, where);
    m.rope_theta = get<float>(c, "rope_theta", 10000.0f, where);
    m.tie_embeddings = get<bool>(c, "tie_word_embeddings", false, where);
    DENDRITE_CHECK(!c.contains("rope_scaling") || c.at("rope_scaling").is_null(), where,
                   ": rope_scaling ", c.contains("rope_scaling") ? c.at("rope_scaling").dump() : "",
                   " cannot be represented (Dendrite's rotary embedding has no scaling)");
    // transformers 5 writes rope_theta (and any scaling) into rope_parameters.
    if (c.contains("rope_parameters") && c.at("rope_parameters").is_object()) {
      const nlohmann::json& r = c.at("rope_parameters");
      const std::string kind = get<std::string>(r, "rope_type", "default", where);
      DENDRITE_CHECK(kind == "default", where, ": rope_parameters ", r.dump(),
                     " cannot be represented (Dendrite's rotary embedding has no scaling)");
      m.rope_theta = get<float>(r, "rope_theta", m.rope_theta, where);
    }
    require(c, "hidden_act", std::string("silu"), std::string("silu"), where,
            "the MLP is SwiGLU with SiLU");
    require(c, "attention_bias", false, false, where, "Llama's attention has no biases here");
    require(c, "mlp_bias", false, false, where, "Llama's MLP has no biases here");
    const int hd = get<int>(c, "head_dim", m.n_head > 0 ? m.n_embd / m.n_head : 0, where);
    DENDRITE_CHECK(m.n_head > 0 && hd * m.n_head == m.n_embd, where, ": head_dim ", hd,
                   " times num_attention_heads ", m.n_head, " is not hidden_size ", m.n_embd,
                   "; cannot be represented (heads split the width)");
  } else {
    fail(where, ": architecture '", arch.empty() ? type : arch, "' is not supported; Dendrite ",
         "reads GPT2LMHeadModel and LlamaForCausalLM folders");
  }
  try {
    m.validate();
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return m;
}

nlohmann::json hf_config(const ModelConfig& m, int bos_id, int eos_id) {
  nlohmann::json c;
  const auto id = [](int v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(); };
  if (m.gpt2()) {
    c = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", m.vocab_size},
         {"n_positions", m.block_size},
         {"n_ctx", m.block_size},
         {"n_embd", m.n_embd},
         {"n_layer", m.n_layer},
         {"n_head", m.n_head},
         {"n_inner", m.ffn_hidden},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", m.norm_eps},
         {"tie_word_embeddings", true},
         {"scale_attn_weights", true}};
  } else {
    c = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"vocab_size", m.vocab_size},
         {"hidden_size", m.n_embd},
         {"intermediate_size", m.ffn_hidden},
         {"num_hidden_layers", m.n_layer},
         {"num_attention_heads", m.n_head},
         {"num_key_value_heads", m.n_kv_head},
         {"head_dim", m.head_size()},
         {"max_position_embeddings", m.block_size},
         {"rms_norm_eps", m.norm_eps},
         {"rope_theta", m.rope_theta},
         {"tie_word_embeddings", m.tied_embeddings()},
         {"hidden_act", "silu"},
         {"attention_bias", false},
         {"mlp_bias", false}};
  }
  c["bos_token_id"] = id(bos_id);
  c["eos_token_id"] = id(eos_id);
  c["dtype"] = "float32";
  return c;
}

HfFolder::HfFolder(const std::string& dir) : dir_(dir) {
  const fs::path d(dir);
  DENDRITE_CHECK(fs::is_directory(d), "hugging face folder: ", dir, " is not a folder; pass ",
                 "the folder that holds config.json and the safetensors weights");
  const fs::path cfg = d / "config.json";
  DENDRITE_CHECK(fs::exists(cfg), "hugging face folder: ", dir, " has no config.json");
  raw_ = read_json(cfg);
  config_ = model_config_from_hf(raw_, cfg.string());
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = read_json(index);
    DENDRITE_CHECK(j.contains("weight_map") && j.at("weight_map").is_object(), index.string(),
                   ": no weight_map object");
    for (auto& [name, file] : j.at("weight_map").items()) {
      DENDRITE_CHECK(file.is_string(), index.string(), ": weight_map['", name,
                     "'] is not a file name");
      file_of_[name] = file.get<std::string>();
    }
    for (auto& [name, file] : file_of_)
      DENDRITE_CHECK(fs::exists(d / file), index.string(), " lists shard ", file, " (tensor '",
                     name, "'), which is missing from ", dir);
  } else {
    const fs::path single = d / "model.safetensors";
    DENDRITE_CHECK(fs::exists(single), "hugging face folder: ", dir, " has neither ",
                   "model.safetensors nor model.safetensors.index.json (Dendrite reads ",
                   "safetensors weights; convert .bin files with transformers' save_pretrained)");
    for (const std::string& name : reader("model.safetensors").names())
      file_of_[name] = "model.safetensors";
  }
}

HfFolder::~HfFolder() = default;

const SafetensorsReader& HfFolder::reader(const std::string& file) const {
  auto& r = readers_[file];
  if (!r) r = std::make_unique<SafetensorsReader>((fs::path(dir_) / file).string());
  return *r;
}

std::string HfFolder::resolve(const std::string& name) const {
  if (file_of_.count(name)) return name;
  const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 && file_of_.count(name.substr(prefix.size())))
    return name.substr(prefix.size());
  return "";
}

const SafetensorsReader& HfFolder::holder(const std::string& name, std::string& stored) const {
  stored = resolve(name);
  DENDRITE_CHECK(!stored.empty(), "hugging face folder ", dir_, ": tensor '", name,
                 "' is missing from its weights");
  const SafetensorsReader& r = reader(file_of_.at(stored));
  DENDRITE_CHECK(r.has(stored), "hugging face folder ", dir_, ": the index puts tensor '", stored,
                 "' in ", file_of_.at(stored), ", which does not hold it");
  return r;
}

void HfFolder::read(const std::string& name, const std::vector<int64_t>& shape, float* out) const {
  std::string stored;
  holder(name, stored).read_float(stored, shape, out);
}

void HfFolder::gather(const std::string& name, const std::vector<int64_t>& shape,
                      const int64_t* idx, int64_t n, float* out) const {
  std::string stored;
  holder(name, stored).gather_float(stored, shape, idx, n, out);
}

int64_t HfFolder::bytes_read() const {
  int64_t n = 0;
  for (const auto& [file, r] : readers_) n += r->bytes_read();
  return n;
}

}  // namespace dendrite
