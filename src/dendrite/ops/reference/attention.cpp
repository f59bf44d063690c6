// Naive oracles for attention, rotary embedding and LM-head cross-entropy.
// B batch, T sequence, NH/NKV query/key-value heads, hs head size; m rows,
// C channels, V vocabulary, Vp padded vocabulary. Everything in double, one
// thread, with the full [T,T] score matrix and the full [m,V] logits.
#include "dendrite/ops/reference/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dendrite::ref {
namespace {

// Element i of head h in row (b, t) of a strided activation.
inline long at(const ops::AttentionShape& s, int stride, int b, int t, int h, int i) {
  return (static_cast<long>(b) * s.T + t) * stride + static_cast<long>(h) * s.hs + i;
}

// P [T, T] (zero above the diagonal) and lse [T] of one (b, h).
void probabilities(std::vector<double>& P, std::vector<double>& lse, const float* q, const float* k,
                   const ops::AttentionShape& s, int b, int h) {
  const int g = h / (s.NH / s.NKV);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  P.assign(static_cast<size_t>(s.T) * s.T, 0.0);
  lse.assign(s.T, 0.0);
  for (int t = 0; t < s.T; ++t) {
    double mx = -INFINITY;
    for (int u = 0; u <= t; ++u) {
      double dot = 0.0;
      for (int i = 0; i < s.hs; ++i)
        dot += static_cast<double>(q[at(s, s.q_stride, b, t, h, i)]) *
               k[at(s, s.kv_stride, b, u, g, i)];
      P[t * s.T + u] = dot * scale;
      mx = std::max(mx, dot * scale);
    }
    double sum = 0.0;
    for (int u = 0; u <= t; ++u) sum += std::exp(P[t * s.T + u] - mx);
    lse[t] = mx + std::log(sum);
    for (int u = 0; u <= t; ++u) P[t * s.T + u] = std::exp(P[t * s.T + u] - lse[t]);
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const ops::AttentionShape& s) {
  std::vector<double> P, l;
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / (s.NH / s.NKV);
      probabilities(P, l, q, k, s, b, h);
      for (int t = 0; t < s.T; ++t) {
        lse[(static_cast<long>(b) * s.NH + h) * s.T + t] = static_cast<float>(l[t]);
        for (int i = 0; i < s.hs; ++i) {
          double acc = 0.0;
          for (int u = 0; u <= t; ++u) acc += P[t * s.T + u] * v[at(s, s.kv_stride, b, u, g, i)];
          out[at(s, s.out_stride, b, t, h, i)] = static_cast<float>(acc);
        }
      }
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const ops::AttentionShape& s) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  const int T = s.T;
  std::vector<double> P, l, dP(static_cast<size_t>(T) * T);
  std::vector<double> dkd(static_cast<size_t>(s.B) * T * s.NKV * s.hs, 0.0);  // [B,T,NKV,hs]
  std::vector<double> dvd(dkd.size(), 0.0);
  auto kv_index = [&](int b, int u, int g, int i) {
    return ((static_cast<size_t>(b) * T + u) * s.NKV + g) * s.hs + i;
  };
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / (s.NH / s.NKV);
      probabilities(P, l, q, k, s, b, h);
      // dP = dout v^T, then dS = P * (dP - rowsum(P * dP))   (softmax Jacobian)
      for (int t = 0; t < T; ++t) {
        double rowdot = 0.0;
        for (int u = 0; u <= t; ++u) {
          double d = 0.0;
          for (int i = 0; i < s.hs; ++i)
            d += static_cast<double>(dout[at(s, s.out_stride, b, t, h, i)]) *
                 v[at(s, s.kv_stride, b, u, g, i)];
          dP[t * T + u] = d;
          rowdot += P[t * T + u] * d;
        }
        for (int u = 0; u <= t; ++u) dP[t * T + u] = P[t * T + u] * (dP[t * T + u] - rowdot);
      }
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < s.hs; ++i) {
          double acc = 0.0;
          for (int u = 0; u <= t; ++u) acc += dP[t * T + u] * k[at(s, s.kv_stride, b, u, g, i)];
          dq[at(s, s.q_stride, b, t, h, i)] = static_cast<float>(acc * scale);
        }
        for (int u = 0; u <= t; ++u) {
          for (int i = 0; i < s.hs; ++i) {
            dkd[kv_index(b, u, g, i)] += dP[t * T + u] * scale * q[at(s, s.q_stride, b, t, h, i)];
            dvd[kv_index(b, u, g, i)] += P[t * T + u] * dout[at(s, s.out_stride, b, t, h, i)];
          }
        }
      }
    }
  }
  for (int b = 0; b < s.B; ++b)
    for (int u = 0; u < T; ++u)
      for (int g = 0; g < s.NKV; ++g)
        for (int i = 0; i < s.hs; ++i) {
          dk[at(s, s.kv_stride, b, u, g, i)] = static_cast<float>(dkd[kv_index(b, u, g, i)]);
          dv[at(s, s.kv_stride, b, u, g, i)] = static_cast<float>(dvd[kv_index(b, u, g, i)]);
        }
}

void rope_forward(float* x, int B, int T, int nheads, int hs, int stride,
                  const ops::RopeSpec& rope) {
  const int half = hs / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < nheads; ++h) {
        float* xh = x + (static_cast<long>(b) * T + t) * stride + static_cast<long>(h) * hs;
        for (int i = 0; i < half; ++i) {
          const double f = ops::rope_frequency(rope, i, hs);
          const double c = std::cos(t * f), sn = std::sin(t * f);
          const double a = xh[i], bb = xh[i + half];
          xh[i] = static_cast<float>(a * c - bb * sn);
          xh[i + half] = static_cast<float>(bb * c + a * sn);
        }
      }
}

double softmax_cross_entropy(double* dlogits, const double* logits, const int32_t* targets,
                             const float* weight, double denominator, int m, int V) {
  double total = 0.0;
  for (int r = 0; r < m; ++r) {
    const double wt = weight ? weight[r] : 1.0;
    const double* row = &logits[static_cast<size_t>(r) * V];
    double* drow = dlogits ? &dlogits[static_cast<size_t>(r) * V] : nullptr;
    if (wt == 0.0) {
      if (drow) std::fill(drow, drow + V, 0.0);
      continue;
    }
    double mx = -INFINITY;
    for (int j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    const double lse = mx + std::log(sum);
    total += wt * (lse - row[targets[r]]);
    for (int j = 0; drow && j < V; ++j)
      drow[j] = (std::exp(row[j] - lse) - (j == targets[r] ? 1.0 : 0.0)) * wt / denominator;
  }
  return total / denominator;
}

double cross_entropy(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                     const float* weight, double denominator, int m, int C, int V, int Vp) {
  std::vector<double> logits(static_cast<size_t>(m) * V);  // [m, V]
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < V; ++j) {
      double d = 0.0;
      for (int c = 0; c < C; ++c) d += static_cast<double>(x[r * C + c]) * w[j * C + c];
      logits[static_cast<size_t>(r) * V + j] = d;
    }
  std::vector<double> dlogits(logits.size());  // [m, V]
  const double loss =
      softmax_cross_entropy(dlogits.data(), logits.data(), targets, weight, denominator, m, V);
  if (dx) {
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < C; ++c) {
        double d = 0.0;
        for (int j = 0; j < V; ++j) d += dlogits[static_cast<size_t>(r) * V + j] * w[j * C + c];
        dx[r * C + c] = static_cast<float>(d);
      }
    for (int j = 0; j < Vp; ++j)
      for (int c = 0; c < C; ++c) {
        double d = 0.0;
        for (int r = 0; r < m && j < V; ++r)
          d += dlogits[static_cast<size_t>(r) * V + j] * x[r * C + c];
        dw[j * C + c] = static_cast<float>(d);
      }
  }
  return loss;
}

}  // namespace dendrite::ref
