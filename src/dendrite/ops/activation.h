// Elementwise ops over n values: GELU (GPT-2's tanh form), SwiGLU, residual
// add. The ops (Backend's methods of these names):
//
// gelu_forward(y, x, n):            y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// gelu_backward(dx, dy, x, n):      dx = dy * gelu'(x)   (dx overwritten; dx may alias dy)
// swiglu_forward(y, gate, up, n):   y = silu(gate) * up, silu(g) = g / (1 + exp(-g)); all [n]
// swiglu_backward(dgate, dup, dy, gate, up, n): dgate, dup overwritten
// swiglu_forward_bf16(y_bf16, y, gate, up, n): y_bf16 = swiglu_forward's y
//                                  rounded to bf16 (to_bf16); y is scratch
// swiglu_backward_bf16(dgate_bf16, dup_bf16, dgate, dup, dy, gate, up, n):
//                                  swiglu_backward's dgate and dup rounded
//                                  to bf16; dgate and dup are scratch
//   (the products' bf16 operands, where no bias sums need the fp32 values:
//   the CPU runs the separate ops into the scratch, so the same bits; a GPU
//   writes the bf16 values alone, in one pass)
// add(y, a, b, n):                  y = a + b (y may alias a or b)
// add_inplace(y, x, n):             y += x
//
// The exponentials are exact::exp_approx (backend/exact_math.h) on every
// backend, so GELU and SwiGLU give the same bits on each.
#pragma once
