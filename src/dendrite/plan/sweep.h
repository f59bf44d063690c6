// Weak scaling with the performance model (`dendrite plan --sweep`): for each
// GPU count G from 512 to 32,768, a GPT-style model whose parameters grow in
// proportion to G (5B at 512, as AxoNN's SC'24 Frontier study starts, up to
// about 320B at 32,768), a fixed global batch (so that the flops per GPU stay
// constant), the planner's best grid, its predicted step time and flop/s, and
// the efficiency relative to the smallest count (flop/s per GPU / that at 512,
// or at the first count where some grid fits in memory).
// Letters: L layers, C width, NH heads, B global batch, T sequence, G GPUs.
#pragma once

#include <string>
#include <vector>

#include "dendrite/plan/model.h"

namespace dendrite {

// The model of G GPUs: the weak-scaling table of docs/planner.md (GPT-2
// architecture, vocabulary 50,257, block 2048). G must be 512 * 2^k, k in 0..6.
ModelConfig weak_scaling_model(int gpus);

struct SweepPoint {
  int gpus = 0;
  ModelConfig model;
  double params = 0;         // num_parameters()
  bool feasible = false;     // some grid fits in memory
  StepPrediction best;       // the planner's first choice
  std::string runner_up;     // second choice ("" if none)
  double flops_per_gpu = 0;  // model flops (train_flops_per_token) per second per GPU
  double flops_total = 0;
  double efficiency = 0;     // flops_per_gpu / that of the first point that fits
};

// B, T, overlap, keep_gathered, recompute from base; one point per count.
std::vector<SweepPoint> weak_scaling_sweep(const Machine& mach, const PlanOptions& base,
                                           const std::vector<int>& gpus);

// 512, 1024, ..., 32768.
std::vector<int> weak_scaling_counts();

}  // namespace dendrite
