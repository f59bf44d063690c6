// The norms, the vocabulary-parallel embedding and the LM head with its loss
// (layers.h). Letters: m local rows, C/Gx width here, Vp/Gy vocabulary here.
#include "dendrite/parallel/layers.h"

#include <algorithm>

#include "dendrite/core/check.h"

namespace dendrite {

// ---- ParallelNorm ----

ParallelNorm::ParallelNorm(ProcessGrid& grid, Backend& backend, bool layernorm,
                           const ParamSpec& gain, const ParamSpec* bias, int c_total, float eps)
    : grid_(&grid), be_(&backend), layernorm_(layernorm), gain_(&gain), bias_(bias), c_(int(gain.numel)),
      c_total_(c_total), eps_(eps) {}

void ParallelNorm::forward(float* y, float* mean, float* rstd, const float* x, int m,
                           const float* params, Buffer<double>& sums, bf16* y_bf16) const {
  const float* g = params + gain_->offset;
  if (y_bf16 && grid_->X().size() == 1) {  // whole rows: one pass
    if (layernorm_)
      be_->layernorm_rows_bf16(sums.data(), y_bf16, y, mean, rstd, x, g, params + bias_->offset,
                               {m, c_, c_total_}, eps_);
    else
      be_->rmsnorm_rows_bf16(sums.data(), y_bf16, y, rstd, x, g, {m, c_, c_total_}, eps_);
    be_->before_collective();
    // a group of one: counted, sums nothing
    grid_->X().all_reduce(sums.data(), (layernorm_ ? 2 : 1) * int64_t(m));
    return;
  }
  if (layernorm_) {
    be_->layernorm_row_sums(sums.data(), x, {m, c_, c_total_});
    be_->before_collective();
    grid_->X().all_reduce(sums.data(), 2 * int64_t(m));
    const float* b = params + bias_->offset;
    if (y_bf16)
      be_->layernorm_apply_bf16(y_bf16, y, mean, rstd, sums.data(), x, g, b, {m, c_, c_total_},
                                eps_);
    else
      be_->layernorm_apply(y, mean, rstd, sums.data(), x, g, b, {m, c_, c_total_}, eps_);
  } else {
    be_->rmsnorm_row_sums(sums.data(), x, {m, c_, c_total_});
    be_->before_collective();
    grid_->X().all_reduce(sums.data(), m);
    be_->rmsnorm_apply(y, rstd, sums.data(), x, g, {m, c_, c_total_}, eps_);
    if (y_bf16) be_->to_bf16(y_bf16, y, int64_t(m) * c_);
  }
}

void ParallelNorm::backward(float* dx, const float* dy, const float* x, const float* mean,
                            const float* rstd, int m, const float* params, float* grads,
                            Buffer<double>& sums) const {
  const float* g = params + gain_->offset;
  if (layernorm_) {
    be_->layernorm_backward_sums(sums.data(), dy, x, mean, rstd, g, {m, c_, c_total_});
    be_->before_collective();
    grid_->X().all_reduce(sums.data(), 2 * int64_t(m));
    be_->layernorm_backward_apply(dx, grads + gain_->offset, grads + bias_->offset, sums.data(), dy,
                                  x, mean, rstd, g, {m, c_, c_total_});
  } else {
    be_->rmsnorm_backward_sums(sums.data(), dy, x, g, {m, c_, c_total_});
    be_->before_collective();
    grid_->X().all_reduce(sums.data(), m);
    be_->rmsnorm_backward_apply(dx, grads + gain_->offset, sums.data(), dy, x, rstd, g,
                                {m, c_, c_total_});
  }
}

void ParallelNorm::backward_add(float* dres, float* scratch, const float* dy, const float* x,
                                const float* mean, const float* rstd, int m, const float* params,
                                float* grads, Buffer<double>& sums,
                                const ops::ResidualGradBf16* next) const {
  const float* g = params + gain_->offset;
  float* dg = grads + gain_->offset;
  if (grid_->X().size() == 1) {  // whole rows: one pass
    const ops::NormShape s{m, c_, c_total_};
    if (layernorm_ && next)
      be_->layernorm_backward_rows_add_bf16(*next, sums.data(), dres, scratch, dg,
                                            grads + bias_->offset, dy, x, mean, rstd, g, s);
    else if (layernorm_)
      be_->layernorm_backward_rows_add(sums.data(), dres, scratch, dg, grads + bias_->offset, dy, x,
                                       mean, rstd, g, s);
    else if (next)
      be_->rmsnorm_backward_rows_add_bf16(*next, sums.data(), dres, scratch, dg, dy, x, rstd, g, s);
    else
      be_->rmsnorm_backward_rows_add(sums.data(), dres, scratch, dg, dy, x, rstd, g, s);
    be_->before_collective();
    // a group of one: counted, sums nothing
    grid_->X().all_reduce(sums.data(), (layernorm_ ? 2 : 1) * int64_t(m));
    return;
  }
  if (layernorm_) {
    be_->layernorm_backward_sums(sums.data(), dy, x, mean, rstd, g, {m, c_, c_total_});
    be_->before_collective();
    grid_->X().all_reduce(sums.data(), 2 * int64_t(m));
    be_->layernorm_backward_apply_add(dres, scratch, grads + gain_->offset, grads + bias_->offset,
                                      sums.data(), dy, x, mean, rstd, g, {m, c_, c_total_});
  } else {
    backward(scratch, dy, x, mean, rstd, m, params, grads, sums);
    be_->add_inplace(dres, scratch, int64_t(m) * c_);
  }
  if (!next) return;
  if (next->db)
    be_->to_bf16_column_sums(next->low, next->db, dres, m, c_);
  else
    be_->to_bf16(next->low, dres, int64_t(m) * c_);
}

// ---- VocabEmbedding ----

VocabEmbedding::VocabEmbedding(ProcessGrid& grid, Backend& backend, const ParamSpec& table,
                               const ParamSpec* positions, bool keep_gathered)
    : grid_(&grid), be_(&backend), table_(&table), pos_(positions), keep_(keep_gathered && grid.shape().z > 1) {}

void VocabEmbedding::forward(float* out, const int32_t* tokens, const int32_t* host_tokens, int m,
                             int T, Operand stored, WeightStream& stream, int pos0) {
  const int C = int(table_->block_cols);
  const int v0 = int(table_->row_offset), rows = int(table_->block_rows);
  if (lookup_in_chunks(m)) {
    // The Z group's token ids, gathered on the host (ids move as int64), then
    // uploaded for the lookup and kept for the backward.
    Communicator& z = grid_->Z();
    const int64_t n = int64_t(z.size()) * m;
    mine_.assign(host_tokens, host_tokens + m);
    gathered_.resize(n);
    z.all_gather(mine_.data(), gathered_.data(), m, DType::kI64);
    group_.assign(gathered_.begin(), gathered_.end());
    if (int64_t(tokens_.size()) != n) tokens_ = be_->alloc<int32_t>(n);
    be_->upload(tokens_.data(), group_.data(), n * sizeof(int32_t));
    if (int64_t(rows_.size()) < n * C) rows_ = be_->alloc<float>(n * C);
    be_->embedding_chunk_forward(rows_.data(), tokens_.data(), stored.plus(table_->offset),
                                 {table_->chunk_offset, table_->numel}, {v0, rows, int(n), C});
    be_->before_collective();
    z.reduce_scatter(rows_.data(), out, int64_t(m) * C, DType::kF32);
  } else {
    if (keep_) {  // held for the tied head (kept_table())
      if (kept_.size() == 0) kept_ = be_->alloc<float>((stream.block_bytes(*table_) + 3) / 4);
      kept_block_ = stream.gather_to_keep(*table_, kept_.data());
    }
    const Operand w = keep_ ? kept_block_ : stream.gather(*table_);
    be_->embedding_range_forward(out, tokens, w, {v0, rows, m, C});
    be_->before_collective();
  }
  grid_->Y().all_reduce(out, int64_t(m) * C);
  if (pos_)  // positions [T_max, C/Gx], from pos0 on
    be_->position_add(out, stream.gather(*pos_).plus(int64_t(pos0) * C), {m, T, C});
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
    be_->before_collective();
    z.all_gather(dout, rows_.data(), int64_t(m) * C, DType::kF32);
    // A reduction still on the engine may be adding into this chunk (the tied head's).
    stream.finish_reductions();
    be_->embedding_chunk_backward(grads + table_->offset, rows_.data(), tokens_.data(),
                                  {table_->chunk_offset, table_->numel}, {v0, rows, int(n), C});
  } else {
    float* dw = direct ? grads + table_->offset : stream.gradient_block(*table_);
    if (!direct) be_->fill(dw, 0.0f, table_->block_numel());
    be_->embedding_range_backward(dw, dout, tokens, {v0, rows, m, C});
    if (!direct) stream.reduce_scatter(*table_, grads);
  }
  if (pos_) {
    float* dp = direct ? grads + pos_->offset : stream.gradient_block(*pos_);
    if (!direct) be_->fill(dp, 0.0f, pos_->block_numel());
    be_->position_backward(dp, dout, {m, T, C});
    if (!direct) stream.reduce_scatter(*pos_, grads);
  }
}

// ---- VocabCrossEntropy ----

VocabCrossEntropy::VocabCrossEntropy(ProcessGrid& grid, Backend& backend, const ParamSpec& head,
                                     int V, int chunk_rows)
    : grid_(&grid), be_(&backend), head_(&head), V_(V), chunk_(chunk_rows) {
  const int Vloc = int(head.block_rows), gy = grid.shape().y;
  AllocationPurpose purpose("the LM head's logits");
  logits_ = backend.alloc<float>(int64_t(chunk_) * Vloc);
  stats_ = backend.alloc<float>(2 * int64_t(chunk_));
  gathered_ = backend.alloc<float>(2 * int64_t(chunk_) * gy);
  lse_ = backend.alloc<float>(chunk_);
}

void VocabCrossEntropy::forward_backward(float* dx, Operand x, const int32_t* targets,
                                         const float* weight, double denominator, int m,
                                         float* grads, WeightStream& stream, double* loss_sum,
                                         Operand gathered) {
  const int C = int(head_->block_cols), Vloc = int(head_->block_rows), v0 = int(head_->row_offset);
  const int gy = grid_->shape().y;
  const Operand w = gathered.empty() ? stream.gather(*head_) : gathered;  // [Vp/Gy, C/Gx]
  const bool direct = !stream.chunked();  // else dW is a block reduce-scattered over Z
  float* dw = nullptr;                    // [Vp/Gy, C/Gx]
  if (dx) dw = direct ? grads + head_->offset : stream.gradient_block(*head_);
  if (dx && x.is_bf16() && dlogits_.size() == 0)
    dlogits_ = be_->alloc<bf16>(int64_t(chunk_) * Vloc);
  for (int r0 = 0; r0 < m; r0 += chunk_) {
    const int rows = std::min(chunk_, m - r0);
    const Operand xc = x.plus(int64_t(r0) * C);
    const float* wc = weight ? weight + r0 : nullptr;
    float* logits = logits_.data();  // [rows, Vloc]
    be_->linear_forward(logits, xc, w, nullptr, {rows, C, Vloc});
    be_->before_collective();
    grid_->X().all_reduce(logits, int64_t(rows) * Vloc);
    const ops::VocabShape vs{rows, Vloc, v0, V_};
    // dlogits as a GEMM operand: in place, or rounded into bf16 under bf16 precision
    Operand dl = logits;
    if (dx && x.is_bf16() && gy == 1) {  // the whole vocabulary here: one pass over the logits
      be_->ce_stats_dlogits_bf16(stats_.data(), dlogits_.data(), logits, targets + r0, wc,
                                 denominator, vs);
      be_->ce_combine(lse_.data(), stats_.data(), wc, rows, 1, loss_sum);
      dl = dlogits_.data();
    } else {
      be_->ce_local_stats(stats_.data(), logits, targets + r0, wc, vs);
      be_->before_collective();
      grid_->Y().all_gather(stats_.data(), gathered_.data(), 2 * int64_t(rows), DType::kF32);
      be_->ce_combine(lse_.data(), gathered_.data(), wc, rows, gy, loss_sum);
      if (!dx) continue;
      if (x.is_bf16()) {
        be_->ce_dlogits_bf16(dlogits_.data(), logits, lse_.data(), targets + r0, wc, denominator,
                             vs);
        dl = dlogits_.data();
      } else {
        be_->ce_dlogits(logits, lse_.data(), targets + r0, wc, denominator, vs);
      }
    }
    // The block scratch starts fresh with the first chunk; the gradient itself accumulates.
    const bool accumulate = direct || r0 > 0;
    float* dxc = dx + int64_t(r0) * C;
    be_->linear_backward_input(dxc, dl, w, {rows, C, Vloc}, false);
    be_->linear_backward_weight(dw, dl, xc, {rows, C, Vloc}, accumulate);
  }
  if (dx) {
    be_->before_collective();
    grid_->Y().all_reduce(dx, int64_t(m) * C);
    if (!direct) stream.reduce_scatter(*head_, grads);
  }
}

void VocabCrossEntropy::logits(float* out, Operand x, int m, WeightStream& stream, Operand gathered,
                               bool keep) {
  const int C = int(head_->block_cols), Vloc = int(head_->block_rows), gy = grid_->shape().y;
  const Operand w = gathered.empty() ? stream.gather(*head_) : gathered;  // [Vp/Gy, C/Gx]
  Buffer<float> local_once, all_once;
  auto scratch = [&](Buffer<float>& kept, Buffer<float>& once, int64_t n) {
    Buffer<float>& b = keep ? kept : once;
    if (b.size() < size_t(n)) b = be_->alloc<float>(n);
    return b.data();
  };
  float* local = scratch(kept_local_, local_once, int64_t(m) * Vloc);
  float* all = scratch(kept_all_, all_once, int64_t(m) * Vloc * gy);
  be_->linear_forward(local, x, w, nullptr, {m, C, Vloc});
  be_->before_collective();
  grid_->X().all_reduce(local, int64_t(m) * Vloc);
  grid_->Y().all_gather(local, all, int64_t(m) * Vloc, DType::kF32);
  be_->interleave_vocab_parts(out, all, {gy, m, Vloc, V_});
}

}  // namespace dendrite
