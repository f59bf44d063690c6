// The LM head fused with softmax cross-entropy, computed in row chunks so the
// [m, V] logits never exist at once. x [m, C] final hidden states, w [Vp, C]
// the head weight (Vp >= V: rows V..Vp-1 are padding and never predicted).
// targets [m]; weight [m] per-token loss weight (0 drops a token: padding,
// Goldfish); the mean divides by `denominator` (the supervised-token count of
// the whole global batch).
#pragma once

#include <cstdint>

namespace dendrite::ops {

struct CrossEntropyShape {
  int m, C, V, Vp;
  int chunk_rows;  // rows per chunk (logits buffer is [chunk_rows, Vp])
};

// Returns sum over rows of weight[r] * (-log softmax(x w^T)[r, targets[r]]),
// divided by denominator.  When dx is not null, also computes the gradients of
// that mean: dx [m, C] overwritten, dw [Vp, C] accumulated.
// weight may be null (all ones).  scratch holds chunk_rows * Vp floats.
double lm_head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                             const int32_t* targets, const float* weight, double denominator,
                             const CrossEntropyShape& s, float* scratch);

// logits [m, V] = x [m, C] * w[:V]^T   (for generation and tests)
void lm_head_logits(float* logits, const float* x, const float* w, int m, int C, int V);

// Pieces of the vocabulary-parallel cross-entropy (DESIGN.md section 4). A
// rank holds logits [rows, Vloc] for vocabulary ids [v0, v0 + Vloc); ids at or
// above V (padding) are ignored.
//
// stats[r] = {log sum_j exp(logits[r,j]) over this rank's real ids,
//             logits[r, targets[r] - v0] if the target is in range, else 0}
// Rows with weight 0 (weight may be null) get {0, 0}. Checks targets in [0, V).
void ce_local_stats(float* stats, const float* logits, const int32_t* targets, const float* weight,
                    int rows, int Vloc, int v0, int V);
// Combines the local stats of the `parts` ranks (all [rows, 2], rank-major:
// gathered[p * rows * 2 + r * 2]) into lse[r] = logsumexp over parts; returns
// sum_r weight[r] * (lse[r] - target_logit[r]) (target logits summed over parts).
double ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts);
// logits -> dlogits = (exp(logits - lse) - onehot) * weight / denominator,
// zero for padding ids and zero-weight rows.
void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                double denominator, int rows, int Vloc, int v0, int V);

}  // namespace dendrite::ops
