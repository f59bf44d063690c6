// The training loop of `dendrite train`: data, model, AdamW with warmup and
// cosine decay, clipping, validation, metrics, checkpoints and exact resume.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "dendrite/comm/grid.h"

namespace dendrite {

struct TrainOptions {
  std::string model = "gpt2-mini";  // preset or model config file
  std::string data = "data/kjv";    // folder written by `dendrite tokenize`
  int64_t steps = 1000;
  int batch = 8;
  int seq = 256;
  double lr = 1e-3;
  double min_lr = -1.0;  // default lr / 10
  int64_t warmup = -1;   // default min(100, steps / 10)
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;
  uint64_t seed = 1337;
  std::string out;     // run folder for checkpoints (empty: none)
  std::string resume;  // run or checkpoint folder
  int64_t save_every = 0;  // 0: only at the end
  int64_t stop_at = 0;     // >0: stop (and save) after this step, as if interrupted
  int64_t eval_every = 100;
  int eval_batches = 8;
  int64_t log_every = 1;
  std::string metrics;  // JSON Lines file
  int threads = 0;      // 0: OMP_NUM_THREADS or all cores
  std::string grid;     // "x=2,y=2,z=1,d=2" (the command builds the ProcessGrid from it)
  bool keep_gathered = false;  // keep Z-gathered weights from forward to backward
  bool recompute = false;      // activation recomputation
  bool gemm_tune = false;      // time each GEMM shape's ways at its first call, keep the fastest
  std::string overlap = "all";  // communication to hide: oar, ors, oag, dp, all, none (ModelOptions)
  int keep = 0;                // keep only the newest N checkpoints of --out (0: all)
  std::string on_nan = "stop";  // a non-finite loss or gradient norm: stop, or skip-step
  double timeout = 600;         // seconds a collective may block before the job fails (0: off)
  std::string goldfish = "off";  // Goldfish loss: "off" or "k=4,h=13,mode=hash,seed=0" (goldfish.h)

  nlohmann::json to_json() const;
  // Sets the fields named in j; an unknown key or a value of the wrong type is an error.
  void update_from_json(const nlohmann::json& j);
};

// --on-nan skip-step gives up after this many non-finite steps in a row.
constexpr int kMaxSkippedStepsInARow = 10;

struct TrainResult {
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;  // updates skipped by --on-nan skip-step
  double last_loss = 0, last_val_loss = -1;
  std::string last_checkpoint;
};

// Runs on every rank of grid (built once by the caller from opt.grid).
TrainResult run_train(TrainOptions opt, ProcessGrid& grid);

}  // namespace dendrite
