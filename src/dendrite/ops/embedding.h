// Token and position embedding. tokens [B*T] (row r = b*T + t), wte [V,C],
// wpe [T_max,C] (null for Llama, which uses rotary positions instead).
#pragma once

#include <cstdint>

namespace dendrite::ops {

// out[r,:] = wte[tokens[r],:] + (wpe ? wpe[r % T,:] : 0);  out [B*T, C]
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
// dwte[tokens[r],:] += dout[r,:];  dwpe[r % T,:] += dout[r,:]  (dwpe may be null)
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C);

}  // namespace dendrite::ops
