// `dendrite train`: options, an optional JSON config file (--config), run.
// --grid auto asks the performance model (src/dendrite/plan) for the grid.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "dendrite/backend/backend.h"
#include "dendrite/core/check.h"
#include "dendrite/model/config.h"
#include "dendrite/plan/model.h"
#include "dendrite/train/trainer.h"

namespace dendrite::app {

std::string find_config_arg(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
  }
  return "";
}

std::unique_ptr<Backend> make_rank_backend(const std::string& device, MpiEnv& env,
                                           bool gemm_epilogues) {
  const Device d = resolve_device(device);
  BackendOptions o;
  o.gemm_epilogues = gemm_epilogues;
  if (d == Device::kCuda) {
    const NodePlace place = node_place(env.world());
    o.node_rank = place.rank;
    o.node_ranks = place.ranks;
    o.transport = env.options().gpu_transport;
  }
  return make_backend(d, o);
}

ProcessGrid make_grid(Communicator& world, const std::string& text) {
  return ProcessGrid(GridShape::parse(text, world.size()), world);
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

// The machine --grid auto plans for: the --machine file, or a generic
// description of this node; either way with this job's ranks on the node and
// threads per rank (what decides oversubscription).
static Machine auto_grid_machine(const std::string& file, int ranks, int threads,
                                 const Backend& backend, std::string& source) {
  const int cores = int(sysconf(_SC_NPROCESSORS_ONLN));
  Machine mach;
  if (!file.empty()) {
    mach = load_machine(file);
    source = "machine file " + file;
  } else {
    const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    mach = generic_machine(ranks, threads, cores, memory);
    if (backend.device() != Device::kCpu) {  // each rank's GPU and its memory
      mach.gpu = true;
      mach.memory_per_rank_bytes = double(backend.device_capacity_bytes());
    }
    source = "no --machine file: a generic description of this node (nominal rates; write a "
             "measured one with `dendrite calibrate --out FILE` and pass --machine FILE)";
  }
  mach.ranks_per_node = ranks;
  mach.threads_per_rank = threads;
  return mach;
}

// --grid auto: the planner's first choice for this job's world size, model,
// batch, sequence and options. Every rank plans (the same inputs give the same
// ranking); rank 0's choice is broadcast so that all ranks build one grid even
// if nodes differ, and rank 0 says why.
static std::string auto_grid(const TrainOptions& opt, const std::string& machine_file,
                             Communicator& comm, const Backend& backend) {
  const int world = comm.size(), rank = comm.rank();
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  std::string source;
  const Machine mach =
      auto_grid_machine(machine_file, comm.ranks_on_node(), threads, backend, source);
  PlanOptions po;
  // With gradient accumulation the grid runs micro-batches: plan for one.
  po.B = opt.batch / std::max(1, opt.grad_accum), po.T = opt.seq;
  po.keep_gathered = opt.keep_gathered;
  po.precision = parse_precision(opt.precision);
  po.recompute = opt.recompute;
  po.overlap = Overlap::parse(resolve_overlap(opt.overlap, comm.ranks_on_node(), threads));
  const Plan plan = plan_grids(model_config_of(opt.init_from.empty() ? opt.model : opt.init_from),
                               mach, world, po);
  DENDRITE_CHECK(!plan.ranked.empty(), "train --grid auto: no grid of ", world, " ranks runs ",
                 opt.model, " with batch ", opt.batch, " (",
                 plan.excluded.empty() ? "" : plan.excluded[0].second,
                 "); see `dendrite plan --world ", world, "`");
  // The text travels as 8-byte words: the collectives move numbers.
  int64_t words[8] = {};
  char* text = reinterpret_cast<char*>(words);
  std::snprintf(text, sizeof words, "%s", grid_str(plan.ranked[0].grid).c_str());
  comm.broadcast(words, 8, DType::kI64, 0);
  if (rank == 0) {
    const StepPrediction& best = plan.ranked[0];
    std::printf("grid auto: %s, predicted %.4g ms/step (compute %.4g, exposed communication %.4g, "
                "hidden %.4g) for %s B=%d T=%d on %d ranks (%d per node, %d threads per rank), "
                "overlap %s, %s\n", text, best.step_s * 1e3, best.compute_s * 1e3,
                best.comm_exposed_s * 1e3, best.comm_hidden_s * 1e3, opt.model.c_str(), opt.batch,
                opt.seq, world, mach.ranks_per_node, threads, po.overlap.str().c_str(),
                source.c_str());
    if (plan.ranked.size() > 1)
      std::printf("grid auto: runner-up %s, predicted %.4g ms/step (+%.1f%%)\n",
                  grid_str(plan.ranked[1].grid).c_str(), plan.ranked[1].step_s * 1e3,
                  100 * (plan.ranked[1].step_s / best.step_s - 1));
    else
      std::printf("grid auto: the only grid that runs (%zu ruled out)\n", plan.excluded.size());
    std::fflush(stdout);
  }
  return text;
}

// The model and its data: what is trained on what.
static void add_model_options(CLI::App& app, TrainOptions& opt) {
  std::string presets;
  for (auto& n : preset_names()) presets += " " + n;
  app.add_option("--model", opt.model, "Preset (" + presets.substr(1) + ") or model JSON file")
      ->capture_default_str();
  app.add_option("--data", opt.data, "Folder written by `dendrite tokenize`")->capture_default_str();
  app.add_option("--steps", opt.steps, "Optimizer steps")->capture_default_str();
  app.add_option("--batch", opt.batch, "Sequences per optimizer step")->capture_default_str();
  app.add_option("--grad-accum", opt.grad_accum,
                 "Gradient accumulation: run each step's batch as N micro-batches of batch/N "
                 "sequences (activations for one micro-batch; the gradient sums over d only "
                 "after the last); the same update as one batch")
      ->capture_default_str();
  app.add_option("--seq", opt.seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--seed", opt.seed, "Seed of initialisation and batch order")->capture_default_str();
  app.add_option("--goldfish", opt.goldfish,
                 "Goldfish loss: leave a pseudo-random 1/k of the target tokens out of the loss, "
                 "e.g. k=4,h=13,mode=hash (hash of the h targets ending at each one; the same "
                 "passage drops the same tokens wherever it appears), k=4,mode=static (every "
                 "k-th position), seed=N; off by default")
      ->capture_default_str();
}

// AdamW, the schedule and clipping.
static void add_optimizer_options(CLI::App& app, TrainOptions& opt) {
  app.add_option("--lr", opt.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--min-lr", opt.min_lr, "Final learning rate of the cosine decay (default lr/10)");
  app.add_option("--warmup", opt.warmup, "Linear warmup steps (default min(100, steps/10))");
  app.add_option("--weight-decay", opt.weight_decay, "AdamW decay (not on norms and biases)")
      ->capture_default_str();
  app.add_option("--beta1", opt.beta1,
                 "AdamW's decay of the running mean of gradients (first moment)")
      ->capture_default_str();
  app.add_option("--beta2", opt.beta2,
                 "AdamW's decay of the running mean of squared gradients (second moment); "
                 "0.95 as GPT-3 and Llama, 0.999 as PyTorch's default")
      ->capture_default_str();
  app.add_option("--adam-eps", opt.adam_eps,
                 "AdamW's epsilon, added to the square root of the second moment before dividing")
      ->capture_default_str();
  app.add_option("--grad-clip", opt.grad_clip, "Clip the global gradient norm (0: off)")
      ->capture_default_str();
}

// Checkpoints, failures, validation and output.
static void add_run_options(CLI::App& app, TrainOptions& opt) {
  app.add_option("--out", opt.out, "Run folder for checkpoints (ckpt-<step>/ and latest)");
  app.add_option("--resume", opt.resume, "Continue from a run folder or checkpoint folder");
  app.add_option("--init-from", opt.init_from,
                 "Start from a Hugging Face model folder (GPT2LMHeadModel or LlamaForCausalLM: "
                 "config.json and safetensors in fp32, bf16 or fp16); the model is the folder's "
                 "(--model is not used), optimizer and schedule start fresh");
  app.add_option("--save-every", opt.save_every, "Checkpoint every N steps (0: at the end only)")
      ->capture_default_str();
  app.add_option("--keep", opt.keep,
                 "Keep only the newest N checkpoints in --out: after each save, older ckpt-* "
                 "folders are removed, never the one `latest` names (0: keep all)")
      ->capture_default_str();
  app.add_option("--on-nan", opt.on_nan,
                 "When a step's loss or gradient norm is not finite: stop (fail before the update; "
                 "the last checkpoint stays good) or skip-step (skip that update, log a warning, "
                 "count it; fail after " +
                     std::to_string(kMaxSkippedStepsInARow) + " in a row)")
      ->capture_default_str()
      ->check(CLI::IsMember({"stop", "skip-step"}));
  app.add_option("--timeout", opt.timeout,
                 "Seconds a collective may wait for the other ranks before the job fails with an "
                 "error naming the collective and the grid axis (a rank stuck or dead); the wait "
                 "for a checkpoint write is not timed (0: wait forever)")
      ->capture_default_str();
  app.add_option("--stop-at", opt.stop_at,
                 "Stop (and save) after this step, as an interrupted run would; --resume later "
                 "continues with the same schedule (--steps still sets its length)")
      ->capture_default_str();
  app.add_option("--eval-every", opt.eval_every, "Validation loss every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--eval-batches", opt.eval_batches,
                 "Batches of --batch sequences of the validation tokens (val.bin) each validation "
                 "loss averages over")
      ->capture_default_str();
  app.add_option("--log-every", opt.log_every,
                 "Print the progress line (loss, learning rate, gradient norm, tokens/s, MFU, "
                 "step time, time left) every N steps, and at the last step and every "
                 "validation (0: only those)")
      ->capture_default_str();
  app.add_option("--progress", opt.progress,
                 "live: one progress line rewritten in place (\\r); lines: a plain line every "
                 "--log-every steps, as a log file wants; auto: live only where stdout is a "
                 "terminal and no MPI launcher started the job (mpirun and srun give ranks a "
                 "pseudo-terminal even when their output goes to a file)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "live", "lines"}));
  app.add_option("--metrics", opt.metrics, "Write one JSON object per step to this file");
  app.add_option("--trace", opt.trace,
                 "Write a timeline of every rank's steps and collectives to this file (Trace "
                 "Event JSON: ui.perfetto.dev or chrome://tracing)");
  app.add_option("--trace-steps", opt.trace_steps,
                 "Steps the --trace timeline covers (from the second step when the run is longer)")
      ->capture_default_str();
}

// How the run uses the machine: grid, threads, overlap, memory trade-offs.
static void add_parallel_options(CLI::App& app, TrainOptions& opt, std::string& machine) {
  app.add_option("--threads", opt.threads, "Threads per rank (default: OMP_NUM_THREADS or all cores)");
  app.add_flag("--keep-gathered", opt.keep_gathered,
               "Keep each layer's Z-gathered weights from the forward for the backward "
               "(one all-gather over Z a step instead of two; 1/(x*y) of the weights more memory)");
  app.add_flag("--recompute", opt.recompute,
               "Keep only each block's input and recompute the block in the backward (less memory)");
  app.add_option("--device", opt.device,
                 "cpu, cuda (a build with the CUDA backend, DENDRITE_CUDA), or auto: cuda when "
                 "the build has it and the machine a GPU, else cpu")
      ->capture_default_str();
  app.add_option("--precision", opt.precision,
                 "fp32, or bf16: GEMM operands and the z all-gathers of weights in bf16 with fp32 "
                 "accumulation; norms, softmax, losses, gradients, master weights and AdamW state "
                 "stay fp32, and checkpoints are the same (either precision resumes either)")
      ->capture_default_str();
  app.add_flag("--gemm-tune", opt.gemm_tune,
               "Time every way of computing each GEMM shape at its first call and keep the fastest "
               "that gives the same bits (reported after the first step)");
  app.add_option("--overlap", opt.overlap,
                 "Communication hidden behind computation, a list of: oar (backward all-reduce of "
                 "dx behind the dW product), ors (dW reduce-scatter over z behind earlier layers), "
                 "oag (z all-gather of the next layer's weights posted ahead), dp (gradient sum "
                 "over d per layer during the backward); or all, none; or auto: all when each "
                 "rank on the node has a core to spare for its progress engine, else none")
      ->capture_default_str();
  app.add_option("--grid", opt.grid,
                 "Process grid, e.g. x=2,y=2,z=1,d=2 (axes left out are 1; d fills the job "
                 "when left out), or auto: the performance model's fastest grid for this job "
                 "(see --machine); default: all ranks data-parallel");
  app.add_option("--machine", machine,
                 "Machine file for --grid auto (dendrite calibrate, machines/*.json); default: "
                 "a generic description of this node");
}

Runner add_train(CLI::App& app, int argc, char** argv, const TrainHooks* hooks, MpiEnv& env) {
  auto opt = std::make_shared<TrainOptions>();
  auto config_path = std::make_shared<std::string>();
  auto machine = std::make_shared<std::string>();
  app.add_option("--config", *config_path,
                 "JSON file of options (keys are these long option names without dashes, "
                 "e.g. {\"steps\": 500}); options on the command line win");
  add_model_options(app, *opt);
  add_optimizer_options(app, *opt);
  add_run_options(app, *opt);
  add_parallel_options(app, *opt, *machine);
  // The config file is read before the command line is parsed, so that the
  // parsed options (bound to the same fields) override it.
  auto pre = std::make_shared<std::string>(find_config_arg(argc, argv));
  app.preparse_callback([opt, pre](size_t) {
    if (!pre->empty()) apply_config_file(*pre, *opt);
  });
  // The runner holds config_path too: CLI11 stores the --config value through
  // a reference to it after this function returns.
  return [opt, machine, config_path, hooks, &env] {
    std::unique_ptr<Backend> backend = make_rank_backend(opt->device, env);
    if (opt->grid == "auto") opt->grid = auto_grid(*opt, *machine, env.world(), *backend);
    ProcessGrid grid = make_grid(backend->transport(env.world()), opt->grid);
    run_train(*opt, grid, *backend, hooks);
    return 0;
  };
}

}  // namespace dendrite::app
