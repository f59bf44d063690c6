// `dendrite generate`: load a checkpoint and its tokenizer, stream text.
#include <cstdio>
#include <filesystem>

#include "apps/commands.h"
#include "dendrite/backend/backend.h"
#include "dendrite/comm/self_communicator.h"
#include "dendrite/core/check.h"
#include "dendrite/eval/generate.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite::app {

namespace {

struct GenerateOptions {
  std::string checkpoint, prompt = "\n", tokenizer, device = "auto";
  int tokens = 200;
  SampleOptions sample;
};

int run_generate(const GenerateOptions& o, int rank) {
  if (rank != 0) return 0;  // generation runs on one process
  const std::string dir = resolve_checkpoint(o.checkpoint);
  ModelConfig mc = model_config_from_json(read_checkpoint_config(dir).at("model"));
  const std::string tok_path = o.tokenizer.empty() ? checkpoint_tokenizer(dir) : o.tokenizer;
  DENDRITE_CHECK(std::filesystem::exists(tok_path), "generate: no tokenizer at ", tok_path,
                 "; pass --tokenizer FILE.model or a Hugging Face tokenizer folder (the one the "
                 "training data was made with)");
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(tok_path);
  // Dendrite's own models size the model's vocabulary exactly; a Hugging Face
  // model may pad its embedding beyond the tokenizer's ids.
  const bool padded_ok = tok->format() != "sentencepiece";
  DENDRITE_CHECK(
      tok->vocab_size() == mc.vocab_size || (padded_ok && tok->vocab_size() < mc.vocab_size),
      "generate: the tokenizer ", tok_path, " has ", tok->vocab_size(),
      " tokens but the checkpoint's model has ", mc.vocab_size,
      "; use the tokenizer the model was trained with");
  std::vector<int32_t> ids = tok->encode(o.prompt);
  if (ids.empty()) ids.push_back(tok->eos_id() >= 0 ? tok->eos_id() : 0);
  int max_T = std::min<int>(mc.block_size, int(ids.size()) + o.tokens);
  std::unique_ptr<Backend> backend = make_backend(resolve_device(o.device));
  SelfCommunicator self("world");  // one process; its collectives through the backend's transport
  ProcessGrid grid(GridShape{}, backend->transport(self));
  Transformer model(mc, grid, *backend, 1, max_T);
  load_weights(dir, model);
  std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  // The new text follows the prompt: no leading space is dropped, and a
  // character split over byte-level tokens is printed once complete.
  std::unique_ptr<TokenStream> text = tok->stream(/*continuing=*/true);
  generate(model, ids, o.tokens, o.sample, [&](int32_t id) {
    if (id >= tok->vocab_size()) return;  // a padding row of the embedding: no text
    std::fputs(text->next(id).c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputs((text->finish() + "\n").c_str(), stdout);
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app, MpiEnv& env) {
  auto o = std::make_shared<GenerateOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Run folder or checkpoint folder")->required();
  app.add_option("--prompt", o->prompt, "Text to continue");
  app.add_option("--tokens", o->tokens, "Tokens to generate")->capture_default_str();
  app.add_option("--device", o->device, "cpu, cuda or auto (as train)")->capture_default_str();
  app.add_option("--temperature", o->sample.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  app.add_option("--top-k", o->sample.top_k, "Sample among the k likeliest tokens (0: all)")
      ->capture_default_str();
  app.add_flag_callback("--greedy", [o] { o->sample.temperature = 0; }, "Greedy decoding");
  app.add_option("--seed", o->sample.seed, "Sampling seed")->capture_default_str();
  app.add_option("--tokenizer", o->tokenizer,
                 "Tokenizer: a FILE.model or a Hugging Face tokenizer folder (default: the "
                 "checkpoint's)");
  return [o, &env] { return run_generate(*o, env.rank()); };
}

}  // namespace dendrite::app
