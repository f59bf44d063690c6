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

// The ops (Backend's methods of these names):
//
// adamw_update(param, grad, m, v, n, lr, step, decay, c, grad_scale, param_bf16):
//   one AdamW step (PyTorch semantics, decoupled decay, bias correction) on n
//   values; step counts from 1. Decay applies when `decay` is true. The
//   gradient is used as grad * grad_scale (gradient clipping folded into the
//   update, which saves a pass over the gradients). With param_bf16 non-null
//   the updated values are also written there rounded to bf16 (as
//   dendrite::to_bf16), the copy that bf16 precision computes with, in the
//   same pass.
// sum_squares(g, n): the sum of g[i]^2, in double.
// scale(g, s, n): g *= s.
// The table forms, below FlatTensor.

// One tensor of a flat buffer: values [offset, offset + n). decay: whether
// AdamW decays it (0 or 1; an int so that the table is plain device data).
// start: where it begins when the table's tensors are laid end to end, each
// padded to a multiple of 4 (number_tensors), which is how a GPU shares the
// table's values out to its blocks.
struct FlatTensor {
  int64_t offset = 0, n = 0, start = 0;
  int32_t decay = 0, unused = 0;
};
// Throw, naming the op, unless step >= 1; unless count >= 0 and values >= 0.
void check_step(int step, const char* op);
void check_table(int count, int64_t values, const char* op);

// Sets each tensor's start; returns the table's `values` (the padded total).
inline int64_t number_tensors(FlatTensor* table, int count) {
  int64_t at = 0;
  for (int t = 0; t < count; ++t) {
    table[t].start = at;
    at += (table[t].n + 3) / 4 * 4;
  }
  return at;
}

// sum_squares_tensors(total, base, table, count, values): *total = the sum
//   over the table's `count` tensors, in table order, of sum_squares(base +
//   offset, n): the same value, and on the CPU the same bits, as adding the
//   per-tensor sums on the host. total and table are in the backend's memory
//   (total: one double); values is number_tensors' result.
// adamw_update_tensors(param, grad, m, v, table, count, values, lr, step, c,
//   grad_scale, low, low_count): adamw_update on every tensor of the table (its
//   decay flag; the other arguments shared). The bf16 copy (low, may be null)
//   covers the values below low_count: a tensor lies wholly below it or wholly above.

}  // namespace dendrite::ops
