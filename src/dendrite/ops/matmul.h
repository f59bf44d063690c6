// Matrix products on row-major buffers (oneDNN on the CPU, cuBLASLt on a GPU).
// Dimension letters: m rows of activations (B*T), k input features, n output
// features. A linear weight W is [n, k] (out x in), as in DESIGN.md section 3.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/core/bf16.h"
#include "dendrite/core/check.h"
#include "dendrite/core/operand.h"

namespace dendrite::ops {

// A linear layer's product: x [m, k] (m rows of activations), w [n, k],
// y [m, n]; dy [m, n] and dx [m, k] in the backward.
struct LinearShape {
  int m, k, n;
};
// Throws, naming the op, unless the sizes are valid (m >= 0, k and n > 0) and
// the two operands are of one precision.
void check_linear(const LinearShape& s, Operand a, Operand b, const char* op);
// gemm's sizes and leading dimensions (row-major: lda >= A's columns, ...).
void check_gemm(bool trans_a, bool trans_b, int M, int N, int K, Operand A, int lda, Operand B,
                int ldb, int ldc);

// gemm (Backend::gemm): C[M,N] = alpha * op(A) * op(B) + beta * C, row-major;
// op(X) = X or X^T. A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K]
// when trans_b). Operands fp32, or both bf16 (bf16 precision, DESIGN.md
// section 10: fp32 accumulation and output).

// GEMM layout tuning (AxoNN picked the fastest transpose layout per GEMM
// shape at the first call). When on (Backend::set_gemm_tuning), the first product
// of each shape (and transposes, thread count, beta) runs every way this
// backend can compute it and keeps the fastest among those giving the same
// bits as the default, so tuning never changes results; the choice is kept by
// the backend (the CPU's GemmCache). Ways: oneDNN threading itself; one block of output columns,
// or of rows, per thread; and the transposed product C^T = op(B)^T op(A)^T
// into scratch, transposed back.
struct GemmChoice {
  char ta, tb;
  int M, N, K, threads;
  bool accumulate;
  std::string way;                 // the way kept
  std::vector<std::string> ways;   // every way tried
  std::vector<double> ms;          // its time at the trial (-1: other bits, rejected)
  int64_t calls = 0;               // products of this shape since the trial
  // What the way kept saves per product against the default (ways[0]), by the trial.
  double saved_ms() const {
    for (size_t i = 0; i < ways.size(); ++i)
      if (ways[i] == way) return ms[0] - ms[i];
    return 0;
  }
};
// The linear layer's products, on LinearShape (above); operands fp32 or bf16:
//   linear_forward:          y [m,n] = x [m,k] w [n,k]^T (+ b [n], may be null)
//   linear_backward_input:   dx [m,k] = dy [m,n] w [n,k]   (overwritten, or added to when
//   accumulate) linear_backward_weight:  dw [n,k] = dy [m,n]^T x [m,k] (the same); the bias
//                            gradient is add_column_sums of the fp32 dy
//   add_bias:                y [m,n] += b [n] on every row
//   add_column_sums:         db [n] += the sums over the m rows of dy [m,n]

// What a linear layer's product does to its output before storing it, in
// this order (on a GPU, cuBLASLt's epilogues: the product and these steps in
// one kernel where cuBLASLt offers it):
//   t = x w^T;  t += b (bias set; the widened bias_bf16 instead where
//   adds_bf16_bias: a bf16 output's product takes its bias in bf16, as
//   cuBLASLt's epilogue and autocast do);  pre_gelu = t, t = gelu(t) (gelu);
//   t = residual + t (residual set: a residual stream's add, y != residual);
//   y = t, or y_bf16 = bf16(t) when y_bf16 is set (y is then scratch, its
//   values unspecified).
// The steps are the separate ops' (add_bias, gelu_forward, add, to_bf16), so
// on the CPU the bits are those of the separate calls.
struct LinearEpilogue {
  const float* bias = nullptr;  // [n], or none
  bool gelu = false;            // GPT-2's tanh form (activation.h)
  float* pre_gelu = nullptr;    // [m, n]: GELU's input, for gelu_backward; required with gelu
  const float* residual = nullptr;  // [m, n], or none
  bf16* y_bf16 = nullptr;           // [m, n], or none
  const bf16* bias_bf16 = nullptr;  // [n]: bias rounded to bf16, or none
};
// Whether the product adds bias_bf16 (widened) in the fp32 bias's stead: a
// bf16 output alone after the bias (no GELU, no residual).
inline bool adds_bf16_bias(const LinearEpilogue& e) {
  return e.bias && e.bias_bf16 && e.y_bf16 && !e.gelu && !e.residual;
}
// linear_forward_fused: y [m,n] = x [m,k] w [n,k]^T, then the epilogue e.
// Throws, naming the op, unless e is complete (pre_gelu given with gelu).
inline void check_epilogue(const LinearEpilogue& e, const char* op) {
  DENDRITE_CHECK(!e.gelu || e.pre_gelu, op,
                 ": a GELU epilogue needs pre_gelu, the buffer [m, n] for GELU's input that the "
                 "backward reads; pass one");
  DENDRITE_CHECK(!e.gelu || !e.residual, op,
                 ": a residual added after GELU is no epilogue a product offers; add it apart");
}

// linear_backward_input_dgelu: dx [m,k] = (dy [m,n] w [n,k]) * gelu'(gelu_input
// [m,k]): linear_backward_input (overwriting), then gelu_backward in place
// (activation.h); one kernel where the device fuses them (cuBLASLt's DGELU epilogue).

}  // namespace dendrite::ops
