// The special-token configuration of a Hugging Face tokenizer folder
// (hf_tokenizer_config.h). transformers writes a token either as its string
// or as an AddedToken object {"content": ..., "special": ...}.
#include "dendrite/io/hf_tokenizer_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "dendrite/core/check.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTokenKeys[] = {"eos_token", "bos_token", "unk_token", "pad_token",
                                      "sep_token", "cls_token", "mask_token"};

// The token a value names: a string, {"content": string}, or null / "" for none.
std::string token_content(const nlohmann::json& value, const std::string& file,
                          const std::string& key) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string())
    return value.at("content").get<std::string>();
  fail("open_tokenizer: ", file, ": key ", key, " is ", value.dump(),
       "; expected a token string or an object with a \"content\" string");
}

void add_unique(std::vector<std::string>& list, const std::string& token) {
  if (!token.empty() && std::find(list.begin(), list.end(), token) == list.end())
    list.push_back(token);
}

void read_config_file(const std::string& file, HfTokenizerConfig& config) {
  const nlohmann::json j = read_tokenizer_json(file);
  DENDRITE_CHECK(j.is_object(), "open_tokenizer: ", file, " holds ", j.type_name(),
                 ", not a JSON object");
  config.files.push_back(file);
  for (const char* key : kTokenKeys) {
    if (!j.contains(key)) continue;
    const std::string token = token_content(j.at(key), file, key);
    add_unique(config.special_tokens, token);
    if (std::string(key) == "eos_token" && config.eos_token.empty() && !token.empty()) {
      config.eos_token = token;
      config.eos_file = file;
    }
    if (std::string(key) == "bos_token" && config.bos_token.empty()) config.bos_token = token;
  }
  for (const char* key : {"add_bos_token", "add_eos_token"}) {
    if (!j.contains(key) || j.at(key).is_null()) continue;
    DENDRITE_CHECK(j.at(key).is_boolean(), "open_tokenizer: ", file, ": key ", key, " is ",
                   j.at(key).dump(), ", expected true or false");
    int& flag = std::string(key) == "add_bos_token" ? config.add_bos_token : config.add_eos_token;
    if (flag < 0) flag = j.at(key).get<bool>() ? 1 : 0;
  }
  if (j.contains("additional_special_tokens") && !j.at("additional_special_tokens").is_null()) {
    const nlohmann::json& extra = j.at("additional_special_tokens");
    DENDRITE_CHECK(extra.is_array(), "open_tokenizer: ", file,
                   ": key additional_special_tokens is not a list");
    for (size_t i = 0; i < extra.size(); ++i)
      add_unique(config.special_tokens,
                 token_content(extra[i], file, str("additional_special_tokens[", i, "]")));
  }
  if (j.contains("added_tokens_decoder") && !j.at("added_tokens_decoder").is_null()) {
    const nlohmann::json& added = j.at("added_tokens_decoder");
    DENDRITE_CHECK(added.is_object(), "open_tokenizer: ", file,
                   ": key added_tokens_decoder is not an object of id: token");
    for (const auto& [id, token] : added.items())
      add_unique(config.special_tokens, token_content(token, file, "added_tokens_decoder." + id));
  }
}

// config.json's bos_token_id / eos_token_id: an id, a list (the first), or null.
int model_token_id(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return -1;
  nlohmann::json v = j.at(key);
  if (v.is_array() && !v.empty()) v = v[0];
  DENDRITE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1 << 30),
                 "open_tokenizer: ", file, ": key ", key, " is ", j.at(key).dump(),
                 ", expected a token id or a list of them");
  return v.get<int>();
}

}  // namespace

nlohmann::json read_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DENDRITE_CHECK(in.good(), "open_tokenizer: cannot open ", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("open_tokenizer: ", path, " is not valid JSON (", e.what(),
         "); is the file complete? Copy it again from the model's folder");
  }
}

HfTokenizerConfig read_hf_tokenizer_config(const std::string& dir) {
  HfTokenizerConfig config;
  // tokenizer_config.json first: transformers lets it override the map.
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string file = (fs::path(dir) / name).string();
    if (fs::is_regular_file(file)) read_config_file(file, config);
  }
  const std::string model_config = (fs::path(dir) / "config.json").string();
  if (fs::is_regular_file(model_config)) {
    const nlohmann::json j = read_tokenizer_json(model_config);
    if (j.is_object()) {
      config.bos_token_id = model_token_id(j, "bos_token_id", model_config);
      config.eos_token_id = model_token_id(j, "eos_token_id", model_config);
    }
  }
  return config;
}

}  // namespace dendrite
