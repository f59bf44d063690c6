// The training loop of `dendrite train`: data, model, AdamW with warmup and
// cosine decay, clipping, validation, metrics, checkpoints and exact resume.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "dendrite/comm/grid.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/hooks.h"

namespace dendrite {

struct TrainOptions {
  std::string model = "gpt2-mini";  // preset or model config file
  std::string data = "data/kjv";    // folder written by `dendrite tokenize`
  int64_t steps = 1000;
  int batch = 8;       // sequences per optimizer step
  int grad_accum = 1;  // micro-batches per step (batch / grad_accum sequences each)
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
  std::string init_from;  // a Hugging Face model folder to start from (replaces model)
  int64_t save_every = 0;  // 0: only at the end
  int64_t stop_at = 0;     // >0: stop (and save) after this step, as if interrupted
  int64_t eval_every = 100;
  int eval_batches = 8;
  int64_t log_every = 1;
  std::string metrics;  // JSON Lines file
  // A timeline of trace_steps steps of every rank (core/trace.h), written to
  // this file (empty: none). The first step is left out when the run has more
  // steps than trace_steps (it warms caches up and tunes GEMMs).
  std::string trace;
  int64_t trace_steps = 3;
  int threads = 0;      // 0: OMP_NUM_THREADS or all cores
  std::string grid;     // "x=2,y=2,z=1,d=2" (the command builds the ProcessGrid from it)
  bool keep_gathered = false;  // keep Z-gathered weights from forward to backward
  bool recompute = false;      // activation recomputation
  bool gemm_tune = false;      // time each GEMM shape's ways at its first call, keep the fastest
  bool fuse_qkv = true;        // q, k and v as one product where the layout allows (ModelOptions)
  bool fuse_gate_up = true;    // SwiGLU's gate and up as one product, likewise
  std::string precision = "fp32";  // fp32 or bf16 (core/precision.h)
  std::string device = "auto";     // cpu, cuda or auto (backend/backend.h: resolve_device)
  // Communication to hide: oar, ors, oag, dp, all, none (ModelOptions), or
  // auto (resolve_overlap).
  std::string overlap = "auto";
  int keep = 0;                // keep only the newest N checkpoints of --out (0: all)
  std::string on_nan = "stop";  // a non-finite loss or gradient norm: stop, or skip-step
  double timeout = 600;         // seconds a collective may block before the job fails (0: off)
  std::string goldfish = "off";  // Goldfish loss: "off" or "k=4,h=13,mode=hash,seed=0" (goldfish.h)
  std::string progress = "auto";  // live, lines or auto (train/progress.h: ProgressMode)

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

// Runs on every rank of grid (built once by the caller from opt.grid) with
// the rank's backend (made by the caller from opt.device).
// hooks: failure injection for tests (train/hooks.h); null in normal use.
TrainResult run_train(TrainOptions opt, ProcessGrid& grid, Backend& backend,
                      const TrainHooks* hooks = nullptr);

// Whether opt.batch splits into opt.grad_accum micro-batches that the grid's
// d*z ranks share out in whole sequences; an error naming the fix if not.
void check_batch_split(const TrainOptions& opt, const GridShape& grid);

// The model of a run (`train`, `bench step`) on grid: sized for the run's
// micro-batch and sequence, with its overlap, kept gathers, recomputation
// and GEMM tuning.
// The overlaps `auto` stands for on this machine: all when every rank on the
// node has a core to spare for its progress engine beside its `threads`
// compute threads, else none (on a full node the engine's copies and sums
// take the computing cores' cycles, and the step measured slower with
// overlap: docs/overlap.md). Other values are returned as given. why, when
// not null, gets the reason in words.
std::string resolve_overlap(const std::string& overlap, int ranks_on_node, int threads,
                            std::string* why = nullptr);

std::unique_ptr<Transformer> make_model(const ModelConfig& mc, ProcessGrid& grid,
                                        Backend& backend, const TrainOptions& opt);

// One step's gradients over a global batch of B sequences of T tokens
// (inputs, targets, weights [B*T] as every rank holds them; weights may be
// null) in micro_batches micro-batches of B / micro_batches sequences, each
// rank running its share of each. Zeroes the gradients first; leaves in
// model.grads() the gradient of the whole batch's loss (summed over every
// axis) and returns that loss. The loss denominator is the whole batch's.
double step_gradients(Transformer& model, const int32_t* inputs, const int32_t* targets,
                      const float* weights, double denominator, int B, int T, int micro_batches);
// The same, the loss left on the device for model.read_step_totals().
void step_gradients_unread(Transformer& model, const int32_t* inputs, const int32_t* targets,
                           const float* weights, double denominator, int B, int T,
                           int micro_batches);

}  // namespace dendrite
