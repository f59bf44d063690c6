// AdamW and global-norm clipping, on flat buffers
// (a rank's whole shard of parameters is one contiguous buffer), one tensor
// at a time or over a table of the tensors in it (one launch on a GPU).
// n values of a tensor; a table's tensors may leave gaps between them.
#pragma once

#include <cstdint>

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

// One tensor of a flat buffer: values [offset, offset + n). decay: whether
// AdamW decays it (0 or 1; an int so that the table is plain device data).
// start: where it begins when the table's tensors are laid end to end, each
// padded to a multiple of 4 (number_tensors), which is how a GPU shares the
// table's values out to its blocks.
struct FlatTensor {
  int64_t offset = 0, n = 0, start = 0;
  int32_t decay = 0, unused = 0;
};

// Sets each tensor's start; returns the table's `values` (the padded total).
inline int64_t number_tensors(FlatTensor* table, int count) {
  int64_t at = 0;
  for (int t = 0; t < count; ++t) {
    table[t].start = at;
    at += (table[t].n + 3) / 4 * 4;
  }
  return at;
}

// *total = the sum over the table's `count` tensors, in table order, of
// sum_squares(base + offset, n): the same value, and on the CPU the same bits,
// as adding the per-tensor sums on the host. total and table are in the
// backend's memory (total: one double).
void sum_squares_tensors(double* total, const float* base, const FlatTensor* table, int count);
// adamw_update on every tensor of the table (its decay flag; the other
// arguments shared). The bf16 copy (low, may be null) covers the values below
// low_count: a tensor lies wholly below it or wholly above.
void adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                          const FlatTensor* table, int count, float lr, int step,
                          const AdamWConfig& c, float grad_scale, bf16* low, int64_t low_count);
}  // namespace dendrite::ops
