#include "dendrite/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"
#include "dendrite/model/transformer.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/optim.h"
#include "dendrite/ops/peak.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/train/goldfish.h"
#include "dendrite/train/optimizer.h"
#include "dendrite/train/progress.h"
#include "dendrite/train/token_file.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

// After the first step (every shape met once): what --gemm-tune chose, and
// the time it saves per step by the trials' figures.
std::string gemm_tuning_summary() {
  int changed = 0, shapes = 0;
  double saved = 0;
  for (const ops::GemmChoice& c : ops::gemm_choices()) {
    ++shapes;
    if (c.way == c.ways[0]) continue;
    ++changed;
    saved += c.saved_ms() * double(c.calls + 1);
  }
  return str("gemm tuning: ", shapes, " GEMM shapes timed in ",
             std::round(ops::gemm_tuning_seconds() * 1e3), " ms; another way than the default ",
             "kept for ", changed, " (same bits), saving about ", std::round(saved * 10) / 10,
             " ms per step on rank 0");
}

}  // namespace

#define DENDRITE_TRAIN_FIELDS(X)                                                              \
  X(model) X(data) X(steps) X(batch) X(seq) X(lr) X(min_lr) X(warmup) X(weight_decay) X(beta1) \
  X(beta2) X(adam_eps) X(grad_clip) X(seed) X(out) X(resume) X(save_every) X(stop_at) X(eval_every)       \
  X(eval_batches) X(log_every) X(metrics) X(threads) X(grid) X(keep_gathered) X(recompute) X(overlap) \
  X(keep) X(on_nan) X(timeout) X(goldfish) X(gemm_tune)

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j;
#define X(f) j[#f] = f;
  DENDRITE_TRAIN_FIELDS(X)
#undef X
  return j;
}

// get<T>() of a JSON number outside T's range is undefined behaviour (found by
// fuzz/config_fuzz.cpp: {"steps": 1e300}), so integer options need a JSON
// integer that fits.
template <typename T>
T option_value(const std::string& key, const nlohmann::json& v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool fits = v.is_number_unsigned() ? std::in_range<T>(v.get<uint64_t>())
                                             : v.is_number_integer() && std::in_range<T>(v.get<int64_t>());
    DENDRITE_CHECK(fits, "config: key '", key, "' must be an integer from ",
                   std::numeric_limits<T>::min(), " to ", std::numeric_limits<T>::max(), ", not ",
                   v.dump());
  }
  return v.get<T>();
}

void TrainOptions::update_from_json(const nlohmann::json& j) {
  DENDRITE_CHECK(j.is_object(), "config: expected a JSON object of option names and values");
  for (auto& [key, value] : j.items()) {
    bool known = false;
    try {
#define X(f)                             \
  if (key == #f) {                       \
    f = option_value<decltype(f)>(key, value); \
    known = true;                        \
  }
      DENDRITE_TRAIN_FIELDS(X)
#undef X
    } catch (const nlohmann::json::exception& e) {
      fail("config: key '", key, "' has the wrong type (", e.what(), ")");
    }
    DENDRITE_CHECK(known, "config: unknown key '", key, "'; the keys are the long options of ",
                   "`dendrite train --help` without the dashes (e.g. \"steps\", \"lr\")");
  }
}

namespace {

struct Data {
  std::unique_ptr<TokenFile> train, val;
  std::string tokenizer;
  int vocab_size = 0;
};

Data open_data(const std::string& dir) {
  DENDRITE_CHECK(fs::is_directory(dir), "train: data folder ", dir, " does not exist; make it with ",
                 "`dendrite tokenize --input FILE --out ", dir, "`");
  Data d;
  d.train = std::make_unique<TokenFile>((fs::path(dir) / "train.bin").string());
  if (fs::exists(fs::path(dir) / "val.bin"))
    d.val = std::make_unique<TokenFile>((fs::path(dir) / "val.bin").string());
  const fs::path meta = fs::path(dir) / "meta.json";
  if (fs::exists(meta)) {
    std::ifstream in(meta);
    try {
      d.vocab_size = nlohmann::json::parse(in).at("vocab_size").get<int>();
    } catch (const nlohmann::json::exception& e) {
      fail("train: ", meta.string(), " is not valid (", e.what(), "); re-run `dendrite tokenize`");
    }
  }
  if (fs::exists(fs::path(dir) / "tokenizer.model"))
    d.tokenizer = (fs::path(dir) / "tokenizer.model").string();
  return d;
}

// Token ids only mean the same words under the same tokenizer: a data folder
// made with another vocabulary (or another tokenizer of the same size) must
// not continue a checkpoint.
void check_same_vocabulary(const TrainOptions& opt, const Data& data, const std::string& ckpt,
                           const nlohmann::json& saved_model) {
  const std::string fix =
      str("; pass the --data folder the checkpoint was trained on, or ",
          "tokenize your text with the checkpoint's tokenizer: `dendrite ", "tokenize --tokenizer ",
          (fs::path(ckpt) / "tokenizer.model").string(), " --input FILE --out DIR`");
  const int ckpt_vocab = saved_model.value("vocab_size", 0);
  DENDRITE_CHECK(data.vocab_size == 0 || ckpt_vocab == data.vocab_size, "resume: checkpoint ", ckpt,
                 " has a vocabulary of ", ckpt_vocab, " tokens but the data folder ", opt.data,
                 " was tokenized with a vocabulary of ", data.vocab_size, " (its meta.json)", fix);
  const fs::path ckpt_tok = fs::path(ckpt) / "tokenizer.model";
  if (data.tokenizer.empty() || !fs::exists(ckpt_tok)) return;
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  DENDRITE_CHECK(bytes(ckpt_tok) == bytes(data.tokenizer), "resume: the data folder ", opt.data,
                 " was made with another tokenizer than checkpoint ", ckpt, " (both have ",
                 ckpt_vocab, " tokens, but ", data.tokenizer, " differs from ", ckpt_tok.string(),
                 ")", fix);
}

// The model config of this run: the checkpoint's when resuming (the run's
// --model must agree), else the preset or file, with the data's vocabulary.
ModelConfig resolve_model(const TrainOptions& opt, const Data& data, const std::string& ckpt) {
  ModelConfig mc = load_model_config(opt.model);
  if (data.vocab_size > 0) mc.vocab_size = data.vocab_size;
  mc.validate();
  if (ckpt.empty()) return mc;
  nlohmann::json saved = read_checkpoint_config(ckpt).at("model");
  check_same_vocabulary(opt, data, ckpt, saved);
  nlohmann::json now = to_json(mc);
  for (auto& [key, value] : now.items())
    DENDRITE_CHECK(saved.contains(key) && saved[key] == value, "resume: checkpoint ", ckpt,
                   " holds a model with ", key, " = ", saved.value(key, nlohmann::json()).dump(),
                   " but this run's model has ", key, " = ", value.dump(),
                   "; pass the same --model and --data as the run that wrote it");
  return mc;
}

// A global batch of B sequences, and this rank's slice of it.
// Every rank builds the whole global batch, so the Goldfish mask and its
// supervised count (the loss denominator) come out the same on every grid.
struct Batch {
  std::vector<int32_t> inputs, targets;  // [B*T]
  std::vector<float> weights;            // [B*T] Goldfish loss weights (empty: all kept)
  const int32_t* local_inputs = nullptr;
  const int32_t* local_targets = nullptr;
  const float* local_weights = nullptr;
  Batch(int B, int T) : inputs(size_t(B) * T), targets(size_t(B) * T) {}
  void slice(const Transformer& model, int B, int T) {
    const size_t first = size_t(model.first_sequence(B)) * T;
    local_inputs = inputs.data() + first;
    local_targets = targets.data() + first;
    local_weights = weights.empty() ? nullptr : weights.data() + first;
  }
  // Fills the weights of the whole batch; returns the supervised-token count.
  int64_t mask(const GoldfishOptions& g, int B, int T) {
    if (!g.enabled()) return int64_t(B) * T;
    weights.resize(size_t(B) * T);
    return goldfish_weights(g, targets.data(), B, T, weights.data());
  }
};

double evaluate(Transformer& model, const BatchSampler& sampler, int B, int T, int batches) {
  Batch b(B, T);
  double total = 0;
  for (int j = 0; j < batches; ++j) {
    sampler.eval_batch(j, batches, b.inputs.data(), b.targets.data());
    b.slice(model, B, T);
    total += model.forward_loss(b.local_inputs, b.local_targets, nullptr, double(B) * T, B, T);
  }
  return total / batches;
}

// Test-only hooks, read from the environment (never set in normal use):
//   DENDRITE_TEST_NAN_STEPS=a or a-b [DENDRITE_TEST_NAN_RANK=r]: at steps a..b
//     (counted from 1) rank r (default: every rank) fills its gradients with
//     NaN after the backward, as an overflow would.
//   DENDRITE_TEST_HANG_STEP=s [DENDRITE_TEST_HANG_RANK=r]: rank r (default 0)
//     sleeps forever at the start of step s, as a stuck rank would.
struct TestHooks {
  int64_t nan_first = 0, nan_last = 0, hang_step = 0;
  int nan_rank = -1, hang_rank = 0;

  static TestHooks from_env() {
    auto number = [](const char* name, long long fallback) {
      const char* v = std::getenv(name);
      return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
    };
    TestHooks h;
    if (const char* v = std::getenv("DENDRITE_TEST_NAN_STEPS"); v && *v) {
      char* rest = nullptr;
      h.nan_first = h.nan_last = std::strtoll(v, &rest, 10);
      if (*rest == '-') h.nan_last = std::strtoll(rest + 1, nullptr, 10);
    }
    h.nan_rank = int(number("DENDRITE_TEST_NAN_RANK", -1));
    h.hang_step = number("DENDRITE_TEST_HANG_STEP", 0);
    h.hang_rank = int(number("DENDRITE_TEST_HANG_RANK", 0));
    return h;
  }
  void poison_gradients(int64_t step, Transformer& model) const {
    const int rank = model.grid().rank();
    if (nan_first <= 0 || step < nan_first || step > nan_last ||
        (nan_rank >= 0 && nan_rank != rank))
      return;
    std::fill_n(model.grads(), model.table().total(), std::numeric_limits<float>::quiet_NaN());
  }
  void maybe_hang(int64_t step, int rank) const {
    if (step != hang_step || rank != hang_rank) return;
    log_error(str("test hook: hanging at the start of step ", step, " (DENDRITE_TEST_HANG_STEP)"));
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
};

// A step whose loss or gradient norm is not finite: under --on-nan stop the
// run fails before the update (so the weights stay good); under skip-step the
// update is skipped (weights and AdamW state untouched; the step counter and
// the data position move on), until kMaxSkippedStepsInARow in a row.
// The loss and the norm are global sums (over x, y, z and d), so every rank
// sees the same values and decides the same.
class NonFiniteSteps {
 public:
  explicit NonFiniteSteps(const std::string& policy) : skip_(policy == "skip-step") {
    DENDRITE_CHECK(policy == "stop" || policy == "skip-step", "train: --on-nan must be stop or ",
                   "skip-step, not '", policy, "'");
  }
  // True when the step's update should be applied.
  bool accept(int64_t step, double loss, double norm, const std::string& last_ckpt,
              Progress& progress) {
    if (std::isfinite(loss) && std::isfinite(norm)) {
      in_a_row_ = 0;
      return true;
    }
    const std::string what =
        str("step ", step, ": the ", std::isfinite(loss) ? "gradient norm" : "loss",
            " is not finite (loss ", loss, ", gradient norm ", norm, ")");
    const std::string intact =
        str("the last good checkpoint", last_ckpt.empty() ? "" : " " + last_ckpt,
            " is intact; lower --lr or raise --warmup");
    DENDRITE_CHECK(skip_, "train: ", what, "; stopped before the update, so ", intact,
                   " (or pass --on-nan skip-step to skip such steps)");
    ++skipped_;
    ++in_a_row_;
    DENDRITE_CHECK(in_a_row_ < kMaxSkippedStepsInARow, "train: ", what, "; that makes ",
                   kMaxSkippedStepsInARow, " steps in a row (", step - in_a_row_ + 1, " to ", step,
                   ") with a non-finite loss or gradient norm, so --on-nan skip-step gives up; ",
                   intact);
    progress.note(str("warning: ", what, "; skipped its update (--on-nan skip-step): weights and ",
                      "optimizer state unchanged, ", skipped_, " step", skipped_ == 1 ? "" : "s",
                      " skipped so far"));
    return false;
  }
  int64_t skipped() const { return skipped_; }

 private:
  bool skip_;
  int64_t skipped_ = 0, in_a_row_ = 0;
};

// Whether the weights and the AdamW state are finite on every rank (a
// collective over the world): checked before each save, so that a NaN or Inf
// never reaches a checkpoint.
bool state_is_finite(Transformer& model, const AdamW& adam) {
  const int64_t n = model.table().total();
  double bad = 0;
  for (const float* p : {static_cast<const float*>(model.params()), adam.m(), adam.v()})
    for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(p[i]);
  model.grid().world().all_reduce(&bad, 1);
  return bad == 0;
}

}  // namespace

TrainResult run_train(TrainOptions opt, ProcessGrid& grid) {
  if (opt.threads > 0) omp_set_num_threads(opt.threads);
  if (opt.min_lr < 0) opt.min_lr = opt.lr / 10;
  if (opt.warmup < 0) opt.warmup = std::min<int64_t>(100, opt.steps / 10);
  DENDRITE_CHECK(opt.steps > 0 && opt.batch > 0 && opt.seq > 0, "train: --steps, --batch and ",
                 "--seq must be positive");
  DENDRITE_CHECK(opt.lr > 0 && std::isfinite(opt.lr), "train: --lr must be positive, got ", opt.lr);
  DENDRITE_CHECK(opt.keep >= 0, "train: --keep must be 0 (keep all) or positive, got ", opt.keep);
  DENDRITE_CHECK(opt.timeout >= 0 && std::isfinite(opt.timeout), "train: --timeout must be 0 ",
                 "(off) or a positive number of seconds, got ", opt.timeout);
  NonFiniteSteps non_finite(opt.on_nan);
  const TestHooks hooks = TestHooks::from_env();
  grid.set_timeout(opt.timeout);
  // Writes past a file-size limit (ulimit -f) then fail with EFBIG, reported
  // like a full disk, instead of killing the process mid-checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
  const GoldfishOptions goldfish = GoldfishOptions::parse(opt.goldfish);
  opt.goldfish = goldfish.str();

  Data data = open_data(opt.data);
  const std::string ckpt = opt.resume.empty() ? "" : resolve_checkpoint(opt.resume);
  ModelConfig mc = resolve_model(opt, data, ckpt);
  data.train->check_vocab(mc.vocab_size);
  if (data.val) data.val->check_vocab(mc.vocab_size);

  ModelOptions mo;
  mo.keep_gathered = opt.keep_gathered;
  mo.recompute = opt.recompute;
  mo.set_overlap(opt.overlap);
  ops::set_gemm_tuning(opt.gemm_tune);
  Transformer model(mc, grid, opt.batch, opt.seq, mo);
  model.init(opt.seed);
  ops::AdamWConfig ac{float(opt.beta1), float(opt.beta2), float(opt.adam_eps),
                       float(opt.weight_decay)};
  AdamW adam(model.table(), ac);
  int64_t start = 0;
  if (!ckpt.empty()) {
    load_weights(ckpt, model);
    load_optimizer(ckpt, model, adam);
    nlohmann::json st = read_trainer_state(ckpt);
    start = st.at("step").get<int64_t>();
    adam.set_steps_taken(st.at("optimizer_steps").get<int64_t>());
    DENDRITE_CHECK(st.at("seed").get<uint64_t>() == opt.seed, "resume: the checkpoint was trained ",
                   "with --seed ", st.at("seed").get<uint64_t>(), "; pass the same seed");
  }

  nlohmann::json resolved = {{"train", opt.to_json()}, {"model", to_json(mc)}};
  log_info("config " + resolved.dump());
  log_info(str("model ", arch_name(mc.arch), ": ", mc.num_parameters() / 1e6, "M parameters, ",
               model.activation_bytes() / 1e6, " MB activations per rank; ", data.train->size(),
               " training tokens; grid ", grid.shape().str(), ", ", omp_get_max_threads(),
               " threads per rank",
               ckpt.empty() ? "" : "; resuming from " + ckpt + " at step " + std::to_string(start)));

  if (goldfish.enabled())
    log_info("goldfish loss " + goldfish.str() + ": about 1/" + std::to_string(goldfish.k) +
             " of the target tokens leave the loss (validation keeps them all)");
  BatchSampler sampler(*data.train, opt.batch, opt.seq, opt.seed);
  std::unique_ptr<BatchSampler> val_sampler;
  if (data.val && data.val->size() > uint64_t(opt.seq) + 1)
    val_sampler = std::make_unique<BatchSampler>(*data.val, opt.batch, opt.seq, opt.seed);

  std::ofstream metrics;
  if (!opt.metrics.empty() && grid.rank() == 0) {
    const fs::path folder = fs::path(opt.metrics).parent_path();
    std::error_code ec;
    if (!folder.empty()) fs::create_directories(folder, ec);
    metrics.open(opt.metrics, start > 0 ? std::ios::app : std::ios::trunc);
    DENDRITE_CHECK(metrics.good(), "train: cannot open --metrics file ", opt.metrics);
  }
  const double peak = ops::measure_peak_gflops() * grid.shape().size();  // the whole job
  const double flops_per_step = mc.train_flops_per_token(opt.seq) * opt.batch * opt.seq;
  Progress progress(opt.steps - start);

  Batch batch(opt.batch, opt.seq);
  TrainResult result;
  auto save = [&](int64_t step) {
    if (opt.out.empty()) return;
    DENDRITE_CHECK(state_is_finite(model, adam), "train: step ", step, ": the weights or the ",
                   "optimizer state are not finite, so no checkpoint is saved; the last good ",
                   "checkpoint", result.last_checkpoint.empty() ? "" : " " + result.last_checkpoint,
                   " is intact; lower --lr or raise --warmup");
    CheckpointContents c{resolved,
                         {{"step", step}, {"seed", opt.seed}, {"optimizer_steps", adam.steps_taken()}},
                         data.tokenizer};
    result.last_checkpoint = save_checkpoint(opt.out, step, model, &adam, c);
    progress.note("saved " + result.last_checkpoint);
    // Only once the new checkpoint is complete and `latest` names it.
    if (grid.rank() == 0)
      for (const std::string& line : prune_checkpoints(opt.out, opt.keep)) progress.note(line);
  };

  const int64_t end = opt.stop_at > 0 ? std::min(opt.stop_at, opt.steps) : opt.steps;
  for (int64_t step = start; step < end; ++step) {
    hooks.maybe_hang(step + 1, grid.rank());
    auto t0 = std::chrono::steady_clock::now();
    sampler.batch(step, batch.inputs.data(), batch.targets.data());
    const int64_t supervised = batch.mask(goldfish, opt.batch, opt.seq);
    batch.slice(model, opt.batch, opt.seq);
    model.zero_grads();
    double loss = model.forward_backward(batch.local_inputs, batch.local_targets,
                                         batch.local_weights, double(std::max<int64_t>(supervised, 1)),
                                         opt.batch, opt.seq);
    hooks.poison_gradients(step + 1, model);
    double norm = model.grad_norm();
    float lr = ops::lr_at(int(step), float(opt.lr), float(opt.min_lr), int(opt.warmup), int(opt.steps));
    const bool update = non_finite.accept(step + 1, loss, norm, result.last_checkpoint, progress);
    if (update)
      adam.step(model.params(), model.grads(), lr, AdamW::clip_factor(norm, opt.grad_clip));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    StepFigures f{step + 1, opt.steps, loss, lr, norm, opt.batch * opt.seq / secs, secs * 1e3,
                  flops_per_step / secs / 1e9 / peak, -1};
    f.skipped = !update;
    f.skipped_steps = result.skipped_steps = non_finite.skipped();
    f.supervised = double(supervised) / (double(opt.batch) * opt.seq);
    f.show_supervised = goldfish.enabled();
    bool last = step + 1 == end;
    if (val_sampler && opt.eval_every > 0 && ((step + 1) % opt.eval_every == 0 || last))
      f.val_loss = result.last_val_loss = evaluate(model, *val_sampler, opt.batch, opt.seq, opt.eval_batches);
    if (metrics.is_open()) metrics << f.to_json().dump() << "\n" << std::flush;
    progress.update(f, opt.log_every > 0 && ((step + 1) % opt.log_every == 0 || last || f.val_loss >= 0));
    if (opt.gemm_tune && step == start) progress.note(gemm_tuning_summary());
    if (update) result.last_loss = loss;
    result.steps_done = step + 1;
    if (!last && opt.save_every > 0 && (step + 1) % opt.save_every == 0) save(step + 1);
  }
  progress.finish();
  if (result.steps_done > start) save(result.steps_done);
  return result;
}

}  // namespace dendrite
