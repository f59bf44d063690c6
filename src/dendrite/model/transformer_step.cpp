// The forward and backward passes of the Transformer (declared in
// transformer.h), with the gradient reductions of DESIGN.md section 4 and
// the overlaps of section 5. Letters as in transformer.h.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "dendrite/core/check.h"
#include "dendrite/core/trace.h"
#include "dendrite/model/transformer.h"

namespace dendrite {

void Transformer::params_fence() {
  if (grid_.shape().z > 1 && params_->shared()) grid_.Z().barrier();
}

void Transformer::end_pass() {
  stream_.end_pass();
  params_fence();
}

Operand Transformer::stored_params() {
  if (!low_precision()) return params_->data();
  if (!low_fresh_) {  // rounded here, before the fence that lets the Z peers read them
    be_.to_bf16(params_low_->data_as<bf16>(), params_->data(), table_.replicated_begin());
    be_.before_collective();
    low_fresh_ = true;
  }
  return params_low_->data_as<bf16>();
}

Transformer::Writable Transformer::params_and_copy() {
  if (!low_precision()) return {params(), nullptr, 0};
  low_fresh_ = true;  // the caller writes both
  return {params_->data(), params_low_->data_as<bf16>(), table_.replicated_begin()};
}

Operand Transformer::operand(const float* x, bf16* low, int64_t n) const {
  if (!low_precision()) return x;
  be_.to_bf16(low, x, n);
  return low;
}

float* Transformer::bias_grad(const ParallelLinear& layer) {
  const ParamSpec* b = layer.bias();
  return b ? grads_->data() + b->offset : nullptr;
}

Transformer::LinearGrad Transformer::grad_of(const ParallelLinear& layer, const float* dy,
                                             bf16* low, Operand x, int m) {
  if (!low_precision()) return {&layer, dy, dy, x};
  return {&layer, nullptr, layer.dy_bf16(low, dy, m, grads_->data()), x};
}

void Transformer::forward(const int32_t* inputs, int B_loc, int T, int pass, int pos,
                          bool caching) {
  check_batch(inputs, B_loc, T);
  const Operand stored = stored_params();
  if (low_precision()) {  // the biases as bf16 epilogues add them
    const int64_t rb = table_.replicated_begin();
    be_.to_bf16(replicated_low_.data(), params_->data() + rb, table_.total() - rb);
  }
  params_fence();
  stream_.begin_pass(pass);
  const int m = B_loc * T;
  const int32_t* tokens = upload_ids(tokens_, inputs, m);
  {
    trace::Scope part("step", "embedding forward");
    embedding_.forward(residual_[0].data(), tokens, inputs, m, T, stored, stream_, pos);
  }
  for (int l = 0; l < cfg_.n_layer; ++l) {
    trace::Scope part("step", l, "forward");
    layer_forward(l, residual_[l].data(), residual_[l + 1].data(), B_loc, T, pos, caching);
  }
  // A pass that reads every row's logits takes the head's bf16 operand from
  // the norm's own pass (normf_ is then scratch). Generation keeps normf_: it
  // reads the last rows' fp32 values.
  const bool every_row = pass == kPassStep || pass == kPassLoss || pass == kPassLogits;
  norm_f_.forward(normf_.data(), meanf_.data(), rstdf_.data(), residual_[cfg_.n_layer].data(), m,
                  params_->data(), sums_, low_precision() && every_row ? normf_h_.data() : nullptr);
}

// x, out [m, C/Gx]. Under bf16 precision the inputs of GEMMs (attention's
// q, k, v included) are rounded to bf16 where they are made and saved so
// (LayerActs); their fp32 values then pass through the backward's scratch
// (tmp_c_, dqkv_, datt_, dact_: free until this layer's backward). A layer
// with qkv (Layer) computes q, k and v in one product, into rows of qkvh that
// attention reads with their stride.
void Transformer::layer_forward(int l, const float* x, float* out, int B_loc, int T, int pos,
                                bool caching) {
  Layer& L = layers_[l];
  LayerActs& a = acts(l);
  const float* P = params_->data();
  const int m = B_loc * T;
  // Where the fp32 outputs go: saved, or (bf16 saves only their rounding) scratch.
  const bool low = low_precision();
  float* n1 = low ? tmp_c_.data() : a.norm1.data();
  float* q = low ? dq_ : a.q.data();
  float* k = low ? dk_ : a.k.data();
  float* v = low ? dv_ : a.v.data();
  float* att = low ? datt_.data() : a.att.data();
  float* n2 = low ? tmp_c_.data() : a.norm2.data();
  float* act = low ? dact_.data() : a.act.data();

  // attention: [m, C/Gx] -> q [m, qd/Gy], k, v [m, kvd/Gy] -> att [m, qd/Gy] -> [m, C/Gx]
  L.norm1.forward(n1, a.mean1.data(), a.rstd1.data(), x, m, P, sums_,
                  low ? a.norm1h.data() : nullptr);
  const Operand h1 = saved(a.norm1, a.norm1h);
  // Under bf16 the products write attention's bf16 inputs themselves where
  // nothing comes between (RoPE turns q and k, the cache reads fp32).
  const bool v_low = low && !caching, qk_low = v_low && cfg_.gpt2();
  const bool qk_norm = cfg_.qk_norm;
  const bool fused = L.qkv_w && !caching;  // then under bf16
  if (fused && cfg_.gpt2()) {  // [m, qd/Gy + 2 kvd/Gy] in bf16 (the CPU's fp32 values in dqkv_)
    L.qkv.forward(dq_, h1, m, P, stream_, bf16_output(L.qkv, a.qkvh.data()));
  } else if (fused) {  // Llama's shape (no bias)
    // RoPE turns q's and k's heads (end to end in each row) in fp32 and
    // rounds the whole rows, v's values as they are, in one pass.
    const int w = qkv_width();
    L.qkv.forward(dq_, h1, m, P, stream_);
    be_.rope_forward_bf16(a.qkvh.data(), dq_, {B_loc, T, nh_ + nkv_, hs_, w, pos}, cfg_.rope());
  } else {
    L.q.forward(qk_norm ? a.qpre.data() : q, h1, m, P, stream_,
                bf16_output(L.q, qk_low ? a.qh : nullptr));
    L.k.forward(qk_norm ? a.kpre.data() : k, h1, m, P, stream_,
                bf16_output(L.k, qk_low ? a.kh : nullptr));
    L.v.forward(v, h1, m, P, stream_, bf16_output(L.v, v_low ? a.vh : nullptr));
  }
  if (qk_norm) {
    head_norm_forward(q, a.qrstd.data(), a.qpre.data(), m * nh_, *L.q_norm);
    head_norm_forward(k, a.krstd.data(), a.kpre.data(), m * nkv_, *L.k_norm);
  }
  if (!cfg_.gpt2() && !fused) {
    be_.rope_forward(q, {B_loc, T, nh_, hs_, qd_, pos}, cfg_.rope());
    be_.rope_forward(k, {B_loc, T, nkv_, hs_, kvd_, pos}, cfg_.rope());
  }
  if (caching) {
    // The cache is fp32; under bf16 precision q, k and v take the values the
    // training forward's attention reads (their bf16 rounding).
    if (low) {
      for (auto [x, h, n] :
           {std::tuple{q, a.qh, long(m) * qd_}, std::tuple{k, a.kh, long(m) * kvd_},
            std::tuple{v, a.vh, long(m) * kvd_}}) {
        be_.to_bf16(h, x, n);
        be_.to_float(x, h, n);
      }
    }
    const ops::CachedAttentionShape s{B_loc, T, pos, max_T_, nh_, nkv_, hs_, qd_, kvd_, qd_};
    be_.attention_cached(att, q, k, v, k_cache_[l].data(), v_cache_[l].data(), s);
  } else {
    const int w = fused ? qkv_width() : 0;  // the rows' stride in qkvh
    const ops::AttentionShape s{B_loc, T, nh_, nkv_, hs_, fused ? w : qd_, fused ? w : kvd_, qd_};
    const bf16* qkv = a.qkvh.data();
    const Operand qo = fused    ? Operand(qkv)
                       : qk_low ? Operand(a.qh)
                                : operand(q, a.qh, long(m) * qd_);
    const Operand ko = fused    ? Operand(qkv + qd_)
                       : qk_low ? Operand(a.kh)
                                : operand(k, a.kh, long(m) * kvd_);
    const Operand vo = fused   ? Operand(qkv + qd_ + kvd_)
                       : v_low ? Operand(a.vh)
                               : operand(v, a.vh, long(m) * kvd_);
    if (low)  // the output in bf16 alone: o's operand
      be_.attention_forward_bf16(a.atth.data(), att, a.lse.data(), qo, ko, vo, s);
    else
      be_.attention_forward(att, a.lse.data(), qo, ko, vo, s);
  }
  const Operand att_in =
      low && !caching ? Operand(a.atth.data()) : operand(att, a.atth.data(), long(m) * qd_);
  ops::LinearEpilogue plus_x;  // mid = x + o(att), the residual added in the product
  plus_x.residual = x;
  L.o.forward(a.mid.data(), att_in, m, P, stream_, plus_x);

  // MLP: [m, C/Gx] -> [m, F/Gy] -> [m, C/Gx]
  L.norm2.forward(n2, a.mean2.data(), a.rstd2.data(), a.mid.data(), m, P, sums_,
                  low ? a.norm2h.data() : nullptr);
  const Operand h2 = saved(a.norm2, a.norm2h);
  if (cfg_.gpt2()) {  // act = gelu(up), keeping up (GELU's input) for the backward
    ops::LinearEpilogue gelu = bf16_output(L.up, low ? a.acth.data() : nullptr);
    gelu.gelu = true;
    gelu.pre_gelu = a.up_out;
    L.up.forward(act, h2, m, P, stream_, gelu);
  } else {
    if (gate_up_fused_) {  // rows of gate's values then up's
      L.gate_up.forward(a.gate_out, h2, m, P, stream_);
    } else {
      L.up.forward(a.up_out, h2, m, P, stream_);
      L.gate.forward(a.gate_out, h2, m, P, stream_);
    }
    if (low)  // down's operand alone
      be_.swiglu_forward_bf16(a.acth.data(), act, a.gate_out, a.up_out, glu_rows(m));
    else
      be_.swiglu_forward(act, a.gate_out, a.up_out, long(m) * f_);
  }
  const Operand act_in = low ? Operand(a.acth.data()) : Operand(act);
  ops::LinearEpilogue plus_mid;  // out = mid + down(act)
  plus_mid.residual = a.mid.data();
  L.down.forward(out, act_in, m, P, stream_, plus_mid);
}

// dres [m, C/Gx] holds dLoss/d(output of layer l); on return, dLoss/d(its
// input). layer_forward in reverse: the MLP, then attention.
void Transformer::layer_backward(int l, float* dres, int B_loc, int T) {
  Layer& L = layers_[l];
  LayerActs& a = acts(l);
  const float* P = params_->data();
  float* G = grads_->data();
  const int m = B_loc * T;
  const long mF = long(m) * f_;

  // Under bf16 each norm's backward writes the residual's new gradient as the
  // bf16 operand of the product below it, with that product's bias sums: o's
  // from norm2, and the next layer down's down from norm1. The top layer's
  // down takes the final norm's gradient and rounds it itself.
  const bool low = low_precision();
  const bool dres_rounded = low && l + 1 < cfg_.n_layer;  // by the layer above's norm1
  const Operand act = saved(a.act, a.acth);

  // MLP: out = mid + down(act): [m, C/Gx] -> [m, F/Gy] -> [m, C/Gx]
  LinearGrad down_dw;  // down's dW, when it runs behind the MLP's dx sum
  // GPT-2: dup = gelu'(up) * (the dx of down), GELU's backward in dup itself
  const bool gelu = cfg_.gpt2();
  linear_backward(gelu ? dup_ : dact_.data(), m,
                  {dres_rounded ? LinearGrad{&L.down, nullptr, Operand(dres_h_.data()), act}
                                : grad_of(L.down, dres, dres_h_.data(), act, m)},
                  {}, &down_dw, gelu ? a.up_out : nullptr);
  // SwiGLU: under bf16 without biases to sum, the backward writes the bf16
  // operands of gate's and up's backward alone (as gate_up's rows, where
  // they are one product).
  const bool swiglu_low = !gelu && low && !L.gate.bias() && !L.up.bias();
  if (swiglu_low) {
    be_.swiglu_backward_bf16(dgate_h_, dup_h_, dgate_, dup_, dact_.data(), a.gate_out, a.up_out,
                             glu_rows(m));
  } else if (!gelu) {
    be_.swiglu_backward(dgate_, dup_, dact_.data(), a.gate_out, a.up_out, mF);
  }
  const Operand h2 = saved(a.norm2, a.norm2h);
  if (gate_up_fused_) {  // under bf16, without biases (can_fuse_gate_up)
    linear_backward(dnorm_.data(), m, {LinearGrad{&L.gate_up, nullptr, Operand(dgate_h_), h2}},
                    down_dw, nullptr);
  } else {
    const LinearGrad gate = gelu         ? LinearGrad{}
                            : swiglu_low ? LinearGrad{&L.gate, nullptr, Operand(dgate_h_), h2}
                                         : grad_of(L.gate, dgate_, dgate_h_, h2, m);
    const LinearGrad up = swiglu_low ? LinearGrad{&L.up, nullptr, Operand(dup_h_), h2}
                                     : grad_of(L.up, dup_, dup_h_, h2, m);
    linear_backward(dnorm_.data(), m, {gate, up}, down_dw, nullptr);
  }
  const ops::ResidualGradBf16 o_dy{dres_h_.data(), bias_grad(L.o)};
  L.norm2.backward_add(dres, tmp_c_.data(), dnorm_.data(), a.mid.data(), a.mean2.data(),
                       a.rstd2.data(), m, P, G, sums_, low ? &o_dy : nullptr);  // dLoss/d(mid)

  // attention: mid = x + o(att): [m, C/Gx] -> q [m, qd/Gy], k, v [m, kvd/Gy] -> [m, C/Gx]
  LinearGrad o_dw;  // o's dW, when it runs behind the dx sum of q, k, v
  const Operand att = saved(a.att, a.atth);
  linear_backward(datt_.data(), m,
                  {low ? LinearGrad{&L.o, nullptr, Operand(dres_h_.data()), att}
                       : grad_of(L.o, dres, dres_h_.data(), att, m)},
                  {}, &o_dw);
  // norm1's backward: the gradient of layer l - 1's output, rounded for its down
  const ops::ResidualGradBf16 down_dy{dres_h_.data(),
                                      l > 0 ? bias_grad(layers_[l - 1].down) : nullptr};
  const ops::ResidualGradBf16* below = low && l > 0 ? &down_dy : nullptr;
  const Operand h1 = saved(a.norm1, a.norm1h);
  if (L.qkv_w) {  // q, k and v's rows interleaved, and their gradients so in dqkv_
    const int w = qkv_width();
    const ops::AttentionShape s{B_loc, T, nh_, nkv_, hs_, w, w, qd_};
    const bf16* qkv = a.qkvh.data();
    if (low_precision() && cfg_.gpt2()) {
      // No RoPE between: attention writes the bf16 operand of qkv's backward
      // and adds its columns' sums into qkv's bias gradient itself.
      ops::AttentionGradsBf16 g{dq_h_, dq_h_ + qd_, dq_h_ + qd_ + kvd_,
                                dq_,   dq_ + qd_,   dq_ + qd_ + kvd_};
      if (const ParamSpec* b = L.qkv.bias()) {
        g.db_q = G + b->offset;
        g.db_k = g.db_q + qd_;
        g.db_v = g.db_k + kvd_;
      }
      be_.attention_backward_bf16(g, datt_.data(), saved(a.att, a.atth), a.lse.data(), Operand(qkv),
                                  Operand(qkv + qd_), Operand(qkv + qd_ + kvd_), s);
      linear_backward(dnorm_.data(), m, {LinearGrad{&L.qkv, nullptr, Operand(dq_h_), h1}}, o_dw,
                      nullptr);
    } else {  // Llama's shape: bf16 and no bias (fuse_qkv)
      be_.attention_backward(dq_, dq_ + qd_, dq_ + qd_ + kvd_, datt_.data(), saved(a.att, a.atth),
                             a.lse.data(), Operand(qkv), Operand(qkv + qd_),
                             Operand(qkv + qd_ + kvd_), s);
      // RoPE's backward turns q's and k's heads back and rounds the whole
      // rows (v's gradient as it is) into qkv's operand, in one pass.
      be_.rope_backward_bf16(dq_h_, dq_, {B_loc, T, nh_ + nkv_, hs_, w}, cfg_.rope());
      linear_backward(dnorm_.data(), m, {LinearGrad{&L.qkv, nullptr, Operand(dq_h_), h1}}, o_dw,
                      nullptr);
    }
    L.norm1.backward_add(dres, tmp_c_.data(), dnorm_.data(), residual_[l].data(), a.mean1.data(),
                         a.rstd1.data(), m, P, G, sums_, below);
    return;
  }
  const ops::AttentionShape s{B_loc, T, nh_, nkv_, hs_, qd_, kvd_, qd_};
  be_.attention_backward(dq_, dk_, dv_, datt_.data(), saved(a.att, a.atth), a.lse.data(),
                         saved(a.q, a.qh), saved(a.k, a.kh), saved(a.v, a.vh), s);
  if (!cfg_.gpt2()) {
    be_.rope_backward(dq_, {B_loc, T, nh_, hs_, qd_}, cfg_.rope());
    be_.rope_backward(dk_, {B_loc, T, nkv_, hs_, kvd_}, cfg_.rope());
  }
  float* dq = dq_;  // the gradients of q's and k's products
  float* dk = dk_;
  if (cfg_.qk_norm) {
    head_norm_backward(dqn_.data(), dq, a.qpre.data(), a.qrstd.data(), m * nh_, *L.q_norm);
    head_norm_backward(dkn_.data(), dk, a.kpre.data(), a.krstd.data(), m * nkv_, *L.k_norm);
    dq = dqn_.data(), dk = dkn_.data();
  }
  linear_backward(dnorm_.data(), m,
                  {grad_of(L.q, dq, dq_h_, h1, m), grad_of(L.k, dk, dk_h_, h1, m),
                   grad_of(L.v, dv_, dv_h_, h1, m)},
                  o_dw, nullptr);
  L.norm1.backward_add(dres, tmp_c_.data(), dnorm_.data(), residual_[l].data(), a.mean1.data(),
                       a.rstd1.data(), m, P, G, sums_, below);
}

void Transformer::head_norm_forward(float* y, float* rstd, const float* x, int rows,
                                    const ParamSpec& gain) {
  be_.rmsnorm_row_sums(head_sums_.data(), x, {rows, hs_, hs_});
  be_.rmsnorm_apply(y, rstd, head_sums_.data(), x, params_->data() + gain.offset, {rows, hs_, hs_},
                    cfg_.norm_eps);
}

void Transformer::head_norm_backward(float* dx, const float* dy, const float* x, const float* rstd,
                                     int rows, const ParamSpec& gain) {
  const float* g = params_->data() + gain.offset;
  be_.rmsnorm_backward_sums(head_sums_.data(), dy, x, g, {rows, hs_, hs_});
  be_.fill(head_dgain_.data(), 0.0f, hs_);
  be_.rmsnorm_backward_apply(dx, head_dgain_.data(), head_sums_.data(), dy, x, rstd, g,
                             {rows, hs_, hs_});
  be_.before_collective();
  grid_.Y().all_reduce(head_dgain_.data(), hs_);
  be_.add_inplace(grads_->data() + gain.offset, head_dgain_.data(), hs_);
}

// OAR over a group of layers that read one input (q, k, v; gate and up; o or
// down alone): dx [m, in] = the sum over the group of dy W, summed over the
// backward axis once. With OAR that sum is posted, and the group's dW
// products, then `behind`'s, run while it moves; it is waited for last.
// Where the backward axis has no peers (o and down when Gx = 1) there is no
// sum to hide a dW product behind: given hand_on, the (one) layer's product
// is left there, and the next group of the block runs it as its `behind`.
// The products are the same bits in any order; only their place changes.
void Transformer::linear_backward(float* dx, int m, std::initializer_list<LinearGrad> group,
                                  const LinearGrad& behind, LinearGrad* hand_on,
                                  const float* gelu_input) {
  float* G = grads_->data();
  const ParallelLinear* summing = nullptr;  // the group's first layer: all share the axis
  const bool fuse_gelu = gelu_input && group.size() == 1 && !group.begin()->layer->sums_input();
  for (const LinearGrad& g : group) {
    if (!g.layer) continue;
    g.layer->input_gradient(dx, summing != nullptr, g.dy, m, stream_,
                            fuse_gelu ? gelu_input : nullptr);
    if (!summing) summing = g.layer;
  }
  Request sum = summing->sum_input_gradient(dx, m);
  stream_.post_pending();  // the dW reduce-scatter queued last, behind the dx sum
  if (hand_on && opt_.oar && !summing->sums_input()) {
    DENDRITE_CHECK(group.size() == 1, "linear backward: only a single layer hands its dW on");
    *hand_on = *group.begin();
  } else {
    for (const LinearGrad& g : group)
      if (g.layer) g.layer->weight_gradient(g.dy_f32, g.dy, g.x, m, G, stream_, &sum);
  }
  if (behind.layer)
    behind.layer->weight_gradient(behind.dy_f32, behind.dy, behind.x, m, G, stream_, &sum);
  sum.wait();
  if (gelu_input && !fuse_gelu)
    be_.gelu_backward(dx, dx, gelu_input, int64_t(m) * summing->in_local());
}

const float* Transformer::upload_weights(const float* host, int64_t m) {
  if (!host) return nullptr;
  be_.upload(weights_.data(), host, size_t(m) * sizeof(float));
  return weights_.data();
}

double Transformer::global_sum(double local) {
  grid_.Z().all_reduce(&local, 1);
  grid_.D().all_reduce(&local, 1);
  return local;
}

// On shared memory the D sums run on the progress engine after the layer's
// ORS reduce-scatters (one FIFO: the queued one is posted first); over MPI
// those must be complete first.
void Transformer::reduce_bucket(const Range& chunked, const Range& replicated) {
  float* G = grads_->data();
  be_.before_collective();
  stream_.post_pending();
  grid_.Z().all_reduce(G + replicated.begin, replicated.end - replicated.begin);
  // Where Z or D crosses nodes, the layer's pending Z reduce-scatters are
  // waited for before its D sums are posted. Where MPI lacks
  // MPI_THREAD_MULTIPLE the D sums are MPI requests that read the dW chunks
  // at once, so the wait is needed. Where the sums are rings on the engine
  // (which would run them after the reduce-scatters anyway), the wait still
  // measured faster: it keeps the long D rings from queueing between the Z
  // gathers the next layers need (docs/overlap.md, simulated nodes).
  if (!grads_->shared() || !params_->shared()) stream_.finish_reductions();
  for (const Range& r : {chunked, replicated})
    dp_pending_.push_back(post_dp_sum(r));
}

Request Transformer::post_dp_sum(const Range& r) {
  if (grads_->shared()) return grid_.D().iall_reduce(*grads_, r.begin, r.end - r.begin);
  return grid_.D().iall_reduce(grads_->data() + r.begin, r.end - r.begin, DType::kF32);
}

// Replicated tensors (norms, biases) sum over Z; every tensor sums over D.
// The Z-chunked weights were already reduce-scattered over Z by their layers.
// With DP buckets, the layers' sums over D are already in flight; the rest
// (embedding, head, final norm) is posted here and everything waited for.
void Transformer::sync_gradients() {
  float* G = grads_->data();
  be_.before_collective();
  stream_.finish_reductions();
  if (!dp_buckets()) {
    const int64_t r0 = table_.replicated_begin();
    grid_.Z().all_reduce(G + r0, table_.total() - r0);
    grid_.D().all_reduce(*grads_, 0, table_.total());
    return;
  }
  for (const Range& r : rest_replicated_) grid_.Z().all_reduce(G + r.begin, r.end - r.begin);
  for (const auto* ranges : {&rest_chunked_, &rest_replicated_})
    for (const Range& r : *ranges) dp_pending_.push_back(post_dp_sum(r));
  for (Request& r : dp_pending_) r.wait();
  dp_pending_.clear();
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets,
                                     const float* weights, double denominator, int B, int T,
                                     bool sync) {
  forward_backward_unread(inputs, targets, weights, denominator, B, T, sync);
  return read_step_totals().loss;
}

void Transformer::forward_backward_unread(const int32_t* inputs, const int32_t* targets,
                                          const float* weights, double denominator, int B, int T,
                                          bool sync) {
  const int B_loc = local_batch(B), m = B_loc * T;
  forward(inputs, B_loc, T, kPassStep);
  float* G = grads_->data();
  const Operand xf = saved(normf_, normf_h_);
  {
    trace::Scope part("step", "head and loss");
    head_.forward_backward(dnorm_.data(), xf, upload_targets(targets, m),
                           upload_weights(weights, m), denominator, m, G, stream_,
                           loss_slot(denominator), tied_head());
  }
  float* dres = dres_.data();
  norm_f_.backward(dres, dnorm_.data(), residual_[cfg_.n_layer].data(), meanf_.data(),
                   rstdf_.data(), m, params_->data(), G, sums_);
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    trace::Scope part("step", l, "backward");
    // Recomputation refills the shared activations from the layer's saved input
    // (its output goes to scratch: the stream above is no longer needed).
    if (opt_.recompute) layer_forward(l, residual_[l].data(), recompute_out_.data(), B_loc, T);
    layer_backward(l, dres, B_loc, T);
    if (sync && dp_buckets()) reduce_bucket(layer_chunked_[l], layer_replicated_[l]);
    for (Request& r : dp_pending_) r.test();  // progress: MPI moves them only inside MPI calls
  }
  trace::Scope part("step", "embedding backward and gradient sync");
  embedding_.backward(dres, tokens_.data(), m, T, G, stream_);  // uploaded by forward()
  end_pass();
  if (sync)
    sync_gradients();
  else
    stream_.finish_reductions();  // this micro-batch's dW chunks added before the next one's
}

double Transformer::forward_loss(const int32_t* inputs, const int32_t* targets,
                                 const float* weights, double denominator, int B, int T) {
  const int B_loc = local_batch(B), m = B_loc * T;
  forward(inputs, B_loc, T, kPassLoss);
  const Operand xf = saved(normf_, normf_h_);
  head_.forward_backward(nullptr, xf, upload_targets(targets, m), upload_weights(weights, m),
                         denominator, m, grads_->data(), stream_, loss_slot(denominator),
                         tied_head());
  end_pass();
  return read_step_totals().loss;
}

double Transformer::grad_norm() {
  reduce_grad_norm();
  return read_step_totals().grad_norm;
}

void Transformer::reduce_grad_norm() {
  const TensorTable& t = norm_tensors_;
  be_.sum_squares_tensors(totals_.data(), grads_->data(), t.table.data(), t.count, t.values);
  norm_pending_ = true;
}

double* Transformer::loss_slot(double denominator) {
  const size_t k = pending_.size();
  if (totals_.size() < k + 2) {  // a step of more passes than ever before
    AllocationPurpose purpose("the step's loss and gradient norm");
    Buffer<double> more = be_.alloc<double>(int64_t(2 * (k + 1)));
    be_.copy(more.data(), totals_.data(), totals_.size() * sizeof(double));
    totals_ = std::move(more);
  }
  double* slot = totals_.data() + 1 + k;
  be_.zero(slot, sizeof(double));
  pending_.push_back(denominator);
  return slot;
}

// One download of the step's sums, then the host's sums over the grid, in
// the order the unread calls would have made them: each pass's loss over Z
// and D, then the squared norm over X, Y and Z.
Transformer::StepTotals Transformer::read_step_totals() {
  read_.resize(1 + pending_.size());
  be_.download(read_.data(), totals_.data(), read_.size() * sizeof(double));
  StepTotals t;
  for (size_t k = 0; k < pending_.size(); ++k) t.loss += global_sum(read_[1 + k] / pending_[k]);
  pending_.clear();
  if (norm_pending_) {
    double local = read_[0];
    grid_.X().all_reduce(&local, 1);
    grid_.Y().all_reduce(&local, 1);
    grid_.Z().all_reduce(&local, 1);
    t.grad_norm = std::sqrt(local);
    norm_pending_ = false;
  }
  return t;
}

void Transformer::logits(const int32_t* inputs, int B, int T, float* out) {
  const int B_loc = local_batch(B);
  forward(inputs, B_loc, T, kPassLogits);
  const int m = B_loc * T;
  AllocationPurpose purpose("the logits of every position");
  Buffer<float> logits = be_.alloc<float>(int64_t(m) * cfg_.vocab_size);
  head_.logits(logits.data(), saved(normf_, normf_h_), m, stream_, tied_head());
  end_pass();
  be_.download(out, logits.data(), logits.size() * sizeof(float));
}

void Transformer::last_position_logits(const int32_t* inputs, int B, int T, float* out) {
  const int B_loc = local_batch(B);
  forward(inputs, B_loc, T, kPassLastPosition);
  finish_last_positions(B_loc, T, out);
}

// The last rows and their logits go through buffers made at the first call
// (and grown for a larger batch), so that a generated token allocates and
// frees nothing on the device.
void Transformer::finish_last_positions(int B_loc, int T, float* out) {
  const int64_t rows = int64_t(B_loc) * c_, n = int64_t(B_loc) * cfg_.vocab_size;
  if (last_rows_.size() < size_t(rows) || last_logits_.size() < size_t(n)) {
    AllocationPurpose purpose("generation's last rows and their logits");
    last_rows_ = be_.alloc<float>(rows);  // [B_loc, C/Gx]
    last_logits_ = be_.alloc<float>(n);   // [B_loc, V]
  }
  be_.copy_rows(last_rows_.data(), normf_.data() + int64_t(T - 1) * c_, B_loc, c_, int64_t(T) * c_);
  head_.logits(last_logits_.data(), operand(last_rows_.data(), normf_h_.data(), rows), B_loc,
               stream_, tied_head(), /*keep=*/true);
  end_pass();
  be_.download(out, last_logits_.data(), size_t(n) * sizeof(float));
}

void Transformer::start_generation() {
  if (k_cache_.empty()) {
    const int64_t n = int64_t(std::max(1, local_batch(max_B_))) * max_T_ * kvd_;
    AllocationPurpose purpose("the key/value cache of generation");
    for (int l = 0; l < cfg_.n_layer; ++l) {
      k_cache_.push_back(be_.alloc<float>(n));
      v_cache_.push_back(be_.alloc<float>(n));
    }
  }
  cache_len_ = 0;
  cache_B_ = 0;
}

void Transformer::generation_logits(const int32_t* inputs, int B, int T, float* out) {
  DENDRITE_CHECK(!k_cache_.empty(), "generation: call start_generation first");
  DENDRITE_CHECK(cache_B_ == 0 || cache_B_ == B, "generation: the cache holds a batch of ",
                 cache_B_, " sequences, not ", B, "; start a new generation for another batch");
  DENDRITE_CHECK(cache_len_ + T <= max_T_, "generation: ", T, " new positions after ", cache_len_,
                 " exceed the ", max_T_, " the model was sized for");
  const int B_loc = local_batch(B);
  forward(inputs, B_loc, T, T == 1 ? kPassDecode : kPassPrefill, cache_len_, /*caching=*/true);
  cache_len_ += T;
  cache_B_ = B;
  finish_last_positions(B_loc, T, out);
}

}  // namespace dendrite
