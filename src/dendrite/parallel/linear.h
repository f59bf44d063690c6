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

#include "dendrite/comm/grid.h"
#include "dendrite/core/buffer.h"
#include "dendrite/parallel/params.h"

namespace dendrite {

// Scratch shared by the layers of a model: the gathered weight block and the
// full dW block (each sized for the largest layer). The dW blocks live in a
// SharedArray over Z, in two halves used in turn (a reduce-scatter over
// shared memory lets no rank overwrite a half its peers may still read).
struct LinearWorkspace {
  Buffer<float> weight;
  std::unique_ptr<SharedArray> dweight;  // 2 x block floats
  int64_t block = 0;
  int half = 0;
  // The model's parameters when they are a SharedArray over Z (set by the
  // owner): Z gathers of its tensors then read the peers' chunks directly.
  const SharedArray* params = nullptr;
  void reserve(Communicator& z, int64_t block_numel);
  float* dweight_block() { return dweight->data() + half * block; }
  int64_t bytes() const { return int64_t(weight.size() + (dweight ? dweight->size() : 0)) * 4; }
};

// Reduce-scatters the full block gradient of s held in ws.dweight_block() over
// Z and adds this rank's chunk into its gradient.
void add_block_gradient(ProcessGrid& grid, const ParamSpec& s, float* grads, LinearWorkspace& ws);

// The full [block_rows, block_cols] block of a Z-chunked tensor: gathered over
// Z into scratch, or the stored values themselves when Gz == 1.
const float* gather_block(ProcessGrid& grid, const ParamSpec& s, const float* params,
                          float* scratch, const LinearWorkspace& ws);

class ParallelLinear {
 public:
  ParallelLinear() = default;
  // w (and b, may be null) must be specs of `table` with the matching sharding.
  // keep_gathered: hold the block gathered in the forward until the backward
  // (one all-gather over Z a step instead of two, for 1/(Gx Gy) of the weights
  // in memory), as DESIGN.md section 3 allows where memory does.
  // oar: the backward's all-reduce of dx is posted non-blocking and waited for
  // after the dW product (AxoNN's OAR).
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
  // dx [m, in_local] = dy W (overwritten, or added to when accumulate), and
  // summed over the backward axis when reduce_dx (callers that add several
  // layers' dx reduce once themselves); dW reduce-scattered over Z into
  // grads; db += the row sums of dy.
  void backward(float* dx, bool accumulate, bool reduce_dx, const float* dy, const float* x, int m,
                const float* params, float* grads, LinearWorkspace& ws) const;
  // The axis whose ranks sum dx (Y for a normal layer).
  Communicator& backward_axis() const { return *bwd_; }

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
