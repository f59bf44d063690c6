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

// rows of logits [rows, Vloc] holding ids [v0, v0 + Vloc) of a vocabulary of V.
struct VocabShape {
  int rows, Vloc, v0, V;
};
// Throws, naming the op, unless rows >= 0, Vloc > 0, v0 >= 0 and V > 0.
void check_vocab(const VocabShape& s, const char* op);
// check_vocab, and the rank holds every real id: v0 = 0 and Vloc >= V.
void check_whole_vocab(const VocabShape& s, const char* op);
// ce_combine's sizes: rows >= 0, parts >= 1.
void check_combine(int rows, int parts);
// A positive, finite count of supervised tokens.
void check_denominator(double denominator, const char* op);

// The ops (Backend's methods of these names), on VocabShape s:
//
// ce_local_stats(stats, logits, targets, weight, s):
//   stats[r] = {log sum_j exp(logits[r,j]) over this rank's real ids,
//               logits[r, targets[r] - v0] if the target is in range, else 0}
//   Rows with weight 0 (weight may be null) get {0, 0}. Targets lie in [0, V)
//   (the CPU checks them as it reads them; a GPU does not read them back).
// ce_combine(lse, gathered, weight, rows, parts, total): combines the local
//   stats of the `parts` ranks (all [rows, 2], rank-major: gathered[p * rows *
//   2 + r * 2]) into lse[r] = logsumexp over parts; adds sum_r weight[r] *
//   (lse[r] - target_logit[r]) (target logits summed over parts; the rows
//   summed in row order, then added) to *total, one double in the backend's
//   memory, so that a pass's loss stays there until it is read.
// ce_dlogits(logits, lse, targets, weight, denominator, s): logits -> dlogits =
//   (exp(logits - lse) - onehot) * weight / denominator, zero for padding ids
//   and zero-weight rows. The exponential is exact::exp_approx
//   (backend/exact_math.h) on every backend.
// ce_dlogits_bf16(dlogits, logits, lse, targets, weight, denominator, s): the
//   same dlogits rounded to bf16 into dlogits [rows, Vloc] (the GEMM operand
//   of the head's backward under bf16 precision): ce_dlogits, then to_bf16
//   (convert.h), the same bits. logits are scratch afterwards (the CPU
//   computes in them; a GPU only reads them).
// ce_stats_dlogits_bf16(stats, dlogits, logits, targets, weight, denominator,
//   s): where one rank holds the whole vocabulary (v0 = 0, Vloc >= V: no
//   split, so a row's local log-sum-exp is its lse), the statistics and the
//   bf16 dlogits in one pass over the logits: the bits of ce_local_stats, then
//   ce_combine over one part (whose lse[r] is stats[2r]), then
//   ce_dlogits_bf16. ce_combine(lse, stats, weight, rows, 1, total) still adds
//   the loss. A GPU reads each row of logits from memory once (the re-reads
//   of a row a block holds come from its cache), where the separate ops read
//   the whole chunk twice.

}  // namespace dendrite::ops
