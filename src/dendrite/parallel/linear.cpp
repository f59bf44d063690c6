#include "dendrite/parallel/linear.h"

#include <algorithm>
#include <utility>

#include "dendrite/core/check.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/matmul.h"

namespace dendrite {

void LinearWorkspace::reserve(Communicator& z, int64_t largest, int64_t layer) {
  if (int64_t(weight.size()) < largest) {
    weight.resize(largest);
    weight2.resize(largest);
    block = (std::min(layer, largest) + 15) / 16 * 16;
    big = largest > block ? (largest + 15) / 16 * 16 : 0;
    dweight = z.allocate_shared(kSlots * block + kBigSlots * big);
    weight_big.resize(big > 0 ? largest : 0);
  }
}

void LinearWorkspace::wait_reduction(int64_t seq) {
  // An entry overwritten by a later reduction was waited for then.
  if (seq >= 0 && seq < posted && posted - seq <= kRing) reductions[seq % kRing].wait();
}

float* LinearWorkspace::dweight_block(int64_t numel) {
  const int large = numel > block;
  DENDRITE_CHECK(numel <= (large ? big : block), "dW block of ", numel,
                 " floats exceeds the workspace (", block, ", ", big, ")");
  const int i = large ? kSlots + next[1] : next[0];
  next[large] = (next[large] + 1) % (large ? kBigSlots : kSlots);
  if (deferred.grid && deferred.slot == i) post_deferred();
  if (const int64_t s = slot_seq[i] - 1; s >= 0) {
    if (s + 1 >= posted) post_deferred();  // the one after it, if deferred
    wait_reduction(s);
    wait_reduction(s + 1);
  }
  slot = i;
  return dweight->data() + slot_offset(i);
}

void LinearWorkspace::finish_reductions() {
  post_deferred();
  for (Request& r : reductions) r.wait();
}

void LinearWorkspace::post_deferred() {
  Deferred d = std::exchange(deferred, Deferred{});
  if (!d.grid) return;
  slot_seq[d.slot] = posted + 1;
  reductions[posted % kRing] = d.grid->Z().ireduce_scatter(
      *dweight, slot_offset(d.slot), d.grads + d.spec->offset, d.spec->numel, true);
  ++posted;
}

void LinearWorkspace::begin_pass(int p) {
  pass = p;
  cursor = 0;
  broken = false;
  if (!traces[pass].valid) traces[pass].order.clear();
}

void LinearWorkspace::end_pass() {
  prefetch.wait();
  prefetched = nullptr;
  prefetch_big.wait();
  prefetched_big = nullptr;
  if (pass < 0) return;
  Trace& t = traces[pass];
  t.valid = !broken && cursor == t.order.size();
  pass = -1;
}

void add_block_gradient(ProcessGrid& grid, const ParamSpec& s, float* grads, LinearWorkspace& ws) {
  if (ws.ors) {
    ws.post_deferred();
    ws.deferred = {&grid, &s, grads, ws.slot};
  } else {
    grid.Z().reduce_scatter(*ws.dweight, ws.slot_offset(ws.slot), grads + s.offset, s.numel, true);
  }
}

namespace {

// OAG: the gather of s within a recorded pass, from the prefetch when it
// matches, and the prefetch of the gather that follows.
const float* prefetched_gather(ProcessGrid& grid, const ParamSpec& s, LinearWorkspace& ws) {
  LinearWorkspace::Trace& t = ws.traces[ws.pass];
  if (!t.valid) {  // recording
    t.order.push_back(&s);
    ++ws.cursor;
    grid.Z().all_gather(*ws.params, s.offset, ws.gather_slot(0), s.numel);
    ws.current = 0;
    return ws.gather_slot(0);
  }
  const bool expected = !ws.broken && ws.cursor < t.order.size() && t.order[ws.cursor] == &s;
  if (!expected) ws.broken = true;  // out of the recorded order: recorded again next time
  ws.prefetch.wait();                // the prefetch of s, or one to drop
  const float* out;
  if (expected && ws.prefetched_big == &s) {  // fetched two ahead into the big slot
    ws.prefetch_big.wait();
    ws.prefetched_big = nullptr;
    out = ws.weight_big.data();
  } else {
    ws.current = 1 - ws.current;  // the slot the prefetch filled
    if (!expected || ws.prefetched != &s)
      grid.Z().all_gather(*ws.params, s.offset, ws.gather_slot(ws.current), s.numel);
    out = ws.gather_slot(ws.current);
  }
  ws.prefetched = nullptr;
  if (expected && ws.cursor + 1 < t.order.size()) {
    const ParamSpec& n = *t.order[ws.cursor + 1];
    if (ws.prefetched_big != &n) {
      ws.prefetch =
          grid.Z().iall_gather(*ws.params, n.offset, ws.gather_slot(1 - ws.current), n.numel);
      ws.prefetched = &n;
    }
    // The big slot is free unless it holds a prefetch or the block just handed out.
    if (ws.cursor + 2 < t.order.size() && ws.weight_big.size() > 0 && !ws.prefetched_big &&
        out != ws.weight_big.data()) {
      const ParamSpec& nn = *t.order[ws.cursor + 2];
      if (nn.block_numel() > ws.block) {
        ws.prefetch_big = grid.Z().iall_gather(*ws.params, nn.offset, ws.weight_big.data(), nn.numel);
        ws.prefetched_big = &nn;
      }
    }
  }
  ++ws.cursor;
  return out;
}

}  // namespace

const float* gather_block(ProcessGrid& grid, const ParamSpec& s, const float* params,
                          float* scratch, LinearWorkspace& ws) {
  if (grid.shape().z == 1) return params + s.offset;
  const bool stored = ws.params && params == ws.params->data();  // shared or private
  if (stored && ws.oag && ws.pass >= 0 && scratch == ws.weight.data())
    return prefetched_gather(grid, s, ws);
  if (stored)
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

void ParallelLinear::input_gradient(float* dx, bool accumulate, const float* dy, int m,
                                    const float* params, LinearWorkspace& ws) const {
  ops::linear_backward_input(dx, dy, backward_weight(params, ws), m, in_, out_, accumulate);
}

Request ParallelLinear::sum_input_gradient(float* dx, int m, LinearWorkspace& ws) const {
  Request sum;
  if (oar_)
    sum = bwd_->iall_reduce(dx, int64_t(m) * in_, DType::kF32);
  else
    bwd_->all_reduce(dx, int64_t(m) * in_);
  ws.post_deferred();  // the previous layer's dW reduction, behind the dx sum
  return sum;
}

void ParallelLinear::weight_gradient(const float* dy, const float* x, int m, float* grads,
                                     LinearWorkspace& ws, Request* pending) const {
  float* db = b_ ? grads + b_->offset : nullptr;
  const bool direct = grid_->shape().z == 1;
  float* dw = direct ? grads + w_->offset : ws.dweight_block(w_->block_numel());
  if (pending && pending->needs_polling()) {
    // An MPI request (no engine for it: MPI without MPI_THREAD_MULTIPLE) moves
    // only inside MPI calls, so the dW product runs in row blocks with a
    // test() between them (the same bits as one product: each block is the
    // same sum over m).
    const int parts = 4;
    for (int p = 0; p < parts; ++p) {
      const int r0 = out_ * p / parts / 16 * 16, r1 = p + 1 == parts ? out_ : out_ * (p + 1) / parts / 16 * 16;
      ops::gemm(true, false, r1 - r0, in_, m, 1.0f, dy + r0, out_, x, in_, direct ? 1.0f : 0.0f,
                dw + int64_t(r0) * in_, in_);
      pending->test();
    }
    if (db) ops::add_column_sums(db, dy, m, out_);
  } else {
    ops::linear_backward_weight(dw, db, dy, x, m, in_, out_, direct);
  }
  if (!direct) add_block_gradient(*grid_, *w_, grads, ws);
}

}  // namespace dendrite
