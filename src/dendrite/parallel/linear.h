// The parallel linear layer of DESIGN.md section 3, y = x W^T + b with W [N, K].
//
//   normal:      x [m, K/Gx] (replicated over Y) -> y [m, N/Gy] (replicated over X)
//                W block [N/Gy, K/Gx]; forward all-reduce over X, backward over Y
//   transposed:  x [m, K/Gy] (replicated over X) -> y [m, N/Gx] (replicated over Y)
//                W block [N/Gx, K/Gy]; forward all-reduce over Y, backward over X
//
// The block is stored as Gz chunks and all-gathered over Z before each use
// (forward, and again in the backward); its gradient dW = dy^T x is
// reduce-scattered over Z into this rank's chunk. The collectives come in
// conjugate pairs: forward all-gather over Z / backward reduce-scatter over Z;
// forward all-reduce over X / backward all-reduce over Y (normal layer).
#pragma once

#include <memory>
#include <vector>

#include "dendrite/comm/grid.h"
#include "dendrite/core/buffer.h"
#include "dendrite/parallel/params.h"

namespace dendrite {

// Scratch shared by the layers of a model: the gathered weight blocks and the
// full dW blocks (slots sized below), and the overlap of their
// Z collectives with computation (DESIGN.md section 5), which needs the
// parameters and dW blocks in SharedArrays over Z:
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
//    blocks up to `block` floats (a layer's) and kBigSlots for larger ones
//    (the vocabulary's), so several layers' products can be in flight without
//    slots of the largest size. A slot is reused only after the reduction
//    posted after its own completed here, which (its barrier) means every
//    peer finished reading the slot (the engine runs tasks in post order on
//    every rank); over messages, after its own, which sends from it. A
//    reduction is posted only at the next layer's post_deferred(), after that
//    layer's OAR all-reduce: the engine runs tasks in post order, and the dx
//    sum is needed within one GEMM, the dW sum only at the optimizer.
struct LinearWorkspace {
  static constexpr int kSlots = 8, kBigSlots = 2, kRing = 16;
  Buffer<float> weight;  // gather scratch (and slot 0 of OAG)
  Buffer<float> weight2;  // slot 1 of OAG
  Buffer<float> weight_big;  // OAG's slot for a block larger than a layer's (when there are such)
  std::unique_ptr<SharedArray> dweight;  // kSlots x block, then kBigSlots x big floats
  int64_t block = 0, big = 0;
  int slot = 0;  // the dW slot handed out last
  bool oag = false, ors = false;
  // The model's parameters when they are a SharedArray over Z (set by the
  // owner): Z gathers of its tensors then read the peers' chunks directly.
  const SharedArray* params = nullptr;

  // Scratch for blocks of up to largest floats; dW slots of `layer` floats for
  // the blocks that fit (the rest use the big slots).
  void reserve(Communicator& z, int64_t largest, int64_t layer);
  // A dW block of numel floats for the next reduction (waits until its slot is free).
  float* dweight_block(int64_t numel);
  int64_t slot_offset(int i) const {
    return i < kSlots ? i * block : kSlots * block + (i - kSlots) * big;
  }
  int64_t bytes() const {
    return int64_t(weight.size() + weight2.size() + weight_big.size() +
                   (dweight ? dweight->size() : 0)) *
           4;
  }
  // OAG: a pass of gathers begins (after the parameters' fence) or ends
  // (before it: the last prefetch is waited for and dropped).
  void begin_pass(int pass);
  void end_pass();
  // ORS: waits for every reduce-scatter (posting the deferred one first).
  void finish_reductions();
  // ORS: posts the reduce-scatter deferred by add_block_gradient, if any.
  void post_deferred();

  // Internal state of the overlaps.
  struct Trace {
    std::vector<const ParamSpec*> order;
    bool valid = false;
  };
  Trace traces[8];  // one per pass kind of the owner (Transformer::Pass)
  int pass = -1;
  size_t cursor = 0;
  bool broken = false;
  int current = 0;                       // the gather slot handed out last
  const ParamSpec* prefetched = nullptr;  // in slot 1 - current
  Request prefetch;
  const ParamSpec* prefetched_big = nullptr;  // in weight_big
  Request prefetch_big;
  Request reductions[kRing];  // by sequence number (posted) modulo kRing
  int64_t posted = 0;         // reductions posted so far
  int64_t slot_seq[kSlots + kBigSlots] = {};  // the reduction that last read each slot, + 1
  int next[2] = {0, 0};       // the next slot of each size, in turn
  void wait_reduction(int64_t seq);
  struct Deferred {
    ProcessGrid* grid = nullptr;  // null: nothing deferred
    const ParamSpec* spec = nullptr;
    float* grads = nullptr;
    int slot = 0;
  } deferred;
  float* gather_slot(int i) { return i == 0 ? weight.data() : weight2.data(); }
};

// Reduce-scatters the full block gradient of s held in ws.dweight_block() over
// Z and adds this rank's chunk into its gradient.
void add_block_gradient(ProcessGrid& grid, const ParamSpec& s, float* grads, LinearWorkspace& ws);

// The full [block_rows, block_cols] block of a Z-chunked tensor: gathered over
// Z into scratch, or the stored values themselves when Gz == 1.
const float* gather_block(ProcessGrid& grid, const ParamSpec& s, const float* params,
                          float* scratch, LinearWorkspace& ws);

class ParallelLinear {
 public:
  ParallelLinear() = default;
  // w (and b, may be null) must be specs of `table` with the matching sharding.
  // keep_gathered: hold the block gathered in the forward until the backward
  // (one all-gather over Z a step instead of two, for 1/(Gx Gy) of the weights
  // in memory), as DESIGN.md section 3 allows where memory does.
  // oar: the backward's all-reduce of dx is posted non-blocking, to be waited
  // for after dW products (AxoNN's OAR).
  ParallelLinear(ProcessGrid& grid, const ParamSpec& w, const ParamSpec* b,
                 bool keep_gathered = false, bool oar = false);

  int in_local() const { return in_; }
  int out_local() const { return out_; }
  // The weight block [out_local, in_local], gathered over Z into ws (or the
  // parameters themselves when Gz == 1).
  const float* gather_weight(const float* params, LinearWorkspace& ws) const;
  // In the backward: the kept block, or a fresh gather.
  const float* backward_weight(const float* params, LinearWorkspace& ws) const;

  // y [m, out_local] = x [m, in_local] W^T, summed over the forward axis, + b.
  void forward(float* y, const float* x, int m, const float* params, LinearWorkspace& ws) const;
  // The backward, in three parts so that a block can put the dW products of
  // several layers behind one dx sum (OAR over a group of layers; layers that
  // share an input add their dx and sum it once):
  // dx [m, in_local] = dy W (overwritten, or added to when accumulate);
  void input_gradient(float* dx, bool accumulate, const float* dy, int m, const float* params,
                      LinearWorkspace& ws) const;
  // dx summed over the backward axis: posted non-blocking with OAR (wait for
  // the request before reading dx), else summed before returning;
  Request sum_input_gradient(float* dx, int m, LinearWorkspace& ws) const;
  // dW = dy^T x reduce-scattered over Z into grads, db += the row sums of dy.
  // `pending`, when it moves only when polled (an MPI request), is polled
  // between row blocks of the product.
  void weight_gradient(const float* dy, const float* x, int m, float* grads, LinearWorkspace& ws,
                       Request* pending = nullptr) const;
  // Whether the backward axis has peers (else sum_input_gradient has nothing to sum).
  bool sums_input() const { return bwd_->size() > 1; }

 private:
  ProcessGrid* grid_ = nullptr;
  const ParamSpec* w_ = nullptr;
  const ParamSpec* b_ = nullptr;
  Communicator* fwd_ = nullptr;
  Communicator* bwd_ = nullptr;
  int in_ = 0, out_ = 0;
  bool keep_ = false, oar_ = false;
  mutable Buffer<float> kept_;  // the block gathered in the forward (keep_gathered)
};

}  // namespace dendrite
