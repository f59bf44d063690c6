#include "dendrite/train/schedule.h"

#include <cmath>
#include <numbers>

namespace dendrite {

float lr_at(int step, float lr, float min_lr, int warmup, int total) {
  if (step < warmup) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const int span = total - warmup > 1 ? total - warmup : 1;
  double p = static_cast<double>(step - warmup) / span;
  p = p < 0.0 ? 0.0 : (p > 1.0 ? 1.0 : p);
  return static_cast<float>(min_lr + 0.5 * (static_cast<double>(lr) - min_lr) *
                                         (1.0 + std::cos(std::numbers::pi * p)));
}

}  // namespace dendrite
