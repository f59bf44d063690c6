// AdamW and global-norm clipping, on flat buffers
// (a rank's whole shard of parameters is one contiguous buffer).
#pragma once

#include "dendrite/core/bf16.h"

namespace dendrite::ops {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// One AdamW step (PyTorch semantics, decoupled decay, bias correction) on n
// values; step counts from 1. Decay applies when `decay` is true. The
// gradient is used as grad * grad_scale (gradient clipping folded into the
// update, which saves a pass over the gradients). With param_bf16 non-null
// the updated values are also written there rounded to bf16 (as
// dendrite::to_bf16), the copy that bf16 precision computes with, in the
// same pass.
void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr, int step,
                  bool decay, const AdamWConfig& c, float grad_scale = 1.0f,
                  bf16* param_bf16 = nullptr);

// sum of g[i]^2 in double
double sum_squares(const float* g, long n);
// g *= s
void scale(float* g, float s, long n);
}  // namespace dendrite::ops
