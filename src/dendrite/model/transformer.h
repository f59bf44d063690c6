// The GPT-2 and Llama transformer on one process: parameters, activations,
// and an explicit forward and backward that read top to bottom as layer calls.
//
// Letters: B batch, T sequence, m = B*T rows, C width, NH / NKV heads,
// hs head size, F MLP width, V vocabulary (Vp padded), L layers.
//
// GPT-2 block:  x += o(attn(q, k, v of LayerNorm1(x)));  x += down(gelu(up(LayerNorm2(x))))
// Llama block:  x += o(attn(rope q, rope k, v of RMSNorm1(x)));
//               x += down(silu(gate(h)) * up(h)),  h = RMSNorm2(x)
// then the final norm and the LM head (GPT-2: tied to the token embedding).
#pragma once

#include <cstdint>
#include <vector>

#include "dendrite/core/buffer.h"
#include "dendrite/model/config.h"
#include "dendrite/model/params.h"

namespace dendrite {

// Offsets (in floats) of one layer's tensors in the flat parameter buffer; -1 when the
// architecture has no such tensor.
struct LayerOffsets {
  int64_t norm1_w = -1, norm1_b = -1, q_w = -1, q_b = -1, k_w = -1, k_b = -1, v_w = -1, v_b = -1,
          o_w = -1, o_b = -1, norm2_w = -1, norm2_b = -1, up_w = -1, up_b = -1, gate_w = -1,
          down_w = -1, down_b = -1;
};

class Transformer {
 public:
  // Activations are sized for batches of up to max_B sequences of up to max_T tokens.
  Transformer(const ModelConfig& config, int max_B, int max_T);

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  int64_t num_floats() const { return table_.total(); }
  void init(uint64_t seed) { table_.initialize(params_.data(), seed); }
  void zero_grads() { grads_.zero(); }
  size_t activation_bytes() const;

  // Forward and backward on inputs, targets [B*T]. Returns the loss
  // sum_r weight[r] * CE_r / denominator (weights null: all ones) and adds its
  // gradient into grads().
  double forward_backward(const int32_t* inputs, const int32_t* targets, const float* weights,
                          double denominator, int B, int T);
  // The same loss, no gradients.
  double forward_loss(const int32_t* inputs, const int32_t* targets, const float* weights,
                      double denominator, int B, int T);
  // logits [B*T, V] of every position.
  void logits(const int32_t* inputs, int B, int T, float* out);
  // logits [V] of the last position of one sequence of T tokens.
  void last_logits(const int32_t* inputs, int T, float* out);

 private:
  struct LayerActs {
    Buffer<float> norm1, mean1, rstd1, q, k, v, att, lse, mid, norm2, mean2, rstd2, up, gate, act;
  };
  void build_table();
  void check_batch(const int32_t* inputs, int B, int T) const;
  void forward(const int32_t* inputs, int B, int T);
  void layer_forward(int l, const float* x, float* out, int B, int T);
  void layer_backward(int l, float* dres, int B, int T);
  void norm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, int m);
  void norm_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                     const float* mean, const float* rstd, const float* w, int m);
  double head_loss(float* dx, const int32_t* targets, const float* weights, double denominator,
                   int m);
  static float* at(float* base, int64_t off) { return off < 0 ? nullptr : base + off; }

  ModelConfig cfg_;
  int max_B_, max_T_;
  ParamTable table_;
  int64_t tok_emb_ = -1, pos_emb_ = -1, normf_w_ = -1, normf_b_ = -1, lm_head_ = -1;
  std::vector<LayerOffsets> layers_;
  Buffer<float> params_, grads_;

  // Activations saved for the backward, and scratch.
  std::vector<Buffer<float>> residual_;  // L+1 of [m, C]: the input of each layer, then the output
  std::vector<LayerActs> acts_;
  Buffer<float> normf_, meanf_, rstdf_;  // [m, C], [m], [m]
  Buffer<float> tmp_c_, dnorm_, dres_, dq_, dk_, dv_, datt_, dup_, dgate_, dact_, ce_scratch_;
  int ce_chunk_rows_ = 0;
};

}  // namespace dendrite
