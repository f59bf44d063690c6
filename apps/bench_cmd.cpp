// `dendrite bench step`: warm up, time training steps of a model on random
// tokens, and print tokens/s, GFLOP/s against the measured FMA peak, MFU and
// peak memory; with --anatomy (a program that counts its device's work, the
// emulated GPU's), what the device did in each step.
// `dendrite bench generate`: time greedy generation from random prompts with
// the key/value cache and without it, side by side; with --anatomy, what the
// device did for one token generated with the cache.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/commands.h"
#include "dendrite/backend/backend.h"
#include "dendrite/core/check.h"
#include "dendrite/core/device_profile.h"
#include "dendrite/core/rng.h"
#include "dendrite/core/trace.h"
#include "dendrite/eval/generate.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/optimizer.h"
#include "dendrite/train/progress.h"
#include "dendrite/train/trace_file.h"
#include "dendrite/train/trainer.h"

namespace dendrite::app {

namespace {

// The model and run options are train's (make_model reads them), with the
// benchmark's defaults: GPT-2 124M, batch 4, sequence 64.
struct BenchOptions {
  TrainOptions run = [] {
    TrainOptions o;
    o.model = "gpt2-124m";
    o.batch = 4;
    o.seq = 64;
    return o;
  }();
  int steps = 5, warmup = 2;
  bool json = false;
  std::string trace;  // a timeline of the timed steps (core/trace.h)
  std::string profile;  // where the device's time went in the timed steps (core/device_profile.h)
  bool anatomy = false;
  bool no_gemm_epilogues = false;  // the GPU's fused products' steps as kernels
  StepCounter* counter = nullptr;  // the program's, if it counts its device's work
};

// This process's resident pages that are shared memory (its own and its
// peers' shared arrays it has touched: counted in every rank's RSS).
double rss_shmem_mb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "RssShmem: %lf", &kb) == 1) break;
  std::fclose(f);
  return kb / 1024.0;
}

// The GEMM shapes tuned (--gemm-tune): the way kept, each way's trial time,
// and what the choice saves per step against the default way.
nlohmann::json gemm_report(const Backend& be, int runs) {
  nlohmann::json shapes = nlohmann::json::array();
  double saved = 0;
  for (const ops::GemmChoice& c : be.gemm_choices()) {
    nlohmann::json ways = nlohmann::json::object();
    for (size_t i = 0; i < c.ways.size(); ++i) ways[c.ways[i]] = c.ms[i];
    const double per_step = double(c.calls + 1) / runs;
    saved += c.saved_ms() * per_step;
    shapes.push_back({{"op", std::string{c.ta, c.tb}}, {"M", c.M}, {"N", c.N}, {"K", c.K},
                      {"accumulate", c.accumulate}, {"way", c.way}, {"default", c.ways[0]},
                      {"trial_ms", ways}, {"calls_per_step", per_step}});
  }
  return {{"tuning_ms", be.gemm_tuning_seconds() * 1e3},
          {"saved_ms_per_step", saved},
          {"shapes", shapes}};
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

struct StepTimes {
  double secs = 0;    // per step
  double cpu[3] = {};  // user ms, system ms, context switches per step, summed over the ranks
  double loss = 0;
  std::vector<std::string> anatomy;  // each step's, warm-up first (--anatomy)
  nlohmann::json profile;            // rank 0's device profile (--profile)
};

// The device's activities as spans of the trace's device lane, on the
// device's clock moved onto the host's (core/device_profile.h).
void add_device_spans(const std::vector<DeviceActivity>& activities) {
  for (const DeviceActivity& a : activities) {
    const bool kernel = a.kind == DeviceActivity::Kind::kKernel;
    trace::add({kernel                                  ? "kernel"
                : a.kind == DeviceActivity::Kind::kCopy ? "copy"
                                                        : "memset",
                kernel ? short_kernel_name(a.name) : a.name, a.begin, a.end, trace::Lane::kDevice,
                kernel ? -1 : a.bytes, -1, -1});
  }
}

// Warms up, then times o.steps training steps on random tokens.
StepTimes time_steps(const BenchOptions& o, const ModelConfig& mc, Transformer& model, AdamW& adam) {
  const TrainOptions& r = o.run;
  const size_t count = size_t(r.batch) * r.seq;  // the whole global batch, as every rank holds it
  std::vector<int32_t> in(count), tg(count);
  for (size_t i = 0; i < count; ++i) {
    in[i] = int32_t(random_bits(7, 1, i) % mc.vocab_size);
    tg[i] = int32_t(random_bits(7, 2, i) % mc.vocab_size);
  }
  int number = 0;
  StepTimes t;
  auto counted_step = [&] {
    trace::Scope whole("step", str("step ", ++number));
    double loss = 0, norm = 0;
    {
      trace::Scope part("step", "forward and backward");
      step_gradients_unread(model, in.data(), tg.data(), nullptr, double(count), r.batch, r.seq,
                            r.grad_accum);
    }
    {
      trace::Scope part("step", "gradient norm");  // and the step's one read of the device
      model.reduce_grad_norm();
      const Transformer::StepTotals t = model.read_step_totals();
      loss = t.loss, norm = t.grad_norm;
    }
    trace::Scope part("step", "optimizer");
    adam.step(model, 1e-4f, AdamW::clip_factor(norm, 1.0));
    return loss;
  };
  auto step = [&] {
    if (!o.anatomy) return counted_step();
    o.counter->begin();
    const double loss = counted_step();
    t.anatomy.push_back(o.counter->end());
    return loss;
  };
  for (int i = 0; i < o.warmup; ++i) step();
  model.grid().reset_stats();
  const bool profiling = !o.profile.empty();
  // The profile names each activity's part of the step from the trace's spans.
  if (!o.trace.empty() || profiling) start_trace(model.grid());
  if (profiling) model.backend().start_device_profile();
  rusage u0{}, u1{};
  getrusage(RUSAGE_SELF, &u0);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) t.loss = step();
  t.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  getrusage(RUSAGE_SELF, &u1);
  // CPU time of this process (every thread: compute, progress engine, MPI)
  // per step: on a node with fewer cores than threads it is what the step
  // really costs, whatever waits for what.
  auto ms = [](const timeval& a, const timeval& b) {
    return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_usec - a.tv_usec) * 1e-3;
  };
  t.cpu[0] = ms(u0.ru_utime, u1.ru_utime) / o.steps;
  t.cpu[1] = ms(u0.ru_stime, u1.ru_stime) / o.steps;
  t.cpu[2] = double(u1.ru_nvcsw - u0.ru_nvcsw + u1.ru_nivcsw - u0.ru_nivcsw) / o.steps;
  model.grid().world().all_reduce(t.cpu, 3);
  if (profiling) {
    const std::vector<DeviceActivity> activities = model.backend().stop_device_profile();
    t.profile = device_profile_report(activities, trace::spans(), o.steps, t.secs);
    add_device_spans(activities);
  }
  if (o.trace.empty()) trace::stop();
  if (!o.trace.empty()) {
    const int64_t spans = write_trace(model.grid(), o.trace);
    if (model.grid().rank() == 0)
      std::fprintf(stderr, "trace of the %d timed steps: %lld spans of %d rank(s) in %s\n", o.steps,
                   static_cast<long long>(spans), model.grid().shape().size(), o.trace.c_str());
  }
  return t;
}

// The largest value of x over the ranks.
double max_over_ranks(ProcessGrid& grid, double x) {
  std::vector<double> all(grid.shape().size());
  grid.world().all_gather(&x, all.data(), 1, DType::kF64);
  return *std::max_element(all.begin(), all.end());
}

// What the collectives of a step cost rank 0, summed over the axes.
struct CommTotals {
  double total_ms = 0, exposed_ms = 0, engine_cpu_ms = 0;
};

// Per axis and kind of collective, per step (rank 0): bytes; total_ms the
// time they took (CommStats); exposed_ms all the time the rank was blocked in
// them or waiting for them, queues included; hidden_ms = total - exposed (may
// be negative for one kind: waits behind others' tasks are charged to the
// kind waited for; the sum over kinds is the time not paid); for engine tasks
// queued_ms (posted until started); where the group's ranks share the
// machine, peer_wait_ms: the part of the blocking calls' time before the
// group's last rank had entered them (exposed - peer_wait is the time the
// collectives took once the group was there). Adds to `sums`.
// `ranks` (a gather over the world: every rank calls this): the same figures over
// all the ranks of the job, the mean and (total_ms) the least and the most:
// which rank of a group waits for which is the scheduler's choice, so one
// rank's figures are one sample of it; the performance model predicts the
// mean rank.
nlohmann::json comm_report(ProcessGrid& grid, int steps, CommTotals& sums,
                           nlohmann::json& ranks) {
  nlohmann::json comm = nlohmann::json::object();
  std::pair<const char*, Communicator*> axes[] = {
      {"x", &grid.X()}, {"y", &grid.Y()}, {"z", &grid.Z()}, {"d", &grid.D()}};
  constexpr int kinds = int(Collective::kCount), fields = 4;  // total, exposed, queued, peer wait
  std::vector<double> mine(4 * kinds * fields, 0.0);
  for (int a = 0; a < 4; ++a) {
    auto& [name, c] = axes[a];
    if (c->size() == 1) continue;
    const CommStats& s = c->stats();
    sums.engine_cpu_ms += s.engine_cpu_seconds * 1e3 / steps;
    for (int k = 0; k < kinds; ++k) {
      if (s.calls[k] == 0) continue;
      const double total = s.total_seconds[k] * 1e3 / steps;
      const double exposed = s.exposed_seconds[k] * 1e3 / steps;
      const double queued = s.queued_seconds[k] * 1e3 / steps;
      const double wait = s.peer_wait_seconds[k] * 1e3 / steps;
      sums.total_ms += total;
      sums.exposed_ms += exposed;
      comm[name][collective_name(Collective(k))] = {{"bytes", s.bytes[k] / steps},
                                                    {"calls", s.calls[k] / steps},
                                                    {"total_ms", total},
                                                    {"exposed_ms", exposed},
                                                    {"hidden_ms", total - exposed},
                                                    {"queued_ms", queued}};
      if (s.peer_wait_measured)
        comm[name][collective_name(Collective(k))]["peer_wait_ms"] = wait;
      double* f = &mine[(a * kinds + k) * fields];
      f[0] = total, f[1] = exposed, f[2] = queued, f[3] = wait;
    }
  }
  const int n = grid.shape().size(), len = int(mine.size());
  std::vector<double> all(size_t(n) * len);
  grid.world().all_gather(mine.data(), all.data(), len, DType::kF64);
  ranks = nlohmann::json::object();
  for (auto& [name, kinds_json] : comm.items()) {
    const int a = int(std::string("xyzd").find(name));
    for (int k = 0; k < kinds; ++k) {
      const char* kind = collective_name(Collective(k));
      if (!kinds_json.contains(kind)) continue;
      double mean[fields] = {}, lo = 1e300, hi = -1e300;
      for (int r = 0; r < n; ++r) {
        const double* f = &all[size_t(r) * len + (a * kinds + k) * fields];
        for (int i = 0; i < fields; ++i) mean[i] += f[i] / n;
        lo = std::min(lo, f[0]), hi = std::max(hi, f[0]);
      }
      nlohmann::json& j = ranks[name][kind];
      j = {{"total_ms", mean[0]}, {"total_ms_min", lo}, {"total_ms_max", hi},
           {"exposed_ms", mean[1]}, {"hidden_ms", mean[0] - mean[1]}, {"queued_ms", mean[2]}};
      if (kinds_json[kind].contains("peer_wait_ms")) j["peer_wait_ms"] = mean[3];
    }
  }
  return comm;
}

// Rank 0's device work in the first step (warm-up included) and the last,
// with what the model and MFU need (bench/step_roofline.py reads it): the
// model's sizes, the model flops per token that MFU counts, and whether every
// step after the first did the same work.
nlohmann::json anatomy_report(const ModelConfig& mc, const TrainOptions& r,
                              const std::vector<std::string>& steps) {
  nlohmann::json a = {{"steps_counted", steps.size()},
                      {"train_flops_per_token", mc.train_flops_per_token(r.seq)},
                      {"config",
                       {{"arch", arch_name(mc.arch)}, {"L", mc.n_layer}, {"C", mc.n_embd},
                        {"NH", mc.n_head}, {"NKV", mc.n_kv_head}, {"hs", mc.head_size()},
                        {"F", mc.ffn_hidden}, {"V", mc.vocab_size}, {"Vp", mc.padded_vocab()},
                        {"B", r.batch}, {"T", r.seq}, {"grad_accum", r.grad_accum},
                        {"precision", r.precision}}}};
  if (steps.empty()) return a;
  a["first_step"] = nlohmann::json::parse(steps.front());
  a["later_step"] = nlohmann::json::parse(steps.back());
  if (steps.size() > 2)  // the last step stands for every step after the first
    a["later_steps_identical"] =
        std::all_of(steps.begin() + 2, steps.end(), [&](const auto& s) { return s == steps[1]; });
  return a;
}

int run_bench_step(const BenchOptions& o, MpiEnv& env) {
  const TrainOptions& r = o.run;
  if (r.threads > 0) omp_set_num_threads(r.threads);
  const int threads = omp_get_max_threads();
  DENDRITE_CHECK(!o.anatomy || o.counter,
                 "bench step --anatomy: this program cannot count its device's work; the tests' ",
                 "build/tests/dendrite_emulated counts the emulated GPU's");
  DENDRITE_CHECK(!o.anatomy || o.trace.empty(),
                 "bench step: --anatomy records the steps' trace itself; leave out --trace");
  DENDRITE_CHECK(!o.anatomy || o.profile.empty(),
                 "bench step: --anatomy counts the device's work and --profile times it; run them ",
                 "one at a time");
  ModelConfig mc = model_config_of(r.model);
  std::unique_ptr<Backend> backend = make_rank_backend(r.device, env, !o.no_gemm_epilogues);
  ProcessGrid grid = make_grid(backend->transport(env.world()), r.grid);
  if (!o.trace.empty() && grid.rank() == 0) check_trace_path(o.trace);
  if (!o.profile.empty()) {
    const std::string missing = backend->device_profile_missing();
    DENDRITE_CHECK(missing.empty(), "bench step --profile on --device ", r.device, ": ", missing);
    if (grid.rank() == 0) check_trace_path(o.profile, "--profile");
  }
  std::unique_ptr<Transformer> model = make_model(mc, grid, *backend, r);
  model->init(1);
  AdamW adam(*backend, model->table(), ops::AdamWConfig{});
  const StepTimes t = time_steps(o, mc, *model, adam);
  grid.world().barrier();
  const int ranks = grid.shape().size();
  const double device_peak_mb = double(backend->device_peak_bytes()) / (1 << 20);  // before the GEMM peak's
  // In the run's precision; not measured for --anatomy (a device that counts
  // its work is an emulated one, whose rates mean nothing).
  const double peak =
      o.anatomy ? 0 : backend->measure_peak_gflops(model->precision(), threads, 0.3) * ranks;
  const double tokens = double(r.batch) * r.seq;
  const double gflops = mc.train_flops_per_token(r.seq) * tokens / t.secs / 1e9;
  const double mfu = model_flops_utilization(mc, r.seq, tokens / t.secs, peak);
  const double max_rss = max_over_ranks(grid, peak_rss_mb());
  const double max_shm = max_over_ranks(grid, rss_shmem_mb());
  CommTotals sums;
  nlohmann::json comm_ranks;
  nlohmann::json comm = comm_report(grid, o.steps, sums, comm_ranks);
  if (grid.rank() != 0) return 0;
  nlohmann::json j = {
      {"model", r.model},
      {"params", mc.num_parameters()},
      {"batch", r.batch},
      {"grad_accum", r.grad_accum},
      {"seq", r.seq},
      {"threads", threads},
      {"steps", o.steps},
      {"loss", t.loss},
      {"tokens_per_s", tokens / t.secs},
      {"step_ms", t.secs * 1e3},
      {"gflops_per_s", gflops},
      {"peak_gflops", peak},
      {"mfu", mfu},
      {"peak_rss_mb", max_rss},
      {"rss_shmem_mb", max_shm},
      {"grid", grid.shape().str()},
      {"overlap", r.overlap},
      {"overlap_used", resolve_overlap(r.overlap, grid.world().ranks_on_node(), threads)},
      {"precision", r.precision},
      // rank 0, per step: the time the collectives took, the time the
      // rank was blocked by them (exposed), the rest (hidden), and the
      // CPU time the progress engine's thread used
      {"comm_ms", sums.total_ms},
      {"exposed_ms", sums.exposed_ms},
      {"hidden_ms", sums.total_ms - sums.exposed_ms},
      {"engine_cpu_ms", sums.engine_cpu_ms},
      {"comm", comm},
      // the same per axis and kind over all the ranks (mean, least, most)
      {"comm_ranks", comm_ranks},
      {"compute_ms", t.secs * 1e3 - sums.exposed_ms},
      {"cpu_user_ms", t.cpu[0] / ranks},
      {"cpu_sys_ms", t.cpu[1] / ranks},
      {"context_switches", t.cpu[2] / ranks},
      {"param_bytes", 4.0 * model->num_floats()},
      {"activation_bytes", double(model->activation_bytes())}};
  j["device"] = backend->describe();
  if (backend->device() == Device::kCuda) {  // what the model and its step held at most, of
    j["device_peak_mb"] = device_peak_mb;    // what the device has (the planner's input)
    j["device_memory_mb"] = double(backend->device_capacity_bytes()) / (1 << 20);
  }
  if (r.gemm_tune) j["gemm"] = gemm_report(*backend, o.steps + o.warmup);
  if (std::vector<std::string> plans = backend->gemm_plans(); !plans.empty())
    j["gemm_plans"] = plans;  // a GPU's: each shape's split, epilogue or kernels
  if (o.anatomy) j["anatomy"] = anatomy_report(mc, r, t.anatomy);
  if (!o.profile.empty()) {
    nlohmann::json p = t.profile;
    p["model"] = r.model, p["batch"] = r.batch, p["seq"] = r.seq, p["precision"] = r.precision;
    p["device"] = backend->describe();
    p["note"] = "measured with the profiler recording, so the step is a little slower than without";
    write_file_whole(o.profile, p.dump(1) + "\n", "--profile");
    std::fprintf(stderr, "%s(written to %s)\n", device_profile_table(p).c_str(), o.profile.c_str());
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "%s %s B=%d T=%d threads=%d: %.1f tokens/s, %.1f ms/step, %.1f GFLOP/s of %.1f peak "
        "(MFU %.1f%%), peak RSS %.0f MB\n",
        r.model.c_str(), r.precision.c_str(), r.batch, r.seq, threads, tokens / t.secs,
        t.secs * 1e3, gflops, peak, 100 * mfu, max_rss);
    if (mfu > 1)
      std::printf(
          "MFU above 100%%: the peak measured after the steps (%.1f GFLOP/s) read low; "
          "was another process sharing the cores?\n",
          peak);
    if (backend->device() == Device::kCuda)
      std::printf("device %s: peak device memory %.0f MB\n", backend->describe().c_str(),
                  device_peak_mb);
  }
  return 0;
}

// Generation: the model options are train's (--batch is the number of
// sequences generated together).
struct GenerateBenchOptions {
  TrainOptions run = [] {
    TrainOptions o;
    o.model = "gpt2-124m";
    o.batch = 1;
    return o;
  }();
  int prompt = 64, tokens = 256;
  std::string mode = "both";  // both, cache, no-cache
  bool json = false;
  bool anatomy = false;
  StepCounter* counter = nullptr;  // the program's, if it counts its device's work
};

int run_bench_generate(const GenerateBenchOptions& o, MpiEnv& env) {
  TrainOptions r = o.run;
  if (r.threads > 0) omp_set_num_threads(r.threads);
  DENDRITE_CHECK(o.mode == "both" || o.mode == "cache" || o.mode == "no-cache",
                 "bench generate: --mode must be both, cache or no-cache, got '", o.mode, "'");
  DENDRITE_CHECK(o.prompt >= 1 && o.tokens >= 1, "bench generate: --prompt and --tokens must be "
                 "positive, got ", o.prompt, " and ", o.tokens);
  DENDRITE_CHECK(!o.anatomy || o.counter,
                 "bench generate --anatomy: this program cannot count its device's work; the "
                 "tests' build/tests/dendrite_emulated counts the emulated GPU's");
  DENDRITE_CHECK(!o.anatomy || (o.mode != "no-cache" && o.tokens >= 3),
                 "bench generate --anatomy counts the third token generated with the cache; "
                 "give --mode both or cache and --tokens 3 or more");
  ModelConfig mc = model_config_of(r.model);
  std::unique_ptr<Backend> backend = make_rank_backend(r.device, env);
  ProcessGrid grid = make_grid(backend->transport(env.world()), r.grid);
  r.seq = std::min(mc.block_size, o.prompt + o.tokens - 1);
  r.grad_accum = 1;
  std::unique_ptr<Transformer> model = make_model(mc, grid, *backend, r);
  model->init(1);
  std::vector<Ids> prompts(size_t(r.batch), Ids(size_t(o.prompt)));
  for (int b = 0; b < r.batch; ++b)
    for (int i = 0; i < o.prompt; ++i)
      prompts[b][i] = int32_t(random_bits(7, uint64_t(b), uint64_t(i)) % uint64_t(mc.vocab_size));
  const TokenPicker greedy = greedy_picker(mc.vocab_size);
  struct Run {
    const char* name;
    bool cache;
    double secs = 0;
    std::vector<Ids> out;
  };
  // --anatomy: the third token with the cache (the first fills the cache,
  // the second is the first to read it), counted from the end of the second.
  std::string anatomy;
  auto count_third = [&](int i, const Ids&) {
    if (i == 1) o.counter->begin();
    if (i == 2) anatomy = o.counter->end();
  };
  std::vector<Run> runs;
  if (o.mode != "no-cache") runs.push_back({"cache", true, 0, {}});
  if (o.mode != "cache") runs.push_back({"no-cache", false, 0, {}});
  for (Run& run : runs) {
    generate_batch(*model, prompts, std::min(o.tokens, 4), greedy, run.cache);  // warm-up
    grid.world().barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (o.anatomy && run.cache)
      run.out = generate_batch(*model, prompts, o.tokens, greedy, true, count_third);
    else
      run.out = generate_batch(*model, prompts, o.tokens, greedy, run.cache);
    grid.world().barrier();
    run.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (grid.rank() != 0) return 0;
  const double new_tokens = double(r.batch) * o.tokens;
  nlohmann::json j = {{"model", r.model}, {"precision", r.precision}, {"batch", r.batch},
                      {"prompt", o.prompt}, {"tokens", o.tokens},
                      {"threads", omp_get_max_threads()}, {"grid", grid.shape().str()},
                      {"device", backend->describe()}};
  for (const Run& run : runs)
    j[run.name] = {{"seconds", run.secs}, {"tokens_per_s", new_tokens / run.secs},
                   {"ms_per_token", run.secs * 1e3 / o.tokens}};
  if (runs.size() == 2) {
    j["speedup"] = runs[1].secs / runs[0].secs;
    j["same_tokens"] = runs[0].out == runs[1].out;
  }
  if (o.anatomy) j["anatomy"] = nlohmann::json::parse(anatomy);
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s %s B=%d, prompt %d + %d new tokens, threads=%d, grid %s:\n", r.model.c_str(),
              r.precision.c_str(), r.batch, o.prompt, o.tokens, omp_get_max_threads(),
              grid.shape().str().c_str());
  for (const Run& run : runs)
    std::printf("  %-8s %8.2f s  %8.2f new tokens/s  %8.1f ms/token\n", run.name, run.secs,
                new_tokens / run.secs, run.secs * 1e3 / o.tokens);
  if (runs.size() == 2)
    std::printf("  the cache is %.1fx faster; tokens %s\n", runs[1].secs / runs[0].secs,
                runs[0].out == runs[1].out ? "identical" : "DIFFER");
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app, MpiEnv& env, StepCounter* counter) {
  auto o = std::make_shared<BenchOptions>();
  o->counter = counter;
  app.require_subcommand(1);
  CLI::App* step = app.add_subcommand("step", "Time training steps (forward, backward, AdamW)");
  TrainOptions& r = o->run;
  step->add_option("--model", r.model,
                   "Preset, model JSON file, or Hugging Face model folder (its config.json; "
                   "the weights are random)")
      ->capture_default_str();
  step->add_option("--batch", r.batch, "Sequences per step")->capture_default_str();
  step->add_option("--grad-accum", r.grad_accum, "Micro-batches per step (as train)")
      ->capture_default_str();
  step->add_option("--seq", r.seq, "Tokens per sequence")->capture_default_str();
  step->add_option("--precision", r.precision, "fp32 or bf16 (as train)")->capture_default_str();
  step->add_option("--device", r.device, "cpu, cuda or auto (as train)")->capture_default_str();
  step->add_option("--threads", r.threads, "Threads (default: OMP_NUM_THREADS or all cores)");
  step->add_option("--steps", o->steps, "Timed steps")->capture_default_str();
  step->add_option("--warmup", o->warmup, "Untimed steps first")->capture_default_str();
  step->add_flag("--json", o->json, "Print one JSON object");
  step->add_option("--trace", o->trace,
                   "Write a timeline of every rank's timed steps and collectives to this file "
                   "(Trace Event JSON: ui.perfetto.dev or chrome://tracing)");
  step->add_option("--profile", o->profile,
                   "GPU: record what the device ran in the timed steps (CUPTI: every kernel, "
                   "copy and memset with its device time) and write where the time went, by "
                   "kernel and part of the step, to this JSON file (rank 0's device; a table on "
                   "stderr). With --trace, the trace gets a lane of the device's work");
  step->add_flag("--anatomy", o->anatomy,
                 "Count the device's work in every step (launches, synchronisations, "
                 "allocations, copies, by op and part of the step) and print the first and the "
                 "last in the JSON's \"anatomy\" (only a program that counts its device's work: "
                 "the tests' dendrite_emulated)");
  step->add_flag("--recompute", r.recompute, "Activation recomputation");
  step->add_option("--overlap", r.overlap,
                   "Communication to hide: a list of oar, ors, oag, dp; or all, none; or auto (as "
                   "train)")
      ->capture_default_str();
  step->add_flag("--gemm-tune", r.gemm_tune,
                 "Time every way of computing each GEMM shape at its first call, keep the fastest "
                 "with the same bits, and report the choices");
  step->add_flag("--keep-gathered", r.keep_gathered,
                 "Keep Z-gathered weights from the forward for the backward");
  step->add_flag(
      "--no-fused-qkv", [r = &o->run](int64_t) { r->fuse_qkv = false; },
      "Run q, k and v as three products where they would run as one (bf16, X and Z "
      "of one rank), to time the two side by side");
  step->add_flag(
      "--no-fused-gate-up", [r = &o->run](int64_t) { r->fuse_gate_up = false; },
      "Run SwiGLU's gate and up as two products where they would run as one (bf16, X and Z "
      "of one rank), to time the two side by side");
  step->add_flag("--no-gemm-epilogues", o->no_gemm_epilogues,
                 "GPU: run the bias, GELU, residual add and bf16 rounding that cuBLASLt's "
                 "epilogues take as kernels after bare products (to time the two side by side)");
  step->add_option("--grid", r.grid, "Process grid under mpirun, e.g. x=2,y=2 (default: data-parallel)");
  auto g = std::make_shared<GenerateBenchOptions>();
  g->counter = counter;
  CLI::App* gen = app.add_subcommand(
      "generate", "Time greedy generation with the key/value cache and without it");
  TrainOptions& gr = g->run;
  gen->add_option("--model", gr.model,
                  "Preset, model JSON file, or Hugging Face model folder (its config.json; "
                  "the weights are random)")
      ->capture_default_str();
  gen->add_option("--batch", gr.batch, "Sequences generated together")->capture_default_str();
  gen->add_option("--prompt", g->prompt, "Prompt tokens (random ids)")->capture_default_str();
  gen->add_option("--tokens", g->tokens, "New tokens per sequence")->capture_default_str();
  gen->add_option("--mode", g->mode, "both, cache or no-cache")->capture_default_str();
  gen->add_option("--precision", gr.precision, "fp32 or bf16 (as train)")->capture_default_str();
  gen->add_option("--device", gr.device, "cpu, cuda or auto (as train)")->capture_default_str();
  gen->add_option("--threads", gr.threads, "Threads (default: OMP_NUM_THREADS or all cores)");
  gen->add_option("--grid", gr.grid, "Process grid under mpirun, e.g. x=2,y=2 (default: data-parallel)");
  gen->add_flag("--json", g->json, "Print one JSON object");
  gen->add_flag("--anatomy", g->anatomy,
                "Count the device's work for the third token generated with the cache "
                "(launches, synchronisations, allocations, copies, by op) into the JSON's "
                "\"anatomy\" (only a program that counts its device's work: the tests' "
                "dendrite_emulated)");
  return [o, g, step, gen, &env] {
    return step->parsed() ? run_bench_step(*o, env) : run_bench_generate(*g, env);
  };
}

}  // namespace dendrite::app
