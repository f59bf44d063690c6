#include "dendrite/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dendrite/core/check.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/attention.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/norm.h"

namespace dendrite {

Transformer::Transformer(const ModelConfig& config, int max_B, int max_T)
    : cfg_(config), max_B_(max_B), max_T_(max_T) {
  cfg_.validate();
  DENDRITE_CHECK(max_B > 0 && max_T > 0, "model: batch and sequence must be positive, got B=",
                 max_B, " T=", max_T);
  DENDRITE_CHECK(max_T <= cfg_.block_size, "model: sequence length ", max_T,
                 " exceeds the model's block_size ", cfg_.block_size,
                 "; use a shorter --seq or a model with a larger block_size");
  build_table();
  params_.resize(table_.total());
  grads_.resize(table_.total());

  const long m = long(max_B) * max_T, C = cfg_.n_embd, F = cfg_.ffn_hidden;
  const long qd = long(cfg_.n_head) * cfg_.head_size(), kvd = long(cfg_.n_kv_head) * cfg_.head_size();
  residual_.resize(cfg_.n_layer + 1);
  for (auto& r : residual_) r.resize(m * C);
  acts_.resize(cfg_.n_layer);
  for (auto& a : acts_) {
    a.norm1.resize(m * C), a.mean1.resize(m), a.rstd1.resize(m);
    a.q.resize(m * qd), a.k.resize(m * kvd), a.v.resize(m * kvd);
    a.att.resize(m * qd), a.lse.resize(long(max_B) * cfg_.n_head * max_T);
    a.mid.resize(m * C), a.norm2.resize(m * C), a.mean2.resize(m), a.rstd2.resize(m);
    a.up.resize(m * F), a.act.resize(m * F);
    if (!cfg_.gpt2()) a.gate.resize(m * F);
  }
  normf_.resize(m * C), meanf_.resize(m), rstdf_.resize(m);
  tmp_c_.resize(m * C), dnorm_.resize(m * C), dres_.resize(m * C);
  dq_.resize(m * qd), dk_.resize(m * kvd), dv_.resize(m * kvd), datt_.resize(m * qd);
  dup_.resize(m * F), dact_.resize(m * F);
  if (!cfg_.gpt2()) dgate_.resize(m * F);
  ce_chunk_rows_ = int(std::min<long>(m, 256));
  ce_scratch_.resize(long(ce_chunk_rows_) * cfg_.padded_vocab());
}

// Parameter names are Dendrite's own; model/hf_names.cpp maps them to
// Hugging Face's for checkpoints.
void Transformer::build_table() {
  const int64_t C = cfg_.n_embd, F = cfg_.ffn_hidden, Vp = cfg_.padded_vocab();
  const int64_t qd = int64_t(cfg_.n_head) * cfg_.head_size();
  const int64_t kvd = int64_t(cfg_.n_kv_head) * cfg_.head_size();
  const float std = cfg_.init_std;
  // GPT-2 scales the init of the projections into the residual stream by 1/sqrt(2L).
  const float proj_std = cfg_.gpt2() ? std / std::sqrt(2.0f * cfg_.n_layer) : std;
  const bool bias = cfg_.gpt2();
  auto weight = [&](const std::string& n, int64_t out, int64_t in, float s) {
    return table_.add(n, {out, in}, true, Init::kNormal, s).offset;
  };
  auto vec = [&](const std::string& n, int64_t len, Init init) {
    return table_.add(n, {len}, false, init).offset;
  };
  tok_emb_ = table_.add("tok_emb", {Vp, C}, true, Init::kNormal, std, cfg_.vocab_size).offset;
  if (cfg_.gpt2()) pos_emb_ = table_.add("pos_emb", {cfg_.block_size, C}, true, Init::kNormal, std / 2).offset;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    LayerOffsets o;
    o.norm1_w = vec(p + "norm1.weight", C, Init::kOnes);
    if (bias) o.norm1_b = vec(p + "norm1.bias", C, Init::kZeros);
    o.q_w = weight(p + "q.weight", qd, C, std);
    if (bias) o.q_b = vec(p + "q.bias", qd, Init::kZeros);
    o.k_w = weight(p + "k.weight", kvd, C, std);
    if (bias) o.k_b = vec(p + "k.bias", kvd, Init::kZeros);
    o.v_w = weight(p + "v.weight", kvd, C, std);
    if (bias) o.v_b = vec(p + "v.bias", kvd, Init::kZeros);
    o.o_w = weight(p + "o.weight", C, qd, proj_std);
    if (bias) o.o_b = vec(p + "o.bias", C, Init::kZeros);
    o.norm2_w = vec(p + "norm2.weight", C, Init::kOnes);
    if (bias) o.norm2_b = vec(p + "norm2.bias", C, Init::kZeros);
    if (!cfg_.gpt2()) o.gate_w = weight(p + "gate.weight", F, C, std);
    o.up_w = weight(p + "up.weight", F, C, std);
    if (bias) o.up_b = vec(p + "up.bias", F, Init::kZeros);
    o.down_w = weight(p + "down.weight", C, F, proj_std);
    if (bias) o.down_b = vec(p + "down.bias", C, Init::kZeros);
    layers_.push_back(o);
  }
  normf_w_ = vec("norm_f.weight", C, Init::kOnes);
  if (bias) normf_b_ = vec("norm_f.bias", C, Init::kZeros);
  if (!cfg_.tied_embeddings())
    lm_head_ = table_.add("lm_head", {Vp, C}, true, Init::kNormal, std, cfg_.vocab_size).offset;
}

size_t Transformer::activation_bytes() const {
  size_t n = 0;
  for (auto& r : residual_) n += r.size();
  for (auto& a : acts_)
    for (const Buffer<float>* b : {&a.norm1, &a.mean1, &a.rstd1, &a.q, &a.k, &a.v, &a.att, &a.lse,
                                   &a.mid, &a.norm2, &a.mean2, &a.rstd2, &a.up, &a.gate, &a.act})
      n += b->size();
  for (const Buffer<float>* b : {&normf_, &meanf_, &rstdf_, &tmp_c_, &dnorm_, &dres_, &dq_, &dk_, &dv_,
                                 &datt_, &dup_, &dgate_, &dact_, &ce_scratch_})
    n += b->size();
  return n * sizeof(float);
}

void Transformer::check_batch(const int32_t* inputs, int B, int T) const {
  DENDRITE_CHECK(B >= 1 && B <= max_B_ && T >= 1 && T <= max_T_, "model: batch ", B, "x", T,
                 " exceeds the ", max_B_, "x", max_T_, " the model was sized for");
  for (long r = 0; r < long(B) * T; ++r)
    DENDRITE_CHECK(inputs[r] >= 0 && inputs[r] < cfg_.vocab_size, "model: token id ", inputs[r],
                   " at position ", r, " is outside the vocabulary [0, ", cfg_.vocab_size,
                   "); the data was tokenized with another tokenizer");
}

void Transformer::norm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                               const float* b, int m) {
  if (cfg_.gpt2())
    ops::layernorm_forward(y, mean, rstd, x, w, b, m, cfg_.n_embd, cfg_.norm_eps);
  else
    ops::rmsnorm_forward(y, rstd, x, w, m, cfg_.n_embd, cfg_.norm_eps);
}

void Transformer::norm_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                                const float* mean, const float* rstd, const float* w, int m) {
  if (cfg_.gpt2())
    ops::layernorm_backward(dx, dw, db, dy, x, mean, rstd, w, m, cfg_.n_embd);
  else
    ops::rmsnorm_backward(dx, dw, dy, x, rstd, w, m, cfg_.n_embd);
}

void Transformer::forward(const int32_t* inputs, int B, int T) {
  check_batch(inputs, B, T);
  float* P = params_.data();
  const int m = B * T;
  ops::embedding_forward(residual_[0].data(), inputs, P + tok_emb_, at(P, pos_emb_), B, T,
                         cfg_.n_embd);
  for (int l = 0; l < cfg_.n_layer; ++l)
    layer_forward(l, residual_[l].data(), residual_[l + 1].data(), B, T);
  norm_forward(normf_.data(), meanf_.data(), rstdf_.data(), residual_[cfg_.n_layer].data(),
               P + normf_w_, at(P, normf_b_), m);
}

void Transformer::layer_forward(int l, const float* x, float* out, int B, int T) {
  const LayerOffsets& o = layers_[l];
  LayerActs& a = acts_[l];
  float* P = params_.data();
  const int m = B * T, C = cfg_.n_embd, F = cfg_.ffn_hidden, hs = cfg_.head_size();
  const int qd = cfg_.n_head * hs, kvd = cfg_.n_kv_head * hs;
  const long mC = long(m) * C;

  // attention: [m, C] -> q [m, qd], k, v [m, kvd] -> att [m, qd] -> [m, C]
  norm_forward(a.norm1.data(), a.mean1.data(), a.rstd1.data(), x, P + o.norm1_w, at(P, o.norm1_b), m);
  ops::linear_forward(a.q.data(), a.norm1.data(), P + o.q_w, at(P, o.q_b), m, C, qd);
  ops::linear_forward(a.k.data(), a.norm1.data(), P + o.k_w, at(P, o.k_b), m, C, kvd);
  ops::linear_forward(a.v.data(), a.norm1.data(), P + o.v_w, at(P, o.v_b), m, C, kvd);
  if (!cfg_.gpt2()) {
    ops::rope_forward(a.q.data(), B, T, cfg_.n_head, hs, qd, cfg_.rope_theta);
    ops::rope_forward(a.k.data(), B, T, cfg_.n_kv_head, hs, kvd, cfg_.rope_theta);
  }
  ops::AttentionShape s{B, T, cfg_.n_head, cfg_.n_kv_head, hs, qd, kvd, qd};
  ops::attention_forward(a.att.data(), a.lse.data(), a.q.data(), a.k.data(), a.v.data(), s);
  ops::linear_forward(tmp_c_.data(), a.att.data(), P + o.o_w, at(P, o.o_b), m, qd, C);
  ops::add(a.mid.data(), x, tmp_c_.data(), mC);

  // MLP: [m, C] -> [m, F] -> [m, C]
  norm_forward(a.norm2.data(), a.mean2.data(), a.rstd2.data(), a.mid.data(), P + o.norm2_w,
               at(P, o.norm2_b), m);
  ops::linear_forward(a.up.data(), a.norm2.data(), P + o.up_w, at(P, o.up_b), m, C, F);
  if (cfg_.gpt2()) {
    ops::gelu_forward(a.act.data(), a.up.data(), long(m) * F);
  } else {
    ops::linear_forward(a.gate.data(), a.norm2.data(), P + o.gate_w, nullptr, m, C, F);
    ops::swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), long(m) * F);
  }
  ops::linear_forward(tmp_c_.data(), a.act.data(), P + o.down_w, at(P, o.down_b), m, F, C);
  ops::add(out, a.mid.data(), tmp_c_.data(), mC);
}

// dres [m, C] holds dLoss/d(output of layer l); on return, dLoss/d(input of layer l).
void Transformer::layer_backward(int l, float* dres, int B, int T) {
  const LayerOffsets& o = layers_[l];
  LayerActs& a = acts_[l];
  float* P = params_.data();
  float* G = grads_.data();
  const int m = B * T, C = cfg_.n_embd, F = cfg_.ffn_hidden, hs = cfg_.head_size();
  const int qd = cfg_.n_head * hs, kvd = cfg_.n_kv_head * hs;
  const long mC = long(m) * C;

  // MLP: out = mid + down(act)
  ops::linear_backward_input(dact_.data(), dres, P + o.down_w, m, F, C, false);
  ops::linear_backward_weight(G + o.down_w, at(G, o.down_b), dres, a.act.data(), m, F, C);
  if (cfg_.gpt2()) {
    ops::gelu_backward(dup_.data(), dact_.data(), a.up.data(), long(m) * F);
  } else {
    ops::swiglu_backward(dgate_.data(), dup_.data(), dact_.data(), a.gate.data(), a.up.data(),
                         long(m) * F);
    ops::linear_backward_input(dnorm_.data(), dgate_.data(), P + o.gate_w, m, C, F, false);
    ops::linear_backward_weight(G + o.gate_w, nullptr, dgate_.data(), a.norm2.data(), m, C, F);
  }
  ops::linear_backward_input(dnorm_.data(), dup_.data(), P + o.up_w, m, C, F, !cfg_.gpt2());
  ops::linear_backward_weight(G + o.up_w, at(G, o.up_b), dup_.data(), a.norm2.data(), m, C, F);
  norm_backward(tmp_c_.data(), G + o.norm2_w, at(G, o.norm2_b), dnorm_.data(), a.mid.data(),
                a.mean2.data(), a.rstd2.data(), P + o.norm2_w, m);
  ops::add_inplace(dres, tmp_c_.data(), mC);  // now dLoss/d(mid)

  // attention: mid = x + o(att)
  ops::linear_backward_input(datt_.data(), dres, P + o.o_w, m, qd, C, false);
  ops::linear_backward_weight(G + o.o_w, at(G, o.o_b), dres, a.att.data(), m, qd, C);
  ops::AttentionShape s{B, T, cfg_.n_head, cfg_.n_kv_head, hs, qd, kvd, qd};
  ops::attention_backward(dq_.data(), dk_.data(), dv_.data(), datt_.data(), a.att.data(),
                          a.lse.data(), a.q.data(), a.k.data(), a.v.data(), s);
  if (!cfg_.gpt2()) {
    ops::rope_backward(dq_.data(), B, T, cfg_.n_head, hs, qd, cfg_.rope_theta);
    ops::rope_backward(dk_.data(), B, T, cfg_.n_kv_head, hs, kvd, cfg_.rope_theta);
  }
  ops::linear_backward_input(dnorm_.data(), dq_.data(), P + o.q_w, m, C, qd, false);
  ops::linear_backward_input(dnorm_.data(), dk_.data(), P + o.k_w, m, C, kvd, true);
  ops::linear_backward_input(dnorm_.data(), dv_.data(), P + o.v_w, m, C, kvd, true);
  ops::linear_backward_weight(G + o.q_w, at(G, o.q_b), dq_.data(), a.norm1.data(), m, C, qd);
  ops::linear_backward_weight(G + o.k_w, at(G, o.k_b), dk_.data(), a.norm1.data(), m, C, kvd);
  ops::linear_backward_weight(G + o.v_w, at(G, o.v_b), dv_.data(), a.norm1.data(), m, C, kvd);
  norm_backward(tmp_c_.data(), G + o.norm1_w, at(G, o.norm1_b), dnorm_.data(),
                residual_[l].data(), a.mean1.data(), a.rstd1.data(), P + o.norm1_w, m);
  ops::add_inplace(dres, tmp_c_.data(), mC);
}

double Transformer::head_loss(float* dx, const int32_t* targets, const float* weights,
                              double denominator, int m) {
  float* P = params_.data();
  const int64_t head = cfg_.tied_embeddings() ? tok_emb_ : lm_head_;
  ops::CrossEntropyShape s{m, cfg_.n_embd, cfg_.vocab_size, cfg_.padded_vocab(), ce_chunk_rows_};
  return ops::lm_head_cross_entropy(dx, dx ? grads_.data() + head : nullptr, normf_.data(),
                                    P + head, targets, weights, denominator, s, ce_scratch_.data());
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets,
                                     const float* weights, double denominator, int B, int T) {
  forward(inputs, B, T);
  const int m = B * T;
  float* G = grads_.data();
  float* dres = dres_.data();
  double loss = head_loss(dnorm_.data(), targets, weights, denominator, m);
  norm_backward(dres, G + normf_w_, at(G, normf_b_), dnorm_.data(), residual_[cfg_.n_layer].data(),
                meanf_.data(), rstdf_.data(), params_.data() + normf_w_, m);
  for (int l = cfg_.n_layer - 1; l >= 0; --l) layer_backward(l, dres, B, T);
  ops::embedding_backward(G + tok_emb_, at(G, pos_emb_), dres, inputs, B, T, cfg_.n_embd);
  return loss;
}

double Transformer::forward_loss(const int32_t* inputs, const int32_t* targets,
                                 const float* weights, double denominator, int B, int T) {
  forward(inputs, B, T);
  return head_loss(nullptr, targets, weights, denominator, B * T);
}

void Transformer::logits(const int32_t* inputs, int B, int T, float* out) {
  forward(inputs, B, T);
  const int64_t head = cfg_.tied_embeddings() ? tok_emb_ : lm_head_;
  ops::lm_head_logits(out, normf_.data(), params_.data() + head, B * T, cfg_.n_embd,
                      cfg_.vocab_size);
}

void Transformer::last_logits(const int32_t* inputs, int T, float* out) {
  forward(inputs, 1, T);
  const int64_t head = cfg_.tied_embeddings() ? tok_emb_ : lm_head_;
  ops::lm_head_logits(out, normf_.data() + long(T - 1) * cfg_.n_embd, params_.data() + head, 1,
                      cfg_.n_embd, cfg_.vocab_size);
}

}  // namespace dendrite
