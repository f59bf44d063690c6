// The parallel linear layer (linear.h): the steps of DESIGN.md section 3 for
// a normal or transposed layer, its Z collectives through the WeightStream.
// Letters: m local rows; in = K/Gx and out = N/Gy for a normal layer (swapped
// axes for a transposed one).
#include "dendrite/parallel/linear.h"

#include "dendrite/core/check.h"

namespace dendrite {

ParallelLinear::ParallelLinear(ProcessGrid& grid, Backend& backend, const ParamSpec& w,
                               const ParamSpec* b, bool keep_gathered, bool oar)
    : be_(&backend), w_(&w), b_(b), keep_(keep_gathered && grid.shape().z > 1), oar_(oar) {
  const bool normal = w.sharding.rows == Axis::kY;
  DENDRITE_CHECK(
      w.sharding.chunk_z && (normal ? w.sharding.cols == Axis::kX
                                    : w.sharding.rows == Axis::kX && w.sharding.cols == Axis::kY),
      "parallel linear: ", w.name, " is not sharded as a normal or transposed layer");
  fwd_ = normal ? &grid.X() : &grid.Y();
  bwd_ = normal ? &grid.Y() : &grid.X();
  out_ = int(w.block_rows);
  in_ = int(w.block_cols);
  DENDRITE_CHECK(!b || b->numel == out_, "parallel linear: bias ", b ? b->name : "",
                 " does not match the ", out_, " local outputs of ", w.name);
}

void ParallelLinear::forward(float* y, Operand x, int m, const float* params, WeightStream& stream,
                             const ops::LinearEpilogue& after) {
  DENDRITE_CHECK(!after.bias, "parallel linear ", w_->name,
                 ": the epilogue's bias is the layer's own; pass none");
  ops::check_epilogue(after, "parallel linear forward");
  DENDRITE_CHECK(!after.bias_bf16 || b_, "parallel linear ", w_->name,
                 ": a bf16 bias for a layer without one");
  if (keep_) {  // gathered once a step, into the layer's own buffer
    if (kept_.size() == 0) kept_ = be_->alloc<float>((stream.block_bytes(*w_) + 3) / 4);
    kept_block_ = stream.gather_to_keep(*w_, kept_.data());
  }
  const Operand w = keep_ ? kept_block_ : stream.gather(*w_);  // [out, in]
  DENDRITE_CHECK(x.is_bf16() == w.is_bf16(), "parallel linear ", w_->name,
                 ": the input and the weights differ in precision");
  ops::LinearEpilogue e = after;
  e.bias = b_ ? params + b_->offset : nullptr;  // [out]
  float* sum = e.gelu ? e.pre_gelu : y;         // [m, out]: what the forward axis sums
  const bool alone = fwd_->size() == 1;
  if (alone) {
    be_->linear_forward_fused(y, x, w, {m, in_, out_}, e);
  } else {
    be_->linear_forward(sum, x, w, nullptr, {m, in_, out_});  // partial over the forward axis
    e.bias_bf16 = nullptr;  // the separate ops below add the fp32 bias
  }
  // A group of one sums nothing, but the call stays: the axis counts it.
  be_->before_collective();
  fwd_->all_reduce(sum, int64_t(m) * out_);
  if (alone) return;
  const int64_t n = int64_t(m) * out_;
  if (e.bias) be_->add_bias(sum, e.bias, m, out_);
  if (e.gelu) be_->gelu_forward(y, sum, n);
  if (e.residual) be_->add(y, e.residual, y, n);
  if (e.y_bf16) be_->to_bf16(e.y_bf16, y, n);
}

void ParallelLinear::input_gradient(float* dx, bool accumulate, Operand dy, int m,
                                    WeightStream& stream, const float* gelu_input) const {
  const Operand w = keep_ ? kept_block_ : stream.gather(*w_);  // [out, in]
  if (gelu_input) {
    DENDRITE_CHECK(!accumulate && !sums_input(), "parallel linear ", w_->name,
                   ": GELU's backward fuses into dx only where dx is neither added to nor "
                   "summed over the backward axis");
    be_->linear_backward_input_dgelu(dx, dy, w, gelu_input, {m, in_, out_});
    return;
  }
  be_->linear_backward_input(dx, dy, w, {m, in_, out_}, accumulate);
}

Request ParallelLinear::sum_input_gradient(float* dx, int m) const {
  be_->before_collective();
  if (oar_) return bwd_->iall_reduce(dx, int64_t(m) * in_, DType::kF32);
  bwd_->all_reduce(dx, int64_t(m) * in_);
  return {};
}

namespace {

// Rows [r0, r1) of dw [out, in] (+)= dy^T x, in either precision.
void weight_rows(Backend& be, float* dw, Operand dy, Operand x, int m, int in, int out,
                 bool accumulate, int r0, int r1) {
  const float beta = accumulate ? 1.0f : 0.0f;
  be.gemm(true, false, r1 - r0, in, m, 1.0f, dy.plus(r0), out, x, in, beta,
          dw + int64_t(r0) * in, in);
}

// dw [out, in] (+)= dy^T x in row blocks with a test() of `pending` between
// them: an MPI request (no engine for it: MPI without MPI_THREAD_MULTIPLE)
// moves only inside MPI calls. The same bits as one product: each block is
// the same sum over m.
void weight_product_polled(Backend& be, float* dw, Operand dy, Operand x, int m, int in, int out,
                           bool accumulate, Request& pending) {
  const int parts = 4;
  for (int p = 0; p < parts; ++p) {
    const int r0 = out * p / parts / 16 * 16;
    const int r1 = p + 1 == parts ? out : out * (p + 1) / parts / 16 * 16;
    weight_rows(be, dw, dy, x, m, in, out, accumulate, r0, r1);
    pending.test();
  }
}

}  // namespace

void ParallelLinear::weight_gradient(const float* dy_f32, Operand dy, Operand x, int m,
                                     float* grads, WeightStream& stream, Request* pending) const {
  DENDRITE_CHECK(x.is_bf16() == dy.is_bf16(), "parallel linear ", w_->name,
                 ": the input and the output gradient differ in precision");
  float* db = b_ ? grads + b_->offset : nullptr;  // [out]
  // [out, in]: added into the gradient itself when Gz = 1, else a full block
  // for the stream to reduce-scatter over Z.
  const bool direct = !stream.chunked();
  float* dw = direct ? grads + w_->offset : stream.gradient_block(*w_);
  if (pending && pending->needs_polling())
    weight_product_polled(*be_, dw, dy, x, m, in_, out_, direct, *pending);
  else
    be_->linear_backward_weight(dw, dy, x, {m, in_, out_}, direct);
  if (db && dy_f32) be_->add_column_sums(db, dy_f32, m, out_);
  if (!direct) stream.reduce_scatter(*w_, grads);
}

Operand ParallelLinear::dy_bf16(bf16* low, const float* dy, int m, float* grads) const {
  if (b_)
    be_->to_bf16_column_sums(low, grads + b_->offset, dy, m, out_);
  else
    be_->to_bf16(low, dy, int64_t(m) * out_);
  return low;
}

}  // namespace dendrite
