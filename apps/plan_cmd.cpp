// `dendrite plan`: predict the step time and memory of every process grid of a
// world size on a machine (src/dendrite/plan/model.h) and rank them.
// `dendrite calibrate`: measure this machine under mpirun (GEMM rates by shape
// (m, n, k), memory bandwidth, FMA peak, collective latency and bandwidth)
// and write a machine file (src/dendrite/plan/machine.h).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/commands.h"
#include "dendrite/core/check.h"
#include "dendrite/backend/backend.h"
#include "dendrite/plan/model.h"
#include "dendrite/plan/sweep.h"
#include "dendrite/train/trainer.h"

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
  int simulate_nodes = 0;  // also DENDRITE_RANKS_PER_NODE, as the trainer
  bool json = false, keep_gathered = false, recompute = false, sweep = false;
  bool batch_given = false, seq_given = false;
  bool no_shared_memory = false;  // also when DENDRITE_SHARED_MEMORY=0, as the trainer
  std::string overlap = TrainOptions{}.overlap;  // train's default
  std::string precision = "fp32";
};

nlohmann::json prediction_json(const StepPrediction& p) {
  nlohmann::json comm = nlohmann::json::object(), hidden = nlohmann::json::object(),
                 bytes = nlohmann::json::object(), wait = nlohmann::json::object();
  for (auto& [axis, t] : p.comm_s) comm[axis] = t * 1e3;
  for (auto& [axis, t] : p.peer_wait_axis_s) wait[axis] = t * 1e3;
  for (auto& [axis, t] : p.hidden_s) hidden[axis] = t * 1e3;
  nlohmann::json calls = nlohmann::json::object();
  for (auto& [key, b] : p.volume.bytes) bytes[key] = b;
  for (auto& [key, n] : p.volume.calls) calls[key] = n;
  return {{"grid", grid_str(p.grid)},
          {"x", p.grid.x}, {"y", p.grid.y}, {"z", p.grid.z}, {"d", p.grid.d},
          {"step_ms", p.step_s * 1e3},
          {"compute_ms", p.compute_s * 1e3},
          {"gemm_ms", p.gemm_s * 1e3},
          {"attention_ms", p.attention_s * 1e3},
          {"other_ms", p.other_s * 1e3},
          {"comm_ms", comm},
          {"comm_total_ms", p.comm_total_s * 1e3},
          {"comm_exposed_ms", p.comm_exposed_s * 1e3},
          {"comm_hidden_ms", p.comm_hidden_s * 1e3},
          {"penalty_ms", p.penalty_s * 1e3},
          {"peer_wait_ms", p.peer_wait_s * 1e3},
          {"peer_wait_axis_ms", wait},
          {"engine_ms", p.engine_s * 1e3},
          {"hidden_ms", hidden},
          {"comm_bytes", bytes},
          {"comm_calls", calls},
          {"memory_mb", p.memory.total() / 1048576.0},
          {"param_state_mb", p.memory.params / 1048576.0},
          {"tokens_per_s", p.tokens_per_s}};
}

// train's --overlap auto on the machine planned for: all when each of a
// node's ranks has a core to spare for its progress engine beside its threads
// (or the machine file gives no core count), else none; other values as given.
std::string planned_overlap(const std::string& overlap, const Machine& m) {
  if (overlap != "auto") return overlap;
  return m.cores_per_node == 0 || m.cores_per_node >= m.ranks_per_node * (m.threads_per_rank + 1)
             ? "all"
             : "none";
}

void print_plan_table(const PlanCmd& o, const Machine& mach, const Plan& plan) {
  std::printf("plan: %s, B=%d T=%d on %d ranks of %s (%d ranks per node), overlap %s, "
              "node-local Z/D collectives over %s\n",
              o.model.c_str(), o.batch, o.seq, o.world, mach.name.c_str(), mach.node_span(),
              Overlap::parse(planned_overlap(o.overlap, mach)).str().c_str(),
              o.no_shared_memory ? "messages (--no-shared-memory)"
              : mach.has_shm     ? "shared memory"
                                 : "messages (the machine file has no shm figures)");
  std::printf("(x/y/z/d ms: exposed communication per axis; hidden: behind compute, all axes)\n");
  std::printf("%-4s %-18s %9s %9s %8s %8s %8s %8s %8s %9s %10s\n", "rank", "grid", "step ms",
              "compute", "x ms", "y ms", "z ms", "d ms", "hidden", "mem MB", "tokens/s");
  const size_t n = o.top > 0 ? std::min<size_t>(o.top, plan.ranked.size()) : plan.ranked.size();
  for (size_t i = 0; i < n; ++i) {
    const StepPrediction& p = plan.ranked[i];
    auto axis = [&](const char* a) { return p.comm_s.count(a) ? p.comm_s.at(a) * 1e3 : 0.0; };
    std::printf("%-4zu %-18s %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.1f %10.1f\n", i + 1,
                grid_str(p.grid).c_str(), p.step_s * 1e3, p.compute_s * 1e3, axis("x"), axis("y"),
                axis("z"), axis("d"), p.comm_hidden_s * 1e3, p.memory.total() / 1048576.0,
                p.tokens_per_s);
  }
  if (!plan.excluded.empty()) std::printf("ruled out:\n");
  for (auto& [g, why] : plan.excluded) std::printf("  %-18s %s\n", grid_str(g).c_str(), why.c_str());
  if (!plan.ranked.empty())
    std::printf("first choice: %s (fastest predicted step)\n", grid_str(plan.ranked[0].grid).c_str());
  if (mach.oversubscription() > 1)
    std::printf("oversubscribed: %d ranks x %d threads on %d cores: compute x%.2f%s\n",
                mach.ranks_per_node, mach.threads_per_rank, mach.cores_per_node,
                mach.oversubscription(),
                mach.oversubscribed_call_penalty_s > 0
                    ? str(", ", mach.oversubscribed_call_penalty_s * 1e3,
                          " ms more per collective call").c_str()
                    : "");
  if (!mach.peer_wait_fraction.empty()) {
    std::string w;
    for (auto [g, f] : mach.peer_wait_fraction)
      w += str(w.empty() ? "" : ", ", "groups of ", g, " ", std::lround(1000 * f) / 10.0, "%");
    std::printf("wait for peers (in the axes' ms): %s of the compute between a group's calls "
                "(up to %.1f ms apart)\n", w.c_str(), mach.peer_wait_interval_s * 1e3);
  }
}

// Weak scaling (sweep.h): the best grid per GPU count, its step time, flop/s
// and efficiency relative to the first count. B and T default to 2048.
int run_sweep(const PlanCmd& o, const Machine& mach, PlanOptions po, int rank) {
  if (!o.batch_given) po.B = 2048;
  if (!o.seq_given) po.T = 2048;
  const std::vector<SweepPoint> pts = weak_scaling_sweep(mach, po, weak_scaling_counts());
  if (rank != 0) return 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const SweepPoint& p : pts)
    rows.push_back({{"gpus", p.gpus}, {"params", p.params}, {"layers", p.model.n_layer},
                    {"width", p.model.n_embd}, {"heads", p.model.n_head},
                    {"feasible", p.feasible}, {"grid", p.feasible ? grid_str(p.best.grid) : ""},
                    {"runner_up", p.runner_up}, {"step_s", p.best.step_s},
                    {"compute_s", p.best.compute_s}, {"comm_exposed_s", p.best.comm_exposed_s},
                    {"comm_hidden_s", p.best.comm_hidden_s},
                    {"memory_gb", p.best.memory.total() / 1e9},
                    {"flops_per_gpu", p.flops_per_gpu}, {"flops_total", p.flops_total},
                    {"efficiency", p.efficiency}});
  if (o.json) {
    nlohmann::json j = {{"machine", mach.name}, {"batch", po.B}, {"seq", po.T},
                        {"overlap", po.overlap.str()}, {"points", rows}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("weak scaling on %s: B=%d sequences of T=%d, overlap %s; parameters grow with G\n",
              mach.name.c_str(), po.B, po.T, po.overlap.str().c_str());
  std::printf("%6s %7s %-26s %9s %8s %8s %10s %11s %6s\n", "GPUs", "params", "best grid",
              "step s", "comm s", "hidden s", "TF/s/GPU", "PF/s total", "eff");
  for (const SweepPoint& p : pts) {
    if (!p.feasible) {
      std::printf("%6d %6.0fB  no grid fits in memory\n", p.gpus, p.params / 1e9);
      continue;
    }
    std::printf("%6d %6.0fB %-26s %9.2f %8.2f %8.2f %10.1f %11.1f %5.1f%%\n", p.gpus,
                p.params / 1e9, grid_str(p.best.grid).c_str(), p.best.step_s,
                p.best.comm_exposed_s, p.best.comm_hidden_s, p.flops_per_gpu / 1e12,
                p.flops_total / 1e15, 100 * p.efficiency);
  }
  return 0;
}

// Every rank plans (the same inputs give the same plan); rank 0 prints it.
int run_plan(const PlanCmd& o, const MpiEnv& env) {
  Machine mach = load_machine(o.machine);
  if (o.ranks_per_node > 0) mach.ranks_per_node = o.ranks_per_node;
  mach.simulated_ranks_per_node =
      o.simulate_nodes > 0 ? o.simulate_nodes : env.options().ranks_per_node;
  const ModelConfig mc = model_config_of(o.model);
  PlanOptions po;
  po.B = o.batch, po.T = o.seq, po.keep_gathered = o.keep_gathered, po.recompute = o.recompute;
  po.overlap = Overlap::parse(planned_overlap(o.overlap, mach));
  po.shared_memory = !o.no_shared_memory && env.options().shared_memory;
  po.precision = parse_precision(o.precision);
  // A file of published figures (no GEMM table) gives one peak for both.
  if (po.precision == Precision::kBF16 && !mach.gemm.empty() && mach.gemm_bf16.empty() &&
      env.rank() == 0)
    std::printf("plan: machine %s has no bf16 GEMM rates (calibrate measures them on GPUs and "
                "where the CPU has AVX512_BF16 or AMX): bf16 GEMMs are predicted at the fp32 "
                "rates\n",
                mach.name.c_str());
  if (o.sweep) return run_sweep(o, mach, po, env.rank());
  const Plan plan = plan_grids(mc, mach, o.world, po);
  if (env.rank() != 0) return 0;
  if (!o.json) {
    print_plan_table(o, mach, plan);
    return 0;
  }
  nlohmann::json ranked = nlohmann::json::array(), excluded = nlohmann::json::array();
  for (const StepPrediction& p : plan.ranked) ranked.push_back(prediction_json(p));
  for (auto& [g, why] : plan.excluded) excluded.push_back({{"grid", grid_str(g)}, {"reason", why}});
  nlohmann::json j = {{"model", o.model}, {"batch", o.batch}, {"seq", o.seq}, {"world", o.world},
                      {"machine", mach.name}, {"ranks_per_node", mach.ranks_per_node},
                      {"node_span", mach.node_span()},
                      {"shared_memory", po.shared_memory && mach.has_shm},
                      {"precision", o.precision},
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

// One warm-up call, then one timed call (after a barrier when `barrier`): the
// slowest rank's seconds, the same on every rank, so that repetition counts
// derived from it are the same on every rank (collectives must match).
template <typename Fn>
double slowest_trial(Communicator& world, Fn&& fn, bool barrier) {
  fn();
  if (barrier) world.barrier();
  auto t1 = Clock::now();
  fn();
  double trial = seconds_since(t1);
  std::vector<double> all(world.size());
  world.all_gather(&trial, all.data(), 1, DType::kF64);
  return std::max(*std::max_element(all.begin(), all.end()), 1e-9);
}

// Seconds per call of fn: the slowest_trial above, then 5 batches of
// repetitions of about min_seconds/5 each (at least min_reps calls in all, at
// most 10^6 per batch), each batch started at a barrier, keeping the fastest
// batch: on a shared machine a descheduled rank makes single batches slow,
// which is not the cost of the call. Averaged over the ranks.
template <typename Fn>
double time_call(Communicator& world, Fn&& fn, double min_seconds, int min_reps) {
  const double trial = slowest_trial(world, fn, true);
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

// The GEMM rates of the step's shapes in one precision (C = A B^T, as the
// forward of a linear layer).
std::vector<GemmRate> calibrate_gemm(Communicator& world, Backend& be, bool quick,
                                     Precision precision) {
  std::vector<std::array<int64_t, 3>> shapes;
  const std::vector<int64_t> ms = quick ? std::vector<int64_t>{64, 256} :
                                          std::vector<int64_t>{64, 128, 256, 512, 2048};
  const std::vector<int64_t> nks = quick ? std::vector<int64_t>{192, 768} :
                                           std::vector<int64_t>{192, 768, 3072};
  // k as small as the smallest m as well: a weight gradient's inner dimension
  // is the rank's rows (64 on a grid with D or Z = 4 at B=4, T=64), and the
  // rate below the smallest measured k is only extrapolated (Machine::gemm_gflops).
  std::vector<int64_t> ks = nks;
  ks.insert(ks.begin(), ms.front());
  for (int64_t m : ms)
    for (int64_t n : nks)
      for (int64_t k : ks) shapes.push_back({m, n, k});
  if (!quick)  // the LM head of GPT-2 (V = 50304) whole and split in two, and its weight gradient
    for (std::array<int64_t, 3> s : {std::array<int64_t, 3>{256, 50304, 768}, {256, 25152, 768},
                                     {256, 50304, 384}, {256, 768, 50304}, {50304, 768, 256}})
      shapes.push_back(s);
  std::vector<GemmRate> out;
  for (auto [m, n, k] : shapes) {
    Buffer<float> A = be.alloc<float>(m * k), B = be.alloc<float>(n * k), C = be.alloc<float>(m * n);
    be.fill(A.data(), 0.01f, A.size());
    be.fill(B.data(), 0.02f, B.size());
    Buffer<bf16> A16, B16;
    if (precision == Precision::kBF16) {
      A16 = be.alloc<bf16>(m * k), B16 = be.alloc<bf16>(n * k);
      be.to_bf16(A16.data(), A.data(), A.size());
      be.to_bf16(B16.data(), B.data(), B.size());
    }
    const Operand a = A16.size() ? Operand(A16.data()) : Operand(A.data());
    const Operand b = B16.size() ? Operand(B16.data()) : Operand(B.data());
    auto fn = [&] {
      be.gemm(false, true, int(m), int(n), int(k), 1.0f, a, int(k), b, int(k), 0.0f, C.data(),
              int(n));
      be.wait(be.record());
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

// Bytes/s of a device copy far larger than cache (read and write counted).
double calibrate_device_bandwidth(Communicator& world, Backend& be) {
  const int64_t n = 64 << 20;  // 256 MB per array
  Buffer<float> a = be.alloc<float>(n), c = be.alloc<float>(n);
  auto fn = [&] {
    be.copy(c.data(), a.data(), size_t(n) * sizeof(float));
    be.ready_for_host();
  };
  return 8.0 * n / time_call(world, fn, 0.3, 3);
}

// Seconds per parameter of the optimizer step as the trainer runs it: zero the
// gradients, their squared norm, AdamW (all ranks at once), over 32M parameters:
// their 512 MB of state, as a model's, come from memory, not from a last-level
// cache (4M parameters, 64 MB, stayed in a 260 MB one: 1.6 ns per parameter
// where a GPT-2 124M step spent about 2.8).
double calibrate_optimizer(Communicator& world, Backend& be) {
  const long n = 32 << 20;
  Buffer<float> p = be.alloc<float>(n), g = be.alloc<float>(n), m = be.alloc<float>(n),
                v = be.alloc<float>(n);
  be.fill(p.data(), 0.1f, n);
  be.fill(m.data(), 0.0f, n);
  be.fill(v.data(), 0.0f, n);
  int step = 0;
  auto fn = [&] {
    be.fill(g.data(), 0.01f, n);
    volatile double norm = be.sum_squares(g.data(), n);
    (void)norm;
    be.adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, ++step, true,
                    ops::AdamWConfig{}, 1.0f, nullptr);
    be.wait(be.record());
  };
  return time_call(world, fn, 0.5, 3) / n;
}

// Payload sizes (floats per call, as step_volume counts bytes) at which the
// collectives are timed: 256 B per rank up to 256 MB, as a step's calls range
// from a layer's activations to a whole model's gradients. The middle sizes
// matter: MPI changes algorithm with the size, so they do not lie on the line
// through the two ends.
std::vector<int64_t> collective_sizes(int g, bool quick) {
  std::vector<int64_t> n = {64 * g};
  for (int e = 10; e <= 26; e += 2) n.push_back(int64_t(1) << e);  // 4 KB to 256 MB, x4
  if (quick) n = {64 * g, int64_t(1) << 18};
  for (int64_t& v : n) v = std::max<int64_t>(g, v / g * g);
  return n;
}

// The points (bytes, seconds per call) of one kind over a group of g ranks,
// and latency and bandwidth of the line through the last two (the smallest
// call's time where that is below the line).
LinkCost fit_points(const std::vector<int64_t>& sizes, const std::vector<double>& t, int g,
                    const std::string& kind) {
  const double coef = (kind == "all_reduce" ? 2.0 : 1.0) * (g - 1.0) / g * 4.0;
  LinkCost c;
  c.group = g;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double b = 4.0 * double(sizes[i]);
    // Seconds never fall as bytes grow (timing noise on a busy node can say so).
    const double s = std::max(t[i], c.points.empty() ? 0.0 : c.points.back().second);
    c.points.push_back({b, std::max(s, 1e-9)});
  }
  const size_t k = sizes.size() - 1;
  c.bandwidth = coef * double(sizes[k] - sizes[k - 1]) /
                std::max(c.points[k].second - c.points[k - 1].second, 1e-9);
  c.latency = std::max(0.0, c.points[0].second - coef * double(sizes[0]) / c.bandwidth);
  return c;
}

// The seconds a group's blocking calls spent waiting for their last rank to
// arrive, summed over the kinds (CommStats::peer_wait_seconds); -1 where the
// communicator does not measure it.
double peer_wait(const Communicator& comm) {
  const CommStats& s = comm.stats();
  if (!s.peer_wait_measured) return -1;
  double w = 0;
  for (double x : s.peer_wait_seconds) w += x;
  return w;
}

// Seconds per call of fn (collectives on comm) once comm's ranks have all
// arrived: each call timed on its own (after `before`, untimed, when given),
// less the time it waited for the group's last rank (arrival stamps; the
// whole call where they are not measured). The fastest of 5 batches of about
// min_seconds/5, averaged over the ranks.
template <typename Before, typename Fn>
double after_arrival(Communicator& world, Communicator& comm, Before&& before, Fn&& fn,
                     double min_seconds) {
  const double trial = slowest_trial(world, [&] { before(); fn(); }, true);
  const int batches = 5;
  const int reps = std::max(2, int(std::min(1e6, min_seconds / batches / trial)));
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    world.barrier();
    comm.reset_stats();
    double calls = 0;
    for (int r = 0; r < reps; ++r) {
      before();
      auto t0 = Clock::now();
      fn();
      calls += seconds_since(t0);
    }
    const double wait = peer_wait(comm);
    best = std::min(best, (calls - std::max(wait, 0.0)) / reps);
  }
  comm.reset_stats();
  return mean_over(world, std::max(best, 1e-9));
}

// A collective as a training step meets it: right after a GEMM of the step's
// size (a GPT-2 linear of 256 rows, about a millisecond or two), timed from
// the moment the group's last rank arrived (the wait before it, the ranks'
// drift or a descheduled peer, is not the collective's: bench step reports it
// apart as peer_wait_ms). The call after a GEMM still costs more than in a
// tight loop (its buffers are out of cache, a waiting rank may have slept),
// so each size is timed both ways and the larger kept.
struct StepContext {
  Backend* be = nullptr;
  Buffer<float> A, B, C;
  static constexpr int m = 256, n = 768, k = 768;
  void gemm() {
    be->gemm(false, true, m, n, k, 1.0f, A.data(), k, B.data(), k, 0.0f, C.data(), n);
    be->ready_for_host();
  }
  explicit StepContext(Backend& backend)
      : be(&backend), A(backend.alloc<float>(m * k)), B(backend.alloc<float>(n * k)),
        C(backend.alloc<float>(m * n)) {
    be->fill(A.data(), 0.01f, A.size());
    be->fill(B.data(), 0.02f, B.size());
  }
  // Seconds of one call of fn (on comm) in a step: calls of 16 MB and more
  // take long enough for the loop to tell.
  template <typename Fn>
  double seconds(Communicator& world, Communicator& comm, Fn&& fn, int64_t bytes) {
    const double loop = after_arrival(world, comm, [] {}, fn, 0.2);
    if (bytes >= (int64_t(16) << 20)) return loop;
    return std::max(loop, after_arrival(world, comm, [&] { gemm(); }, fn, 0.3));
  }
};

// Times one collective kind over comm (a group of g) at every size of
// collective_sizes, as a step meets it (StepContext): MPI messages (or the
// node's shared-memory channel for an all-reduce of private arrays, where the
// trainer uses it).
LinkCost calibrate_collective(Communicator& world, Communicator& comm, const std::string& kind,
                              bool quick, StepContext& step) {
  const int g = comm.size();
  const std::vector<int64_t> sizes = collective_sizes(g, quick);
  // In the backend's memory (a GPU's: NCCL moves it), as the step's are.
  Backend& be = *step.be;
  Buffer<float> in = be.alloc<float>(sizes.back()), out = be.alloc<float>(sizes.back());
  be.fill(in.data(), 1.0f, in.size());
  be.fill(out.data(), 0.0f, out.size());
  std::vector<double> t;
  for (int64_t n : sizes) {
    const int64_t part = n / g;
    // Successive calls move successive ranges of the buffers: a step's calls
    // move data it has not touched for a while (a layer's weights, another
    // layer's activations), not the same few megabytes from cache.
    const int64_t ranges = std::max<int64_t>(1, sizes.back() / n);
    int64_t call = 0;
    auto fn = [&] {
      const int64_t at = (call++ % ranges) * n;
      float *i = in.data() + at, *o = out.data() + at;
      if (kind == "all_reduce") comm.all_reduce(i, n, DType::kF32);
      if (kind == "all_gather") comm.all_gather(i, o, part, DType::kF32);
      if (kind == "reduce_scatter") comm.reduce_scatter(i, o, part, DType::kF32);
      be.ready_for_host();  // a transport on streams returns before the call is done
    };
    t.push_back(step.seconds(world, comm, fn, 4 * n));
  }
  return fit_points(sizes, t, g, kind);
}

// The same for the collectives over a SharedArray (shared_array.cpp) of a
// group inside one node: all-gather of n/g floats per rank, reduce-scatter of
// n per rank to n/g, all-reduce of n in place. Returns false (and writes
// nothing) when the group's array is not shared (DENDRITE_SHARED_MEMORY=0).
bool calibrate_shm_collective(Communicator& world, Communicator& comm, const std::string& kind,
                              bool quick, StepContext& step, LinkCost& c) {
  const int g = comm.size();
  const std::vector<int64_t> sizes = collective_sizes(g, quick);
  std::vector<double> t;
  for (int64_t n : sizes) {
    const int64_t part = n / g;
    // Successive ranges, as calibrate_collective's (the arrays about as large).
    const int64_t ranges = std::max<int64_t>(1, sizes.back() / n);
    const int64_t len = kind == "all_gather" ? part : n, out_len = kind == "all_gather" ? n : part;
    // Zero-filled: repeated sums stay finite.
    std::unique_ptr<SharedArray> a = comm.allocate_shared(len * ranges);
    comm.barrier();
    if (!a->shared()) return false;
    std::vector<float> out(out_len * ranges);
    int64_t call = 0;
    auto fn = [&] {
      const int64_t k = call++ % ranges, at = k * len;
      float* o = out.data() + k * out_len;
      if (kind == "all_reduce") comm.all_reduce(*a, at, n);
      if (kind == "all_gather") comm.all_gather(*a, at, o, part);
      if (kind == "reduce_scatter") comm.reduce_scatter(*a, at, o, part, false);
    };
    t.push_back(step.seconds(world, comm, fn, 4 * n));
    comm.barrier();
  }
  c = fit_points(sizes, t, g, kind);
  return true;
}

// The wait for peers (Machine::peer_wait_fraction) of groups of comm's size:
// every group at once runs GPT-2's GEMM, then a one-element all-reduce,
// `seconds` long; the calls' wait for the group's last rank (arrival stamps)
// over the time in GEMMs, averaged over the ranks (-1 where the communicator
// has no stamps: its ranks on several machines), and the seconds of one GEMM.
std::pair<double, double> calibrate_peer_wait(Communicator& world, Communicator& comm,
                                              StepContext& step, double seconds) {
  double one = 1.0;
  const double trial = slowest_trial(world, [&] { step.gemm(); }, false);
  const int reps = std::clamp(int(seconds / trial), 5, 10000);
  world.barrier();
  comm.reset_stats();
  double gemm = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    step.gemm();
    gemm += seconds_since(t0);
    comm.all_reduce(&one, 1, DType::kF64);
  }
  const double wait = peer_wait(comm);  // -1: no stamps (the same on every rank of the group)
  comm.reset_stats();
  const double f = mean_over(world, std::max(wait, 0.0) / std::max(gemm, 1e-9));
  return {wait < 0 ? -1 : f, mean_over(world, gemm / reps)};
}

struct CalibrateCmd {
  std::string out, name = "this-machine", compute_from, links_from, device = "auto";
  int threads = 0;
  bool quick = false;
};

void print_link(const char* level, const char* kind, int g, const LinkCost& c) {
  std::string pts;
  for (auto [b, t] : c.points) pts += str(" ", b >= 1048576 ? str(std::lround(b / 1048576), "M")
                                                            : str(std::lround(b / 1024), "K"),
                                          ":", std::lround(t * 1e6));
  std::printf("calibrate: %-8s %-14s g=%d  latency %.1f us, bandwidth %.2f GB/s; us per call at"
              "%s\n", level, kind, g, c.latency * 1e6, c.bandwidth / 1e9, pts.c_str());
}

// messages: the same ranks with shared memory off (every collective an MPI
// message), as DENDRITE_SHARED_MEMORY=0 and simulated node bounds run them.
// messages: the same ranks with shared memory off (the network's stand-in),
// or null (GPUs: one node cannot stand in for their network).
void calibrate_links(Communicator& world, Communicator* messages, Backend& be, Machine& mach,
                     int P, bool quick) {
  const char* kinds[] = {"all_reduce", "all_gather", "reduce_scatter"};
  StepContext step(be);
  mach.peer_wait_fraction.clear();
  for (int g = 2; g <= P; ++g) {  // the largest group within the node is kept
    if (P % g != 0 || g > mach.ranks_per_node) continue;
    ProcessGrid sub = make_grid(world, str("x=", g, ",d=", P / g));
    const auto [wait, interval] = calibrate_peer_wait(world, sub.X(), step, quick ? 0.2 : 1.5);
    if (wait >= 0) {
      mach.peer_wait_fraction[g] = wait;
      mach.peer_wait_interval_s = interval;
      if (world.rank() == 0)
        std::printf("calibrate: groups of %d wait for their last rank %.1f%% of the compute "
                    "(%.1f ms GEMMs between calls)\n", g, 100 * wait, interval * 1e3);
    }
    for (const char* kind : kinds) {
      LinkCost c = calibrate_collective(world, sub.X(), kind, quick, step);
      mach.node.by_kind[kind] = mach.node.by_group[g][kind] = c;
      if (world.rank() == 0) print_link("node", kind, g, c);
    }
    for (const char* kind : kinds) {  // the same over shared memory, where it is on
      LinkCost c;
      if (!calibrate_shm_collective(world, sub.X(), kind, quick, step, c)) continue;
      mach.shm.by_kind[kind] = mach.shm.by_group[g][kind] = c;
      mach.has_shm = true;
      if (world.rank() == 0) print_link("shm", kind, g, c);
    }
    if (!messages) continue;
    ProcessGrid msub = make_grid(*messages, str("x=", g, ",d=", P / g));
    for (const char* kind : kinds) {
      LinkCost c = calibrate_collective(*messages, msub.X(), kind, quick, step);
      mach.messages.by_kind[kind] = mach.messages.by_group[g][kind] = c;
      mach.has_messages = true;
      if (world.rank() == 0) print_link("messages", kind, g, c);
    }
  }
  // by_kind holds the largest group's figures; by_group the smaller ones.
  for (LevelCost* l : {&mach.node, &mach.shm, &mach.messages})
    if (!l->by_group.empty()) l->by_group.erase(std::prev(l->by_group.end()));
  if (mach.has_shm) mach.shm.all = mach.shm.get("all_reduce");
  if (mach.node.by_kind.empty()) mach.node.by_kind["all_reduce"] = {1e12, 0};  // one rank: free
  mach.node.all = mach.node.by_kind["all_reduce"];
  // One node cannot measure the network: its ranks' MPI messages stand in (what
  // simulated nodes use; a real network is slower).
  if (mach.has_messages) {
    mach.messages.all = mach.messages.get("all_reduce");
    mach.network = mach.messages;
  } else {
    mach.network = mach.node;
  }
}

// calibrate --links-from FILE: what a run on part of one node cannot measure
// comes from FILE (published figures of the whole node, machines/*.json): the
// network always (one node's own messages only stand in for it); the node's
// ranks (GPUs) where FILE's node holds more than this run had; and the node
// level where this run had one rank, so measured no collective.
void take_links(Machine& mach, const Machine& from, const std::string& path, int P) {
  std::string taken = "network";
  mach.network = from.network;
  if (from.ranks_per_node > mach.ranks_per_node) {
    mach.ranks_per_node = from.ranks_per_node;
    taken += str(", ", from.ranks_per_node, " ranks per node");
  }
  if (P == 1) {
    mach.node = from.node;
    mach.shm = from.shm;
    mach.has_shm = from.has_shm;
    mach.messages = from.messages;
    mach.has_messages = from.has_messages;
    taken += ", the node's collectives";
  }
  mach.notes += str("; from ", path, " (", from.name, "): ", taken);
}

int run_calibrate(const CalibrateCmd& o, MpiEnv& env) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  auto t0 = Clock::now();
  // The machine file describes a node of the device's: its kernels, and its
  // collectives over the backend's transport (NCCL or staged on GPUs).
  std::unique_ptr<Backend> backend = make_rank_backend(o.device, env);
  Backend& be = *backend;
  const bool gpu = be.device() != Device::kCpu;
  ProcessGrid grid = make_grid(be.transport(env.world()), "");
  const int P = grid.shape().size();
  Machine mach;
  const bool keep_compute = !o.compute_from.empty();
  if (keep_compute) {
    // --compute-from: that file's compute figures, this run's collectives and
    // waits (an oversubscribed node: compute slows by the model's ratio of
    // threads to cores, collectives and waits by more).
    DENDRITE_CHECK(!gpu, "calibrate --compute-from is for CPU ranks sharing cores; run it with "
                   "--device cpu");
    mach = load_machine(o.compute_from);
    DENDRITE_CHECK(mach.threads_per_rank == omp_get_max_threads(), "calibrate --compute-from ",
                   o.compute_from, ": its compute was measured with ", mach.threads_per_rank,
                   " threads per rank; run with --threads ", mach.threads_per_rank);
  } else {
    mach.memory_per_rank_bytes =
        gpu ? double(be.device_capacity_bytes())
            : double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) /
                  grid.world().ranks_on_node();
    mach.peak_gflops = mean_over(grid.world(), be.peak_gflops(Precision::kF32, 0, 0.3));
    mach.memory_bandwidth = gpu ? calibrate_device_bandwidth(grid.world(), be)
                                : calibrate_bandwidth(grid.world());
    mach.optimizer_seconds_per_param = calibrate_optimizer(grid.world(), be);
    mach.gemm = calibrate_gemm(grid.world(), be, o.quick, Precision::kF32);
    // Where bf16 would only be widened to fp32, its rates are the fp32 ones: none written.
    if (be.bf16_native())
      mach.gemm_bf16 = calibrate_gemm(grid.world(), be, o.quick, Precision::kBF16);
    mach.threads_per_rank = omp_get_max_threads();
  }
  mach.name = o.name;
  mach.ranks_per_node = grid.world().ranks_on_node();
  mach.cores_per_node = int(sysconf(_SC_NPROCESSORS_ONLN));
  mach.has_shm = mach.has_messages = false;
  mach.node = mach.shm = mach.messages = LevelCost{};
  if (gpu) {
    calibrate_links(grid.world(), nullptr, be, mach, P, o.quick);
  } else {
    // The same ranks with shared memory off: the messages level.
    CommOptions off = env.options();
    off.shared_memory = false;
    std::unique_ptr<Communicator> messages = env.make_world(off);
    calibrate_links(grid.world(), messages.get(), be, mach, P, o.quick);
  }
  // Collectives and waits measured with this run's ranks already hold what an
  // oversubscribed node adds to each call.
  mach.oversubscribed_call_penalty_s = 0;
  // A GPU's compute does not share the node's cores: no oversubscription model.
  if (gpu) mach.cores_per_node = 0;
  const std::string compute_note =
      keep_compute ? str("; compute figures from ", o.compute_from, " (", mach.notes, ")") : "";
  mach.notes = gpu ? str("measured by `dendrite calibrate --device cuda` with ", P, " ranks on ",
                         be.describe(), " in ", std::lround(seconds_since(t0)),
                         " s; network = the node's transport (one node cannot measure it)")
                   : str("measured by `dendrite calibrate` with ", P, " ranks of ",
                         mach.threads_per_rank, " threads in ", std::lround(seconds_since(t0)),
                         " s; network = the node's MPI messages (one node)") +
                         compute_note;
  if (!o.links_from.empty()) take_links(mach, load_machine(o.links_from), o.links_from, P);
  if (grid.rank() == 0) {
    save_machine(mach, o.out);
    std::printf("calibrate: peak %.1f GFLOP/s, bandwidth %.2f GB/s per rank, %zu GEMM shapes "
                "(%zu in bf16); wrote %s in %.1f s\n", mach.peak_gflops,
                mach.memory_bandwidth / 1e9, mach.gemm.size(), mach.gemm_bf16.size(),
                o.out.c_str(), seconds_since(t0));
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app, MpiEnv& env) {
  auto o = std::make_shared<PlanCmd>();
  app.add_option("--model", o->model,
                 "Preset, model JSON file, or Hugging Face model folder (its config.json)")
      ->capture_default_str();
  auto* batch = app.add_option("--batch", o->batch, "Global batch (sequences; --sweep: 2048)")
                    ->capture_default_str();
  auto* seq = app.add_option("--seq", o->seq, "Tokens per sequence (--sweep: 2048)")
                  ->capture_default_str();
  app.add_option("--world", o->world, "World size P (ranks)")->capture_default_str();
  app.add_option("--machine", o->machine, "Machine file (dendrite calibrate, machines/*.json)")
      ->required();
  app.add_option("--top", o->top, "Show only the K best grids (0: all)");
  app.add_option("--ranks-per-node", o->ranks_per_node,
                 "Override the machine's ranks per node (e.g. oversubscribed runs)");
  app.add_flag("--keep-gathered", o->keep_gathered, "Model --keep-gathered runs");
  app.add_flag("--recompute", o->recompute, "Model --recompute runs");
  app.add_option("--overlap", o->overlap,
                 "Communication hidden behind compute: none, all or a list of oar, ors, oag, dp; "
                 "or auto, all where the machine has a core per rank to spare (as train "
                 "--overlap, and its default)")
      ->capture_default_str();
  app.add_option("--precision", o->precision,
                 "fp32 or bf16 (as train --precision): bf16 GEMMs at the machine's bf16 rates, "
                 "the Z gathers of weights in half the bytes, bf16 activations and weight copy")
      ->capture_default_str();
  app.add_flag("--sweep", o->sweep,
               "Weak scaling from 512 to 32768 GPUs (model grows with the count; "
               "docs/planner.md); --model and --world are not used");
  app.add_flag("--no-shared-memory", o->no_shared_memory,
               "Model runs with DENDRITE_SHARED_MEMORY=0: node-local Z and D collectives as MPI "
               "messages (also when that variable is 0 here)");
  app.add_option("--simulate-nodes", o->simulate_nodes,
                 "Model runs with DENDRITE_RANKS_PER_NODE=N (nodes of N ranks simulated on the "
                 "machine's): groups crossing them use the network figures, oversubscription "
                 "still counts the physical node (also when that variable is set here)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--json", o->json, "Print one JSON object");
  return [o, batch, seq, &env] {
    o->batch_given = batch->count() > 0;
    o->seq_given = seq->count() > 0;
    return run_plan(*o, env);
  };
}

Runner add_calibrate(CLI::App& app, MpiEnv& env) {
  auto o = std::make_shared<CalibrateCmd>();
  app.add_option("--out", o->out, "Machine file to write")->required();
  app.add_option("--name", o->name,
                 "The machine's name, kept in the file's \"name\" and printed by `plan` "
                 "beside its choice")
      ->capture_default_str();
  app.add_option("--threads", o->threads, "Threads per rank (default: OMP_NUM_THREADS)");
  app.add_flag("--quick", o->quick, "Fewer GEMM shapes (tests)");
  app.add_option("--device", o->device,
                 "cpu, cuda or auto (as train --device): the node described is one of this "
                 "device's, its GEMMs, memory bandwidth and collectives (NCCL on GPUs) measured")
      ->capture_default_str();
  app.add_option("--compute-from", o->compute_from,
                 "Keep this machine file's compute figures (GEMM rates, peak, memory, optimizer) "
                 "and measure only the collectives and the wait for peers with this run's ranks: "
                 "a node run with more ranks than cores, where the compute of a run with a core "
                 "per rank still holds")
      ->check(CLI::ExistingFile);
  app.add_option("--links-from", o->links_from,
                 "Machine file (e.g. machines/h200-node.json) giving what this run cannot "
                 "measure: the network, the node's ranks when this run has fewer (one GPU of "
                 "a node of 8) and, with one rank, the node's collectives")
      ->check(CLI::ExistingFile);
  return [o, &env] { return run_calibrate(*o, env); };
}

}  // namespace dendrite::app
