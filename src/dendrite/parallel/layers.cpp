// The norms, the vocabulary-parallel embedding and the LM head with its loss
// (layers.h). Letters: m local rows, C/Gx width here, Vp/Gy vocabulary here.
#include "dendrite/parallel/layers.h"

#include <algorithm>

#include "dendrite/core/check.h"
#include "dendrite/ops/convert.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/norm.h"
#include "dendrite/ops/tensor.h"

namespace dendrite {

// ---- ParallelNorm ----

ParallelNorm::ParallelNorm(ProcessGrid& grid, bool layernorm, const ParamSpec& gain,
                           const ParamSpec* bias, int c_total, float eps)
    : grid_(&grid), layernorm_(layernorm), gain_(&gain), bias_(bias), c_(int(gain.numel)),
      c_total_(c_total), eps_(eps) {}

void ParallelNorm::forward(float* y, float* mean, float* rstd, const float* x, int m,
                           const float* params, Buffer<double>& sums) const {
  const float* g = params + gain_->offset;
  if (layernorm_) {
    ops::layernorm_row_sums(sums.data(), x, m, c_);
    grid_->X().all_reduce(sums.data(), 2 * int64_t(m));
    ops::layernorm_apply(y, mean, rstd, sums.data(), x, g, params + bias_->offset, m, c_, c_total_,
                         eps_);
  } else {
    ops::rmsnorm_row_sums(sums.data(), x, m, c_);
    grid_->X().all_reduce(sums.data(), m);
    ops::rmsnorm_apply(y, rstd, sums.data(), x, g, m, c_, c_total_, eps_);
  }
}

void ParallelNorm::backward(float* dx, const float* dy, const float* x, const float* mean,
                            const float* rstd, int m, const float* params, float* grads,
                            Buffer<double>& sums) const {
  const float* g = params + gain_->offset;
  if (layernorm_) {
    ops::layernorm_backward_sums(sums.data(), dy, x, mean, rstd, g, m, c_);
    grid_->X().all_reduce(sums.data(), 2 * int64_t(m));
    ops::layernorm_backward_apply(dx, grads + gain_->offset, grads + bias_->offset, sums.data(), dy,
                                  x, mean, rstd, g, m, c_, c_total_);
  } else {
    ops::rmsnorm_backward_sums(sums.data(), dy, x, g, m, c_);
    grid_->X().all_reduce(sums.data(), m);
    ops::rmsnorm_backward_apply(dx, grads + gain_->offset, sums.data(), dy, x, rstd, g, m, c_,
                                c_total_);
  }
}

// ---- VocabEmbedding ----

VocabEmbedding::VocabEmbedding(ProcessGrid& grid, const ParamSpec& table, const ParamSpec* positions,
                               bool keep_gathered)
    : grid_(&grid), table_(&table), pos_(positions), keep_(keep_gathered && grid.shape().z > 1) {}

void VocabEmbedding::forward(float* out, const int32_t* tokens, int m, int T, Operand stored,
                             WeightStream& stream) {
  const int C = int(table_->block_cols);
  const int v0 = int(table_->row_offset), rows = int(table_->block_rows);
  if (lookup_in_chunks(m)) {
    Communicator& z = grid_->Z();
    const int64_t n = int64_t(z.size()) * m;
    mine_.resize(m);
    gathered_.resize(n);
    tokens_.resize(n);
    rows_.resize(n * C);
    std::copy(tokens, tokens + m, mine_.data());
    z.all_gather(mine_.data(), gathered_.data(), m, DType::kI64);
    std::copy(gathered_.data(), gathered_.data() + n, tokens_.data());
    const Operand chunk = stored.plus(table_->offset);
    if (chunk.is_bf16())
      ops::embedding_chunk_forward(rows_.data(), tokens_.data(), chunk.b16, table_->chunk_offset,
                                   table_->numel, v0, rows, int(n), C);
    else
      ops::embedding_chunk_forward(rows_.data(), tokens_.data(), chunk.f32, table_->chunk_offset,
                                   table_->numel, v0, rows, int(n), C);
    z.reduce_scatter(rows_.data(), out, int64_t(m) * C, DType::kF32);
  } else {
    if (keep_) {  // held for the tied head (kept_table())
      if (kept_.size() == 0) kept_.resize((stream.block_bytes(*table_) + 3) / 4);
      kept_block_ = stream.gather_to_keep(*table_, kept_.data());
    }
    const Operand w = keep_ ? kept_block_ : stream.gather(*table_);
    if (w.is_bf16())
      ops::embedding_range_forward(out, tokens, w.b16, v0, rows, m, C);
    else
      ops::embedding_range_forward(out, tokens, w.f32, v0, rows, m, C);
  }
  grid_->Y().all_reduce(out, int64_t(m) * C);
  if (pos_) {
    const Operand p = stream.gather(*pos_);  // [T_max, C/Gx]
    if (p.is_bf16())
      ops::position_add(out, p.b16, m, T, C);
    else
      ops::position_add(out, p.f32, m, T, C);
  }
}

void VocabEmbedding::backward(const float* dout, const int32_t* tokens, int m, int T, float* grads,
                              WeightStream& stream) {
  const int C = int(table_->block_cols);
  const int v0 = int(table_->row_offset), rows = int(table_->block_rows);
  const bool direct = !stream.chunked();  // else the dW blocks are reduce-scattered over Z
  if (lookup_in_chunks(m)) {
    Communicator& z = grid_->Z();
    const int64_t n = int64_t(z.size()) * m;
    DENDRITE_CHECK(int64_t(tokens_.size()) == n,
                   "embedding backward: the forward saw another batch; run the forward first");
    z.all_gather(dout, rows_.data(), int64_t(m) * C, DType::kF32);
    // A reduction still on the engine may be adding into this chunk (the tied head's).
    stream.finish_reductions();
    ops::embedding_chunk_backward(grads + table_->offset, rows_.data(), tokens_.data(),
                                  table_->chunk_offset, table_->numel, v0, rows, int(n), C);
  } else {
    float* dw = direct ? grads + table_->offset : stream.gradient_block(*table_);
    if (!direct) ops::fill(dw, 0.0f, table_->block_numel());
    ops::embedding_range_backward(dw, dout, tokens, v0, rows, m, C);
    if (!direct) stream.reduce_scatter(*table_, grads);
  }
  if (pos_) {
    float* dp = direct ? grads + pos_->offset : stream.gradient_block(*pos_);
    if (!direct) ops::fill(dp, 0.0f, pos_->block_numel());
    ops::position_backward(dp, dout, m, T, C);
    if (!direct) stream.reduce_scatter(*pos_, grads);
  }
}

// ---- VocabCrossEntropy ----

VocabCrossEntropy::VocabCrossEntropy(ProcessGrid& grid, const ParamSpec& head, int V, int chunk_rows)
    : grid_(&grid), head_(&head), V_(V), chunk_(chunk_rows) {
  const int Vloc = int(head.block_rows), gy = grid.shape().y;
  logits_.resize(int64_t(chunk_) * Vloc);
  stats_.resize(2 * int64_t(chunk_));
  gathered_.resize(2 * int64_t(chunk_) * gy);
  lse_.resize(chunk_);
}

namespace {

// y [m, n] = x [m, k] w [n, k]^T, in the operands' precision.
void product(float* y, Operand x, Operand w, int m, int k, int n) {
  if (x.is_bf16())
    ops::linear_forward(y, x.b16, w.b16, m, k, n);
  else
    ops::linear_forward(y, x.f32, w.f32, nullptr, m, k, n);
}

}  // namespace

double VocabCrossEntropy::forward_backward(float* dx, Operand x, const int32_t* targets,
                                           const float* weight, double denominator, int m,
                                           float* grads, WeightStream& stream, Operand gathered) {
  const int C = int(head_->block_cols), Vloc = int(head_->block_rows), v0 = int(head_->row_offset);
  const int gy = grid_->shape().y;
  const Operand w = gathered.empty() ? stream.gather(*head_) : gathered;  // [Vp/Gy, C/Gx]
  const bool direct = !stream.chunked();  // else dW is a block reduce-scattered over Z
  float* dw = nullptr;                    // [Vp/Gy, C/Gx]
  if (dx) dw = direct ? grads + head_->offset : stream.gradient_block(*head_);
  if (dx && x.is_bf16()) dlogits_.resize(int64_t(chunk_) * Vloc);
  double loss = 0;
  for (int r0 = 0; r0 < m; r0 += chunk_) {
    const int rows = std::min(chunk_, m - r0);
    const Operand xc = x.plus(int64_t(r0) * C);
    const float* wc = weight ? weight + r0 : nullptr;
    float* logits = logits_.data();  // [rows, Vloc]
    product(logits, xc, w, rows, C, Vloc);
    grid_->X().all_reduce(logits, int64_t(rows) * Vloc);
    ops::ce_local_stats(stats_.data(), logits, targets + r0, wc, rows, Vloc, v0, V_);
    grid_->Y().all_gather(stats_.data(), gathered_.data(), 2 * int64_t(rows), DType::kF32);
    loss += ops::ce_combine(lse_.data(), gathered_.data(), wc, rows, gy);
    if (!dx) continue;
    ops::ce_dlogits(logits, lse_.data(), targets + r0, wc, denominator, rows, Vloc, v0, V_);
    // The block scratch starts fresh with the first chunk; the gradient itself accumulates.
    const bool accumulate = direct || r0 > 0;
    float* dxc = dx + int64_t(r0) * C;
    if (x.is_bf16()) {
      ops::to_bf16(dlogits_.data(), logits, int64_t(rows) * Vloc);
      ops::linear_backward_input(dxc, dlogits_.data(), w.b16, rows, C, Vloc, false);
      ops::linear_backward_weight(dw, dlogits_.data(), xc.b16, rows, C, Vloc, accumulate);
    } else {
      ops::linear_backward_input(dxc, logits, w.f32, rows, C, Vloc, false);
      ops::linear_backward_weight(dw, nullptr, logits, xc.f32, rows, C, Vloc, accumulate);
    }
  }
  if (dx) {
    grid_->Y().all_reduce(dx, int64_t(m) * C);
    if (!direct) stream.reduce_scatter(*head_, grads);
  }
  return loss / denominator;
}

void VocabCrossEntropy::logits(float* out, Operand x, int m, WeightStream& stream,
                               Operand gathered) {
  const int C = int(head_->block_cols), Vloc = int(head_->block_rows), gy = grid_->shape().y;
  const Operand w = gathered.empty() ? stream.gather(*head_) : gathered;  // [Vp/Gy, C/Gx]
  Buffer<float> local(int64_t(m) * Vloc), all(int64_t(m) * Vloc * gy);
  product(local.data(), x, w, m, C, Vloc);
  grid_->X().all_reduce(local.data(), int64_t(m) * Vloc);
  grid_->Y().all_gather(local.data(), all.data(), int64_t(m) * Vloc, DType::kF32);
  ops::interleave_vocab_parts(out, all.data(), gy, m, Vloc, V_);
}

}  // namespace dendrite
