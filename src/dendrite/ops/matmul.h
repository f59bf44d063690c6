// Matrix products on row-major fp32 buffers (oneDNN sgemm on the CPU backend).
// Dimension letters: m rows of activations (B*T), k input features, n output
// features. A linear weight W is [n, k] (out x in), as in DESIGN.md section 3.
#pragma once

namespace dendrite::ops {

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major; op(X) = X or X^T.
// A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// y[m,n] = x[m,k] * w[n,k]^T + b[n]   (b may be null)
void linear_forward(float* y, const float* x, const float* w, const float* b, int m, int k, int n);

// dx[m,k] = dy[m,n] * w[n,k]        (dx overwritten, or added to when accumulate)
void linear_backward_input(float* dx, const float* dy, const float* w, int m, int k, int n,
                           bool accumulate);

// dw[n,k] += dy[m,n]^T * x[m,k] (or = when !accumulate);  db[n] += sum over rows of dy
// (db may be null)
void linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int m, int k,
                            int n, bool accumulate = true);

}  // namespace dendrite::ops
