// What a step's collectives cost beside its compute in the performance model
// (src/dendrite/plan/overlap.h, model.h): what the overlaps hide, the
// oversubscription penalty, the progress engine's work on a node with no
// spare core, and the wait for peers. No MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "dendrite/plan/model.h"
#include "dendrite/plan/overlap.h"
#include "plan_support.h"

namespace dendrite {
namespace {

using test::error_of;
using test::shm_machine;
using test::test_machine;

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
                                         in.tail_backward_s + 1e-12)
              << at;
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

// With dp, where the D group crosses nodes, each layer's Z reduce-scatters are
// waited for before its D sums go out (Transformer::reduce_bucket): ors then
// hides them only behind the rest of their own layer's backward.
TEST(Overlap, ZScattersWaitEachLayerWhenDCrossesNodes) {
  const ModelConfig c = load_model_config("gpt2-124m");
  PlanOptions o;
  o.B = 8, o.T = 64;
  o.overlap = Overlap::parse("all");
  Machine one = shm_machine();
  one.ranks_per_node = 4;             // Z and D groups of z=2,d=2 inside one node
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

}  // namespace
}  // namespace dendrite
