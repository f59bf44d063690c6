// `dendrite score`: the logits a checkpoint or a Hugging Face folder gives
// token sequences (float32 [B, T, V], little-endian), to compare Dendrite
// with another implementation of the same model (scripts/check_hf_export.py).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "dendrite/backend/backend.h"
#include "dendrite/comm/self_communicator.h"
#include "dendrite/core/check.h"
#include "dendrite/io/hf_folder.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/checkpoint.h"

namespace dendrite::app {

namespace {

struct ScoreOptions {
  std::string checkpoint, hf, tokens, out, device = "auto";
};

int run_score(const ScoreOptions& o, int rank) {
  if (rank != 0) return 0;  // one process
  DENDRITE_CHECK(o.checkpoint.empty() != o.hf.empty(), "score: pass either --checkpoint or --hf");
  std::ifstream in(o.tokens);
  DENDRITE_CHECK(in.good(), "score: cannot open --tokens ", o.tokens);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("score: ", o.tokens, " is not valid JSON (", e.what(), ")");
  }
  const nlohmann::json& seqs = j.is_object() ? j.at("tokens") : j;
  DENDRITE_CHECK(seqs.is_array() && !seqs.empty() && seqs[0].is_array() && !seqs[0].empty(),
                 "score: ", o.tokens, " must hold {\"tokens\": [[ids...], ...]}");
  const int B = int(seqs.size()), T = int(seqs[0].size());
  std::vector<int32_t> ids;
  for (const auto& s : seqs) {
    DENDRITE_CHECK(int(s.size()) == T, "score: every sequence of ", o.tokens, " needs ", T,
                   " tokens (the first one's)");
    for (const auto& t : s) ids.push_back(t.get<int32_t>());
  }
  std::unique_ptr<Backend> backend = make_backend(resolve_device(o.device));
  SelfCommunicator self("world");
  ProcessGrid grid(GridShape{}, backend->transport(self));
  std::unique_ptr<HfFolder> folder;
  ModelConfig mc;
  if (!o.hf.empty()) {
    folder = std::make_unique<HfFolder>(o.hf);
    folder->check_sequence(T);
    mc = folder->config();
  } else {
    mc = model_config_from_json(read_checkpoint_config(resolve_checkpoint(o.checkpoint)).at("model"));
  }
  Transformer model(mc, grid, *backend, B, T);
  if (folder)
    load_hf_folder(*folder, model);
  else
    load_weights(resolve_checkpoint(o.checkpoint), model);
  std::vector<float> logits(size_t(B) * T * mc.vocab_size);
  model.logits(ids.data(), B, T, logits.data());
  std::ofstream out(o.out, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * 4));
  out.close();
  DENDRITE_CHECK(out.good(), "score: cannot write ", o.out);
  std::printf("score: logits of %d x %d tokens, vocabulary %d, written to %s\n", B, T,
              mc.vocab_size, o.out.c_str());
  return 0;
}

}  // namespace

Runner add_score(CLI::App& app, MpiEnv& env) {
  auto o = std::make_shared<ScoreOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Run folder or checkpoint folder");
  app.add_option("--hf", o->hf, "A Hugging Face model folder instead of a checkpoint");
  app.add_option("--tokens", o->tokens, "JSON: {\"tokens\": [[ids...], ...]}, equal lengths")
      ->required();
  app.add_option("--out", o->out, "The logits, float32 [B, T, V] little-endian")->required();
  app.add_option("--device", o->device, "cpu, cuda or auto (as train)")->capture_default_str();
  return [o, &env] { return run_score(*o, env.rank()); };
}

}  // namespace dendrite::app
