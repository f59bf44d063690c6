// Elementwise ops over n values: GELU (GPT-2's tanh form), SwiGLU, residual add.
#pragma once

namespace dendrite::ops {

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward(float* y, const float* x, long n);
// dx = dy * gelu'(x)   (dx overwritten; dx may alias dy)
void gelu_backward(float* dx, const float* dy, const float* x, long n);

// y = silu(gate) * up, silu(g) = g / (1 + exp(-g));  all [n]
void swiglu_forward(float* y, const float* gate, const float* up, long n);
// dgate, dup overwritten
void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                     long n);

// y = a + b (y may alias a or b)
void add(float* y, const float* a, const float* b, long n);
// y += x
void add_inplace(float* y, const float* x, long n);

}  // namespace dendrite::ops
