// `dendrite generate`: load a checkpoint and its tokenizer, stream text.
// Runs on every rank of the launch (any grid; a batch of --samples sequences
// of the same prompt); rank 0 prints.
#include <omp.h>

#include <cstdio>
#include <filesystem>

#include "apps/commands.h"
#include "dendrite/backend/backend.h"
#include "dendrite/core/check.h"
#include "dendrite/eval/generate.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite::app {

namespace {

struct GenerateOptions {
  std::string checkpoint, prompt = "\n", tokenizer, device = "auto", grid;
  int tokens = 200, samples = 1, threads = 0;
  bool no_cache = false;
  SampleOptions sample;
};

int run_generate(const GenerateOptions& o, MpiEnv& env) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  DENDRITE_CHECK(o.samples >= 1 && o.tokens >= 0, "generate: --samples must be positive and "
                 "--tokens non-negative, got ", o.samples, " and ", o.tokens);
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
  const int max_T = std::min<int>(mc.block_size, int(ids.size()) + std::max(o.tokens, 1));
  std::unique_ptr<Backend> backend = make_rank_backend(o.device, env);
  ProcessGrid grid = make_grid(backend->transport(env.world()), o.grid);
  const int dz = grid.shape().d * grid.shape().z;
  DENDRITE_CHECK(o.samples % dz == 0, "generate: --samples ", o.samples,
                 " is not divisible by d*z = ", dz, " of grid ", grid.shape().str(),
                 "; each sequence stays on one rank: pass --samples a multiple of d*z, or a --grid "
                 "over x and y (e.g. --grid x=2)");
  Transformer model(mc, grid, *backend, o.samples, max_T);
  load_weights(dir, model);
  const bool print = grid.rank() == 0, stream = o.samples == 1;
  if (print && stream) {
    std::fputs(o.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  // The new text follows the prompt: no leading space is dropped, and a
  // character split over byte-level tokens is printed once complete.
  std::unique_ptr<TokenStream> text = tok->stream(/*continuing=*/true);
  auto piece = [&](TokenStream& t, int32_t id) {
    return id < tok->vocab_size() ? t.next(id) : std::string();  // a padding row: no text
  };
  const std::vector<Ids> prompts(size_t(o.samples), ids);
  const std::vector<Ids> out = generate_batch(
      model, prompts, o.tokens, sampling_picker(mc.vocab_size, o.sample), !o.no_cache,
      [&](int, const Ids& next) {
        if (!print || !stream) return;
        std::fputs(piece(*text, next[0]).c_str(), stdout);
        std::fflush(stdout);
      });
  if (!print) return 0;
  if (stream) {
    std::fputs((text->finish() + "\n").c_str(), stdout);
    return 0;
  }
  for (int b = 0; b < o.samples; ++b) {
    std::unique_ptr<TokenStream> t = tok->stream(/*continuing=*/true);
    std::string s = o.prompt;
    for (size_t i = ids.size(); i < out[b].size(); ++i) s += piece(*t, out[b][i]);
    std::printf("--- sample %d ---\n%s%s\n", b + 1, s.c_str(), t->finish().c_str());
  }
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app, MpiEnv& env) {
  auto o = std::make_shared<GenerateOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Run folder or checkpoint folder")->required();
  app.add_option("--prompt", o->prompt, "Text to continue");
  app.add_option("--tokens", o->tokens, "Tokens to generate")->capture_default_str();
  app.add_option("--samples", o->samples,
                 "Sequences generated together from the prompt, each with its own random stream "
                 "(a multiple of d*z of the grid)")
      ->capture_default_str();
  app.add_option("--grid", o->grid, "Process grid, e.g. x=2,y=2 (default: all ranks data-parallel)");
  app.add_option("--threads", o->threads, "Threads per rank (default: OMP_NUM_THREADS or all cores)");
  app.add_flag("--no-cache", o->no_cache,
               "Run each new token over the whole sequence instead of the key/value cache "
               "(slower; the same tokens)");
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
  return [o, &env] { return run_generate(*o, env); };
}

}  // namespace dendrite::app
