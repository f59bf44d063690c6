#include "dendrite/train/optimizer.h"

#include <cmath>

namespace dendrite {

AdamW::AdamW(const ParamTable& table, const ops::AdamWConfig& config)
    : table_(table), config_(config), m_(table.total()), v_(table.total()) {}

double AdamW::grad_norm(const float* grads) const {
  // Padding between tensors and vocabulary padding rows hold zero gradients, so
  // one pass over the whole buffer counts every value once.
  return std::sqrt(ops::sum_squares(grads, table_.total()));
}

void AdamW::clip(float* grads, double norm, double max_norm) const {
  if (max_norm <= 0 || !(norm > max_norm)) return;
  ops::scale(grads, static_cast<float>(max_norm / (norm + 1e-6)), table_.total());
}

void AdamW::step(float* params, const float* grads, float lr) {
  ++step_;
  for (const ParamSpec& s : table_.specs())
    ops::adamw_update(params + s.offset, grads + s.offset, m_.data() + s.offset,
                      v_.data() + s.offset, s.numel, lr, static_cast<int>(step_), s.decay, config_);
}

}  // namespace dendrite
