// Writes the seed corpora of fuzz/corpus/<target>/ with Dendrite's own
// writers, so the fuzzers start from valid files:
//   make_corpus DIR   (from the repository root, with DIR = fuzz/corpus)
// Letters: C width, V vocabulary (the tensors mimic a tiny model's).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dendrite/model/config.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/io/token_file.h"
#include "dendrite/train/trainer.h"

namespace fs = std::filesystem;

namespace {

void write_safetensors(const fs::path& dir) {
  const int V = 8, C = 4;
  std::vector<float> wte(V * C), ln(C, 1.0f);  // [V, C], [C]
  for (int i = 0; i < V * C; ++i) wte[i] = 0.01f * static_cast<float>(i - 7);
  std::vector<int32_t> ids = {3, 1, 4, 1, 5};
  std::vector<uint8_t> flags = {1, 0, 1};
  dendrite::SafetensorsWriter full;
  full.add_f32("wte.weight", {V, C}, wte.data());
  full.add_f32("ln_f.weight", {C}, ln.data());
  full.add("tokens", "I32", {5}, ids.data(), ids.size() * sizeof(int32_t));
  full.add("flags", "U8", {3}, flags.data(), flags.size());
  full.set_metadata("format", "pt");
  full.write((dir / "tiny_model.safetensors").string());
  dendrite::SafetensorsWriter one;
  one.add_f32("ln_f.weight", {C}, ln.data());
  one.write((dir / "one_tensor.safetensors").string());
  dendrite::SafetensorsWriter().write((dir / "empty.safetensors").string());
}

void write_token_files(const fs::path& dir) {
  std::vector<int32_t> small, large;
  for (int i = 0; i < 40; ++i) small.push_back((i * 37) % 500);
  for (int i = 0; i < 24; ++i) large.push_back(70000 + i * 1001);
  dendrite::write_token_file((dir / "width2.bin").string(), small, 2);
  dendrite::write_token_file((dir / "width4.bin").string(), small, 4);
  dendrite::write_token_file((dir / "large_ids.bin").string(), large, 4);
}

void write_configs(const fs::path& dir) {
  std::ofstream(dir / "gpt2_tiny.json") << dendrite::to_json(dendrite::load_model_config("gpt2-tiny")).dump(1);
  std::ofstream(dir / "llama_tiny.json") << dendrite::to_json(dendrite::load_model_config("llama-tiny")).dump(1);
  std::ofstream(dir / "train_options.json") << dendrite::TrainOptions().to_json().dump(1);
  std::ofstream(dir / "partial.json") << R"({"arch": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 32})";
  std::ofstream(dir / "train_partial.json") << R"({"steps": 8, "lr": 0.001, "grid": "x=2,y=2"})";
  // Regressions: floats out of range for integer keys were undefined behaviour.
  std::ofstream(dir / "float_size.json") << R"({"arch": "llama", "n_layer": 1e30})";
  std::ofstream(dir / "float_steps.json") << R"({"steps": 1e300, "seed": -1.5})";
}

// Each tokenizer.json of tests/data/hf/tokenizers/ cut down to its first
// tokens and the merges among them (a few KB), plus GPT-2's.
void write_tokenizer_jsons(const fs::path& dir) {
  for (const char* kind : {"llama3", "qwen2", "mistral", "llama2", "../bpe"}) {
    nlohmann::json j;
    std::ifstream(fs::path("tests/data/hf/tokenizers") / kind / "tokenizer.json") >> j;
    nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
    for (const auto& [token, id] : j["model"]["vocab"].items())
      if (id.get<int>() < 300) vocab[token] = id;
    for (const auto& m : j["model"]["merges"]) {
      const std::string l = m[0], r = m[1];
      if (vocab.contains(l) && vocab.contains(r) && vocab.contains(l + r)) merges.push_back(m);
    }
    j["model"]["vocab"] = vocab;
    j["model"]["merges"] = merges;
    std::ofstream(dir / (fs::path(kind).filename().string() + ".json")) << j.dump(1);
  }
}

void write_sentencepiece_models(const fs::path& dir) {
  fs::copy_file("tests/data/hf/sp/tokenizer.model", dir / "hf_sp.model",
                fs::copy_options::overwrite_existing);
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "fuzz/corpus";
  for (const char* target : {"safetensors_fuzz", "token_file_fuzz", "config_fuzz",
                             "tokenizer_json_fuzz", "sentencepiece_model_fuzz"})
    fs::create_directories(root / target);
  write_safetensors(root / "safetensors_fuzz");
  write_token_files(root / "token_file_fuzz");
  write_configs(root / "config_fuzz");
  write_tokenizer_jsons(root / "tokenizer_json_fuzz");  // run from the repository root
  write_sentencepiece_models(root / "sentencepiece_model_fuzz");
  return 0;
}
