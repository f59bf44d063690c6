// `dendrite plan`: predict the step time and memory of every process grid of a
// world size on a machine (src/dendrite/plan/model.h) and rank them.
// `dendrite calibrate`: measure this machine under mpirun (GEMM rates by shape
// (m, n, k), memory bandwidth, FMA peak, collective latency and bandwidth)
// and write a machine file (src/dendrite/plan/machine.h).
#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/commands.h"
#include "dendrite/core/check.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/optim.h"
#include "dendrite/ops/peak.h"
#include "dendrite/plan/model.h"

namespace dendrite::app {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- plan ----

struct PlanCmd {
  std::string model = "gpt2-124m", machine;
  int batch = 4, seq = 64, world = 1, top = 0, ranks_per_node = 0;
  bool json = false, keep_gathered = false, recompute = false, sweep = false;
  std::string overlap = "none";
};

nlohmann::json prediction_json(const StepPrediction& p) {
  nlohmann::json comm = nlohmann::json::object(), hidden = nlohmann::json::object(),
                 bytes = nlohmann::json::object();
  for (auto& [axis, t] : p.comm_s) comm[axis] = t * 1e3;
  for (auto& [axis, t] : p.hidden_s) hidden[axis] = t * 1e3;
  for (auto& [key, b] : p.volume.bytes) bytes[key] = b;
  return {{"grid", grid_str(p.grid)},
          {"x", p.grid.x}, {"y", p.grid.y}, {"z", p.grid.z}, {"d", p.grid.d},
          {"step_ms", p.step_s * 1e3},
          {"compute_ms", p.compute_s * 1e3},
          {"gemm_ms", p.gemm_s * 1e3},
          {"attention_ms", p.attention_s * 1e3},
          {"other_ms", p.other_s * 1e3},
          {"comm_ms", comm},
          {"comm_total_ms", p.comm_total_s * 1e3},
          {"hidden_ms", hidden},
          {"comm_bytes", bytes},
          {"memory_mb", p.memory.total() / 1048576.0},
          {"param_state_mb", p.memory.params / 1048576.0},
          {"tokens_per_s", p.tokens_per_s}};
}

void print_plan_table(const PlanCmd& o, const Machine& mach, const Plan& plan) {
  std::printf("plan: %s, B=%d T=%d on %d ranks of %s (%d ranks per node)\n", o.model.c_str(),
              o.batch, o.seq, o.world, mach.name.c_str(), mach.ranks_per_node);
  std::printf("%-4s %-18s %9s %9s %8s %8s %8s %8s %8s %9s %10s\n", "rank", "grid", "step ms",
              "compute", "x ms", "y ms", "z ms", "d ms", "hidden", "mem MB", "tokens/s");
  const size_t n = o.top > 0 ? std::min<size_t>(o.top, plan.ranked.size()) : plan.ranked.size();
  for (size_t i = 0; i < n; ++i) {
    const StepPrediction& p = plan.ranked[i];
    auto axis = [&](const char* a) { return p.comm_s.count(a) ? p.comm_s.at(a) * 1e3 : 0.0; };
    std::printf("%-4zu %-18s %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.1f %10.1f\n", i + 1,
                grid_str(p.grid).c_str(), p.step_s * 1e3, p.compute_s * 1e3, axis("x"), axis("y"),
                axis("z"), axis("d"), 0.0, p.memory.total() / 1048576.0, p.tokens_per_s);
  }
  if (!plan.excluded.empty()) std::printf("ruled out:\n");
  for (auto& [g, why] : plan.excluded) std::printf("  %-18s %s\n", grid_str(g).c_str(), why.c_str());
  if (!plan.ranked.empty())
    std::printf("first choice: %s (fastest predicted step; no overlap modelled, hidden = 0)\n",
                grid_str(plan.ranked[0].grid).c_str());
}

int run_plan(const PlanCmd& o) {
  Machine mach = load_machine(o.machine);
  if (o.ranks_per_node > 0) mach.ranks_per_node = o.ranks_per_node;
  const ModelConfig mc = load_model_config(o.model);
  PlanOptions po;
  po.B = o.batch, po.T = o.seq, po.keep_gathered = o.keep_gathered, po.recompute = o.recompute;
  DENDRITE_CHECK(o.overlap == "none" || o.overlap == "dp", "plan: --overlap ", o.overlap,
                 " is not modelled; use none (nothing hidden) or dp (per-layer D buckets, "
                 "their calls counted, nothing hidden)");
  po.dp_buckets = o.overlap == "dp";
  const Plan plan = plan_grids(mc, mach, o.world, po);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return 0;
  if (!o.json) {
    print_plan_table(o, mach, plan);
    return 0;
  }
  nlohmann::json ranked = nlohmann::json::array(), excluded = nlohmann::json::array();
  for (const StepPrediction& p : plan.ranked) ranked.push_back(prediction_json(p));
  for (auto& [g, why] : plan.excluded) excluded.push_back({{"grid", grid_str(g)}, {"reason", why}});
  nlohmann::json j = {{"model", o.model}, {"batch", o.batch}, {"seq", o.seq}, {"world", o.world},
                      {"machine", mach.name}, {"ranks_per_node", mach.ranks_per_node},
                      {"ranked", ranked}, {"excluded", excluded}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// ---- calibrate ----

// Mean over ranks of a per-rank measurement (every rank times the same work at
// once, as in a training step).
double mean_over(Communicator& world, double local) {
  world.all_reduce(&local, 1, DType::kF64);
  return local / world.size();
}

// Runs fn once to warm up, times one more call, then runs 5 batches of
// repetitions of about min_seconds/5 each (at least min_reps calls in all) and
// keeps the fastest batch: on a shared machine a descheduled rank makes single
// batches slow, which is not the cost of the call. Returns seconds per call,
// averaged over the ranks. The repetition count comes from the slowest rank's
// trial, so every rank makes the same number of calls (collectives must match).
template <typename Fn>
double time_call(Communicator& world, Fn&& fn, double min_seconds, int min_reps) {
  fn();
  world.barrier();
  auto t1 = Clock::now();
  fn();
  double trial = seconds_since(t1);
  std::vector<double> all(world.size());
  world.all_gather(&trial, all.data(), 1, DType::kF64);
  trial = std::max(*std::max_element(all.begin(), all.end()), 1e-9);
  const int batches = 5;
  const int reps = std::max((min_reps + batches - 1) / batches,
                            int(std::min(1e6, min_seconds / batches / trial)));
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    world.barrier();
    auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) fn();
    best = std::min(best, seconds_since(t0) / reps);
  }
  return mean_over(world, best);
}

std::vector<GemmRate> calibrate_gemm(Communicator& world, bool quick) {
  std::vector<std::array<int64_t, 3>> shapes;
  const std::vector<int64_t> ms = quick ? std::vector<int64_t>{64, 256} :
                                          std::vector<int64_t>{64, 128, 256, 512, 2048};
  const std::vector<int64_t> nks = quick ? std::vector<int64_t>{192, 768} :
                                           std::vector<int64_t>{192, 768, 3072};
  for (int64_t m : ms)
    for (int64_t n : nks)
      for (int64_t k : nks) shapes.push_back({m, n, k});
  if (!quick)  // the LM head of GPT-2 (V = 50304) whole and split in two, and its weight gradient
    for (std::array<int64_t, 3> s : {std::array<int64_t, 3>{256, 50304, 768}, {256, 25152, 768},
                                     {256, 50304, 384}, {256, 768, 50304}, {50304, 768, 256}})
      shapes.push_back(s);
  std::vector<GemmRate> out;
  for (auto [m, n, k] : shapes) {
    std::vector<float> A(m * k, 0.01f), B(n * k, 0.02f), C(m * n);
    auto fn = [&] {
      ops::gemm(false, true, int(m), int(n), int(k), 1.0f, A.data(), int(k), B.data(), int(k), 0.0f,
                C.data(), int(n));
    };
    const double s = time_call(world, fn, 0.03, 2);
    out.push_back({m, n, k, 2.0 * m * n * k / s / 1e9});
  }
  return out;
}

// Bytes/s one rank streams in c[i] = a[i] + b[i] over arrays far larger than cache.
double calibrate_bandwidth(Communicator& world) {
  const int64_t n = 8 << 20;  // 32 MB per array
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  auto fn = [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  };
  return 12.0 * n / time_call(world, fn, 0.3, 3);
}

// Seconds per parameter of the optimizer step as the trainer runs it: zero the
// gradients, their squared norm, AdamW (over 4M parameters, all ranks at once).
double calibrate_optimizer(Communicator& world) {
  const long n = 4 << 20;
  std::vector<float> p(n, 0.1f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  int step = 0;
  auto fn = [&] {
    std::fill(g.begin(), g.end(), 0.01f);
    volatile double norm = ops::sum_squares(g.data(), n);
    (void)norm;
    ops::adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, ++step, true,
                      ops::AdamWConfig{});
  };
  return time_call(world, fn, 0.5, 3) / n;
}

// Fits latency and bandwidth of one collective kind over comm (a group of g):
// per-call time t = latency + f (g-1)/g bytes / bandwidth at a small and a
// large message, bytes counted as step_volume counts them.
LinkCost calibrate_collective(Communicator& world, Communicator& comm, const std::string& kind) {
  const int g = comm.size();
  const double f = kind == "all_reduce" ? 2.0 : 1.0;
  auto per_call = [&](int64_t n) {  // n floats of payload as counted by step_volume
    std::vector<float> in(n, 1.0f), out(n);
    const int64_t part = n / g;
    auto fn = [&] {
      if (kind == "all_reduce") comm.all_reduce(in.data(), n, DType::kF32);
      if (kind == "all_gather") comm.all_gather(in.data(), out.data(), part, DType::kF32);
      if (kind == "reduce_scatter") comm.reduce_scatter(in.data(), out.data(), part, DType::kF32);
    };
    return time_call(world, fn, 0.2, 5);
  };
  const int64_t small = 64 * g, large = (16 << 20) / g * g;  // 256 B per rank, 64 MB
  const double ts = per_call(small), tl = per_call(large);
  const double coef = f * (g - 1.0) / g * 4.0;
  LinkCost c;
  c.bandwidth = coef * (large - small) / std::max(tl - ts, 1e-9);
  c.latency = std::max(0.0, ts - coef * small / c.bandwidth);
  return c;
}

struct CalibrateCmd {
  std::string out, name = "this-machine";
  int threads = 0;
  bool quick = false;
};

int ranks_on_this_node() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

void calibrate_links(ProcessGrid& world_grid, Machine& mach, int P) {
  const char* kinds[] = {"all_reduce", "all_gather", "reduce_scatter"};
  for (int g = 2; g <= P; ++g) {  // the largest group within the node is kept
    if (P % g != 0 || g > mach.ranks_per_node) continue;
    ProcessGrid sub = make_grid(str("x=", g, ",d=", P / g));
    for (const char* kind : kinds) {
      LinkCost c = calibrate_collective(world_grid.world(), sub.X(), kind);
      mach.node.by_kind[kind] = c;
      if (world_grid.rank() == 0)
        std::printf("calibrate: %-14s g=%d  latency %.1f us, bandwidth %.2f GB/s\n", kind, g,
                    c.latency * 1e6, c.bandwidth / 1e9);
    }
  }
  if (mach.node.by_kind.empty()) mach.node.by_kind["all_reduce"] = {1e12, 0};  // one rank: free
  mach.node.all = mach.node.by_kind["all_reduce"];
  // One node cannot measure the network: the node's figures stand in for it.
  mach.network = mach.node;
}

int run_calibrate(const CalibrateCmd& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  auto t0 = Clock::now();
  ProcessGrid grid = make_grid("");
  const int P = grid.shape().size();
  Machine mach;
  mach.name = o.name;
  mach.threads_per_rank = omp_get_max_threads();
  mach.ranks_per_node = ranks_on_this_node();
  mach.cores_per_node = int(sysconf(_SC_NPROCESSORS_ONLN));
  mach.memory_per_rank_bytes =
      double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / mach.ranks_per_node;
  mach.peak_gflops = mean_over(grid.world(), ops::measure_peak_gflops(0, 0.3));
  mach.memory_bandwidth = calibrate_bandwidth(grid.world());
  mach.optimizer_seconds_per_param = calibrate_optimizer(grid.world());
  mach.gemm = calibrate_gemm(grid.world(), o.quick);
  calibrate_links(grid, mach, P);
  mach.notes = str("measured by `dendrite calibrate` with ", P, " ranks of ", mach.threads_per_rank,
                   " threads in ", std::lround(seconds_since(t0)), " s; network = node (one node)");
  if (grid.rank() == 0) {
    save_machine(mach, o.out);
    std::printf("calibrate: peak %.1f GFLOP/s, bandwidth %.2f GB/s per rank, %zu GEMM shapes; "
                "wrote %s in %.1f s\n", mach.peak_gflops, mach.memory_bandwidth / 1e9,
                mach.gemm.size(), o.out.c_str(), seconds_since(t0));
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto o = std::make_shared<PlanCmd>();
  app.add_option("--model", o->model, "Preset or model JSON file")->capture_default_str();
  app.add_option("--batch", o->batch, "Global batch (sequences)")->capture_default_str();
  app.add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--world", o->world, "World size P (ranks)")->capture_default_str();
  app.add_option("--machine", o->machine, "Machine file (dendrite calibrate, machines/*.json)")
      ->required();
  app.add_option("--top", o->top, "Show only the K best grids (0: all)");
  app.add_option("--ranks-per-node", o->ranks_per_node,
                 "Override the machine's ranks per node (e.g. oversubscribed runs)");
  app.add_flag("--keep-gathered", o->keep_gathered, "Model --keep-gathered runs");
  app.add_flag("--recompute", o->recompute, "Model --recompute runs");
  app.add_option("--overlap", o->overlap, "none or dp (as bench/train --overlap)")
      ->capture_default_str();
  app.add_flag("--json", o->json, "Print one JSON object");
  return [o] { return run_plan(*o); };
}

Runner add_calibrate(CLI::App& app) {
  auto o = std::make_shared<CalibrateCmd>();
  app.add_option("--out", o->out, "Machine file to write")->required();
  app.add_option("--name", o->name, "Machine name")->capture_default_str();
  app.add_option("--threads", o->threads, "Threads per rank (default: OMP_NUM_THREADS)");
  app.add_flag("--quick", o->quick, "Fewer GEMM shapes (tests)");
  return [o] { return run_calibrate(*o); };
}

}  // namespace dendrite::app
