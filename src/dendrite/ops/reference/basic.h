// Naive reference versions of the basic ops (matmul, norms, activations,
// embedding, AdamW), used only by tests as oracles for the fast backends.
// Everything is double precision, single-threaded and written straight from the
// formula, so a test can also differentiate the forward by central differences.
// Letters as in the op headers: m rows (B*T), k input and n output features,
// c channels, B sequences, T positions, C channels; shapes as [rows, cols].
#pragma once

#include <cstdint>

#include "dendrite/ops/optim.h"

namespace dendrite::ref {

// C[M,N] = alpha * op(A) op(B) + beta * C (C not read when beta == 0); A [M,K]
// or [K,M] when trans_a, B [K,N] or [N,K] when trans_b; row-major with strides.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc);

// y [m,n] = x [m,k] w[n,k]^T + b [n]  (b may be null)
void linear_forward(double* y, const double* x, const double* w, const double* b, int m, int k,
                    int n);
// ops::LinearEpilogue's steps: y [m,n] = x w^T + b (b may be null), then with
// gelu pre [m,n] = that and y = gelu(pre)
void linear_forward_epilogue(double* y, double* pre, const double* x, const double* w,
                             const double* b, bool gelu, int m, int k, int n);
// dx [m,k] = (dy w) gelu'(gelu_input)  (overwritten)
void linear_backward_input_dgelu(double* dx, const double* dy, const double* w,
                                 const double* gelu_input, int m, int k, int n);
// dx [m,k] = dy w (overwritten);  dw [n,k] += dy^T x;  db [n] += column sums of dy (may be null)
void linear_backward(double* dx, double* dw, double* db, const double* dy, const double* x,
                     const double* w, int m, int k, int n);

// y [m,c] = (x - mean) rstd gamma + beta;  mean, rstd [m]
void layernorm_forward(double* y, double* mean, double* rstd, const double* x, const double* gamma,
                       const double* beta, int m, int c, double eps);
// dx [m,c] overwritten; dgamma, dbeta [c] accumulated
void layernorm_backward(double* dx, double* dgamma, double* dbeta, const double* dy,
                        const double* x, const double* mean, const double* rstd,
                        const double* gamma, int m, int c);

// y [m,c] = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps);  rstd [m]
void rmsnorm_forward(double* y, double* rstd, const double* x, const double* gamma, int m, int c,
                     double eps);
// dx [m,c] overwritten; dgamma [c] accumulated
void rmsnorm_backward(double* dx, double* dgamma, const double* dy, const double* x,
                      const double* rstd, const double* gamma, int m, int c);

// GELU, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));  all [n]
void gelu_forward(double* y, const double* x, long n);
void gelu_backward(double* dx, const double* dy, const double* x, long n);

// y = gate / (1 + exp(-gate)) * up;  all [n]; backward overwrites dgate, dup
void swiglu_forward(double* y, const double* gate, const double* up, long n);
void swiglu_backward(double* dgate, double* dup, const double* dy, const double* gate,
                     const double* up, long n);

// out [B*T, C] = wte[tokens[r]] + wpe[r % T] (wpe may be null)
void embedding_forward(double* out, const int32_t* tokens, const double* wte, const double* wpe,
                       int B, int T, int C);
// dwte [V,C], dwpe [T,C] (may be null) accumulated
void embedding_backward(double* dwte, double* dwpe, const double* dout, const int32_t* tokens,
                        int B, int T, int C);

// One AdamW step on n values, step counting from 1, as the textbook formula:
// p -= lr wd p (if decay); m, v moving averages; p -= lr mhat / (sqrt(vhat) + eps)
void adamw_step(double* param, const double* grad, double* m, double* v, long n, double lr,
                int step, bool decay, const ops::AdamWConfig& c);
// The sum of g^2 over the tensors of a table (host memory), and adamw_step on
// each of them with its decay flag.
double sum_squares_tensors(const double* g, const ops::FlatTensor* table, int count);
void adamw_step_tensors(double* param, const double* grad, double* m, double* v,
                        const ops::FlatTensor* table, int count, double lr, int step,
                        const ops::AdamWConfig& c);

}  // namespace dendrite::ref
