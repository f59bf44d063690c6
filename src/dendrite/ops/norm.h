// LayerNorm and RMSNorm over the full width c_total of an [m, c_total]
// stream whose columns may be split over ranks (DESIGN.md section 4): each
// rank holds c of the c_total columns. Every norm is two steps per direction:
// per-row sums (double), which the caller sums over the ranks of the split,
// then an apply step that reads the summed sums. An unsplit width is the same
// calls with c == c_total and nothing to sum in between.
// The forward saves per-row statistics for the backward: mean and rstd
// (LayerNorm), rstd (RMSNorm). The backward accumulates (+=) into the
// parameter gradients and overwrites dx.
#pragma once

#include "dendrite/core/bf16.h"

namespace dendrite::ops {

// m rows of c columns, c of the full width c_total (c == c_total unsplit).
struct NormShape {
  int m, c, c_total;
};

// Where a norm's backward over whole rows (layernorm_backward_rows_add_bf16,
// rmsnorm_backward_rows_add_bf16) writes the residual's gradient as the next
// product's operand: low [m, c], and that product's bias gradient db [c]
// (null where it has no bias).
struct ResidualGradBf16 {
  bf16* low;
  float* db;
};
// Throws, naming the op, unless m >= 0, c > 0 and c_total >= c.
void check_norm(const NormShape& s, const char* op);
// The same, and c == c_total (an op over whole rows).
void check_whole_rows(const NormShape& s, const char* op);

// The ops (Backend's methods of these names), on NormShape s:
//
// layernorm_row_sums(sums, x, s): sums[r] = {sum_i x[r,i], sum_i x[r,i]^2}
//   (double, [m, 2]).
// layernorm_apply(y, mean, rstd, sums, x, gamma, beta, s, eps): mean, rstd [m]
//   from the summed row sums; then y = (x - mean) * rstd * gamma + beta
//   (x, y [m, c]; gamma, beta [c]: this rank's columns).
// layernorm_apply_bf16(y_bf16, y, ...): the same y rounded to bf16 into y_bf16
//   [m, c] (a bf16 GEMM's operand): layernorm_apply into y, then to_bf16
//   (convert.h), the same bits. y [m, c] is scratch afterwards (the CPU
//   computes in it; a GPU writes only y_bf16).
// layernorm_rows_bf16(sums, y_bf16, y, mean, rstd, x, gamma, beta, s, eps):
//   whole rows (c_total = c) in one pass where the device can:
//   layernorm_row_sums, then layernorm_apply_bf16, the same bits (sums
//   written as the first writes them).
// layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, s):
//   sums[r] = {sum_i g[r,i], sum_i g[r,i] xhat[r,i]}, g = dy * gamma.
// layernorm_backward_apply(dx, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s):
//   dx = rstd (g - (S1 + xhat S2) / c_total) from the summed sums (dx
//   overwritten); dgamma += sum_r dy xhat, dbeta += sum_r dy (dbeta may be null).
// layernorm_backward_apply_add(dres, scratch, dgamma, dbeta, ...): the same, dx
//   added to the residual stream's gradient: dres [m, c] += dx
//   (layernorm_backward_apply into scratch [m, c], then add_inplace: the same
//   bits; a GPU adds in the kernel and leaves scratch untouched).
// layernorm_backward_rows_add(sums, dres, scratch, dgamma, dbeta, dy, x, mean,
//   rstd, gamma, s): whole rows (c_total = c) in one pass where the device can:
//   layernorm_backward_sums, then layernorm_backward_apply_add (scratch
//   [m, c]). sums and dres get the bits those give; dgamma and dbeta the same
//   sums in a fixed order of the device's own (a GPU adds each block of rows'
//   columns in row order, then the blocks in order, partials in scratch).
// layernorm_backward_rows_add_bf16(next, sums, dres, scratch, dgamma, dbeta,
//   dy, x, mean, rstd, gamma, s): layernorm_backward_rows_add, then the new
//   dres as the operand of the product below it (o's or down's output
//   gradient): next.low [m, c] = dres rounded to bf16 (to_bf16), and, where
//   next.db is given, next.db [c] += dres's column sums (add_column_sums) in
//   a fixed order of the device's own (a GPU sums them with dgamma and dbeta,
//   in the same blocks of rows). sums, dres and low get the bits of the
//   separate ops.
// rmsnorm_row_sums(sums, x, s): sums[r] = sum_i x[r,i]^2 (double, [m]).
// rmsnorm_apply(y, rstd, sums, x, gamma, s, eps): rstd [m] = 1 / sqrt(S /
//   c_total + eps) from the summed sums; y = x * rstd * gamma.
// rmsnorm_rows_bf16(sums, y_bf16, y, rstd, x, gamma, s, eps): whole rows
//   (c_total = c) in one pass where the device can: rmsnorm_row_sums, then
//   rmsnorm_apply and to_bf16 into y_bf16 [m, c], the same bits. y [m, c] is
//   scratch afterwards (the CPU computes in it; a GPU writes only y_bf16).
// rmsnorm_backward_sums(sums, dy, x, gamma, s): sums[r] = sum_i dy[r,i] gamma[i] x[r,i].
// rmsnorm_backward_apply(dx, dgamma, sums, dy, x, rstd, gamma, s):
//   dx = rstd g - x rstd^3 S / c_total (dx overwritten); dgamma += sum_r dy x rstd.
// rmsnorm_backward_rows_add(sums, dres, scratch, dgamma, dy, x, rstd, gamma, s):
//   whole rows (c_total = c) in one pass where the device can:
//   rmsnorm_backward_sums, rmsnorm_backward_apply into scratch [m, c], then
//   add_inplace into dres [m, c]. sums and dres get the bits those give;
//   dgamma the same sums in a fixed order of the device's own (as
//   layernorm_backward_rows_add's).
// rmsnorm_backward_rows_add_bf16(next, sums, dres, scratch, dgamma, dy, x,
//   rstd, gamma, s): the same, then the new dres as the next product's
//   operand, as layernorm_backward_rows_add_bf16 writes it.

}  // namespace dendrite::ops
