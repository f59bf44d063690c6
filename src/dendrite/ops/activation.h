// Elementwise ops over n values: GELU (GPT-2's tanh form), SwiGLU, residual
// add. The ops (Backend's methods of these names):
//
// gelu_forward(y, x, n):            y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// gelu_backward(dx, dy, x, n):      dx = dy * gelu'(x)   (dx overwritten; dx may alias dy)
// swiglu_forward(y, gate, up, n):   y = silu(gate) * up, silu(g) = g / (1 + exp(-g)); all [n]
// swiglu_backward(dgate, dup, dy, gate, up, n): dgate, dup overwritten
// swiglu_forward_bf16(y_bf16, y, gate, up, s): y_bf16 = swiglu_forward's y
//                                  rounded to bf16 (to_bf16); y is scratch;
//                                  y_bf16, y [s.rows, s.width], gate's and
//                                  up's rows at s.stride (GluRows)
// swiglu_backward_bf16(dgate_bf16, dup_bf16, dgate, dup, dy, gate, up, s):
//                                  swiglu_backward's dgate and dup rounded
//                                  to bf16; dgate and dup are scratch;
//                                  dy [s.rows, s.width], the others' rows
//                                  at s.stride
//   (the products' bf16 operands, where no bias sums need the fp32 values:
//   the CPU runs the separate ops into the scratch, row by row where the
//   rows are strided, so the same bits; a GPU writes the bf16 values alone,
//   in one pass)
// add(y, a, b, n):                  y = a + b (y may alias a or b)
// add_inplace(y, x, n):             y += x
//
// The exponentials are exact::exp_approx (backend/exact_math.h) on every
// backend, so GELU and SwiGLU give the same bits on each.
#pragma once

#include <cstdint>

namespace dendrite::ops {

// The rows of SwiGLU's inputs in the bf16 forms: rows of width values, row r
// of gate and up (and of their gradients) at r * stride. stride == width:
// gate and up are blocks of their own ([rows, width] each); stride ==
// 2 * width: one product wrote them side by side ([rows, 2 * width], up at
// gate + width).
struct GluRows {
  int64_t rows = 0;
  int64_t width = 0;
  int64_t stride = 0;
  int64_t count() const { return rows * width; }
};
// Throw, naming the op, unless rows >= 0 and 0 < width <= stride.
void check_glu_rows(const GluRows& s, const char* op);

}  // namespace dendrite::ops
