// `dendrite train`: options, an optional JSON config file (--config), run.
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "dendrite/core/check.h"
#include "dendrite/model/config.h"
#include "dendrite/train/trainer.h"

namespace dendrite::app {

std::string find_config_arg(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
  }
  return "";
}

ProcessGrid make_grid(const std::string& text) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm comm = MPI_COMM_WORLD;
  return ProcessGrid(GridShape::parse(text, world), &comm);
}

static void apply_config_file(const std::string& path, TrainOptions& opt) {
  DENDRITE_CHECK(std::filesystem::exists(path), "train: config file ", path, " does not exist");
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("train: config file ", path, " is not valid JSON (", e.what(), ")");
  }
  opt.update_from_json(j);
}

Runner add_train(CLI::App& app, int argc, char** argv) {
  auto opt = std::make_shared<TrainOptions>();
  auto config_path = std::make_shared<std::string>();
  std::string presets;
  for (auto& n : preset_names()) presets += " " + n;
  app.add_option("--config", *config_path,
                 "JSON file of options (keys are these long option names without dashes, "
                 "e.g. {\"steps\": 500}); options on the command line win");
  app.add_option("--model", opt->model, "Preset (" + presets.substr(1) + ") or model JSON file")
      ->capture_default_str();
  app.add_option("--data", opt->data, "Folder written by `dendrite tokenize`")->capture_default_str();
  app.add_option("--steps", opt->steps, "Optimizer steps")->capture_default_str();
  app.add_option("--batch", opt->batch, "Sequences per step")->capture_default_str();
  app.add_option("--seq", opt->seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--lr", opt->lr, "Peak learning rate")->capture_default_str();
  app.add_option("--min-lr", opt->min_lr, "Final learning rate of the cosine decay (default lr/10)");
  app.add_option("--warmup", opt->warmup, "Linear warmup steps (default min(100, steps/10))");
  app.add_option("--weight-decay", opt->weight_decay, "AdamW decay (not on norms and biases)")
      ->capture_default_str();
  app.add_option("--beta1", opt->beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", opt->beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--adam-eps", opt->adam_eps, "AdamW epsilon")->capture_default_str();
  app.add_option("--grad-clip", opt->grad_clip, "Clip the global gradient norm (0: off)")
      ->capture_default_str();
  app.add_option("--seed", opt->seed, "Seed of initialisation and batch order")->capture_default_str();
  app.add_option("--out", opt->out, "Run folder for checkpoints (ckpt-<step>/ and latest)");
  app.add_option("--resume", opt->resume, "Continue from a run folder or checkpoint folder");
  app.add_option("--save-every", opt->save_every, "Checkpoint every N steps (0: at the end only)")
      ->capture_default_str();
  app.add_option("--stop-at", opt->stop_at,
                 "Stop (and save) after this step, as an interrupted run would; resume later")
      ->capture_default_str();
  app.add_option("--eval-every", opt->eval_every, "Validation loss every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--eval-batches", opt->eval_batches, "Batches per validation")->capture_default_str();
  app.add_option("--log-every", opt->log_every, "Print a line every N steps")->capture_default_str();
  app.add_option("--metrics", opt->metrics, "Write one JSON object per step to this file");
  app.add_option("--threads", opt->threads, "Threads per rank (default: OMP_NUM_THREADS or all cores)");
  app.add_flag("--keep-gathered", opt->keep_gathered,
               "Keep each layer's Z-gathered weights from the forward for the backward "
               "(one all-gather over Z a step instead of two; 1/(x*y) of the weights more memory)");
  app.add_flag("--recompute", opt->recompute,
               "Keep only each block's input and recompute the block in the backward (less memory)");
  app.add_option("--overlap", opt->overlap,
                 "Communication hidden behind computation: oar (backward all-reduce of dx behind "
                 "the dW product), dp (gradient reduction over d per layer during the backward; "
                 "slower on machines without a spare core per rank), all, none")
      ->capture_default_str();
  app.add_option("--goldfish", opt->goldfish,
                 "Goldfish loss: leave a pseudo-random 1/k of the target tokens out of the loss, "
                 "e.g. k=4,h=13,mode=hash (hash of the h targets ending at each one; the same "
                 "passage drops the same tokens wherever it appears), k=4,mode=static (every "
                 "k-th position), seed=N; off by default")
      ->capture_default_str();
  app.add_option("--grid", opt->grid,
                 "Process grid, e.g. x=2,y=2,z=1,d=2 (axes left out are 1; d fills the job "
                 "when left out); default: all ranks data-parallel");
  // The config file is read before the command line is parsed, so that the
  // parsed options (bound to the same fields) override it.
  const std::string path = find_config_arg(argc, argv);
  auto pre = std::make_shared<std::string>(path);
  app.preparse_callback([opt, pre](size_t) {
    if (!pre->empty()) apply_config_file(*pre, *opt);
  });
  // The runner holds config_path: CLI11 writes --config into it while parsing
  // (it was freed when this function returned: a use after free).
  return [opt, config_path] {
    ProcessGrid grid = make_grid(opt->grid);
    run_train(*opt, grid);
    return 0;
  };
}

}  // namespace dendrite::app
