// The weak-scaling sweep of sweep.h. The model table: parameters about
// 5B * G / 512 (12 L C^2 for the layers plus the embeddings), shapes like the
// GPT-3 family (head size 128).
#include "dendrite/plan/sweep.h"

#include "dendrite/core/check.h"

namespace dendrite {

namespace {

struct Shape {
  int gpus, layers, width;
};

// 5B, 10B, 20B, 40B, 80B, 160B, 320B (within 5%).
constexpr Shape kShapes[] = {{512, 24, 4096},    {1024, 32, 5120},   {2048, 32, 7168},
                             {4096, 40, 9216},   {8192, 42, 12288},  {16384, 84, 12288},
                             {32768, 96, 16384}};

}  // namespace

std::vector<int> weak_scaling_counts() {
  std::vector<int> out;
  for (const Shape& s : kShapes) out.push_back(s.gpus);
  return out;
}

ModelConfig weak_scaling_model(int gpus) {
  for (const Shape& s : kShapes)
    if (s.gpus == gpus) {
      ModelConfig c;
      c.arch = Arch::kGpt2;
      c.n_layer = s.layers;
      c.n_embd = s.width;
      c.n_head = c.n_kv_head = s.width / 128;
      c.ffn_hidden = 4 * s.width;
      c.vocab_size = 50257;
      c.block_size = 2048;
      c.validate();
      return c;
    }
  fail("plan --sweep: no weak-scaling model for ", gpus, " GPUs; use 512 * 2^k up to 32768");
}

std::vector<SweepPoint> weak_scaling_sweep(const Machine& mach, const PlanOptions& base,
                                           const std::vector<int>& gpus) {
  std::vector<SweepPoint> out;
  for (int G : gpus) {
    SweepPoint pt;
    pt.gpus = G;
    pt.model = weak_scaling_model(G);
    pt.params = double(pt.model.num_parameters());
    const Plan plan = plan_grids(pt.model, mach, G, base);
    pt.feasible = !plan.ranked.empty();
    if (pt.feasible) {
      pt.best = plan.ranked[0];
      if (plan.ranked.size() > 1) pt.runner_up = grid_str(plan.ranked[1].grid);
      const double flops = pt.model.train_flops_per_token(base.T) * double(base.B) * base.T;
      pt.flops_total = flops / pt.best.step_s;
      pt.flops_per_gpu = pt.flops_total / G;
    }
    out.push_back(pt);
  }
  double ref = 0;  // the first count that fits
  for (const SweepPoint& pt : out)
    if (pt.feasible && ref == 0) ref = pt.flops_per_gpu;
  for (SweepPoint& pt : out) pt.efficiency = ref > 0 ? pt.flops_per_gpu / ref : 0;
  return out;
}

}  // namespace dendrite
