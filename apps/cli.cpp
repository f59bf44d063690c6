// The `dendrite` command: one MPI program with subcommands (tokenize, train,
// generate, bench, ...). Any error on any rank aborts the whole job with the
// rank and message.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>

#include "apps/commands.h"
#include "dendrite/comm/mpi/env.h"
#include "dendrite/io/hf_folder.h"

namespace dendrite::app {

int dendrite_main(int argc, char** argv, const TrainHooks* hooks, StepCounter* counter) {
  // The one place the communication settings are read from the environment;
  // a bad value ends every rank the same way, before MPI starts.
  CommOptions options;
  try {
    options = comm_options_from_environment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  dendrite::MpiEnv env(&argc, &argv, options);
  return env.run_or_abort([&]() -> int {
    CLI::App app{
        "Dendrite: train GPT-2 and Llama language models with 4D hybrid parallelism.\n"
        "Typical use:\n"
        "  dendrite tokenize --input corpus.txt --vocab-size 8192 --out data/corpus\n"
        "  dendrite train --model gpt2-mini --data data/corpus --steps 500 --out runs/mini\n"
        "  dendrite generate --checkpoint runs/mini --prompt \"In the beginning\"\n",
        "dendrite"};
    app.require_subcommand(1);
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    std::map<CLI::App*, dendrite::app::Runner> runners;
    auto add = [&](const char* name, const char* help, auto&& fn) {
      CLI::App* sub = app.add_subcommand(name, help);
      runners[sub] = fn(*sub);
    };
    add("tokenize", "Train a SentencePiece BPE tokenizer and write token files",
        [](CLI::App& s) { return dendrite::app::add_tokenize(s); });
    add("train", "Train a model", [&](CLI::App& s) { return dendrite::app::add_train(s, argc, argv, hooks, env); });
    add("generate", "Generate text from a checkpoint",
        [&](CLI::App& s) { return dendrite::app::add_generate(s, env); });
    add("memorization", "Measure verbatim memorization: greedy continuations of training, canary and held-out text",
        [&](CLI::App& s) { return dendrite::app::add_memorization(s, env); });
    add("bench", "Benchmarks (`bench step`: time training steps)",
        [&](CLI::App& s) { return dendrite::app::add_bench(s, env, counter); });
    add("plan", "Predict step time and memory of every process grid, and rank them",
        [&](CLI::App& s) { return dendrite::app::add_plan(s, env); });
    add("calibrate", "Measure this machine (GEMM rates, collectives, memory) into a machine file",
        [&](CLI::App& s) { return dendrite::app::add_calibrate(s, env); });
    add("export", "Write a checkpoint as a Hugging Face model folder (transformers loads it)",
        [&](CLI::App& s) { return dendrite::app::add_export(s, env); });
    add("score", "Write the logits a checkpoint or Hugging Face folder gives token sequences",
        [&](CLI::App& s) { return dendrite::app::add_score(s, env); });
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);
      return code;
    }
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
    return 1;
  });
}

ModelConfig model_config_of(const std::string& model_or_folder) {
  namespace fs = std::filesystem;
  const fs::path config = fs::path(model_or_folder) / "config.json";
  if (!fs::is_directory(model_or_folder) || !fs::exists(config))
    return load_model_config(model_or_folder);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::ifstream(config));
  } catch (const nlohmann::json::exception& e) {
    fail("hugging face folder: ", config.string(), " is not valid JSON (", e.what(), ")");
  }
  return model_config_from_hf(j, config.string());
}

}  // namespace dendrite::app
