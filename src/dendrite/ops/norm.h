// LayerNorm and RMSNorm over the last dimension c of an [m, c] buffer.
// Forward saves per-row statistics for the backward: mean and rstd (LayerNorm),
// rstd (RMSNorm). Backward accumulates (+=) into the parameter gradients and
// overwrites dx.
#pragma once

namespace dendrite::ops {

// y = (x - mean) * rstd * gamma + beta;   x,y [m,c]; gamma,beta [c]; mean,rstd [m]
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                       const float* beta, int m, int c, float eps);
// dx [m,c] overwritten; dgamma, dbeta [c] accumulated
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* mean, const float* rstd, const float* gamma, int m, int c);

// y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps);  x,y [m,c]; gamma [c]; rstd [m]
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gamma, int m, int c,
                     float eps);
// dx [m,c] overwritten; dgamma [c] accumulated
void rmsnorm_backward(float* dx, float* dgamma, const float* dy, const float* x, const float* rstd,
                      const float* gamma, int m, int c);

// Split forms for a width split over ranks (DESIGN.md section 4): each rank
// holds c of the full width c_total; the caller sums the [m, 2] row sums over
// the ranks of the split between the two halves. With c == c_total and no
// summing, they compose to exactly the functions above.
//
// LayerNorm forward: sums[r] = {sum_i x[r,i], sum_i x[r,i]^2}   (double, [m, 2])
void layernorm_row_sums(double* sums, const float* x, int m, int c);
// mean, rstd [m] from the summed row sums; then y = (x - mean) * rstd * gamma + beta
void layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                     const float* gamma, const float* beta, int m, int c, int c_total, float eps);
// LayerNorm backward: sums[r] = {sum_i g[r,i], sum_i g[r,i] xhat[r,i]}, g = dy * gamma
void layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                             const float* rstd, const float* gamma, int m, int c);
// dx = rstd (g - (S1 + xhat S2) / c_total) from the summed sums (dx overwritten);
// dgamma += sum_r dy xhat, dbeta += sum_r dy  (dbeta may be null)
void layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                              const float* dy, const float* x, const float* mean,
                              const float* rstd, const float* gamma, int m, int c, int c_total);
// RMSNorm forward: sums[r] = sum_i x[r,i]^2  (double, [m])
void rmsnorm_row_sums(double* sums, const float* x, int m, int c);
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
