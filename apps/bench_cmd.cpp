// `dendrite bench step`: warm up, time training steps of a model on random
// tokens, and print tokens/s, GFLOP/s against the measured FMA peak, MFU and
// peak memory.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/commands.h"
#include "dendrite/core/rng.h"
#include "dendrite/model/transformer.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/peak.h"
#include "dendrite/train/optimizer.h"

namespace dendrite::app {

namespace {

struct BenchOptions {
  std::string model = "gpt2-124m";
  int batch = 4, seq = 64, threads = 0, steps = 5, warmup = 2;
  std::string grid;
  bool json = false, keep_gathered = false, recompute = false, gemm_tune = false;
  std::string overlap = "all";  // as train
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
nlohmann::json gemm_report(int runs) {
  nlohmann::json shapes = nlohmann::json::array();
  double saved = 0;
  for (const ops::GemmChoice& c : ops::gemm_choices()) {
    nlohmann::json ways = nlohmann::json::object();
    for (size_t i = 0; i < c.ways.size(); ++i) ways[c.ways[i]] = c.ms[i];
    const double per_step = double(c.calls + 1) / runs;
    saved += c.saved_ms() * per_step;
    shapes.push_back({{"op", std::string{c.ta, c.tb}}, {"M", c.M}, {"N", c.N}, {"K", c.K},
                      {"accumulate", c.accumulate}, {"way", c.way}, {"default", c.ways[0]},
                      {"trial_ms", ways}, {"calls_per_step", per_step}});
  }
  return {{"tuning_ms", ops::gemm_tuning_seconds() * 1e3},
          {"saved_ms_per_step", saved},
          {"shapes", shapes}};
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

int run_bench_step(const BenchOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = omp_get_max_threads();
  ModelConfig mc = load_model_config(o.model);
  ProcessGrid grid = make_grid(o.grid);
  ModelOptions mo;
  mo.keep_gathered = o.keep_gathered;
  mo.recompute = o.recompute;
  mo.set_overlap(o.overlap);
  ops::set_gemm_tuning(o.gemm_tune);
  Transformer model(mc, grid, o.batch, o.seq, mo);
  model.init(1);
  AdamW adam(model.table(), ops::AdamWConfig{});
  // Random tokens; this rank's sequences of the global batch.
  const size_t first = size_t(model.first_sequence(o.batch)) * o.seq;
  const size_t count = size_t(model.local_batch(o.batch)) * o.seq;
  std::vector<int32_t> in(count), tg(count);
  for (size_t i = 0; i < count; ++i) {
    in[i] = int32_t(random_bits(7, 1, first + i) % mc.vocab_size);
    tg[i] = int32_t(random_bits(7, 2, first + i) % mc.vocab_size);
  }
  const double tokens = double(o.batch) * o.seq;
  auto step = [&] {
    model.zero_grads();
    double loss = model.forward_backward(in.data(), tg.data(), nullptr, tokens, o.batch, o.seq);
    double norm = model.grad_norm();
    adam.step(model.params(), model.grads(), 1e-4f, AdamW::clip_factor(norm, 1.0));
    return loss;
  };
  for (int i = 0; i < o.warmup; ++i) step();
  grid.reset_stats();
  rusage u0{}, u1{};
  getrusage(RUSAGE_SELF, &u0);
  auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int i = 0; i < o.steps; ++i) loss = step();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  getrusage(RUSAGE_SELF, &u1);
  // CPU time of this process (every thread: compute, progress engine, MPI)
  // per step: on a node with fewer cores than threads it is what the step
  // really costs, whatever waits for what.
  auto ms = [](const timeval& a, const timeval& b) {
    return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_usec - a.tv_usec) * 1e-3;
  };
  double cpu[3] = {ms(u0.ru_utime, u1.ru_utime) / o.steps, ms(u0.ru_stime, u1.ru_stime) / o.steps,
                   double(u1.ru_nvcsw - u0.ru_nvcsw + u1.ru_nivcsw - u0.ru_nivcsw) / o.steps};
  grid.world().all_reduce(cpu, 3);  // then averaged over the ranks
  grid.world().barrier();
  const double peak = ops::measure_peak_gflops(threads, 0.3) * grid.shape().size();
  const double gflops = mc.train_flops_per_token(o.seq) * tokens / secs / 1e9;
  // The largest rank's peak memory.
  std::vector<double> rss(grid.shape().size());
  const double mine = peak_rss_mb();
  grid.world().all_gather(&mine, rss.data(), 1, DType::kF64);
  const double max_rss = *std::max_element(rss.begin(), rss.end());
  const double shm = rss_shmem_mb();
  std::vector<double> shms(grid.shape().size());
  grid.world().all_gather(&shm, shms.data(), 1, DType::kF64);
  const double max_shm = *std::max_element(shms.begin(), shms.end());
  // Per axis and kind of collective, per step (rank 0): bytes; total_ms from
  // the call or post until seen complete; exposed_ms blocked; hidden_ms the
  // rest, in flight while the rank computed (an upper bound).
  nlohmann::json comm = nlohmann::json::object();
  double exposed_ms = 0;
  std::pair<const char*, Communicator*> axes[] = {
      {"x", &grid.X()}, {"y", &grid.Y()}, {"z", &grid.Z()}, {"d", &grid.D()}};
  for (auto& [name, c] : axes) {
    if (c->size() == 1) continue;
    const CommStats& s = c->stats();
    for (int k = 0; k < int(Collective::kCount); ++k) {
      if (s.calls[k] == 0) continue;
      const double total = s.total_seconds[k] * 1e3 / o.steps;
      const double exposed = s.exposed_seconds[k] * 1e3 / o.steps;
      exposed_ms += exposed;
      comm[name][collective_name(Collective(k))] = {{"bytes", s.bytes[k] / o.steps},
                                                    {"calls", s.calls[k] / o.steps},
                                                    {"total_ms", total},
                                                    {"exposed_ms", exposed},
                                                    {"hidden_ms", total - exposed},
                                                    {"queued_ms", s.queued_seconds[k] * 1e3 / o.steps}};
    }
  }
  if (grid.rank() != 0) return 0;
  nlohmann::json j = {{"model", o.model},
                      {"params", mc.num_parameters()},
                      {"batch", o.batch},
                      {"seq", o.seq},
                      {"threads", threads},
                      {"steps", o.steps},
                      {"loss", loss},
                      {"tokens_per_s", tokens / secs},
                      {"step_ms", secs * 1e3},
                      {"gflops_per_s", gflops},
                      {"peak_gflops", peak},
                      {"mfu", gflops / peak},
                      {"peak_rss_mb", max_rss},
                      {"rss_shmem_mb", max_shm},
                      {"grid", grid.shape().str()},
                      {"overlap", o.overlap},
                      {"comm", comm},
                      {"compute_ms", secs * 1e3 - exposed_ms},
                      {"cpu_user_ms", cpu[0] / grid.shape().size()},
                      {"cpu_sys_ms", cpu[1] / grid.shape().size()},
                      {"context_switches", cpu[2] / grid.shape().size()},
                      {"param_bytes", 4.0 * model.num_floats()},
                      {"activation_bytes", double(model.activation_bytes())}};
  if (o.gemm_tune) j["gemm"] = gemm_report(o.steps + o.warmup);
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s B=%d T=%d threads=%d: %.1f tokens/s, %.1f ms/step, %.1f GFLOP/s of %.1f peak "
                "(MFU %.1f%%), peak RSS %.0f MB\n",
                o.model.c_str(), o.batch, o.seq, threads, tokens / secs, secs * 1e3, gflops,
                peak, 100 * gflops / peak, max_rss);
  }
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.require_subcommand(1);
  CLI::App* step = app.add_subcommand("step", "Time training steps (forward, backward, AdamW)");
  step->add_option("--model", o->model, "Preset or model JSON file")->capture_default_str();
  step->add_option("--batch", o->batch, "Sequences per step")->capture_default_str();
  step->add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str();
  step->add_option("--threads", o->threads, "Threads (default: OMP_NUM_THREADS or all cores)");
  step->add_option("--steps", o->steps, "Timed steps")->capture_default_str();
  step->add_option("--warmup", o->warmup, "Untimed steps first")->capture_default_str();
  step->add_flag("--json", o->json, "Print one JSON object");
  step->add_flag("--recompute", o->recompute, "Activation recomputation");
  step->add_option("--overlap", o->overlap, "Communication to hide: a list of oar, ors, oag, dp; or all, none")
      ->capture_default_str();
  step->add_flag("--gemm-tune", o->gemm_tune,
                 "Time every way of computing each GEMM shape at its first call, keep the fastest "
                 "with the same bits, and report the choices");
  step->add_flag("--keep-gathered", o->keep_gathered,
                 "Keep Z-gathered weights from the forward for the backward");
  step->add_option("--grid", o->grid, "Process grid under mpirun, e.g. x=2,y=2 (default: data-parallel)");
  return [o] { return run_bench_step(*o); };
}

}  // namespace dendrite::app
