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

// LayerNorm forward: sums[r] = {sum_i x[r,i], sum_i x[r,i]^2}   (double, [m, 2])
void layernorm_row_sums(double* sums, const float* x, int m, int c);
// mean, rstd [m] from the summed row sums; then y = (x - mean) * rstd * gamma + beta
// (x, y [m, c]; gamma, beta [c]: this rank's columns)
void layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                     const float* gamma, const float* beta, int m, int c, int c_total, float eps);
// The same y rounded to bf16 into y_bf16 [m, c] (a bf16 GEMM's operand):
// layernorm_apply into y, then to_bf16 (convert.h), the same bits. y [m, c] is
// scratch afterwards (the CPU computes in it; a GPU writes only y_bf16).
void layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd, const double* sums,
                          const float* x, const float* gamma, const float* beta, int m, int c,
                          int c_total, float eps);
// An unsplit width (c_total = c) in one pass where the device can:
// layernorm_row_sums, then layernorm_apply_bf16, the same bits (sums
// written as the first writes them).
void layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean, float* rstd,
                         const float* x, const float* gamma, const float* beta, int m, int c,
                         float eps);
// LayerNorm backward: sums[r] = {sum_i g[r,i], sum_i g[r,i] xhat[r,i]}, g = dy * gamma
void layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                             const float* rstd, const float* gamma, int m, int c);
// dx = rstd (g - (S1 + xhat S2) / c_total) from the summed sums (dx overwritten);
// dgamma += sum_r dy xhat, dbeta += sum_r dy  (dbeta may be null)
void layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                              const float* dy, const float* x, const float* mean,
                              const float* rstd, const float* gamma, int m, int c, int c_total);
// The same, dx added to the residual stream's gradient: dres [m, c] += dx
// (layernorm_backward_apply into scratch [m, c], then add_inplace: the same
// bits; a GPU adds in the kernel and leaves scratch untouched).
void layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma, float* dbeta,
                                  const double* sums, const float* dy, const float* x,
                                  const float* mean, const float* rstd, const float* gamma, int m,
                                  int c, int c_total);
// RMSNorm forward: sums[r] = sum_i x[r,i]^2  (double, [m])
void rmsnorm_row_sums(double* sums, const float* x, int m, int c);
// rstd [m] = 1 / sqrt(S / c_total + eps) from the summed sums; y = x * rstd * gamma
void rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x, const float* gamma,
                   int m, int c, int c_total, float eps);
// RMSNorm backward: sums[r] = sum_i dy[r,i] gamma[i] x[r,i]
void rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma, int m,
                           int c);
// dx = rstd g - x rstd^3 S / c_total (dx overwritten); dgamma += sum_r dy x rstd
void rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                            const float* x, const float* rstd, const float* gamma, int m, int c,
                            int c_total);

}  // namespace dendrite::ops
