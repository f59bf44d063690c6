// The LM head fused with softmax cross-entropy, computed in row chunks so the
// [m, V] logits never exist at once. x [m, C] final hidden states, w [Vp, C]
// the head weight (Vp >= V: rows V..Vp-1 are padding and never predicted).
// targets [m]; weight [m] per-token loss weight (0 drops a token: padding,
// Goldfish); the mean divides by `denominator` (the supervised-token count of
// the whole global batch).
#pragma once

#include <cstdint>

namespace dendrite::ops {

struct CrossEntropyShape {
  int m, C, V, Vp;
  int chunk_rows;  // rows per chunk (logits buffer is [chunk_rows, Vp])
};

// Returns sum over rows of weight[r] * (-log softmax(x w^T)[r, targets[r]]),
// divided by denominator.  When dx is not null, also computes the gradients of
// that mean: dx [m, C] overwritten, dw [Vp, C] accumulated.
// weight may be null (all ones).  scratch holds chunk_rows * Vp floats.
double lm_head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                             const int32_t* targets, const float* weight, double denominator,
                             const CrossEntropyShape& s, float* scratch);

// logits [m, V] = x [m, C] * w[:V]^T   (for generation and tests)
void lm_head_logits(float* logits, const float* x, const float* w, int m, int C, int V);

}  // namespace dendrite::ops
