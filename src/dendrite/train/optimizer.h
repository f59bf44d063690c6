// AdamW over a model's flat parameter buffer, with the state beside it
// (m and v laid out like the parameters), and clipping by the global norm.
#pragma once

#include <cstdint>

#include "dendrite/backend/backend.h"
#include "dendrite/core/buffer.h"
#include "dendrite/model/transformer.h"
#include "dendrite/parallel/params.h"
#include "dendrite/ops/optim.h"

namespace dendrite {

class AdamW {
 public:
  // The state (m, v: zeros) in the backend's memory, which runs the updates.
  AdamW(Backend& backend, const ParamTable& table, const ops::AdamWConfig& config);
  // The factor that brings a gradient of this norm down to max_norm, as
  // torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
  static float clip_factor(double norm, double max_norm);
  // One update with learning rate lr on grads * grad_scale; decay off for
  // tensors whose spec says so. With low non-null, the first low_count
  // updated values are also written there rounded to bf16, in the same pass
  // (Transformer::params_and_copy).
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f,
            bf16* low = nullptr, int64_t low_count = 0);
  // The step of a model's parameters on its gradients (with the bf16 copy
  // under bf16 precision).
  void step(Transformer& model, float lr, float grad_scale = 1.0f);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const float* m() const { return m_.data(); }
  const float* v() const { return v_.data(); }

 private:
  Backend& be_;
  const ParamTable& table_;
  TensorTable tensors_;  // every tensor: one launch updates them all
  ops::AdamWConfig config_;
  Buffer<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace dendrite
