#include "dendrite/parallel/linear.h"

#include <algorithm>

#include "dendrite/core/check.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/matmul.h"

namespace dendrite {

void LinearWorkspace::reserve(Communicator& z, int64_t block_numel) {
  if (int64_t(weight.size()) < block_numel) {
    weight.resize(block_numel);
    block = (block_numel + 15) / 16 * 16;
    dweight = z.allocate_shared(2 * block);
    half = 0;
  }
}

void add_block_gradient(ProcessGrid& grid, const ParamSpec& s, float* grads, LinearWorkspace& ws) {
  grid.Z().reduce_scatter(*ws.dweight, ws.half * ws.block, grads + s.offset, s.numel, true);
  ws.half ^= 1;
}

const float* gather_block(ProcessGrid& grid, const ParamSpec& s, const float* params,
                          float* scratch, const LinearWorkspace& ws) {
  if (grid.shape().z == 1) return params + s.offset;
  if (ws.params && params == ws.params->data())
    grid.Z().all_gather(*ws.params, s.offset, scratch, s.numel);
  else
    grid.Z().all_gather(params + s.offset, scratch, s.numel, DType::kF32);
  return scratch;
}

ParallelLinear::ParallelLinear(ProcessGrid& grid, const ParamSpec& w, const ParamSpec* b,
                               bool keep_gathered, bool oar)
    : grid_(&grid), w_(&w), b_(b), keep_(keep_gathered && grid.shape().z > 1), oar_(oar) {
  if (keep_) kept_.resize(w.block_numel());
  const bool normal = w.sharding.rows == Axis::kY;
  DENDRITE_CHECK(w.sharding.chunk_z && (normal ? w.sharding.cols == Axis::kX
                                               : w.sharding.rows == Axis::kX &&
                                                     w.sharding.cols == Axis::kY),
                 "parallel linear: ", w.name, " is not sharded as a normal or transposed layer");
  fwd_ = normal ? &grid.X() : &grid.Y();
  bwd_ = normal ? &grid.Y() : &grid.X();
  out_ = int(w.block_rows);
  in_ = int(w.block_cols);
  DENDRITE_CHECK(!b || b->numel == out_, "parallel linear: bias ", b ? b->name : "",
                 " does not match the ", out_, " local outputs of ", w.name);
}

const float* ParallelLinear::gather_weight(const float* params, LinearWorkspace& ws) const {
  return gather_block(*grid_, *w_, params, keep_ ? kept_.data() : ws.weight.data(), ws);
}

const float* ParallelLinear::backward_weight(const float* params, LinearWorkspace& ws) const {
  return keep_ ? kept_.data() : gather_weight(params, ws);
}

void ParallelLinear::forward(float* y, const float* x, int m, const float* params,
                             LinearWorkspace& ws) const {
  const float* w = gather_weight(params, ws);
  ops::linear_forward(y, x, w, nullptr, m, in_, out_);  // [m, out]: partial over the forward axis
  fwd_->all_reduce(y, int64_t(m) * out_);
  if (b_) {
    const float* b = params + b_->offset;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; ++r) ops::add_inplace(y + int64_t(r) * out_, b, out_);
  }
}

void ParallelLinear::backward(float* dx, bool accumulate, bool reduce_dx, const float* dy,
                              const float* x, int m, const float* params, float* grads,
                              LinearWorkspace& ws) const {
  const float* w = backward_weight(params, ws);
  ops::linear_backward_input(dx, dy, w, m, in_, out_, accumulate);
  Request dx_sum;  // OAR: summing dx over the backward axis runs behind the dW product
  if (reduce_dx && oar_)
    dx_sum = bwd_->iall_reduce(dx, int64_t(m) * in_, DType::kF32);
  else if (reduce_dx)
    bwd_->all_reduce(dx, int64_t(m) * in_);
  float* db = b_ ? grads + b_->offset : nullptr;
  if (grid_->shape().z == 1) {
    ops::linear_backward_weight(grads + w_->offset, db, dy, x, m, in_, out_);
  } else {
    ops::linear_backward_weight(ws.dweight_block(), db, dy, x, m, in_, out_, false);
    add_block_gradient(*grid_, *w_, grads, ws);
  }
  dx_sum.wait();
}

}  // namespace dendrite
