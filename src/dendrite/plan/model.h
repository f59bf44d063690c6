// The performance model of DESIGN.md section 6: the time and memory of one
// training step of a model on a grid (Gx, Gy, Gz, Gd), and the planner that
// enumerates every grid of a world size, rules out those the model cannot run
// on (with the reason) and ranks the rest by predicted step time.
// Letters: B global batch, T sequence, m = (B/(Gd*Gz))*T local rows, C width,
// F MLP width, V vocabulary (padded), hs head size, L layers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dendrite/model/config.h"
#include "dendrite/plan/machine.h"
#include "dendrite/plan/overlap.h"
#include "dendrite/plan/volume.h"

namespace dendrite {

// One GEMM of the step on one rank: C[m, n] = A[m, k] B[k, n], `count` times.
struct GemmCall {
  std::string what;  // "layer.q.forward", "head.dweight", ...
  int64_t m, n, k, count;
  double flops() const { return 2.0 * m * n * k * count; }
};

struct PlanOptions {
  int B = 1, T = 1;
  bool keep_gathered = false;
  bool recompute = false;   // each layer's forward runs again before its backward
  // What runs behind computation (default none here; train and plan default
  // to oar). With dp the gradients are reduced over D per layer: more calls.
  Overlap overlap;
  // The memory of each rank's GPU in bytes (0: the ranks compute on CPUs):
  // the LM head's chunks are sized from it (step_head_chunk), and the GPU's
  // own buffers count (step_memory). predict_step takes it from the machine.
  double device_bytes = 0;
  // The trainer's shared-memory path (DENDRITE_SHARED_MEMORY, default on): a Z
  // group (D group) inside one node all-gathers and reduce-scatters its
  // parameters (all-reduces its gradients) through shared memory, at the
  // machine's "shm" figures (same bytes and calls), and ORS/OAG (dp) run them
  // on the progress-engine thread. Off, or without shm figures: messages.
  bool shared_memory = true;
  // bf16: the GEMMs at the machine's bf16 rates, the Z gathers of weights in
  // half the bytes, GEMM inputs saved in bf16 and a bf16 copy of the weights
  // (as the trainer's --precision bf16).
  Precision precision = Precision::kF32;
};

// Fraction of the progress engine's hidden work that the model adds to the
// compute when the node has no spare core (ranks x threads >= cores): the
// engine thread then takes its cycles from the GEMMs. 1: measured on the
// 2-core machine (docs/overlap.md: compute rose by about what the engine ran,
// the step came out 4-5% slower than without overlap).
constexpr double kEngineWorkFraction = 1.0;

// Memory of one rank, bytes.
struct MemoryEstimate {
  double params = 0;      // weights, gradients, AdamW m and v: 16 bytes per local float
  double activations = 0; // what Transformer::allocate holds
  double workspace = 0;   // gathered blocks (Gz > 1), kept blocks, head chunk buffers
  double total() const { return params + activations + workspace; }
};

struct StepPrediction {
  GridDims grid;
  double gemm_s = 0, attention_s = 0, other_s = 0, compute_s = 0;
  std::map<std::string, double> comm_s;    // exposed seconds per axis ("x", "y", "z", "d")
  std::map<std::string, double> hidden_s;  // hidden behind compute per axis (overlap.h)
  // comm_total_s: every collective's cost (ring cost plus, oversubscribed, the
  // per-call penalty, plus the wait for peers) = exposed + hidden; step_s = compute_s + comm_exposed_s.
  double comm_total_s = 0, comm_exposed_s = 0, comm_hidden_s = 0;
  double penalty_s = 0;  // of which the oversubscription penalty (exposed)
  // Of which the wait for peers (exposed): each axis' collectives wait
  // Machine::peer_wait(group) times the compute for their group's last rank.
  // Oversubscribed, it is carved out of compute_s (part of its stretch by
  // ranks over cores) and held to at most that stretch.
  double peer_wait_s = 0;
  std::map<std::string, double> peer_wait_axis_s;  // the same per axis
  // Of compute_s: the progress engine's shared-memory work (hidden ORS/OAG, dp)
  // charged to the compute on a node with no spare core (kEngineWorkFraction).
  double engine_s = 0;
  double step_s = 0, tokens_per_s = 0;
  MemoryEstimate memory;
  Volume volume;
  int64_t local_floats = 0;  // parameters this rank holds (padded as the table pads)
};

// Every GEMM of one training step on this grid, as the model runs them.
std::vector<GemmCall> step_gemms(const ModelConfig& c, const GridDims& g, const PlanOptions& o);
// The seconds of `calls` collectives of one kind moving `bytes` in all (as
// step_volume counts them) over a group of g ranks at stride s.
double collective_seconds(const Machine& mach, const std::string& kind, int stride, int g,
                          double bytes, double calls);
// The same over the link mach.link(kind, stride, g, shared, shared_memory) picks.
double collective_seconds(const Machine& mach, const std::string& kind, int stride, int g,
                          double bytes, double calls, bool shared, bool shared_memory = true);
// Whether the trainer runs this axis' collective of this kind over shared
// memory on this grid: Z all-gather / reduce-scatter and D all-reduce of a
// group inside one node, with o.shared_memory and the machine's shm figures.
bool uses_shared_memory(const Machine& mach, const GridDims& g, const std::string& axis,
                        const std::string& kind, const PlanOptions& o);
// Floats this rank holds for parameters (each tensor padded to 16, as the table).
int64_t local_parameter_floats(const ModelConfig& c, const GridDims& g);
MemoryEstimate step_memory(const ModelConfig& c, const GridDims& g, const PlanOptions& o);
// Rows of the LM head's chunks, as the trainer takes them (parallel/head_chunk.h).
int step_head_chunk(const ModelConfig& c, const GridDims& g, const PlanOptions& o);
StepPrediction predict_step(const ModelConfig& c, const Machine& mach, const GridDims& g,
                            const PlanOptions& o);
// The per-layer compute and communication figures the overlap model takes
// (exposed for tests; predict_step calls it).
OverlapInputs overlap_inputs(const ModelConfig& c, const Machine& mach, const GridDims& g,
                             const PlanOptions& o);

// All (Gx, Gy, Gz, Gd) with product P, X fastest-varying order of enumeration.
std::vector<GridDims> enumerate_grids(int P);
// Why the model cannot run on this grid ("" when it can): the divisibility
// rules of Transformer::check_grid and the parameter table.
std::string grid_exclusion(const ModelConfig& c, const GridDims& g, const PlanOptions& o);
std::string grid_str(const GridDims& g);  // "x=2,y=1,z=1,d=4"

struct Plan {
  std::vector<StepPrediction> ranked;                       // fastest first
  std::vector<std::pair<GridDims, std::string>> excluded;   // with the reason
};
Plan plan_grids(const ModelConfig& c, const Machine& mach, int P, const PlanOptions& o);

}  // namespace dendrite
