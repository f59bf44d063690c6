// AdamW over a model's flat parameter buffer, with the state beside it
// (m and v laid out like the parameters), and clipping by the global norm.
#pragma once

#include <cstdint>

#include "dendrite/core/buffer.h"
#include "dendrite/model/params.h"
#include "dendrite/ops/optim.h"

namespace dendrite {

class AdamW {
 public:
  AdamW(const ParamTable& table, const ops::AdamWConfig& config);
  // Global L2 norm of the gradients (each value counted once).
  double grad_norm(const float* grads) const;
  // Scales gradients so their norm is at most max_norm (no-op when max_norm <= 0).
  void clip(float* grads, double norm, double max_norm) const;
  // One update with learning rate lr; decay off for tensors whose spec says so.
  void step(float* params, const float* grads, float lr);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const float* m() const { return m_.data(); }
  const float* v() const { return v_.data(); }

 private:
  const ParamTable& table_;
  ops::AdamWConfig config_;
  Buffer<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace dendrite
