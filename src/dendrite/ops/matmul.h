// Matrix products on row-major fp32 buffers (oneDNN sgemm on the CPU backend).
// Dimension letters: m rows of activations (B*T), k input features, n output
// features. A linear weight W is [n, k] (out x in), as in DESIGN.md section 3.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/core/bf16.h"
#include "dendrite/core/check.h"

namespace dendrite::ops {

// What the CPU backend's products keep between calls (backend/cpu/gemm_cache.h:
// the layout tuner's choices, oneDNN's bf16 primitives), one per backend. Every
// product below takes it last; null (the ops alone, in tests and benchmarks):
// the default way, no tuning, a primitive made for the call.
struct GemmCache;

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major; op(X) = X or X^T.
// A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc, GemmCache* cache = nullptr);

// The same product with bf16 operands and fp32 accumulation and output (bf16
// precision, DESIGN.md section 10): oneDNN's bf16 matmul where the CPU has
// AVX512_BF16 (AMX CPUs have it too); elsewhere the operands are widened to fp32 and the fp32
// product runs (the same values, no speed-up; bf16_gemm_native() tells).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda,
          const bf16* B, int ldb, float beta, float* C, int ldc, GemmCache* cache = nullptr);
// Whether the bf16 gemm runs natively here; when not, the instruction set missing.
bool bf16_gemm_native();
const char* bf16_gemm_missing();

// GEMM layout tuning (AxoNN picked the fastest transpose layout per GEMM
// shape at the first call). When on (GemmCache::set_tuning), the first product
// of each shape (and transposes, thread count, beta) runs every way this
// backend can compute it and keeps the fastest among those giving the same
// bits as the default, so tuning never changes results; the choice is kept in
// the GemmCache. Ways: oneDNN threading itself; one block of output columns,
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
// y[m,n] = x[m,k] * w[n,k]^T + b[n]   (b may be null)
void linear_forward(float* y, const float* x, const float* w, const float* b, int m, int k, int n,
                    GemmCache* cache = nullptr);

// dx[m,k] = dy[m,n] * w[n,k]        (dx overwritten, or added to when accumulate)
void linear_backward_input(float* dx, const float* dy, const float* w, int m, int k, int n,
                           bool accumulate, GemmCache* cache = nullptr);

// dw[n,k] += dy[m,n]^T * x[m,k] (or = when !accumulate);  db[n] += sum over rows of dy
// (db may be null)
void linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int m, int k,
                            int n, bool accumulate = true, GemmCache* cache = nullptr);

// The three with bf16 operands (fp32 outputs; no bias: the caller adds it,
// and sums the bias gradient from its fp32 dy).
void linear_forward(float* y, const bf16* x, const bf16* w, int m, int k, int n,
                    GemmCache* cache = nullptr);
void linear_backward_input(float* dx, const bf16* dy, const bf16* w, int m, int k, int n,
                           bool accumulate, GemmCache* cache = nullptr);
void linear_backward_weight(float* dw, const bf16* dy, const bf16* x, int m, int k, int n,
                            bool accumulate, GemmCache* cache = nullptr);

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
// y [m,n] = x [m,k] w [n,k]^T, then the epilogue e.
void linear_forward(float* y, const float* x, const float* w, int m, int k, int n,
                    const LinearEpilogue& e, GemmCache* cache = nullptr);
void linear_forward(float* y, const bf16* x, const bf16* w, int m, int k, int n,
                    const LinearEpilogue& e, GemmCache* cache = nullptr);
// Throws, naming the op, unless e is complete (pre_gelu given with gelu).
inline void check_epilogue(const LinearEpilogue& e, const char* op) {
  DENDRITE_CHECK(!e.gelu || e.pre_gelu, op,
                 ": a GELU epilogue needs pre_gelu, the buffer [m, n] for GELU's input that the "
                 "backward reads; pass one");
  DENDRITE_CHECK(!e.gelu || !e.residual, op,
                 ": a residual added after GELU is no epilogue a product offers; add it apart");
}

// dx [m,k] = (dy [m,n] w [n,k]) * gelu'(gelu_input [m,k]): linear_backward_input
// (overwriting), then gelu_backward in place (activation.h); one kernel where
// the device fuses them (cuBLASLt's DGELU epilogue).
void linear_backward_input_dgelu(float* dx, const float* dy, const float* w,
                                 const float* gelu_input, int m, int k, int n,
                                 GemmCache* cache = nullptr);
void linear_backward_input_dgelu(float* dx, const bf16* dy, const bf16* w, const float* gelu_input,
                                 int m, int k, int n, GemmCache* cache = nullptr);

// y[m,n] += b[n] on every row (the bias of a linear layer whose product came first).
void add_bias(float* y, const float* b, int m, int n);

// db[n] += sum over the m rows of dy[m,n] (the bias gradient of linear_backward_weight).
void add_column_sums(float* db, const float* dy, int m, int n);

}  // namespace dendrite::ops
