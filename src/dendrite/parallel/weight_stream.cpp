// The Z weight stream (weight_stream.h): gathers of weight blocks with OAG's
// prefetch, and reduce-scatters of their gradients with ORS's slots.
#include "dendrite/parallel/weight_stream.h"

#include <algorithm>
#include <utility>

#include "dendrite/core/check.h"

namespace dendrite {

WeightStream::WeightStream(Communicator& z, Backend& backend, const ParamTable& table,
                           const SharedArray& params, bool oag, bool ors)
    : z_(&z), be_(&backend), params_(&params), elem_(int64_t(dtype_size(params.dtype()))), oag_(oag), ors_(ors) {
  DENDRITE_CHECK(params.dtype() == DType::kF32 || params.dtype() == DType::kBF16,
                 "weight stream: parameters must be fp32 or bf16, not ", dtype_name(params.dtype()));
  if (z.size() == 1) return;
  // dW slots: a layer's blocks (each at most a quarter of the largest, the
  // vocabulary's, on real models) in small slots, larger ones in big slots.
  int64_t largest = 0, layer = 0;
  for (const ParamSpec& s : table.specs()) largest = std::max(largest, s.block_numel());
  for (const ParamSpec& s : table.specs())
    if (s.block_numel() * 4 <= largest) layer = std::max(layer, s.block_numel());
  if (layer == 0) layer = largest;
  const int64_t largest_floats = (largest * elem_ + 3) / 4;  // a slot's bytes, in floats
  AllocationPurpose purpose("the slots that gather Z-sharded weights");
  for (Buffer<float>& slot : slots_) slot = backend.alloc<float>(largest_floats);
  block_ = (layer + 15) / 16 * 16;
  big_ = largest > block_ ? (largest + 15) / 16 * 16 : 0;
  grad_slots_ = backend.allocate_shared(z, kSlots * block_ + kBigSlots * big_);
  int64_t shard = 0;  // the most a reduce-scatter of a block leaves on this rank
  for (const ParamSpec& s : table.specs()) shard = std::max(shard, s.numel);
  z.reserve_accumulating(shard);
  big_slot_ = backend.alloc<float>(big_ > 0 ? largest_floats : 0);
}

int64_t WeightStream::bytes() const {
  const size_t gathers = slots_[0].size() + slots_[1].size() + big_slot_.size();
  return int64_t(gathers + (grad_slots_ ? grad_slots_->size() : 0)) * 4;
}

// ---- OAG ----

void WeightStream::begin_pass(int pass) {
  trace_ = &traces_[pass];
  cursor_ = 0;
  broken_ = false;
  if (!trace_->valid) trace_->order.clear();
}

void WeightStream::end_pass() {
  prefetch_.wait();
  prefetched_ = nullptr;
  prefetch_big_.wait();
  prefetched_big_ = nullptr;
  if (!trace_) return;
  trace_->valid = !broken_ && cursor_ == trace_->order.size();
  trace_ = nullptr;
}

Operand WeightStream::as_operand(const void* p) const {
  if (elem_ == 2) return Operand(static_cast<const bf16*>(p));
  return Operand(static_cast<const float*>(p));
}

Operand WeightStream::gather(const ParamSpec& s) {
  if (!chunked()) return as_operand(params_->bytes() + s.offset * elem_);
  if (oag_ && trace_) return as_operand(prefetched_gather(s));
  z_->all_gather(*params_, s.offset, slots_[0].data(), s.numel);
  return as_operand(slots_[0].data());
}

Operand WeightStream::gather_to_keep(const ParamSpec& s, void* keep) {
  if (!chunked()) return as_operand(params_->bytes() + s.offset * elem_);
  z_->all_gather(*params_, s.offset, keep, s.numel);
  return as_operand(keep);
}

// The gather of s within a pass: recorded the first time; then from the
// prefetch when it matches the recorded order, and the gathers that follow
// prefetched.
void* WeightStream::prefetched_gather(const ParamSpec& s) {
  Trace& t = *trace_;
  if (!t.valid) {  // recording
    t.order.push_back(&s);
    ++cursor_;
    z_->all_gather(*params_, s.offset, slots_[0].data(), s.numel);
    current_ = 0;
    return slots_[0].data();
  }
  const bool expected = !broken_ && cursor_ < t.order.size() && t.order[cursor_] == &s;
  if (!expected) broken_ = true;  // out of the recorded order: recorded again next time
  prefetch_.wait();               // the prefetch of s, or one to drop
  void* out;
  if (expected && prefetched_big_ == &s) {  // fetched two ahead into the big slot
    prefetch_big_.wait();
    prefetched_big_ = nullptr;
    out = big_slot_.data();
  } else {
    current_ = 1 - current_;  // the slot the prefetch filled
    if (!expected || prefetched_ != &s)
      z_->all_gather(*params_, s.offset, slots_[current_].data(), s.numel);
    out = slots_[current_].data();
  }
  prefetched_ = nullptr;
  if (expected) prefetch_after(t, out);
  ++cursor_;
  return out;
}

// Posts the gather after the one at cursor_ into the other slot, and a block
// larger than a layer's two ahead into the big slot.
void WeightStream::prefetch_after(const Trace& t, const void* handed_out) {
  if (cursor_ + 1 >= t.order.size()) return;
  const ParamSpec& n = *t.order[cursor_ + 1];
  if (prefetched_big_ != &n) {
    prefetch_ = z_->iall_gather(*params_, n.offset, slots_[1 - current_].data(), n.numel);
    prefetched_ = &n;
  }
  // The big slot is free unless it holds a prefetch or the block just handed out.
  if (cursor_ + 2 < t.order.size() && big_slot_.size() > 0 && !prefetched_big_ &&
      handed_out != big_slot_.data()) {
    const ParamSpec& nn = *t.order[cursor_ + 2];
    if (nn.block_numel() > block_) {
      prefetch_big_ = z_->iall_gather(*params_, nn.offset, big_slot_.data(), nn.numel);
      prefetched_big_ = &nn;
    }
  }
}

// ---- ORS ----

void WeightStream::wait_reduction(int64_t seq) {
  // An entry overwritten by a later reduction was waited for then.
  if (seq >= 0 && seq < posted_ && posted_ - seq <= kRing) reductions_[seq % kRing].wait();
}

float* WeightStream::gradient_block(const ParamSpec& s) {
  const int64_t numel = s.block_numel();
  const int large = numel > block_;
  DENDRITE_CHECK(chunked() && numel <= (large ? big_ : block_), "weight stream: dW block of ",
                 s.name, " (", numel, " floats) exceeds the slots (", block_, ", ", big_, ")");
  const int i = large ? kSlots + next_[1] : next_[0];
  next_[large] = (next_[large] + 1) % (large ? kBigSlots : kSlots);
  if (queued_.spec && queued_.slot == i) post_pending();
  if (const int64_t r = slot_seq_[i] - 1; r >= 0) {
    if (r + 1 >= posted_) post_pending();  // the one after it, if queued
    wait_reduction(r);
    wait_reduction(r + 1);
  }
  handed_ = i;
  handed_spec_ = &s;
  return grad_slots_->data() + slot_offset(i);
}

void WeightStream::reduce_scatter(const ParamSpec& s, float* grads) {
  DENDRITE_CHECK(handed_spec_ == &s, "weight stream: reduce_scatter of ", s.name,
                 " without its gradient_block");
  handed_spec_ = nullptr;
  be_->before_collective();  // the block the layer's product wrote
  if (!ors_) {
    z_->reduce_scatter(*grad_slots_, slot_offset(handed_), grads + s.offset, s.numel, true);
    return;
  }
  post_pending();  // the queue holds one
  queued_ = {&s, grads, handed_};
}

void WeightStream::post_pending() {
  const Queued q = std::exchange(queued_, Queued{});
  if (!q.spec) return;
  slot_seq_[q.slot] = posted_ + 1;
  reductions_[posted_ % kRing] = z_->ireduce_scatter(*grad_slots_, slot_offset(q.slot),
                                                     q.grads + q.spec->offset, q.spec->numel, true);
  ++posted_;
}

void WeightStream::finish_reductions() {
  post_pending();
  for (Request& r : reductions_) r.wait();
}

}  // namespace dendrite
