// Checkpoints as Hugging Face folders (export.h).
#include "dendrite/train/export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dendrite/core/check.h"
#include "dendrite/io/hf_folder.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/io/tokenizer.h"
#include "dendrite/model/config.h"
#include "dendrite/train/checkpoint.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

void write_json(const fs::path& p, const nlohmann::json& j) {
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  out.close();
  DENDRITE_CHECK(out.good(), "export: cannot write ", p.string());
}

// Tokenizer files a Hugging Face folder may hold, copied as they are.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                           "special_tokens_map.json", "vocab.json", "merges.txt"};

}  // namespace

std::string export_hf(const std::string& checkpoint, const std::string& out) {
  const std::string ckpt = resolve_checkpoint(checkpoint);
  const ModelConfig mc = model_config_from_json(read_checkpoint_config(ckpt).at("model"));
  DENDRITE_CHECK(!fs::exists(out), "export: ", out, " exists; pass a new folder for --hf");
  const fs::path dir(out), tmp = dir.parent_path() / ("." + dir.filename().string() + ".tmp");
  std::error_code ec;
  std::string tokenizer = "no tokenizer";
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  DENDRITE_CHECK(!ec, "export: cannot create ", tmp.string(), ": ", ec.message());
  try {
    // The weights: checked (every tensor the model has, by its Hugging Face
    // name), then copied byte for byte.
    const fs::path weights = fs::path(ckpt) / "model.safetensors";
    SafetensorsReader reader(weights.string());
    fs::copy_file(weights, tmp / "model.safetensors");
    int bos = -1, eos = -1;
    const fs::path sp = fs::path(ckpt) / "tokenizer.model";
    if (fs::exists(sp)) {  // Dendrite's SentencePiece model: read by transformers' LlamaTokenizer
      const Tokenizer tok(sp.string());
      eos = tok.eos_id();
      fs::copy_file(sp, tmp / "tokenizer.model");
      if (!fs::exists(fs::path(ckpt) / "tokenizer_config.json"))
        write_json(tmp / "tokenizer_config.json",
                   {{"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", false},
                    {"add_eos_token", false}, {"add_prefix_space", false}, {"legacy", true},
                    {"model_max_length", mc.block_size}});
      tokenizer = "tokenizer.model";
    }
    for (const char* f : kTokenizerFiles)
      if (fs::exists(fs::path(ckpt) / f)) {
        fs::copy_file(fs::path(ckpt) / f, tmp / f);
        tokenizer = "Hugging Face tokenizer files";
      }
    write_json(tmp / "config.json", hf_config(mc, bos, eos));
    nlohmann::json gen = nlohmann::json::object();
    if (bos >= 0) gen["bos_token_id"] = bos;
    if (eos >= 0) gen["eos_token_id"] = eos;
    write_json(tmp / "generation_config.json", gen);
    // The folder reads back as the model it came from.
    const HfFolder back(tmp.string());
    DENDRITE_CHECK(to_json(back.config()) == to_json(mc), "export: ", ckpt,
                   ": the written config reads back as another model");
    fs::rename(tmp, dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return str("export: wrote ", out, " (", arch_name(mc.arch), ", ", mc.num_parameters() / 1e6,
             "M parameters, ", tokenizer, ") from ", ckpt);
}

}  // namespace dendrite
