// Naive double-precision oracles for the basic ops; see basic.h. Clarity over
// speed: plain loops straight from each formula, one thread.
#include "dendrite/ops/reference/basic.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace dendrite::ref {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc) {
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double s = 0.0;
      for (int p = 0; p < K; ++p) {
        double a = trans_a ? A[static_cast<long>(p) * lda + i] : A[static_cast<long>(i) * lda + p];
        double b = trans_b ? B[static_cast<long>(j) * ldb + p] : B[static_cast<long>(p) * ldb + j];
        s += a * b;
      }
      double& c = C[static_cast<long>(i) * ldc + j];
      c = beta == 0.0 ? alpha * s : alpha * s + beta * c;
    }
  }
}

void linear_forward(double* y, const double* x, const double* w, const double* b, int m, int k,
                    int n) {
  for (int r = 0; r < m; ++r) {
    for (int o = 0; o < n; ++o) {
      double s = b ? b[o] : 0.0;
      for (int i = 0; i < k; ++i)
        s += x[static_cast<long>(r) * k + i] * w[static_cast<long>(o) * k + i];
      y[static_cast<long>(r) * n + o] = s;
    }
  }
}

void linear_backward(double* dx, double* dw, double* db, const double* dy, const double* x,
                     const double* w, int m, int k, int n) {
  for (int r = 0; r < m; ++r) {
    for (int i = 0; i < k; ++i) {
      double s = 0.0;
      for (int o = 0; o < n; ++o)
        s += dy[static_cast<long>(r) * n + o] * w[static_cast<long>(o) * k + i];
      dx[static_cast<long>(r) * k + i] = s;
    }
  }
  for (int o = 0; o < n; ++o) {
    for (int i = 0; i < k; ++i) {
      double s = 0.0;
      for (int r = 0; r < m; ++r)
        s += dy[static_cast<long>(r) * n + o] * x[static_cast<long>(r) * k + i];
      dw[static_cast<long>(o) * k + i] += s;
    }
    if (db) {
      for (int r = 0; r < m; ++r) db[o] += dy[static_cast<long>(r) * n + o];
    }
  }
}

void layernorm_forward(double* y, double* mean, double* rstd, const double* x, const double* gamma,
                       const double* beta, int m, int c, double eps) {
  for (int r = 0; r < m; ++r) {
    const double* xr = x + static_cast<long>(r) * c;
    double mu = 0.0;
    for (int j = 0; j < c; ++j) mu += xr[j];
    mu /= c;
    double var = 0.0;
    for (int j = 0; j < c; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= c;
    double rs = 1.0 / std::sqrt(var + eps);
    for (int j = 0; j < c; ++j)
      y[static_cast<long>(r) * c + j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// With xhat = (x - mean) rstd and d = dy gamma:
// dx = rstd (d - mean(d) - xhat mean(d xhat)).
void layernorm_backward(double* dx, double* dgamma, double* dbeta, const double* dy,
                        const double* x, const double* mean, const double* rstd,
                        const double* gamma, int m, int c) {
  std::vector<double> xhat(c), d(c);
  for (int r = 0; r < m; ++r) {
    long off = static_cast<long>(r) * c;
    double mean_d = 0.0, mean_dxhat = 0.0;
    for (int j = 0; j < c; ++j) {
      xhat[j] = (x[off + j] - mean[r]) * rstd[r];
      d[j] = dy[off + j] * gamma[j];
      mean_d += d[j] / c;
      mean_dxhat += d[j] * xhat[j] / c;
      dgamma[j] += dy[off + j] * xhat[j];
      dbeta[j] += dy[off + j];
    }
    for (int j = 0; j < c; ++j) dx[off + j] = rstd[r] * (d[j] - mean_d - xhat[j] * mean_dxhat);
  }
}

void rmsnorm_forward(double* y, double* rstd, const double* x, const double* gamma, int m, int c,
                     double eps) {
  for (int r = 0; r < m; ++r) {
    long off = static_cast<long>(r) * c;
    double ms = 0.0;
    for (int j = 0; j < c; ++j) ms += x[off + j] * x[off + j];
    ms /= c;
    double rs = 1.0 / std::sqrt(ms + eps);
    for (int j = 0; j < c; ++j) y[off + j] = x[off + j] * rs * gamma[j];
    rstd[r] = rs;
  }
}

// dx_j = rstd dy_j gamma_j - rstd^3 x_j / c * sum_i dy_i gamma_i x_i
void rmsnorm_backward(double* dx, double* dgamma, const double* dy, const double* x,
                      const double* rstd, const double* gamma, int m, int c) {
  for (int r = 0; r < m; ++r) {
    long off = static_cast<long>(r) * c;
    double rs = rstd[r], s = 0.0;
    for (int j = 0; j < c; ++j) s += dy[off + j] * gamma[j] * x[off + j];
    for (int j = 0; j < c; ++j) {
      dx[off + j] = rs * dy[off + j] * gamma[j] - rs * rs * rs * x[off + j] * s / c;
      dgamma[j] += dy[off + j] * x[off + j] * rs;
    }
  }
}

namespace {
const double kGeluS = std::sqrt(2.0 / std::numbers::pi);
constexpr double kGeluA = 0.044715;
}  // namespace

void gelu_forward(double* y, const double* x, long n) {
  for (long i = 0; i < n; ++i) {
    double u = kGeluS * (x[i] + kGeluA * x[i] * x[i] * x[i]);
    y[i] = 0.5 * x[i] * (1.0 + std::tanh(u));
  }
}

void linear_forward_epilogue(double* y, double* pre, const double* x, const double* w,
                             const double* b, bool gelu, int m, int k, int n) {
  linear_forward(gelu ? pre : y, x, w, b, m, k, n);
  if (gelu) gelu_forward(y, pre, long(m) * n);
}

void linear_backward_input_dgelu(double* dx, const double* dy, const double* w,
                                 const double* gelu_input, int m, int k, int n) {
  gemm(false, false, m, k, n, 1.0, dy, n, w, k, 0.0, dx, k);
  gelu_backward(dx, dx, gelu_input, long(m) * k);
}

void gelu_backward(double* dx, const double* dy, const double* x, long n) {
  for (long i = 0; i < n; ++i) {
    double u = kGeluS * (x[i] + kGeluA * x[i] * x[i] * x[i]);
    double t = std::tanh(u);
    double du = kGeluS * (1.0 + 3.0 * kGeluA * x[i] * x[i]);
    dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * x[i] * (1.0 - t * t) * du);
  }
}

void swiglu_forward(double* y, const double* gate, const double* up, long n) {
  for (long i = 0; i < n; ++i) y[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
}

void swiglu_backward(double* dgate, double* dup, const double* dy, const double* gate,
                     const double* up, long n) {
  for (long i = 0; i < n; ++i) {
    double s = 1.0 / (1.0 + std::exp(-gate[i]));
    dup[i] = dy[i] * gate[i] * s;
    dgate[i] = dy[i] * up[i] * (s + gate[i] * s * (1.0 - s));
  }
}

void embedding_forward(double* out, const int32_t* tokens, const double* wte, const double* wpe,
                       int B, int T, int C) {
  for (long r = 0; r < static_cast<long>(B) * T; ++r) {
    for (int j = 0; j < C; ++j) {
      out[r * C + j] =
          wte[static_cast<long>(tokens[r]) * C + j] + (wpe ? wpe[(r % T) * C + j] : 0.0);
    }
  }
}

void embedding_backward(double* dwte, double* dwpe, const double* dout, const int32_t* tokens,
                        int B, int T, int C) {
  for (long r = 0; r < static_cast<long>(B) * T; ++r) {
    for (int j = 0; j < C; ++j) {
      dwte[static_cast<long>(tokens[r]) * C + j] += dout[r * C + j];
      if (dwpe) dwpe[(r % T) * C + j] += dout[r * C + j];
    }
  }
}

void adamw_step(double* param, const double* grad, double* m, double* v, long n, double lr,
                int step, bool decay, const ops::AdamWConfig& c) {
  const double b1 = c.beta1, b2 = c.beta2, eps = c.eps, wd = c.weight_decay;
  for (long i = 0; i < n; ++i) {
    if (decay) param[i] -= lr * wd * param[i];
    m[i] = b1 * m[i] + (1.0 - b1) * grad[i];
    v[i] = b2 * v[i] + (1.0 - b2) * grad[i] * grad[i];
    double mhat = m[i] / (1.0 - std::pow(b1, step));
    double vhat = v[i] / (1.0 - std::pow(b2, step));
    param[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

double sum_squares_tensors(const double* g, const ops::FlatTensor* table, int count) {
  double s = 0.0;
  for (int t = 0; t < count; ++t)
    for (int64_t i = 0; i < table[t].n; ++i) s += g[table[t].offset + i] * g[table[t].offset + i];
  return s;
}

void adamw_step_tensors(double* param, const double* grad, double* m, double* v,
                        const ops::FlatTensor* table, int count, double lr, int step,
                        const ops::AdamWConfig& c) {
  for (int t = 0; t < count; ++t) {
    const int64_t o = table[t].offset;
    adamw_step(param + o, grad + o, m + o, v + o, long(table[t].n), lr, step, table[t].decay != 0,
               c);
  }
}

}  // namespace dendrite::ref
