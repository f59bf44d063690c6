// The exact communication volume of one training step (forward, backward,
// gradient reductions, loss and gradient-norm sums) as a closed form of the
// model, the batch and the grid (DESIGN.md section 6). It counts what the
// communicators count: per axis and kind of collective, the payload bytes a
// rank hands to each call on a group larger than one (all-reduce: the buffer;
// all-gather: the gathered output; reduce-scatter: the full input), and the
// number of calls. Rank-independent: every rank of a grid moves the same.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dendrite/core/precision.h"
#include "dendrite/model/config.h"

namespace dendrite {

struct GridDims {
  int x = 1, y = 1, z = 1, d = 1;
};

struct Volume {
  // key: "<axis>.<kind>", e.g. "z.all_gather", "x.all_reduce"
  std::map<std::string, int64_t> bytes, calls;
  void add(const std::string& axis, int extent, const char* kind, int64_t bytes, int64_t calls = 1);
};

// B global batch, T sequence length, with the cross-entropy in chunks of
// ce_chunk rows (step_head_chunk, model.h: 256 on a CPU).
// keep_gathered: the layers keep their forward all-gather for the backward;
// recompute: each layer's forward runs again before its backward;
// dp_buckets: gradients are reduced over D per layer during the backward (d > 1);
// precision: bf16 gathers the weights over Z in bf16 (2 bytes an element);
// activations and gradients move in fp32 either way.
Volume step_volume(const ModelConfig& model, const GridDims& grid, int B, int T,
                   int ce_chunk = 256, bool keep_gathered = false, bool recompute = false,
                   bool dp_buckets = false, Precision precision = Precision::kF32);

}  // namespace dendrite
