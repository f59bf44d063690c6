// Hugging Face model folders (hf_folder.h).
#include "dendrite/io/hf_folder.h"

#include <filesystem>
#include <fstream>

#include "dendrite/core/check.h"
#include "dendrite/core/json_number.h"

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
  DENDRITE_CHECK(json_number_fits<T>(c.at(key)), where, ": key '", key, "' is ", c.at(key).dump(),
                 ", expected ", json_number_kind<T>());
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

// The Llama family: each architecture, its model_type and Dendrite's arch.
struct LlamaFamily {
  const char* architecture;
  const char* model_type;
  Arch arch;
};
constexpr LlamaFamily kLlamaFamily[] = {{"LlamaForCausalLM", "llama", Arch::kLlama},
                                        {"MistralForCausalLM", "mistral", Arch::kMistral},
                                        {"Qwen2ForCausalLM", "qwen2", Arch::kQwen2},
                                        {"Qwen3ForCausalLM", "qwen3", Arch::kQwen3}};

const LlamaFamily* llama_family(const std::string& arch, const std::string& type) {
  for (const LlamaFamily& f : kLlamaFamily)
    if (arch == f.architecture || (arch.empty() && type == f.model_type)) return &f;
  return nullptr;
}

const LlamaFamily& llama_family(Arch a) {
  for (const LlamaFamily& f : kLlamaFamily)
    if (f.arch == a) return f;
  fail("hf_config: arch ", arch_name(a), " is not of the llama family");
}

// One rotary spec: transformers 4's rope_scaling or 5's rope_parameters (key
// names it), whose rope_type (or the older "type") is default, linear or llama3.
void read_rope(const nlohmann::json& r, const char* key, const std::string& where, ModelConfig& m) {
  const std::string at = where + ": " + key;
  DENDRITE_CHECK(r.is_object(), at, " ", r.dump(), " is not an object");
  const std::string kind =
      get<std::string>(r, "rope_type", get<std::string>(r, "type", "default", at), at);
  m.rope_theta = get<float>(r, "rope_theta", m.rope_theta, at);
  const float partial = get<float>(r, "partial_rotary_factor", 1.0f, at);
  DENDRITE_CHECK(partial == 1.0f, at, ": partial_rotary_factor ", partial,
                 " cannot be represented (Dendrite rotates the whole head)");
  if (kind == "default") return;
  if (kind == "linear") {
    m.rope_scaling = ops::RopeScaling::kLinear;
    m.rope_factor = need<float>(r, "factor", at);
  } else if (kind == "llama3") {
    m.rope_scaling = ops::RopeScaling::kLlama3;
    m.rope_factor = need<float>(r, "factor", at);
    m.rope_low_freq_factor = need<float>(r, "low_freq_factor", at);
    m.rope_high_freq_factor = need<float>(r, "high_freq_factor", at);
    // transformers falls back to max_position_embeddings, as here (set before).
    m.rope_original_max_positions =
        get<int>(r, "original_max_position_embeddings", m.block_size, at);
  } else {
    fail(at, ": rope_type '", kind, "' (", r.dump(), ") cannot be represented (Dendrite's ",
         "rotary embedding supports rope_type default, linear and llama3)");
  }
}

// The sliding window: Mistral's sliding_window (null: none); Qwen's only
// where use_sliding_window is true.
int read_sliding_window(const nlohmann::json& c, const std::string& where, Arch arch) {
  if ((arch == Arch::kQwen2 || arch == Arch::kQwen3) &&
      !get<bool>(c, "use_sliding_window", false, where))
    return 0;
  const int w = get<int>(c, "sliding_window", 0, where);
  DENDRITE_CHECK(w >= 0, where, ": sliding_window ", w, " must be positive or null");
  return w;
}

ModelConfig read_llama_family(const nlohmann::json& c, const std::string& where,
                              const LlamaFamily& f) {
  ModelConfig m = model_config_from_json({{"arch", arch_name(f.arch)}});
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
  const float partial = get<float>(c, "partial_rotary_factor", 1.0f, where);
  DENDRITE_CHECK(partial == 1.0f, where, ": partial_rotary_factor ", partial,
                 " cannot be represented (Dendrite rotates the whole head)");
  // transformers 4 writes rope_theta beside rope_scaling; 5 both into rope_parameters.
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (c.contains(key) && !c.at(key).is_null()) read_rope(c.at(key), key, where, m);
  require(c, "hidden_act", std::string("silu"), std::string("silu"), where,
          "the MLP is SwiGLU with SiLU");
  // Qwen2's q, k and v always have biases (its config has no key for them).
  m.qkv_bias = f.arch == Arch::kQwen2;
  require(c, "attention_bias", false, false, where,
          "biases on q, k, v and o are not supported; Qwen2ForCausalLM's q, k and v biases are");
  require(c, "mlp_bias", false, false, where, "the MLP has no biases here");
  m.qk_norm = f.arch == Arch::kQwen3;
  m.sliding_window = read_sliding_window(c, where, f.arch);
  // Absent (or null): width / heads, but Qwen3Config's default of 128.
  const int hd = get<int>(c, "head_dim",
                          f.arch == Arch::kQwen3 ? 128
                          : m.n_head > 0         ? m.n_embd / m.n_head
                                                 : 0,
                          where);
  DENDRITE_CHECK(hd > 0 && hd % 2 == 0, where, ": head_dim ", hd,
                 " cannot be represented (rotary embedding needs a positive even head size)");
  DENDRITE_CHECK(m.qk_norm || (m.n_head > 0 && hd * m.n_head == m.n_embd), where, ": head_dim ", hd,
                 " times num_attention_heads ", m.n_head, " is not hidden_size ", m.n_embd,
                 "; cannot be represented for ", f.architecture, " (heads split the width)");
  if (m.n_head > 0 && hd * m.n_head != m.n_embd) m.head_dim = hd;
  return m;
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
  } else if (const LlamaFamily* f = llama_family(arch, type)) {
    m = read_llama_family(c, where, *f);
  } else {
    fail(where, ": architecture '", arch.empty() ? type : arch, "' is not supported; Dendrite ",
         "reads GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and ",
         "Qwen3ForCausalLM folders");
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
    const LlamaFamily& f = llama_family(m.arch);
    c = {{"architectures", {f.architecture}},
         {"model_type", f.model_type},
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
         {"hidden_act", "silu"}};
    if (m.arch != Arch::kQwen2) c["attention_bias"] = false;
    if (m.arch == Arch::kLlama) c["mlp_bias"] = false;
    if (m.rope_scaling != ops::RopeScaling::kNone) {
      // transformers 4's key (5 reads it into rope_parameters).
      nlohmann::json r = {{"rope_type", rope_scaling_name(m.rope_scaling)},
                          {"factor", m.rope_factor}};
      if (m.rope_scaling == ops::RopeScaling::kLlama3) {
        r["low_freq_factor"] = m.rope_low_freq_factor;
        r["high_freq_factor"] = m.rope_high_freq_factor;
        r["original_max_position_embeddings"] = m.rope_original_max_positions;
      }
      c["rope_scaling"] = r;
    }
    const nlohmann::json window =
        m.sliding_window > 0 ? nlohmann::json(m.sliding_window) : nlohmann::json();
    if (m.arch == Arch::kMistral) c["sliding_window"] = window;
    if (m.arch == Arch::kQwen2 || m.arch == Arch::kQwen3) {
      c["use_sliding_window"] = m.sliding_window > 0;
      c["sliding_window"] = window;
      c["max_window_layers"] = m.sliding_window > 0 ? 0 : m.n_layer;
    }
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

void HfFolder::check_sequence(int T) const {
  DENDRITE_CHECK(config_.sliding_window == 0 || T <= config_.sliding_window, "hugging face folder ",
                 dir_, ": config.json's sliding_window ", config_.sliding_window,
                 " is shorter than the sequence length ", T,
                 "; Dendrite attends to every earlier position, the same function only for ",
                 "sequences no longer than the window: use a --seq of at most ",
                 config_.sliding_window);
}

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
