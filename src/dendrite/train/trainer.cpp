// The training loop of `dendrite train` (trainer.h): the run's data and
// model config, validation, the non-finite guard and the Trainer, its set-up,
// step loop, metrics and checkpoints. Its options are train_options.cpp; the
// model of a run and one step's gradients, run_model.cpp.
#include "dendrite/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/core/device.h"
#include "dendrite/core/log.h"
#include "dendrite/core/trace.h"
#include "dendrite/io/token_file.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/train/goldfish.h"
#include "dendrite/train/optimizer.h"
#include "dendrite/train/progress.h"
#include "dendrite/train/schedule.h"
#include "dendrite/train/trace_file.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

// After the first step (every shape met once): what --gemm-tune chose, and
// the time it saves per step by the trials' figures.
std::string gemm_tuning_summary(const Backend& be) {
  int changed = 0, shapes = 0;
  double saved = 0;
  for (const ops::GemmChoice& c : be.gemm_choices()) {
    ++shapes;
    if (c.way == c.ways[0]) continue;
    ++changed;
    saved += c.saved_ms() * double(c.calls + 1);
  }
  return str("gemm tuning: ", shapes, " GEMM shapes timed in ",
             std::round(be.gemm_tuning_seconds() * 1e3), " ms; another way than the default ",
             "kept for ", changed, " (same bits), saving about ", std::round(saved * 10) / 10,
             " ms per step on rank 0");
}

struct Data {
  std::unique_ptr<TokenFile> train, val;
  std::string tokenizer;
  std::vector<std::string> hf_tokenizer;  // a Hugging Face tokenizer's files, when it made the data
  std::string tokenizer_format;           // meta.json's, when it says
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
      const nlohmann::json j = nlohmann::json::parse(in);
      d.vocab_size = j.at("vocab_size").get<int>();
      d.tokenizer_format = j.value("tokenizer_format", "");
    } catch (const nlohmann::json::exception& e) {
      fail("train: ", meta.string(), " is not valid (", e.what(), "); re-run `dendrite tokenize`");
    }
  }
  if (fs::exists(fs::path(dir) / "tokenizer.model"))
    d.tokenizer = (fs::path(dir) / "tokenizer.model").string();
  for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                        "special_tokens_map.json"})
    if (fs::exists(fs::path(dir) / f)) d.hf_tokenizer.push_back((fs::path(dir) / f).string());
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
  if (!opt.init_from.empty()) {  // the folder's model, its vocabulary included
    DENDRITE_CHECK(ckpt.empty(), "train: --init-from starts a new run from a Hugging Face ",
                   "folder and --resume continues a run; pass one of them");
    const HfFolder folder(opt.init_from);
    folder.check_sequence(opt.seq);
    const ModelConfig mc = folder.config();
    DENDRITE_CHECK(data.vocab_size <= mc.vocab_size, "train: the data's tokenizer has ",
                   data.vocab_size, " tokens but the model of ", opt.init_from, " only ",
                   mc.vocab_size, "; tokenize the data with that model's tokenizer");
    return mc;
  }
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

// A global batch of B sequences, as every rank builds it: so the Goldfish
// mask and its supervised count (the loss denominator) come out the same on
// every grid.
struct Batch {
  std::vector<int32_t> inputs, targets;  // [B*T]
  std::vector<float> weights;            // [B*T] Goldfish loss weights (empty: all kept)
  Batch(int B, int T) : inputs(size_t(B) * T), targets(size_t(B) * T) {}
  // Fills the weights of the whole batch; returns the supervised-token count.
  int64_t mask(const GoldfishOptions& g, int B, int T) {
    if (!g.enabled()) return int64_t(B) * T;
    weights.resize(size_t(B) * T);
    return goldfish_weights(g, targets.data(), B, T, weights.data());
  }
};

// The validation loss: the mean over `batches` batches of B sequences, each
// run in micro-batches of the model's size.
double evaluate(Transformer& model, const BatchSampler& sampler, int B, int T, int micro_batches,
                int batches) {
  Batch b(B, T);
  const int micro = B / micro_batches;
  double total = 0;
  for (int j = 0; j < batches; ++j) {
    sampler.eval_batch(j, batches, b.inputs.data(), b.targets.data());
    for (int k = 0; k < micro_batches; ++k) {
      const size_t first = (size_t(k) * micro + model.first_sequence(micro)) * T;
      total += model.forward_loss(b.inputs.data() + first, b.targets.data() + first, nullptr,
                                  double(B) * T, micro, T);
    }
  }
  return total / batches;
}

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
  for (const float* p : {std::as_const(model).params(), adam.m(), adam.v()})
    bad += double(model.backend().count_nonfinite(p, n));
  model.grid().world().all_reduce(&bad, 1);
  return bad == 0;
}

}  // namespace

namespace {

// One run of `dendrite train` on one rank: set-up (data, model, optimizer,
// resume), the step loop, validation, metrics and checkpoints.
class Trainer {
 public:
  Trainer(TrainOptions opt, ProcessGrid& grid, Backend& backend, const TrainHooks* hooks);
  TrainResult run();

 private:
  void check_options();
  void resume();
  void open_metrics();
  void log_start() const;
  // Gradients of `step`, their loss left on the device; sets supervised.
  void gradients(int64_t step, int64_t& supervised);
  void record(int64_t step, StepFigures& f, bool last);
  void save(int64_t step);

  TrainOptions opt_;
  ProcessGrid& grid_;
  Backend& be_;
  const TrainHooks* hooks_;
  GoldfishOptions goldfish_;
  Data data_;
  std::string ckpt_;  // the checkpoint resumed from (empty: a new run)
  ModelConfig mc_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<AdamW> adam_;
  int64_t start_ = 0;
  nlohmann::json resolved_;
  std::unique_ptr<BatchSampler> sampler_, val_sampler_;
  std::ofstream metrics_;
  Batch batch_;
  TrainResult result_;
};

Trainer::Trainer(TrainOptions opt, ProcessGrid& grid, Backend& backend, const TrainHooks* hooks)
    : opt_(std::move(opt)), grid_(grid), be_(backend), hooks_(hooks), batch_(std::max(opt_.batch, 1), std::max(opt_.seq, 1)) {
  check_options();
  goldfish_ = GoldfishOptions::parse(opt_.goldfish);
  opt_.goldfish = goldfish_.str();
  data_ = open_data(opt_.data);
  ckpt_ = opt_.resume.empty() ? "" : resolve_checkpoint(opt_.resume);
  mc_ = resolve_model(opt_, data_, ckpt_);
  data_.train->check_vocab(mc_.vocab_size);
  if (data_.val) data_.val->check_vocab(mc_.vocab_size);
  model_ = make_model(mc_, grid_, be_, opt_);
  model_->init(opt_.seed);
  if (!opt_.init_from.empty()) load_hf_folder(HfFolder(opt_.init_from), *model_);
  adam_ = std::make_unique<AdamW>(be_, model_->table(),
                                  ops::AdamWConfig{float(opt_.beta1), float(opt_.beta2),
                                                   float(opt_.adam_eps), float(opt_.weight_decay)});
  if (!ckpt_.empty()) resume();
  resolved_ = {{"train", opt_.to_json()}, {"model", to_json(mc_)}};
  log_start();
  sampler_ = std::make_unique<BatchSampler>(*data_.train, opt_.batch, opt_.seq, opt_.seed);
  if (data_.val && data_.val->size() > uint64_t(opt_.seq) + 1)
    val_sampler_ = std::make_unique<BatchSampler>(*data_.val, opt_.batch, opt_.seq, opt_.seed);
  open_metrics();
  if (!opt_.trace.empty() && grid_.rank() == 0) check_trace_path(opt_.trace);
}

void Trainer::check_options() {
  if (opt_.threads > 0) omp_set_num_threads(opt_.threads);
  if (opt_.min_lr < 0) opt_.min_lr = opt_.lr / 10;
  if (opt_.warmup < 0) opt_.warmup = std::min<int64_t>(100, opt_.steps / 10);
  DENDRITE_CHECK(opt_.steps > 0 && opt_.batch > 0 && opt_.seq > 0, "train: --steps, --batch and ",
                 "--seq must be positive");
  DENDRITE_CHECK(opt_.lr > 0 && std::isfinite(opt_.lr), "train: --lr must be positive, got ", opt_.lr);
  DENDRITE_CHECK(opt_.keep >= 0, "train: --keep must be 0 (keep all) or positive, got ", opt_.keep);
  DENDRITE_CHECK(opt_.trace_steps > 0, "train: --trace-steps must be positive, got ",
                 opt_.trace_steps);
  DENDRITE_CHECK(opt_.timeout >= 0 && std::isfinite(opt_.timeout), "train: --timeout must be 0 ",
                 "(off) or a positive number of seconds, got ", opt_.timeout);
  check_batch_split(opt_, grid_.shape());
  parse_precision(opt_.precision);  // an unknown one fails here, before the data is read
  DENDRITE_CHECK(resolve_device(opt_.device) == be_.device(), "train: --device ", opt_.device,
                 " but the backend made for this run is ", device_name(be_.device()));
  grid_.set_timeout(opt_.timeout);
}

void Trainer::resume() {
  load_weights(ckpt_, *model_);
  load_optimizer(ckpt_, *model_, *adam_);
  nlohmann::json st = read_trainer_state(ckpt_);
  start_ = st.at("step").get<int64_t>();
  adam_->set_steps_taken(st.at("optimizer_steps").get<int64_t>());
  DENDRITE_CHECK(st.at("seed").get<uint64_t>() == opt_.seed, "resume: the checkpoint was trained ",
                 "with --seed ", st.at("seed").get<uint64_t>(), "; pass the same seed");
}

void Trainer::log_start() const {
  log_info("config " + resolved_.dump());
  const std::string accum =
      opt_.grad_accum > 1 ? str(" in ", opt_.grad_accum, " micro-batches of ",
                                opt_.batch / opt_.grad_accum, " sequences")
                          : "";
  log_info(str("model ", arch_name(mc_.arch), ": ", mc_.num_parameters() / 1e6, "M parameters, ",
               model_->activation_bytes() / 1e6, " MB activations per rank; ", data_.train->size(),
               " training tokens; batch ", opt_.batch, accum, "; grid ", grid_.shape().str(), ", ",
               omp_get_max_threads(), " threads per rank; device ", be_.describe(),
               ckpt_.empty() ? "" : "; resuming from " + ckpt_ + " at step " + std::to_string(start_),
               opt_.init_from.empty() ? "" : "; weights from " + opt_.init_from));
  if (goldfish_.enabled())
    log_info("goldfish loss " + goldfish_.str() + ": about 1/" + std::to_string(goldfish_.k) +
             " of the target tokens leave the loss (validation keeps them all)");
}

void Trainer::open_metrics() {
  if (opt_.metrics.empty() || grid_.rank() != 0) return;
  const fs::path folder = fs::path(opt_.metrics).parent_path();
  std::error_code ec;
  if (!folder.empty()) fs::create_directories(folder, ec);
  metrics_.open(opt_.metrics, start_ > 0 ? std::ios::app : std::ios::trunc);
  DENDRITE_CHECK(metrics_.good(), "train: cannot open --metrics file ", opt_.metrics);
}

void Trainer::gradients(int64_t step, int64_t& supervised) {
  sampler_->batch(step, batch_.inputs.data(), batch_.targets.data());
  supervised = batch_.mask(goldfish_, opt_.batch, opt_.seq);
  step_gradients_unread(*model_, batch_.inputs.data(), batch_.targets.data(),
                        batch_.weights.empty() ? nullptr : batch_.weights.data(),
                        double(std::max<int64_t>(supervised, 1)), opt_.batch, opt_.seq,
                        opt_.grad_accum);
  if (hooks_) {  // the hook sees (and may change) a host copy of the gradients
    std::vector<float> g(size_t(model_->table().total()));
    be_.download(g.data(), model_->grads(), g.size() * sizeof(float));
    hooks_->gradients_ready(step + 1, grid_.rank(), g.data(), int64_t(g.size()));
    be_.upload(model_->grads(), g.data(), g.size() * sizeof(float));
  }
}

void Trainer::save(int64_t step) {
  if (opt_.out.empty()) return;
  DENDRITE_CHECK(state_is_finite(*model_, *adam_), "train: step ", step, ": the weights or the ",
                 "optimizer state are not finite, so no checkpoint is saved; the last good ",
                 "checkpoint", result_.last_checkpoint.empty() ? "" : " " + result_.last_checkpoint,
                 " is intact; lower --lr or raise --warmup");
  CheckpointContents c{
      resolved_,
      {{"step", step}, {"seed", opt_.seed}, {"optimizer_steps", adam_->steps_taken()}},
      data_.tokenizer,
      data_.hf_tokenizer,
      data_.tokenizer_format};
  result_.last_checkpoint = save_checkpoint(opt_.out, step, *model_, adam_.get(), c, hooks_);
}

TrainResult Trainer::run() {
  NonFiniteSteps non_finite(opt_.on_nan);
  Progress progress(opt_.steps - start_, parse_progress_mode(opt_.progress));
  // The whole job's peak in the run's precision (MFU's denominator).
  double peak = be_.measure_peak_gflops(model_->precision()) * grid_.shape().size();
  bool peak_remeasured = false;
  const double tokens = double(opt_.batch) * opt_.seq;
  const int64_t end = opt_.stop_at > 0 ? std::min(opt_.stop_at, opt_.steps) : opt_.steps;
  auto save_and_note = [&](int64_t step) {
    if (opt_.out.empty()) return;
    save(step);
    progress.note("saved " + result_.last_checkpoint);
    // Only once the new checkpoint is complete and `latest` names it.
    if (grid_.rank() == 0)
      for (const std::string& line : prune_checkpoints(opt_.out, opt_.keep)) progress.note(line);
  };
  // The steps of the trace, [trace_first, trace_end).
  const int64_t trace_first = start_ + (end - start_ > opt_.trace_steps ? 1 : 0),
                trace_end = std::min(end, trace_first + opt_.trace_steps);
  for (int64_t step = start_; step < end; ++step) {
    if (hooks_) hooks_->step_start(step + 1, grid_.rank());
    if (!opt_.trace.empty() && step == trace_first) start_trace(grid_);
    auto t0 = std::chrono::steady_clock::now();
    int64_t supervised = 0;
    const float lr = lr_at(int(step), float(opt_.lr), float(opt_.min_lr), int(opt_.warmup), int(opt_.steps));
    double loss = 0, norm = 0;
    bool update = false;
    {
      trace::Scope whole("step", str("step ", step + 1));
      {
        trace::Scope part("step", "forward and backward");
        gradients(step, supervised);
      }
      {
        trace::Scope part("step", "gradient norm");  // and the step's one read of the device
        model_->reduce_grad_norm();
        const Transformer::StepTotals t = model_->read_step_totals();
        loss = t.loss, norm = t.grad_norm;
      }
      update = non_finite.accept(step + 1, loss, norm, result_.last_checkpoint, progress);
      trace::Scope part("step", "optimizer");
      if (update) adam_->step(*model_, lr, AdamW::clip_factor(norm, opt_.grad_clip));
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!opt_.trace.empty() && step + 1 == trace_end) {
      const int64_t spans = write_trace(grid_, opt_.trace);
      progress.note(str("trace of steps ", trace_first + 1, "-", trace_end, ": ", spans,
                        " spans of ", grid_.shape().size(), " rank(s) in ", opt_.trace,
                        " (open it in ui.perfetto.dev or chrome://tracing)"));
    }
    double mfu = model_flops_utilization(mc_, opt_.seq, tokens / secs, peak);
    if (mfu > 1 && !peak_remeasured) {
      // The peak read low: measured while another process held the cores?
      // Measured again (this rank only: nothing collective), and said.
      peak_remeasured = true;
      const double again = be_.measure_peak_gflops(model_->precision()) * grid_.shape().size();
      progress.note(str("MFU above 100% against the peak measured at the start (", std::round(peak),
                        " GFLOP/s); measured again: ", std::round(again), " GFLOP/s",
                        again > peak ? "" : " (no higher: is another process sharing the cores?)"));
      peak = std::max(peak, again);
      mfu = model_flops_utilization(mc_, opt_.seq, tokens / secs, peak);
    }
    StepFigures f{step + 1, opt_.steps, loss, lr, norm, tokens / secs, secs * 1e3, mfu, -1};
    f.skipped = !update;
    f.skipped_steps = result_.skipped_steps = non_finite.skipped();
    f.supervised = double(supervised) / tokens;
    f.show_supervised = goldfish_.enabled();
    const bool last = step + 1 == end;
    if (val_sampler_ && opt_.eval_every > 0 && ((step + 1) % opt_.eval_every == 0 || last))
      f.val_loss = result_.last_val_loss = evaluate(*model_, *val_sampler_, opt_.batch, opt_.seq,
                                                    opt_.grad_accum, opt_.eval_batches);
    if (metrics_.is_open()) metrics_ << f.to_json().dump() << "\n" << std::flush;
    progress.update(f, opt_.log_every > 0 && ((step + 1) % opt_.log_every == 0 || last || f.val_loss >= 0));
    if (opt_.gemm_tune && step == start_) progress.note(gemm_tuning_summary(be_));
    if (update) result_.last_loss = loss;
    result_.steps_done = step + 1;
    if (!last && opt_.save_every > 0 && (step + 1) % opt_.save_every == 0) save_and_note(step + 1);
  }
  progress.finish();
  if (result_.steps_done > start_) save_and_note(result_.steps_done);
  return result_;
}

}  // namespace

TrainResult run_train(TrainOptions opt, ProcessGrid& grid, Backend& backend,
                      const TrainHooks* hooks) {
  // Writes past a file-size limit (ulimit -f) then fail with EFBIG, reported
  // like a full disk, instead of killing the process mid-checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
  Trainer trainer(std::move(opt), grid, backend, hooks);
  return trainer.run();
}

}  // namespace dendrite
