// The planner (src/dendrite/plan): grid enumeration and exclusions,
// communication bytes against step_volume, the ring cost formula by hand,
// GEMM flops, memory per rank against the Transformer's own allocation, the
// collectives over shared memory and across simulated nodes, and the
// weak-scaling sweep. Machine files: plan_machine_test; overlap, oversubscription
// and the wait for peers: plan_overlap_test. No MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "backend_support.h"
#include "dendrite/comm/grid.h"
#include "dendrite/core/check.h"
#include "dendrite/model/transformer.h"
#include "dendrite/parallel/head_chunk.h"
#include "dendrite/plan/model.h"
#include "dendrite/plan/sweep.h"
#include "plan_support.h"

namespace dendrite {
namespace {

using test::error_of;
using test::shm_machine;
using test::test_machine;

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
      const Volume v = step_volume(c, g, o.B, o.T, step_head_chunk(c, g, o), o.keep_gathered,
                                   o.recompute, o.overlap.dp);
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

// The LM head's chunk rows (parallel/head_chunk.h): 256 on a CPU; on a GPU
// a multiple of 256 from 256 to 8192, fewer for wider rows, as many as fit in
// 1/64 of its memory; never more than the rank's rows.
TEST(HeadChunk, RowsFollowTheDevicesMemory) {
  const int64_t narrow = 64, wide = int64_t(1) << 40, gib = int64_t(1) << 30;
  EXPECT_EQ(head_chunk_rows(0, narrow, 16384), 256);
  EXPECT_EQ(head_chunk_rows(0, wide, 16384), 256);
  EXPECT_EQ(head_chunk_rows(0, narrow, 100), 100);
  const int64_t device = 140 * gib, budget = device / 64;
  for (int64_t row : {narrow, int64_t(201236), int64_t(301828), wide}) {
    const int rows = head_chunk_rows(device, row, 1 << 20);
    EXPECT_EQ(rows % 256, 0) << row;
    EXPECT_GE(rows, 256) << row;
    EXPECT_LE(rows, 8192) << row;
    if (rows > 256) {
      EXPECT_LE(int64_t(rows) * row, budget) << row;
    }
    if (rows < 8192) {
      EXPECT_GT(int64_t(rows + 256) * row, budget) << row;
    }
  }
  EXPECT_EQ(head_chunk_rows(device, wide, 1 << 20), 256);
  EXPECT_EQ(head_chunk_rows(device, narrow, 1000), 1000);
  // GPT-2's 50304 ids in bf16, one rank of Y: on an H200 and an H100.
  const int64_t gpt2 = head_chunk_row_bytes(50304, 1, true);
  EXPECT_EQ(gpt2, 50304 * 6 + 20);
  EXPECT_EQ(head_chunk_rows(143771 * (int64_t(1) << 20), gpt2, 16384), 7680);
  EXPECT_EQ(head_chunk_rows(80 * gib, gpt2, 16384), 4352);
}

// A GPU machine's planner sizes the head's chunks from the GPU's memory, as
// the trainer does (its memory figure is checked against the emulated GPU's
// in cuda_model_test); a CPU machine's takes 256 rows.
TEST(Planner, AGpuMachineSizesTheHeadFromItsMemory) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 16, o.T = 1024, o.precision = Precision::kBF16;
  const GridDims one{1, 1, 1, 1};
  auto head_rows = [&](const PlanOptions& with) {
    for (const GemmCall& call : step_gemms(c, one, with))
      if (call.what == "head.forward") return call.m;
    return int64_t(0);
  };
  Machine m = test_machine();
  const StepPrediction cpu = predict_step(c, m, one, o);
  EXPECT_EQ(step_head_chunk(c, one, o), 256);
  EXPECT_EQ(head_rows(o), 256);
  EXPECT_DOUBLE_EQ(cpu.memory.total(), step_memory(c, one, o).total());
  m.gpu = true, m.memory_per_rank_bytes = 143771.0 * (1 << 20);
  const StepPrediction gpu = predict_step(c, m, one, o);
  o.device_bytes = m.memory_per_rank_bytes;
  EXPECT_EQ(step_head_chunk(c, one, o), 7680);
  EXPECT_EQ(head_rows(o), 7680);
  EXPECT_DOUBLE_EQ(gpu.memory.total(), step_memory(c, one, o).total());
  // 7424 more rows of fp32 logits and bf16 dlogits, cuBLASLt's workspace
  // and the kernels' scratch, and the attention backward's.
  EXPECT_GT(gpu.memory.workspace - cpu.memory.workspace, 7424.0 * 50304 * 6 + (33 << 20));
  EXPECT_LT(gpu.memory.workspace - cpu.memory.workspace, 7424.0 * 50304 * 6 + (66 << 20));
  // Fewer, larger head products, and fewer of the chunks' collectives (none here).
  EXPECT_LT(gpu.gemm_s, cpu.gemm_s);
  m.gpu = false;
  EXPECT_DOUBLE_EQ(predict_step(c, m, one, o).memory.total(), cpu.memory.total());
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
        // 16 bytes per parameter; bf16 adds 2 for each (Transformer's params_low_ of the
        // Z-chunked tensors and replicated_low_ of the rest)
        const double copy = p == Precision::kBF16 ? 2.0 * model.table().total() : 0;
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

}  // namespace
}  // namespace dendrite
