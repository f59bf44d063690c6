// CPU elementwise ops over n values: GELU (tanh form), SwiGLU, residual add.
// n: number of elements (m * 4C for the MLP activations). Each loop is one
// pass, split over threads in contiguous ranges and vectorised. glibc's tanhf
// and expf do not vectorise without -ffast-math, so the exponential below is a
// branch-free Cephes-style polynomial (about 1 ulp on [-87, 88]) that does, and
// tanh is written through it: 0.5 (1 + tanh(u)) = sigmoid(2u).
#include <cstdint>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/backend/exact_math.h"

namespace dendrite::cpu {

namespace {

constexpr long kParallelMin = 1L << 14;        // below this many values, one thread is faster
constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

inline float sigmoid(float x) { return 1.0f / (1.0f + exact::exp_approx(-x)); }

}  // namespace

void CpuBackend::do_gelu_forward(float* y, const float* x, long n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMin)
  for (long i = 0; i < n; ++i) {
    float xi = x[i];
    float u = kGeluS * (xi + kGeluA * xi * xi * xi);
    y[i] = xi * sigmoid(2.0f * u);
  }
}

void CpuBackend::do_gelu_backward(float* dx, const float* dy, const float* x, long n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMin)
  for (long i = 0; i < n; ++i) {
    float xi = x[i];
    float u = kGeluS * (xi + kGeluA * xi * xi * xi);
    float du = kGeluS * (1.0f + 3.0f * kGeluA * xi * xi);
    float s = sigmoid(2.0f * u);  // = 0.5 (1 + tanh u);  1 - tanh^2 u = 4 s (1 - s)
    dx[i] = dy[i] * (s + 2.0f * xi * s * (1.0f - s) * du);
  }
}

void CpuBackend::do_swiglu_forward(float* y, const float* gate, const float* up, long n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMin)
  for (long i = 0; i < n; ++i) {
    float g = gate[i];
    y[i] = g * sigmoid(g) * up[i];
  }
}

void CpuBackend::do_swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                                    const float* up, long n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMin)
  for (long i = 0; i < n; ++i) {
    float g = gate[i], d = dy[i];
    float s = sigmoid(g);
    dup[i] = d * g * s;
    dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

// The fused forms: the separate ops into the scratch, so the bits are theirs
// (one call over blocks of their own, else a call a row).
void CpuBackend::do_swiglu_forward_bf16(bf16* y_bf16, float* y, const float* gate, const float* up,
                                        const ops::GluRows& s) {
  const bool flat = s.stride == s.width;
  const int64_t rows = flat ? 1 : s.rows, w = flat ? s.count() : s.width;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * w, i = r * s.stride;
    do_swiglu_forward(y + o, gate + i, up + i, w);
    do_to_bf16(y_bf16 + o, y + o, w);
  }
}

void CpuBackend::do_swiglu_backward_bf16(bf16* dgate_bf16, bf16* dup_bf16, float* dgate, float* dup,
                                         const float* dy, const float* gate, const float* up,
                                         const ops::GluRows& s) {
  const bool flat = s.stride == s.width;
  const int64_t rows = flat ? 1 : s.rows, w = flat ? s.count() : s.width;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * w, i = r * s.stride;
    do_swiglu_backward(dgate + i, dup + i, dy + o, gate + i, up + i, w);
    do_to_bf16(dgate_bf16 + i, dgate + i, w);
    do_to_bf16(dup_bf16 + i, dup + i, w);
  }
}

void CpuBackend::do_add(float* y, const float* a, const float* b, long n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMin)
  for (long i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void CpuBackend::do_add_inplace(float* y, const float* x, long n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMin)
  for (long i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace dendrite::cpu
