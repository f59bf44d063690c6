// Elementwise ops over n values: GELU (GPT-2's tanh form), SwiGLU, residual
// add. The ops (Backend's methods of these names):
//
// gelu_forward(y, x, n):            y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// gelu_backward(dx, dy, x, n):      dx = dy * gelu'(x)   (dx overwritten; dx may alias dy)
// swiglu_forward(y, gate, up, n):   y = silu(gate) * up, silu(g) = g / (1 + exp(-g)); all [n]
// swiglu_backward(dgate, dup, dy, gate, up, n): dgate, dup overwritten
// add(y, a, b, n):                  y = a + b (y may alias a or b)
// add_inplace(y, x, n):             y += x
//
// The exponentials are exact::exp_approx (backend/exact_math.h) on every
// backend, so GELU and SwiGLU give the same bits on each.
#pragma once
