// The parallel linear layer of DESIGN.md section 3, y = x W^T + b with W [N, K].
//
//   normal:      x [m, K/Gx] (replicated over Y) -> y [m, N/Gy] (replicated over X)
//                W block [N/Gy, K/Gx]; forward all-reduce over X, backward over Y
//   transposed:  x [m, K/Gy] (replicated over X) -> y [m, N/Gx] (replicated over Y)
//                W block [N/Gx, K/Gy]; forward all-reduce over Y, backward over X
//
// The block is stored as Gz chunks and all-gathered over Z before each use
// (forward, and again in the backward); its gradient dW = dy^T x is
// reduce-scattered over Z into this rank's chunk (both by the WeightStream,
// weight_stream.h). The collectives come in conjugate pairs: forward
// all-gather over Z / backward reduce-scatter over Z; forward all-reduce over
// X / backward all-reduce over Y (normal layer).
#pragma once

#include "dendrite/backend/backend.h"
#include "dendrite/comm/grid.h"
#include "dendrite/core/buffer.h"
#include "dendrite/core/operand.h"
#include "dendrite/parallel/params.h"
#include "dendrite/parallel/weight_stream.h"

namespace dendrite {

class ParallelLinear {
 public:
  ParallelLinear() = default;
  // w (and b, may be null) must be specs of `table` with the matching sharding.
  // keep_gathered: hold the block gathered in the forward until the backward
  // (one all-gather over Z a step instead of two, for 1/(Gx Gy) of the weights
  // in memory), as DESIGN.md section 3 allows where memory does.
  // oar: the backward's all-reduce of dx is posted non-blocking, to be waited
  // for after dW products (AxoNN's OAR).
  ParallelLinear(ProcessGrid& grid, Backend& backend, const ParamSpec& w, const ParamSpec* b,
                 bool keep_gathered = false, bool oar = false);

  int in_local() const { return in_; }
  int out_local() const { return out_; }
  const ParamSpec* bias() const { return b_; }  // or null

  // The operands x, dy and the weight block are fp32, or bf16 under bf16
  // precision (core/operand.h); outputs and gradients are fp32 either way.
  // y [m, out_local] = x [m, in_local] W^T, summed over the forward axis, + b,
  // then the rest of `after` (ops::LinearEpilogue; its bias is the layer's,
  // so left null): GELU keeping its input, a residual, a bf16 output, the
  // bias's bf16 rounding (bias_bf16, for a bf16 output). Where the forward
  // axis has one rank there is no sum between the product and the epilogue,
  // and the backend fuses them (cuBLASLt's epilogues on a GPU), taking
  // bias_bf16; after a sum the separate ops add the fp32 bias.
  void forward(float* y, Operand x, int m, const float* params, WeightStream& stream,
               const ops::LinearEpilogue& after = {});

  // The backward is AxoNN's, in its three steps, so that the model can put
  // the dW products of a group of layers behind one dx sum (layers that share
  // an input add their dx and sum it once: Transformer::linear_backward).
  // 1. dx [m, in_local] = dy [m, out_local] W (overwritten, or added to when
  //    accumulate), with the kept block or a fresh gather; given gelu_input
  //    [m, in_local] (only where step 2 sums nothing, and not accumulating),
  //    then times gelu'(gelu_input), GELU's backward fused into the product;
  void input_gradient(float* dx, bool accumulate, Operand dy, int m, WeightStream& stream,
                      const float* gelu_input = nullptr) const;
  // 2. dx summed over the backward axis: posted non-blocking with OAR (wait
  //    for the request before reading dx), else summed before returning;
  Request sum_input_gradient(float* dx, int m) const;
  // 3. dW = dy^T x reduce-scattered over Z into grads (through the stream),
  //    db += the row sums of dy_f32 (dy in fp32, whatever the operand's type;
  //    null where dy_bf16 below summed them already).
  //    `pending`, when it moves only when polled (an MPI request), is polled
  //    between row blocks of the product.
  void weight_gradient(const float* dy_f32, Operand dy, Operand x, int m, float* grads,
                       WeightStream& stream, Request* pending = nullptr) const;
  // dy [m, out_local] rounded into low as the bf16 operand of steps 1 and 3,
  // with db += its row sums in the same pass (then weight_gradient takes no dy_f32).
  Operand dy_bf16(bf16* low, const float* dy, int m, float* grads) const;
  // Whether the backward axis has peers (else step 2 has nothing to sum).
  bool sums_input() const { return bwd_->size() > 1; }

 private:
  Backend* be_ = nullptr;
  const ParamSpec* w_ = nullptr;
  const ParamSpec* b_ = nullptr;
  Communicator* fwd_ = nullptr;
  Communicator* bwd_ = nullptr;
  int in_ = 0, out_ = 0;
  bool keep_ = false, oar_ = false;
  // [out_local, in_local]: the block gathered in the forward (keep_gathered),
  // in the parameters' element type (bytes, as floats for alignment)
  Buffer<float> kept_;
  Operand kept_block_;
};

}  // namespace dendrite
