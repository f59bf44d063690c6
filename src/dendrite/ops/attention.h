// Causal self-attention and rotary position embedding.
// B batch, T sequence, NH query heads, NKV key/value heads (NH % NKV == 0;
// grouped-query attention shares KV head h / (NH/NKV)), hs head size.
// Activations are row-major with row r = b*T + t; within a row the heads are
// consecutive blocks of hs values. Rows have a stride (in floats) so q, k and v
// can be separate buffers or slices of one.
#pragma once

#include "dendrite/core/bf16.h"
#include "dendrite/ops/rope.h"

namespace dendrite::ops {

struct AttentionShape {
  int B, T, NH, NKV, hs;
  int q_stride, kv_stride, out_stride;  // floats between consecutive rows
};

// out[b,t,h,:] = sum_{s<=t} softmax_s(q[b,t,h]·k[b,s,g] / sqrt(hs)) v[b,s,g],  g = h/(NH/NKV)
// lse [B, NH, T]: log-sum-exp of each row of scaled scores, saved for the backward.
// Never holds a [T,T] matrix for more than one (b, h) per thread at once.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s);

// Recomputes the probabilities from q, k and lse. dq, dk, dv overwritten
// (with q_stride / kv_stride layouts).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const AttentionShape& s);
// The same two with q, k, v and the saved output in bf16 (bf16 precision):
// widened as they are read, computed in fp32; out, dq, dk, dv stay fp32.
void attention_forward(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                       const AttentionShape& s);
// The forward's output rounded to bf16 into out_bf16 [B*T, out_stride], the
// heads' columns (the output projection's bf16 operand): attention_forward
// into out, then to_bf16 (convert.h), the same bits. out is scratch afterwards
// (the CPU computes in it; a GPU writes only out_bf16).
void attention_forward_bf16(bf16* out_bf16, float* out, float* lse, const bf16* q, const bf16* k,
                            const bf16* v, const AttentionShape& s);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const bf16* out,
                        const float* lse, const bf16* q, const bf16* k, const bf16* v,
                        const AttentionShape& s);

// Attention over a key/value cache, for generation: each of B sequences has
// Tq new rows at positions pos .. pos+Tq-1. q [B*Tq rows, q_stride], and the
// new keys and values k_new, v_new [B*Tq rows, kv_stride]. The op first writes
// the new keys and values into rows pos .. pos+Tq-1 of each sequence of the
// caches k_cache, v_cache [B, T_cache, NKV*hs] (rows 0 .. pos-1 hold the
// earlier positions), then
//   out[b,t,h,:] = sum_{s<=pos+t} softmax_s(q[b,t,h]·k_cache[b,s,g] / sqrt(hs)) v_cache[b,s,g]
// which for pos = 0 is attention_forward's output. Under bf16 precision the
// caller passes q, k and v rounded to bf16 (and widened back), as the
// training forward reads them.
struct CachedAttentionShape {
  int B, Tq, pos, T_cache, NH, NKV, hs;
  int q_stride, kv_stride, out_stride;  // floats between rows of q, k_new/v_new, out
};
void attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                      float* k_cache, float* v_cache, const CachedAttentionShape& s);

// Rotary embedding in the Hugging Face Llama convention ("rotate half"): for
// position t and i < hs/2, with f = rope_frequency(rope, i, hs) (ops/rope.h;
// theta^(-2i/hs) unscaled):
//   x'[i]        = x[i] cos(t f) - x[i+hs/2] sin(t f)
//   x'[i+hs/2]   = x[i+hs/2] cos(t f) + x[i] sin(t f)
// applied in place to x [B*T rows, nheads * hs] with the given row stride.
// Row b*T + t sits at position pos0 + t (pos0 > 0: new rows after a cache).
void rope_forward(float* x, int B, int T, int nheads, int hs, int stride, const RopeSpec& rope,
                  int pos0 = 0);
// The inverse rotation, applied in place to the gradient.
void rope_backward(float* dx, int B, int T, int nheads, int hs, int stride, const RopeSpec& rope);

}  // namespace dendrite::ops
