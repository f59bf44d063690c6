// `dendrite plan`: predict the step time and memory of every process grid of a
// world size on a machine (src/dendrite/plan/model.h) and rank them; with
// --sweep, the weak-scaling sweep (src/dendrite/plan/sweep.h). The machine
// file comes from `dendrite calibrate` (apps/calibrate_cmd.cpp) or machines/.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/commands.h"
#include "dendrite/core/check.h"
#include "dendrite/plan/model.h"
#include "dendrite/plan/sweep.h"

namespace dendrite::app {

namespace {

struct PlanCmd {
  std::string model = "gpt2-124m", machine;
  int batch = 4, seq = 64, world = 1, top = 0, ranks_per_node = 0;
  int simulate_nodes = 0;  // also DENDRITE_RANKS_PER_NODE, as the trainer
  bool json = false, keep_gathered = false, recompute = false, sweep = false;
  bool batch_given = false, seq_given = false;
  bool no_shared_memory = false;  // also when DENDRITE_SHARED_MEMORY=0, as the trainer
  std::string overlap = "auto";   // as train --overlap's default (TrainOptions::overlap)
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

}  // namespace dendrite::app
