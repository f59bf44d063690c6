// Naive reference implementations (oracles for tests only) of causal
// self-attention, its backward, rotary embedding and the LM-head softmax
// cross-entropy. Single-threaded, every intermediate materialised, sums in
// double. Shapes and layouts are those of dendrite/ops/attention.h and
// dendrite/ops/cross_entropy.h: B batch, T sequence, NH query heads, NKV
// key/value heads, hs head size; m rows, C channels, V vocabulary, Vp padded.
#pragma once

#include <cstdint>

#include "dendrite/ops/attention.h"

namespace dendrite::ref {

// out (out_stride rows), lse [B, NH, T]: as ops::attention_forward.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const ops::AttentionShape& s);

// dq, dk, dv overwritten (only their heads' columns), from the full [T,T]
// probability matrix recomputed in double.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const ops::AttentionShape& s);

// In place, as ops::rope_forward (HF Llama "rotate half" convention).
void rope_forward(float* x, int B, int T, int nheads, int hs, int stride,
                  const ops::RopeSpec& rope);

// Mean weighted softmax cross-entropy of logits [m, V], divided by
// denominator; dlogits [m, V] (may be null) overwritten with its gradient
// (zero rows for zero weights).
double softmax_cross_entropy(double* dlogits, const double* logits, const int32_t* targets,
                             const float* weight, double denominator, int m, int V);

// Mean weighted cross-entropy of logits = x [m, C] * w[:V]^T, divided by
// denominator. When dx is not null: dx [m, C] overwritten, dw [Vp, C]
// overwritten (padding rows V..Vp-1 get zero).
double cross_entropy(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                     const float* weight, double denominator, int m, int C, int V, int Vp);

}  // namespace dendrite::ref
