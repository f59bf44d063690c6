// The performance model and planner (src/dendrite/plan): machine files (round
// trip, errors), grid enumeration and exclusions, communication bytes against
// step_volume, the ring cost formula by hand, GEMM flops, and memory per rank
// against the Transformer's own allocation; what the overlaps hide, the
// oversubscription penalty, the wait for peers, figures per group size, and
// the weak-scaling sweep. No MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "dendrite/comm/grid.h"
#include "dendrite/core/check.h"
#include "dendrite/model/transformer.h"
#include "dendrite/plan/model.h"
#include "dendrite/plan/sweep.h"
#include "backend_support.h"

namespace dendrite {
namespace {

Machine test_machine() {
  Machine m;
  m.name = "test";
  m.ranks_per_node = 2;
  m.threads_per_rank = 1;
  m.memory_per_rank_bytes = 64e9;
  m.peak_gflops = 100;
  m.memory_bandwidth = 10e9;
  m.gemm = {{256, 768, 768, 50}, {2048, 3072, 768, 80}};
  m.node.all = {1e9, 1e-6};
  m.node.by_kind["all_gather"] = {2e9, 2e-6};
  m.network.all = {1e8, 1e-5};
  return m;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Machine, JsonAndFileRoundTrip) {
  const Machine m = test_machine();
  const Machine back = machine_from_json(to_json(m));
  EXPECT_EQ(to_json(back), to_json(m));
  EXPECT_EQ(back.gemm.size(), 2u);
  EXPECT_DOUBLE_EQ(back.node.get("all_gather").bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(back.node.get("reduce_scatter").bandwidth, 1e9);  // the level's default
  const std::string path = testing::TempDir() + "/plan_test_machine.json";
  save_machine(m, path);
  EXPECT_EQ(to_json(load_machine(path)), to_json(m));
  std::remove(path.c_str());
}

TEST(Machine, ErrorsNameTheField) {
  const nlohmann::json good = to_json(test_machine());
  nlohmann::json j = good;
  j["ranks_per_nod"] = 4;
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("unknown key \"ranks_per_nod\""),
            std::string::npos);
  j = good;
  j.erase("peak_gflops");
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("missing field \"peak_gflops\""),
            std::string::npos);
  j = good;
  j["collectives"]["network"]["bandwidth"] = -1;
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("collectives.network"), std::string::npos);
  j = good;
  j["memory_bandwidth"] = "fast";
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("must be a number"), std::string::npos);
  j = good;
  j["gemm"][0]["flops"] = 3;
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("gemm[0]"), std::string::npos);
  EXPECT_NE(error_of([] { load_machine("/nonexistent/m.json"); }).find("dendrite calibrate"),
            std::string::npos);
}

TEST(Machine, GemmRateNearestShape) {
  const Machine m = test_machine();
  EXPECT_DOUBLE_EQ(m.gemm_gflops(256, 768, 768), 50);
  EXPECT_DOUBLE_EQ(m.gemm_gflops(300, 800, 800), 50);     // nearest in log distance
  EXPECT_DOUBLE_EQ(m.gemm_gflops(2048, 3072, 768), 80);
  EXPECT_DOUBLE_EQ(m.gemm_gflops(128, 768, 768), 25);     // below the smallest m: linear
  Machine flat = m;
  flat.gemm.clear();
  flat.gemm_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(flat.gemm_gflops(7, 7, 7), 50);
}

TEST(Planner, EnumeratesAllTwentyGridsOfEight) {
  const std::vector<GridDims> grids = enumerate_grids(8);
  EXPECT_EQ(grids.size(), 20u);
  std::set<std::string> seen;
  for (const GridDims& g : grids) {
    EXPECT_EQ(g.x * g.y * g.z * g.d, 8);
    seen.insert(grid_str(g));
  }
  EXPECT_EQ(seen.size(), 20u);
  EXPECT_EQ(enumerate_grids(1).size(), 1u);
  EXPECT_EQ(enumerate_grids(12).size(), 40u);  // 2^2 * 3: C(5,3) * C(4,3)
}

TEST(Planner, RulesOutGridsWithTheReason) {
  const ModelConfig c = load_model_config("gpt2-124m");  // C 768, 12 heads, F 3072
  PlanOptions o;
  o.B = 4, o.T = 64;
  Machine m = test_machine();
  m.ranks_per_node = 8;
  const Plan plan = plan_grids(c, m, 8, o);
  EXPECT_EQ(plan.ranked.size() + plan.excluded.size(), 20u);
  std::map<std::string, std::string> why;
  for (auto& [g, reason] : plan.excluded) why[grid_str(g)] = reason;
  EXPECT_NE(why.at("x=1,y=8,z=1,d=1").find("heads"), std::string::npos);
  EXPECT_NE(why.at("x=1,y=1,z=1,d=8").find("batch 4 is not divisible by d*z=8"), std::string::npos);
  EXPECT_NE(why.at("x=1,y=1,z=8,d=1").find("d*z=8"), std::string::npos);
  EXPECT_EQ(why.count("x=8,y=1,z=1,d=1"), 0u);
  EXPECT_EQ(why.count("x=2,y=2,z=2,d=1"), 0u);
  for (size_t i = 1; i < plan.ranked.size(); ++i)
    EXPECT_LE(plan.ranked[i - 1].step_s, plan.ranked[i].step_s);
  // Memory rules out what does not fit.
  m.memory_per_rank_bytes = 0.8e9;
  const Plan tight = plan_grids(c, m, 8, o);
  bool memory_reason = false;
  for (auto& [g, reason] : tight.excluded) memory_reason |= reason.find("MB per rank") != std::string::npos;
  EXPECT_TRUE(memory_reason);
  EXPECT_LT(tight.ranked.size(), plan.ranked.size());
}

TEST(Planner, CommunicationBytesEqualStepVolume) {
  const ModelConfig c = load_model_config("llama-tiny");
  const Machine m = test_machine();
  PlanOptions o;
  o.B = 8, o.T = 16;
  for (int P : {1, 2, 4, 8})
    for (const GridDims& g : enumerate_grids(P)) {
      if (!grid_exclusion(c, g, o).empty()) continue;
      const StepPrediction p = predict_step(c, m, g, o);
      const Volume v = step_volume(c, g, o.B, o.T, o.ce_chunk, o.keep_gathered, o.recompute,
                                   o.overlap.dp);
      EXPECT_EQ(p.volume.bytes, v.bytes) << grid_str(g);
      EXPECT_EQ(p.volume.calls, v.calls) << grid_str(g);
      // The predicted seconds are the ring cost of exactly these bytes and calls.
      double total = 0;
      for (auto& [key, b] : v.bytes) {
        const std::string axis = key.substr(0, 1), kind = key.substr(2);
        const int stride = axis == "x" ? 1 : axis == "y" ? g.x : axis == "z" ? g.x * g.y : g.x * g.y * g.z;
        const int size = axis == "x" ? g.x : axis == "y" ? g.y : axis == "z" ? g.z : g.d;
        total += collective_seconds(m, kind, stride, size, double(b), double(v.calls.at(key)));
      }
      EXPECT_NEAR(p.comm_total_s, total, 1e-12 + 1e-9 * total) << grid_str(g);
      for (auto& [axis, t] : p.hidden_s) EXPECT_EQ(t, 0.0);
    }
}

// bf16 gathers every weight block over Z in half the bytes; nothing else
// changes (activations, gradients and statistics move in fp32). With a
// vocabulary block larger than the Z group's rows the embedding gathers its
// block (no fp32 row traffic), so the Z all-gather bytes halve exactly.
TEST(Volume, Bf16HalvesTheWeightGathersOnly) {
  const ModelConfig c = load_model_config("gpt2-tiny");
  for (const GridDims& g : {GridDims{1, 1, 2, 1}, GridDims{2, 2, 2, 1}, GridDims{1, 2, 4, 2}}) {
    for (bool keep : {false, true}) {
      const Volume f32 = step_volume(c, g, 8, 16, 256, keep, false, true, Precision::kF32);
      const Volume b16 = step_volume(c, g, 8, 16, 256, keep, false, true, Precision::kBF16);
      ASSERT_GT(f32.bytes.at("z.all_gather"), 0);
      for (auto& [key, bytes] : f32.bytes) {
        const int64_t want = key == "z.all_gather" ? bytes / 2 : bytes;
        EXPECT_EQ(b16.bytes.at(key), want) << key << " on " << grid_str(g);
        EXPECT_EQ(b16.calls.at(key), f32.calls.at(key)) << key;
      }
    }
  }
}

TEST(Planner, RingCostByHand) {
  const Machine m = test_machine();  // 2 ranks per node
  // All-reduce, 3 calls, 1 MB in all, over 2 neighbours (one node): 3 us + 2 * 1/2 * 1 ms.
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 1, 2, 1e6, 3), 3e-6 + 1e-3, 1e-15);
  // The same pair at stride 2 spans two nodes: the network's 10 us and 100 MB/s.
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 2, 2, 1e6, 3), 3e-5 + 1e-2, 1e-15);
  // All-gather in the node uses its own figures: 2 us + 1/2 * 1 MB / 2 GB/s.
  EXPECT_NEAR(collective_seconds(m, "all_gather", 1, 2, 1e6, 1), 2e-6 + 2.5e-4, 1e-15);
  // Four ranks do not fit a node of two: (4-1)/4 * 1 MB / 100 MB/s + 10 us.
  EXPECT_NEAR(collective_seconds(m, "reduce_scatter", 1, 4, 1e6, 1), 1e-5 + 7.5e-3, 1e-15);
  EXPECT_EQ(collective_seconds(m, "all_reduce", 1, 1, 1e6, 1), 0.0);
}

TEST(Planner, GemmFlopsSplitOverTheGrid) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 4, o.T = 64;
  auto flops = [&](const GridDims& g) {
    double f = 0;
    for (const GemmCall& call : step_gemms(c, g, o)) f += call.flops();
    return f;
  };
  const double C = c.n_embd, F = c.ffn_hidden, Vp = c.padded_vocab(), tokens = o.B * o.T;
  const double weights = c.n_layer * (4 * C * C + 2 * C * F) + Vp * C;
  EXPECT_DOUBLE_EQ(flops({1, 1, 1, 1}), 6 * tokens * weights);
  EXPECT_NEAR(flops({2, 2, 1, 1}), flops({1, 1, 1, 1}) / 4, 1e-9 * flops({1, 1, 1, 1}));
  EXPECT_NEAR(flops({1, 1, 2, 2}), flops({1, 1, 1, 1}) / 4, 1e-9 * flops({1, 1, 1, 1}));
  // A machine without a table runs every GEMM at peak * efficiency.
  Machine m = test_machine();
  m.gemm.clear();
  const StepPrediction p = predict_step(c, m, {1, 1, 1, 1}, o);
  EXPECT_NEAR(p.gemm_s, 6 * tokens * weights / 100e9, 1e-9);
  EXPECT_NEAR(p.step_s, p.compute_s + p.comm_total_s, 1e-12);
}

TEST(Planner, ParameterMemoryFallsWithTheWeightSplit) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 8, o.T = 64;
  const double one = step_memory(c, {1, 1, 1, 1}, o).params;
  EXPECT_NEAR(one, 16.0 * c.num_parameters(), 0.01 * one);  // padding of V only
  for (GridDims g : {GridDims{2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 2, 1}, {2, 2, 2, 1}, {1, 4, 2, 1}}) {
    const double split = g.x * g.y * g.z, part = step_memory(c, g, o).params;
    EXPECT_NEAR(part * split / one, 1.0, 0.03) << grid_str(g);  // vectors replicate
  }
  EXPECT_DOUBLE_EQ(step_memory(c, {1, 1, 1, 8}, o).params, one);  // D replicates
}

TEST(Planner, ActivationMemoryMatchesTheModel) {
  nlohmann::json qwen3 = to_json(load_model_config("llama-tiny"));
  qwen3["arch"] = "qwen3", qwen3["head_dim"] = 16;  // per-head norms, head size 16 of 32 / 4
  for (const std::string name : {"gpt2-tiny", "llama-tiny", "qwen3"})
    for (bool recompute : {false, true})
      for (Precision p : {Precision::kF32, Precision::kBF16}) {
        const ModelConfig c =
            name == "qwen3" ? model_config_from_json(qwen3) : load_model_config(name);
        auto grid = ProcessGrid::single();
        ModelOptions mo;
        mo.recompute = recompute;
        mo.precision = p;
        Transformer model(c, *grid, test::cpu_backend(), 4, 16, mo);
        PlanOptions o;
        o.B = 4, o.T = 16, o.recompute = recompute, o.precision = p;
        const MemoryEstimate e = step_memory(c, {1, 1, 1, 1}, o);
        const std::string what =
            str(name, recompute ? " recompute " : " ", p == Precision::kBF16 ? "bf16" : "fp32");
        EXPECT_DOUBLE_EQ(e.activations, double(model.activation_bytes())) << what;
        // 16 bytes per parameter; bf16 adds 2 for each one GEMMs read (the Z-chunked ones)
        const double copy = p == Precision::kBF16 ? 2.0 * model.table().replicated_begin() : 0;
        EXPECT_DOUBLE_EQ(e.params, 16.0 * double(model.num_floats()) + copy) << what;
      }
}

// With a bf16 GEMM table the planner predicts bf16 GEMMs at those rates (and
// without one at the fp32 rates), the Z gathers in half the bytes.
TEST(Planner, Bf16UsesItsGemmRatesAndHalvesTheGathers) {
  const ModelConfig c = load_model_config("gpt2-tiny");
  Machine m = test_machine();
  PlanOptions o;
  o.B = 8, o.T = 16;
  const GridDims g{1, 1, 2, 1};
  const StepPrediction f32 = predict_step(c, m, g, o);
  o.precision = Precision::kBF16;
  const StepPrediction same_rates = predict_step(c, m, g, o);
  EXPECT_DOUBLE_EQ(same_rates.gemm_s, f32.gemm_s);
  EXPECT_EQ(same_rates.volume.bytes.at("z.all_gather") * 2, f32.volume.bytes.at("z.all_gather"));
  for (GemmRate r : m.gemm) {
    r.gflops *= 2;
    m.gemm_bf16.push_back(r);
  }
  const StepPrediction twice = predict_step(c, m, g, o);
  EXPECT_NEAR(twice.gemm_s, f32.gemm_s / 2, 1e-12 * f32.gemm_s);
  EXPECT_EQ(to_json(machine_from_json(to_json(m))).dump(), to_json(m).dump());  // saved and read
}

TEST(Overlap, ParsesTheList) {
  EXPECT_EQ(Overlap::parse("none").str(), "none");
  EXPECT_EQ(Overlap::parse("all").str(), "all");
  const Overlap o = Overlap::parse("dp,oar");
  EXPECT_TRUE(o.oar && o.dp && !o.ors && !o.oag);
  EXPECT_EQ(o.str(), "oar,dp");
  EXPECT_NE(error_of([] { Overlap::parse("oar,foo"); }).find("unknown overlap 'foo'"),
            std::string::npos);
}

TEST(Overlap, PipelineByHand) {
  // Transfers of 1 s posted at 2, 4, 6 s end at 3, 5, 7; compute ends at 6.5:
  // 0.5 s exposed, 2.5 s hidden.
  EXPECT_DOUBLE_EQ(pipeline_hidden(3, 1.0, 2.0, 0.5), 2.5);
  // Transfers of 3 s behind steps of 1 s: they end at 4, 7, 10, compute at 3.
  EXPECT_DOUBLE_EQ(pipeline_hidden(3, 3.0, 1.0, 0.0), 2.0);
  EXPECT_DOUBLE_EQ(pipeline_hidden(0, 3.0, 1.0, 0.0), 0.0);
  // OAR hides min(all-reduce, dW GEMM) per call and layer.
  OverlapInputs in;
  in.layers = 4;
  in.layer_backward_s = 10;
  in.oar = {{"x", 1.0, 0.5}, {"y", 0.2, 3.0}};
  const auto h = hidden_seconds(Overlap::parse("oar"), in);
  EXPECT_DOUBLE_EQ(h.at("x"), 4 * 0.5);
  EXPECT_DOUBLE_EQ(h.at("y"), 4 * 0.2);
  EXPECT_TRUE(hidden_seconds(Overlap::parse("none"), in).empty());
}

// Hidden never exceeds the compute beside it nor the communication it
// hides; none hides nothing; exposed + hidden is the same total.
TEST(Overlap, HiddenUpToTheComputeBesideIt) {
  Machine m = test_machine();
  m.ranks_per_node = 8;
  m.network = m.node;
  for (const char* name : {"gpt2-124m", "llama-tiny"}) {
    const ModelConfig c = load_model_config(name);
    PlanOptions o;
    o.B = 8, o.T = 16;
    bool some_hidden = false;
    for (int P : {2, 4, 8})
      for (const GridDims& g : enumerate_grids(P)) {
        if (!grid_exclusion(c, g, o).empty()) continue;
        o.overlap = Overlap::parse("none");
        const StepPrediction none = predict_step(c, m, g, o);
        EXPECT_EQ(none.comm_hidden_s, 0.0);
        for (const char* list : {"oar", "ors", "oag", "oar,ors,oag", "dp", "all"}) {
          o.overlap = Overlap::parse(list);
          const StepPrediction p = predict_step(c, m, g, o);
          const OverlapInputs in = overlap_inputs(c, m, g, o);
          const std::string at = grid_str(g) + " " + list + " " + name;
          EXPECT_LE(p.comm_hidden_s, in.layers * (in.layer_forward_s + in.layer_backward_s) +
                                         in.tail_backward_s + 1e-12) << at;
          double dweight = 0;
          for (const OarCall& call : in.oar) dweight += in.layers * call.dweight_s;
          if (std::string(list) == "oar") {
            EXPECT_LE(p.comm_hidden_s, dweight + 1e-12) << at;
          }
          for (auto& [axis, h] : p.hidden_s) EXPECT_GE(h, 0.0) << at;
          EXPECT_NEAR(p.comm_exposed_s + p.comm_hidden_s, p.comm_total_s, 1e-12) << at;
          EXPECT_NEAR(p.step_s, p.compute_s + p.comm_exposed_s, 1e-12) << at;
          if (!o.overlap.dp) {  // same volume: the same total, less exposed
            EXPECT_NEAR(p.comm_total_s, none.comm_total_s, 1e-9 * none.comm_total_s) << at;
            for (auto& [axis, t] : none.comm_s)
              EXPECT_NEAR(p.comm_s.at(axis) + p.hidden_s.at(axis), t, 1e-9 * (t + 1e-9)) << at;
            EXPECT_LE(p.step_s, none.step_s + 1e-12) << at;
          }
          some_hidden |= p.comm_hidden_s > 0;
        }
      }
    EXPECT_TRUE(some_hidden) << name;
  }
}

TEST(Overlap, OagHidesZGathersUnlessBlocksAreKept) {
  const ModelConfig c = load_model_config("gpt2-124m");
  Machine m = test_machine();
  m.ranks_per_node = 8;
  PlanOptions o;
  o.B = 8, o.T = 64, o.overlap = Overlap::parse("oag");
  const GridDims g{1, 1, 4, 2};
  EXPECT_GT(predict_step(c, m, g, o).hidden_s.at("z"), 0.0);
  o.keep_gathered = true;  // the trainer turns oag off then
  EXPECT_EQ(predict_step(c, m, g, o).comm_hidden_s, 0.0);
}

TEST(Oversubscription, SlowsComputeAndChargesEachCall) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 4, o.T = 64;
  Machine m = test_machine();
  m.ranks_per_node = 4;
  m.cores_per_node = 4;
  m.oversubscribed_call_penalty_s = 5e-3;
  const GridDims g{2, 2, 1, 1};
  const StepPrediction fits = predict_step(c, m, g, o);
  EXPECT_EQ(fits.penalty_s, 0.0);
  m.cores_per_node = 2;  // 4 ranks on 2 cores
  const StepPrediction over = predict_step(c, m, g, o);
  EXPECT_NEAR(over.compute_s, 2 * fits.compute_s, 1e-12);
  int64_t calls = 0;
  for (auto& [key, n] : over.volume.calls) calls += n;
  EXPECT_NEAR(over.penalty_s, 5e-3 * calls, 1e-12);
  EXPECT_NEAR(over.comm_total_s - fits.comm_total_s, over.penalty_s, 1e-9);
  // The field survives the file; the generic machine is valid.
  EXPECT_DOUBLE_EQ(machine_from_json(to_json(m)).oversubscribed_call_penalty_s, 5e-3);
  const Machine generic = generic_machine(4, 1, 2, 8e9);
  EXPECT_DOUBLE_EQ(generic.oversubscription(), 2.0);
  EXPECT_GT(generic.oversubscribed_call_penalty_s, 0.0);
}

TEST(Sweep, WeakScalingFrom512) {
  const Machine m = load_machine(std::string(DENDRITE_SOURCE_DIR) + "/machines/frontier.json");
  PlanOptions o;
  o.B = 2048, o.T = 2048, o.overlap = Overlap::parse("all");
  const std::vector<SweepPoint> pts = weak_scaling_sweep(m, o, weak_scaling_counts());
  ASSERT_EQ(pts.size(), 7u);
  EXPECT_EQ(pts.front().gpus, 512);
  EXPECT_EQ(pts.back().gpus, 32768);
  for (size_t i = 0; i < pts.size(); ++i) {
    const SweepPoint& p = pts[i];
    ASSERT_TRUE(p.feasible) << p.gpus;
    if (i > 0) {
      EXPECT_GT(p.gpus, pts[i - 1].gpus);
    }
    const GridDims& g = p.best.grid;
    EXPECT_EQ(g.x * g.y * g.z * g.d, p.gpus);
    EXPECT_NEAR(p.params / (5e9 * p.gpus / 512), 1.0, 0.06) << p.gpus;  // 5B * G/512
    EXPECT_NEAR(p.flops_total, p.flops_per_gpu * p.gpus, 1e-6 * p.flops_total);
    EXPECT_GT(p.efficiency, 0.0);
    EXPECT_LE(p.best.memory.total(), m.memory_per_rank_bytes);
  }
  EXPECT_DOUBLE_EQ(pts.front().efficiency, 1.0);
  EXPECT_NE(error_of([] { weak_scaling_model(3000); }).find("512 * 2^k"), std::string::npos);
}

// A machine whose node-local shared-memory collectives are 10x the messages'.
Machine shm_machine() {
  Machine m = test_machine();
  m.has_shm = true;
  m.shm.all = {10e9, 5e-6};
  m.shm.by_kind["reduce_scatter"] = {20e9, 4e-6};
  return m;
}

TEST(SharedMemory, LevelRoundTripAndOlderFilesLoad) {
  const Machine m = shm_machine();
  const nlohmann::json j = to_json(m);
  ASSERT_TRUE(j.at("collectives").contains("shm"));
  const Machine back = machine_from_json(j);
  EXPECT_TRUE(back.has_shm);
  EXPECT_EQ(to_json(back), j);
  EXPECT_DOUBLE_EQ(back.shm.get("reduce_scatter").bandwidth, 20e9);
  EXPECT_DOUBLE_EQ(back.shm.get("all_gather").latency, 5e-6);  // the level's default
  // A file without the level (written before it) loads, without shm figures.
  nlohmann::json old = j;
  old["collectives"].erase("shm");
  const Machine legacy = machine_from_json(old);
  EXPECT_FALSE(legacy.has_shm);
  EXPECT_FALSE(to_json(legacy).at("collectives").contains("shm"));
  // ... and the shm link then falls back to the node's message figures.
  EXPECT_DOUBLE_EQ(legacy.link("all_gather", 1, 2, true).bandwidth, 2e9);
  // The level is as strict as the others.
  nlohmann::json bad = j;
  bad["collectives"]["shm"]["bandwith"] = 1;
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("collectives.shm"), std::string::npos);
  bad = j;
  bad["collectives"]["shm"]["all_gather"] = {{"bandwidth", -1}, {"latency", 0}};
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("positive"), std::string::npos);
}

TEST(SharedMemory, OnlyForNodeLocalZAndDGroups) {
  const Machine m = shm_machine();  // 2 ranks per node
  PlanOptions o;
  // Z all-gather / reduce-scatter and D all-reduce inside the node: shared memory.
  EXPECT_TRUE(uses_shared_memory(m, {1, 1, 2, 1}, "z", "all_gather", o));
  EXPECT_TRUE(uses_shared_memory(m, {1, 1, 2, 1}, "z", "reduce_scatter", o));
  EXPECT_TRUE(uses_shared_memory(m, {1, 1, 1, 2}, "d", "all_reduce", o));
  // Z's all-reduce of replicated gradients and the X / Y activations: messages.
  EXPECT_FALSE(uses_shared_memory(m, {1, 1, 2, 1}, "z", "all_reduce", o));
  EXPECT_FALSE(uses_shared_memory(m, {2, 1, 1, 1}, "x", "all_reduce", o));
  EXPECT_FALSE(uses_shared_memory(m, {1, 2, 1, 1}, "y", "all_reduce", o));
  // A group spanning nodes (z=2 at stride 2 on 2 ranks per node), a group of
  // one, shared memory off, or a machine without shm figures: messages.
  EXPECT_FALSE(uses_shared_memory(m, {2, 1, 2, 1}, "z", "all_gather", o));
  EXPECT_FALSE(uses_shared_memory(m, {1, 1, 2, 2}, "d", "all_reduce", o));
  EXPECT_FALSE(uses_shared_memory(m, {2, 1, 1, 1}, "z", "all_gather", o));
  PlanOptions off = o;
  off.shared_memory = false;
  EXPECT_FALSE(uses_shared_memory(m, {1, 1, 2, 1}, "z", "all_gather", off));
  EXPECT_FALSE(uses_shared_memory(test_machine(), {1, 1, 2, 1}, "z", "all_gather", o));
  // The ring cost by hand: 4 us + 1/2 * 1 MB / 20 GB/s in the node over shm;
  // across nodes the network's figures whatever the flag.
  EXPECT_NEAR(collective_seconds(m, "reduce_scatter", 1, 2, 1e6, 1, true), 4e-6 + 2.5e-5, 1e-15);
  EXPECT_NEAR(collective_seconds(m, "reduce_scatter", 1, 2, 1e6, 1, false), 1e-6 + 5e-4, 1e-15);
  EXPECT_NEAR(collective_seconds(m, "reduce_scatter", 2, 2, 1e6, 1, true), 1e-5 + 5e-3, 1e-15);
}

TEST(SharedMemory, ZGridPredictsFasterWithSameBytes) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 4, o.T = 64;
  const Machine m = shm_machine();
  PlanOptions off = o;
  off.shared_memory = false;
  for (const GridDims& g : {GridDims{1, 1, 2, 1}, GridDims{1, 1, 1, 2}}) {
    const StepPrediction shm = predict_step(c, m, g, o), msg = predict_step(c, m, g, off);
    EXPECT_LT(shm.step_s, msg.step_s) << grid_str(g);
    EXPECT_LT(shm.comm_total_s, 0.5 * msg.comm_total_s) << grid_str(g);
    EXPECT_EQ(shm.volume.bytes, msg.volume.bytes) << grid_str(g);  // volumes unchanged
    EXPECT_EQ(shm.volume.calls, msg.volume.calls) << grid_str(g);
    EXPECT_EQ(shm.compute_s, msg.compute_s) << grid_str(g);
    // Off, the prediction is that of a machine without shm figures.
    EXPECT_EQ(msg.step_s, predict_step(c, test_machine(), g, o).step_s) << grid_str(g);
  }
  // X and Y grids do not change.
  const GridDims xy{1, 2, 1, 1};
  EXPECT_EQ(predict_step(c, m, xy, o).step_s, predict_step(c, m, xy, off).step_s);
}

TEST(SharedMemory, EngineWorkChargedToComputeWithoutSpareCore) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 4, o.T = 64, o.overlap = Overlap::parse("oar,ors,oag");
  Machine m = shm_machine();
  const GridDims g{1, 1, 2, 1};
  m.cores_per_node = 4;  // 2 ranks of 1 thread on 4 cores: a spare core per rank
  const StepPrediction spare = predict_step(c, m, g, o);
  EXPECT_EQ(spare.engine_s, 0.0);
  ASSERT_GT(spare.hidden_s.at("z"), 0.0);
  m.cores_per_node = 2;  // every core computes: the engine's work takes GEMM cycles
  const StepPrediction full = predict_step(c, m, g, o);
  EXPECT_NEAR(full.engine_s, kEngineWorkFraction * full.hidden_s.at("z"), 1e-12);
  EXPECT_NEAR(full.compute_s, spare.compute_s + full.engine_s, 1e-12);
  EXPECT_NEAR(full.step_s, full.compute_s + full.comm_exposed_s, 1e-12);
  // Over messages (shared memory off) nothing runs on the engine.
  PlanOptions off = o;
  off.shared_memory = false;
  EXPECT_EQ(predict_step(c, m, g, off).engine_s, 0.0);
  // dp on a node-local D group runs on the engine too.
  o.overlap = Overlap::parse("dp");
  const StepPrediction dp = predict_step(c, m, {1, 1, 1, 2}, o);
  ASSERT_GT(dp.hidden_s.at("d"), 0.0);
  EXPECT_NEAR(dp.engine_s, kEngineWorkFraction * dp.hidden_s.at("d"), 1e-12);
}


// Measured points: a call's seconds interpolated between them, extended at the
// link's bandwidth beyond the largest, and looked up for other group sizes at
// the bytes that put as much on each link.
TEST(LinkPoints, InterpolateExtendAndScaleByGroup) {
  LinkCost l(1e9, 0);
  l.group = 2;
  l.points = {{1e3, 10e-6}, {1e5, 50e-6}, {1e7, 5e-3}};
  EXPECT_DOUBLE_EQ(l.seconds(500, 2, 2), 10e-6);              // below: the smallest call's time
  EXPECT_DOUBLE_EQ(l.seconds(1e3, 2, 2), 10e-6);
  EXPECT_NEAR(l.seconds(50500, 2, 2), 30e-6, 1e-15);         // halfway between 1e3 and 1e5
  EXPECT_NEAR(l.seconds(1e7, 2, 2), 5e-3, 1e-15);
  // Beyond the largest: + f (group-1)/group extra bytes / bandwidth = 2 * 1/2 * 1e7 / 1e9.
  EXPECT_NEAR(l.seconds(2e7, 2, 2), 5e-3 + 1e-2, 1e-12);
  // Four ranks move (3/4) / (1/2) = 1.5 times the bytes per link: 1e5 bytes look up 1.5e5.
  EXPECT_NEAR(l.seconds(1e5, 4, 2), 50e-6 + (5e-3 - 50e-6) * 0.5e5 / (1e7 - 1e5), 1e-15);
  EXPECT_EQ(l.seconds(1e5, 1, 2), 0.0);
  // Without points: the ring formula.
  EXPECT_NEAR(LinkCost(1e9, 1e-6).seconds(1e6, 4, 1), 1e-6 + 0.75e-3, 1e-15);
  // collective_seconds takes the mean call: 3 calls of 1e5 bytes.
  Machine m = test_machine();
  m.node.by_kind["all_reduce"] = l;
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 1, 2, 3e5, 3), 3 * 50e-6, 1e-15);
}

TEST(LinkPoints, RoundTripAndBadPointsAreErrors) {
  Machine m = test_machine();
  LinkCost l(1e9, 1e-6);
  l.group = 2;
  l.points = {{1e3, 1e-5}, {1e6, 1e-3}};
  m.node.by_kind["all_reduce"] = l;
  m.node.all = l;
  const nlohmann::json j = to_json(m);
  const Machine back = machine_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.node.get("all_reduce").points.size(), 2u);
  nlohmann::json bad = j;
  bad["collectives"]["node"]["all_reduce"]["points"] = {{1e6, 1e-3}, {1e3, 1e-5}};
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("bytes ascending"), std::string::npos);
  bad = j;
  bad["collectives"]["node"]["all_reduce"]["points"] = {{1e3}};
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("[bytes, seconds]"), std::string::npos);
  bad = j;
  bad["collectives"]["node"]["all_reduce"].erase("group");
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("\"group\""), std::string::npos);
}

// Figures per group size: a group of g uses its own size's where the level
// has them, else the largest group's scaled by bytes per link; they survive
// the file, and a group key that is not a size, or disagrees with its
// points' group, is an error.
TEST(LinkPoints, EachGroupSizeUsesItsOwnFigures) {
  Machine m = test_machine();
  m.ranks_per_node = 8;
  LinkCost big(1e9, 0), two(1e9, 0);
  big.group = 8;
  big.points = {{1e3, 100e-6}, {1e6, 1e-3}};
  two.group = 2;
  two.points = {{1e3, 10e-6}, {1e6, 0.2e-3}};
  m.node.by_kind["all_reduce"] = big;
  m.node.by_group[2]["all_reduce"] = two;
  EXPECT_DOUBLE_EQ(m.link("all_reduce", 1, 2).seconds(1e3, 2, 2), 10e-6);
  EXPECT_EQ(&m.link("all_reduce", 1, 8), &m.node.by_kind.at("all_reduce"));
  EXPECT_EQ(&m.link("all_reduce", 1, 4), &m.node.by_kind.at("all_reduce"));  // none of its own
  EXPECT_EQ(&m.link("all_gather", 1, 2), &m.node.by_kind.at("all_gather"));  // kind not measured
  const nlohmann::json j = to_json(m);
  ASSERT_TRUE(j["collectives"]["node"].contains("groups"));
  const Machine back = machine_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_DOUBLE_EQ(back.link("all_reduce", 1, 2).seconds(1e3, 2, 2), 10e-6);
  nlohmann::json bad = j;
  bad["collectives"]["node"]["groups"]["two"] = bad["collectives"]["node"]["groups"]["2"];
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("group size of 2 or more"),
            std::string::npos);
  bad = j;
  bad["collectives"]["node"]["groups"]["4"] = bad["collectives"]["node"]["groups"]["2"];
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("\"group\" is 2, not 4"),
            std::string::npos);
}

// The wait-for-peers tests' job: GPT-2 124M at B=4, T=64, nothing overlapped,
// on the test machine with 4 ranks per node.
struct PeerWaitJob {
  ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  Machine m = test_machine();
  PeerWaitJob() {
    o.B = 4, o.T = 64;
    o.overlap = Overlap::parse("none");
    m.ranks_per_node = 4;
  }
};

// The wait for peers: each axis' collectives wait the group size's fraction of
// the compute between their calls, up to the interval it was measured over;
// charged exposed to the axis, and the fractions survive the file.
TEST(PeerWait, FractionOfTheComputeUpToTheMeasuredInterval) {
  PeerWaitJob job;
  const ModelConfig& c = job.c;
  const PlanOptions& o = job.o;
  Machine& m = job.m;
  const GridDims g{2, 1, 1, 2};  // x = 2: many calls; d = 2: one gradient sum
  const StepPrediction none = predict_step(c, m, g, o);
  EXPECT_EQ(none.peer_wait_s, 0.0);
  m.peer_wait_fraction = {{2, 0.05}, {4, 0.10}};
  EXPECT_DOUBLE_EQ(m.peer_wait(2), 0.05);
  EXPECT_DOUBLE_EQ(m.peer_wait(3), 0.05);
  EXPECT_DOUBLE_EQ(m.peer_wait(8), 0.10);
  EXPECT_DOUBLE_EQ(m.peer_wait(1), 0.0);
  const StepPrediction all = predict_step(c, m, g, o);  // no interval: the whole compute
  EXPECT_NEAR(all.peer_wait_axis_s.at("x"), 0.05 * all.compute_s, 1e-12);
  EXPECT_NEAR(all.peer_wait_axis_s.at("d"), 0.05 * all.compute_s, 1e-12);
  EXPECT_NEAR(all.comm_s.at("x") - none.comm_s.at("x"), 0.05 * all.compute_s, 1e-12);
  EXPECT_NEAR(all.step_s - none.step_s, all.peer_wait_s, 1e-12);
  double d_calls = 0, x_calls = 0;
  for (auto& [key, n] : all.volume.calls) (key[0] == 'd' ? d_calls : x_calls) += double(n);
  m.peer_wait_interval_s = 0.25 * all.compute_s / x_calls;  // x's calls 4 intervals apart
  const StepPrediction capped = predict_step(c, m, g, o);
  EXPECT_NEAR(capped.peer_wait_axis_s.at("x"), 0.05 * 0.25 * all.compute_s, 1e-12);
  EXPECT_NEAR(capped.peer_wait_axis_s.at("d"), 0.05 * d_calls * m.peer_wait_interval_s, 1e-12);
  const Machine back = machine_from_json(to_json(m));
  EXPECT_EQ(back.peer_wait_fraction, m.peer_wait_fraction);
  EXPECT_DOUBLE_EQ(back.peer_wait_interval_s, m.peer_wait_interval_s);
  nlohmann::json bad = to_json(m);
  bad["peer_wait_fraction"]["1"] = 0.1;
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("not a group size"), std::string::npos);
}

// Oversubscribed, the wait for peers is part of the compute's stretch (ranks
// over cores): carved out of it, not added, and never more than the stretch.
TEST(PeerWait, OversubscribedWaitIsCarvedOutOfTheStretchedCompute) {
  PeerWaitJob job;
  const ModelConfig& c = job.c;
  const PlanOptions& o = job.o;
  Machine& m = job.m;
  m.cores_per_node = 2;  // 4 ranks on 2 cores: compute stretched 2x
  m.oversubscribed_call_penalty_s = 0;
  const GridDims g{2, 1, 1, 2};
  const StepPrediction none = predict_step(c, m, g, o);
  m.peer_wait_fraction = {{2, 0.05}};
  const StepPrediction some = predict_step(c, m, g, o);
  ASSERT_GT(some.peer_wait_s, 0.0);
  EXPECT_NEAR(some.peer_wait_s, some.peer_wait_axis_s.at("x") + some.peer_wait_axis_s.at("d"),
              1e-12);
  EXPECT_NEAR(some.compute_s, none.compute_s - some.peer_wait_s, 1e-12);
  EXPECT_NEAR(some.step_s, none.step_s, 1e-12);  // the step is as long: its parts move
  EXPECT_NEAR(some.comm_s.at("x") - none.comm_s.at("x"), some.peer_wait_axis_s.at("x"), 1e-12);
  // A fraction whose wait would exceed the stretch (half the compute) is held to it.
  m.peer_wait_fraction = {{2, 0.9}};
  const StepPrediction most = predict_step(c, m, g, o);
  EXPECT_NEAR(most.peer_wait_s, 0.5 * none.compute_s, 1e-9);
  EXPECT_NEAR(most.compute_s, 0.5 * none.compute_s, 1e-9);
  EXPECT_NEAR(most.peer_wait_axis_s.at("x") / most.peer_wait_axis_s.at("d"), 1.0, 1e-12);
  // With a core per rank the wait is the ranks' drift: added to the step.
  m.cores_per_node = 4;
  Machine no_wait = m;
  no_wait.peer_wait_fraction.clear();
  const StepPrediction fits = predict_step(c, m, g, o);
  const StepPrediction fits_none = predict_step(c, no_wait, g, o);
  EXPECT_NEAR(fits.compute_s, fits_none.compute_s, 1e-12);
  EXPECT_NEAR(fits.step_s - fits_none.step_s, fits.peer_wait_s, 1e-12);
}

// The messages level: node-local groups with shared memory off; and simulated
// nodes: groups crossing them use the network figures, oversubscription still
// counts the physical node.
TEST(Topology, MessagesLevelAndSimulatedNodes) {
  Machine m = shm_machine();  // 2 ranks per node
  m.has_messages = true;
  m.messages.all = LinkCost(5e8, 3e-6);
  EXPECT_EQ(machine_from_json(to_json(m)).has_messages, true);
  EXPECT_DOUBLE_EQ(machine_from_json(to_json(m)).messages.all.bandwidth, 5e8);
  // In the node: the node's figures, shm for shared arrays, messages with shared memory off.
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 1, 2, 1e6, 1, false, true), 1e-6 + 1e-3, 1e-15);
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 1, 2, 1e6, 1, true, true), 5e-6 + 1e-4, 1e-15);
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 1, 2, 1e6, 1, false, false), 3e-6 + 2e-3, 1e-15);
  // Across nodes: the network's, whatever the flags.
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 2, 2, 1e6, 1, true, false), 1e-5 + 1e-2, 1e-15);
  // Nodes of one rank simulated on a node of two: the pair crosses a node.
  m.simulated_ranks_per_node = 1;
  EXPECT_EQ(m.node_span(), 1);
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 1, 2, 1e6, 1, true, true), 1e-5 + 1e-2, 1e-15);
  EXPECT_FALSE(uses_shared_memory(m, {1, 1, 2, 1}, "z", "all_gather", PlanOptions{}));
  m.cores_per_node = 1;  // 2 ranks on 1 core: still oversubscribed twice
  EXPECT_DOUBLE_EQ(m.oversubscription(), 2.0);
  // A simulated node larger than the real one changes nothing.
  m.simulated_ranks_per_node = 8;
  EXPECT_EQ(m.node_span(), 2);
}

// With dp, where the D group crosses nodes, each layer's Z reduce-scatters are
// waited for before its D sums go out (Transformer::reduce_bucket): ors then
// hides them only behind the rest of their own layer's backward.
TEST(Overlap, ZScattersWaitEachLayerWhenDCrossesNodes) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 8, o.T = 64;
  o.overlap = Overlap::parse("all");
  Machine one = shm_machine();
  one.ranks_per_node = 4;           // Z and D groups of z=2,d=2 inside one node
  const Machine two = shm_machine();  // 2 per node: the D pairs cross nodes
  const GridDims g{1, 1, 2, 2};
  EXPECT_FALSE(overlap_inputs(c, one, g, o).z_scatters_wait_each_layer);
  OverlapInputs in = overlap_inputs(c, two, g, o);
  EXPECT_TRUE(in.z_scatters_wait_each_layer);
  EXPECT_EQ(in.z_scatters_per_layer, 6);  // q, k, v, o, up, down
  PlanOptions no_dp = o;
  no_dp.overlap.dp = false;
  EXPECT_FALSE(overlap_inputs(c, two, g, no_dp).z_scatters_wait_each_layer);
  PlanOptions off = o;
  off.shared_memory = false;  // no shared memory: waited even inside one node
  EXPECT_TRUE(overlap_inputs(c, one, g, off).z_scatters_wait_each_layer);
  const double waited = hidden_seconds(Overlap::parse("ors"), in)["z"];
  EXPECT_NEAR(waited,
              in.layers * pipeline_hidden(6, in.z_scatter_layer_s / 6, in.layer_backward_s / 6, 0),
              1e-12);
  EXPECT_GT(waited, 0.0);
  in.z_scatters_wait_each_layer = false;
  EXPECT_GT(hidden_seconds(Overlap::parse("ors"), in)["z"], waited);
}

}  // namespace
}  // namespace dendrite
