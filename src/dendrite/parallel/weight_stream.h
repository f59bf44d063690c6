// The Z weight stream of the parallel layers (DESIGN.md sections 3 and 5).
// Each weight block [block_rows, block_cols] (a layer's [N/Gy, K/Gx], the
// vocabulary's [Vp/Gy, C/Gx]) is stored as Gz chunks: it is all-gathered over
// Z before each use, and its gradient dW is reduce-scattered over Z into this
// rank's chunk. The stream owns the scratch for both and their overlap with
// computation, which reads the stored parameters and the dW blocks as
// SharedArrays over Z:
//  - OAG: the gathers of a pass (a step's forward and backward, or a forward
//    alone) are recorded the first time; from then on each gather posts the
//    next one on the progress engine into the other of two slots, so it moves
//    while the current layer computes. A gather out of the recorded order is
//    simply done at once (and the order recorded again). (Two ahead hid a
//    little more of the gathers on y=2,z=2 but delayed the reduce-scatters
//    queued behind them on the engine by more.) A block larger than a
//    layer's (the tied LM head's vocabulary block, 77 MB per rank on GPT-2
//    124M y=2,z=2) takes longer to copy than one layer computes: it is
//    prefetched two gathers ahead, into a slot of its own.
//  - ORS: a dW block is reduce-scattered on the engine while the backward of
//    earlier layers computes, and waited for only in finish_reductions(),
//    before the gradients are used. Blocks rotate through slots, kSlots for
//    blocks up to a layer's and kBigSlots for larger ones (the vocabulary's),
//    so several layers' products can be in flight without slots of the
//    largest size. A slot is reused only after the reduction posted after its
//    own completed here, which (its barrier) means every peer finished
//    reading the slot (the engine runs tasks in post order on every rank);
//    over messages, after its own, which sends from it.
// Under bf16 precision the stream reads the parameters' bf16 copy: blocks are
// gathered in bf16 (half the bytes) and handed out as bf16 operands; the dW
// blocks stay fp32.
// Letters: Gz ranks on the Z axis; a block is a ParamSpec's full
// [block_rows, block_cols], of which this rank stores numel elements.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/comm/communicator.h"
#include "dendrite/core/buffer.h"
#include "dendrite/core/operand.h"
#include "dendrite/parallel/params.h"

namespace dendrite {

class WeightStream {
 public:
  WeightStream() = default;
  // The stream of the Z-chunked tensors of `table`, whose values are `params`
  // (a SharedArray over z, kept by the caller: the fp32 parameters, or under
  // bf16 precision their bf16 copy, with the same element offsets). oag and
  // ors switch the two overlaps. Scratch is allocated (from the backend) only
  // when Z splits the blocks (Gz > 1).
  WeightStream(Communicator& z, Backend& backend, const ParamTable& table,
               const SharedArray& params, bool oag, bool ors);
  WeightStream(WeightStream&&) = default;
  WeightStream& operator=(WeightStream&&) = default;

  // Whether the blocks are stored in Z chunks (Gz > 1). Else gather() returns
  // the stored block, and layers add their dW into the gradients directly.
  bool chunked() const { return z_ && z_->size() > 1; }
  int64_t bytes() const;

  // OAG: a pass of gathers begins (after the parameters' fence) or ends
  // (before it: the last prefetch is waited for and dropped). `pass` is the
  // caller's name for a kind of pass whose gathers come in one order.
  void begin_pass(int pass);
  void end_pass();

  // The full block of s in the parameters' element type: the stored values
  // when Gz = 1, else gathered over Z into a slot of the stream (from the
  // prefetch within a recorded pass), valid until the next gather.
  Operand gather(const ParamSpec& s);
  // The full block of s gathered into `keep` (block_bytes(s) bytes) that the
  // caller holds past the next gather (keep_gathered); outside the OAG order.
  Operand gather_to_keep(const ParamSpec& s, void* keep);
  // Bytes of the full block of s in the parameters' element type.
  int64_t block_bytes(const ParamSpec& s) const { return s.block_numel() * elem_; }

  // ORS: a dW slot for the full block of s, to fill and then hand to
  // reduce_scatter(s) (waits until the slot is free; when the reduction that
  // frees it is still queued, it is posted first).
  float* gradient_block(const ParamSpec& s);
  // Reduce-scatters the block from gradient_block(s) over Z and adds this
  // rank's chunk into grads + s.offset. Without ORS at once; with ORS it is
  // queued, and posted by post_pending() (or by the next reduce_scatter: the
  // queue holds one).
  void reduce_scatter(const ParamSpec& s, float* grads);
  // Posts the queued reduce-scatter, if any. The layers call it right after
  // posting a dx sum: the engine runs tasks in post order, and the dx sum is
  // needed within one GEMM, the dW sum only at the optimizer.
  void post_pending();
  // Posts the queued reduce-scatter and waits for all of them.
  void finish_reductions();

 private:
  static constexpr int kSlots = 8, kBigSlots = 2, kRing = 16;
  struct Trace {
    std::vector<const ParamSpec*> order;
    bool valid = false;
  };
  struct Queued {
    const ParamSpec* spec = nullptr;  // null: nothing queued
    float* grads = nullptr;
    int slot = 0;
  };
  void* prefetched_gather(const ParamSpec& s);
  void prefetch_after(const Trace& t, const void* handed_out);
  // The stored block of s (Gz = 1), or a slot's bytes, as an operand.
  Operand as_operand(const void* p) const;
  int64_t slot_offset(int i) const {
    return i < kSlots ? i * block_ : kSlots * block_ + (i - kSlots) * big_;
  }
  void wait_reduction(int64_t seq);

  Communicator* z_ = nullptr;
  Backend* be_ = nullptr;
  const SharedArray* params_ = nullptr;
  int64_t elem_ = 4;  // bytes of a parameter element: 4 (fp32) or 2 (bf16)
  bool oag_ = false, ors_ = false;

  // OAG: two gather slots of the largest block; a third for a block larger
  // than a layer's (when there are such). Bytes, as floats for alignment.
  Buffer<float> slots_[2], big_slot_;
  std::map<int, Trace> traces_;            // by pass
  Trace* trace_ = nullptr;                 // the current pass's; null between passes
  size_t cursor_ = 0;                      // gathers so far in this pass
  bool broken_ = false;                    // a gather came out of the recorded order
  int current_ = 0;                        // the gather slot handed out last
  const ParamSpec* prefetched_ = nullptr;  // in slots_[1 - current_]
  Request prefetch_;
  const ParamSpec* prefetched_big_ = nullptr;  // in big_slot_
  Request prefetch_big_;

  // ORS: kSlots x block_, then kBigSlots x big_ floats, over Z.
  std::unique_ptr<SharedArray> grad_slots_;
  int64_t block_ = 0, big_ = 0;
  int next_[2] = {0, 0};                    // the next slot of each size, in turn
  int handed_ = 0;                          // the slot handed out last
  const ParamSpec* handed_spec_ = nullptr;  // and whose block it holds
  Queued queued_;
  Request reductions_[kRing];                  // by sequence number (posted) modulo kRing
  int64_t posted_ = 0;                         // reductions posted so far
  int64_t slot_seq_[kSlots + kBigSlots] = {};  // the reduction that last read each slot, + 1
};

}  // namespace dendrite
