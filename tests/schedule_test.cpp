// The learning-rate schedule (train/schedule.h) at the points its formula
// fixes: warmup, the peak, the middle and end of the cosine, past the end.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "dendrite/train/schedule.h"

namespace dendrite {
namespace {

TEST(Schedule, WarmupThenCosineDecay) {
  const float lr = 6e-4f, min_lr = 6e-5f;
  const int warmup = 10, total = 110;
  EXPECT_FLOAT_EQ(lr_at(0, lr, min_lr, warmup, total), lr / 10);
  EXPECT_FLOAT_EQ(lr_at(4, lr, min_lr, warmup, total), lr * 5 / 10);
  EXPECT_FLOAT_EQ(lr_at(9, lr, min_lr, warmup, total), lr);   // end of warmup: peak
  EXPECT_FLOAT_EQ(lr_at(10, lr, min_lr, warmup, total), lr);  // cosine starts at the peak
  EXPECT_FLOAT_EQ(lr_at(60, lr, min_lr, warmup, total), 0.5f * (lr + min_lr));  // middle
  EXPECT_FLOAT_EQ(
      lr_at(35, lr, min_lr, warmup, total),
      static_cast<float>(min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(std::numbers::pi * 0.25))));
  EXPECT_FLOAT_EQ(lr_at(110, lr, min_lr, warmup, total), min_lr);  // end
  EXPECT_FLOAT_EQ(lr_at(500, lr, min_lr, warmup, total), min_lr);  // beyond the end
  EXPECT_FLOAT_EQ(lr_at(0, lr, min_lr, 0, total), lr);             // no warmup
  EXPECT_FLOAT_EQ(lr_at(5, lr, min_lr, 5, 5), lr);                 // total == warmup
  EXPECT_FLOAT_EQ(lr_at(6, lr, min_lr, 5, 5), min_lr);
}

}  // namespace
}  // namespace dendrite
