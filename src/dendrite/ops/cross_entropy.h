// Softmax cross-entropy of the LM head, split over the vocabulary (DESIGN.md
// section 4). The head's logits x w^T come from the GEMM ops (ops/matmul.h),
// in chunks of rows so the [m, Vp] logits never exist at once; these pieces
// turn a chunk of logits into its loss and dlogits, from which the GEMM ops
// give dx = dlogits w and dw += dlogits^T x. x [m, C] final hidden
// states, w [Vp, C] the head weight (Vp >= V: ids V..Vp-1 are padding and
// never predicted). targets [m]; weight [m] per-token loss weight (0 drops a
// token: padding, Goldfish); the mean divides by `denominator` (the
// supervised-token count of the whole global batch).
//
// A rank holds logits [rows, Vloc] for vocabulary ids [v0, v0 + Vloc); ids at
// or above V (padding) are ignored. The unsplit vocabulary is one part:
// Vloc = Vp, v0 = 0, parts = 1.
#pragma once

#include <cstdint>

#include "dendrite/core/bf16.h"

namespace dendrite::ops {

// stats[r] = {log sum_j exp(logits[r,j]) over this rank's real ids,
//             logits[r, targets[r] - v0] if the target is in range, else 0}
// Rows with weight 0 (weight may be null) get {0, 0}. Checks targets in [0, V).
void ce_local_stats(float* stats, const float* logits, const int32_t* targets, const float* weight,
                    int rows, int Vloc, int v0, int V);
// Combines the local stats of the `parts` ranks (all [rows, 2], rank-major:
// gathered[p * rows * 2 + r * 2]) into lse[r] = logsumexp over parts; adds
// sum_r weight[r] * (lse[r] - target_logit[r]) (target logits summed over
// parts; the rows summed in row order, then added) to *total, one double in
// the backend's memory, so that a pass's loss stays there until it is read.
void ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                double* total);
// logits -> dlogits = (exp(logits - lse) - onehot) * weight / denominator,
// zero for padding ids and zero-weight rows.
void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                double denominator, int rows, int Vloc, int v0, int V);
// The same dlogits rounded to bf16 into dlogits [rows, Vloc] (the GEMM operand
// of the head's backward under bf16 precision): ce_dlogits, then to_bf16
// (convert.h), the same bits. logits are scratch afterwards (the CPU computes
// in them; a GPU only reads them).
void ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse, const int32_t* targets,
                     const float* weight, double denominator, int rows, int Vloc, int v0, int V);

}  // namespace dendrite::ops
