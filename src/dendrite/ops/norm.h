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

}  // namespace dendrite::ops
