// CPU AdamW and gradient norm on flat buffers of n
// values (a rank's whole parameter shard, ~124M for GPT-2 small). AdamW is one
// fused pass reading param, grad, m, v and writing param, m, v. sum_squares
// cuts the buffer into fixed blocks of kBlock values, sums each in double and
// adds the block sums in block order, so the norm is bit-identical on every run
// and for every thread count. The table forms (sum_squares_tensors,
// adamw_update_tensors) run these tensor by tensor, in table order.
// g++ will not vectorise std::sqrt without -fno-math-errno (sqrtf may set
// errno), and a scalar sqrt + divide makes AdamW compute-bound (5x slower), so
// its loop uses GCC vector types with the ISA's vector sqrt where there is one.
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#define DENDRITE_VECTOR_SQRT 1
#endif

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/core/check.h"

namespace dendrite::cpu {

using ops::AdamWConfig;
using ops::FlatTensor;

namespace {
constexpr long kBlock = 1L << 15;        // values per sum_squares partial
constexpr long kParallelMin = 1L << 14;  // below this many values, one thread is faster
constexpr long kAdamBlock = 1L << 12;    // values per AdamW task

#if defined(__AVX512F__)
typedef float VecF __attribute__((vector_size(64)));
// The masked form with x as pass-through: _mm512_sqrt_ps trips a false
// -Wmaybe-uninitialized in g++ 12 (its _mm512_undefined_ps).
inline VecF vector_sqrt(VecF x) {
  return _mm512_mask_sqrt_ps(x, static_cast<__mmask16>(0xFFFF), x);
}
#elif defined(__AVX__)
typedef float VecF __attribute__((vector_size(32)));
inline VecF vector_sqrt(VecF x) { return _mm256_sqrt_ps(x); }
#elif defined(__SSE2__)
typedef float VecF __attribute__((vector_size(16)));
inline VecF vector_sqrt(VecF x) { return _mm_sqrt_ps(x); }
#endif

struct AdamWScalars {
  float b1, b2, a1, a2, eps;  // a1 = 1 - b1, a2 = 1 - b2
  float keep;                 // 1 - lr wd, or 1 without decay
  float step_size;            // lr / (1 - b1^step)
  float inv_sqrt_bc2;         // 1 / sqrt(1 - b2^step)
  float grad_scale;           // clipping factor
};

// AdamW on values [i0, i1): whole vectors first, then the scalar tail.
// With low non-null, also low[i] = the new param[i] rounded to bf16 (the
// copy GEMMs and gathers read in bf16 precision), in the same pass.
inline void adamw_range(float* __restrict param, const float* __restrict grad, float* __restrict m,
                        float* __restrict v, bf16* __restrict low, long i0, long i1,
                        const AdamWScalars& k) {
  long i = i0;
#ifdef DENDRITE_VECTOR_SQRT
  constexpr long kWidth = sizeof(VecF) / sizeof(float);
  for (; i + kWidth <= i1; i += kWidth) {
    VecF g, mi, vi, p;
    std::memcpy(&g, grad + i, sizeof g);
    g *= k.grad_scale;
    std::memcpy(&mi, m + i, sizeof mi);
    std::memcpy(&vi, v + i, sizeof vi);
    std::memcpy(&p, param + i, sizeof p);
    mi = k.b1 * mi + k.a1 * g;
    vi = k.b2 * vi + k.a2 * g * g;
    p = p * k.keep - k.step_size * mi / (vector_sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
    std::memcpy(m + i, &mi, sizeof mi);
    std::memcpy(v + i, &vi, sizeof vi);
    std::memcpy(param + i, &p, sizeof p);
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    if (low) {
      const __m256bh h = _mm512_cvtneps_pbh(reinterpret_cast<const __m512&>(p));
      std::memcpy(static_cast<void*>(low + i), &h, sizeof h);
    }
#else
    if (low)
      for (long j = 0; j < kWidth; ++j) low[i + j] = to_bf16(param[i + j]);
#endif
  }
#endif
  for (; i < i1; ++i) {
    float g = grad[i] * k.grad_scale;
    float mi = k.b1 * m[i] + k.a1 * g;
    float vi = k.b2 * v[i] + k.a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * k.keep - k.step_size * mi / (std::sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
    if (low) low[i] = to_bf16(param[i]);
  }
}

}  // namespace

void CpuBackend::do_adamw_update(float* param, const float* grad, float* m, float* v, long n,
                                 float lr, int step, bool decay, const AdamWConfig& c,
                                 float grad_scale, bf16* param_bf16) {
  // As torch.optim.AdamW: p *= 1 - lr wd;  p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), step);
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), step);
  AdamWScalars k;
  k.b1 = c.beta1, k.b2 = c.beta2, k.a1 = 1.0f - c.beta1, k.a2 = 1.0f - c.beta2, k.eps = c.eps;
  k.keep = decay ? 1.0f - lr * c.weight_decay : 1.0f;
  k.step_size = static_cast<float>(lr / bc1);
  k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  k.grad_scale = grad_scale;
  const long blocks = (n + kAdamBlock - 1) / kAdamBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long b = 0; b < blocks; ++b) {
    long i1 = (b + 1) * kAdamBlock < n ? (b + 1) * kAdamBlock : n;
    adamw_range(param, grad, m, v, param_bf16, b * kAdamBlock, i1, k);
  }
}

double CpuBackend::do_sum_squares(const float* g, long n) {
  const long blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (long k = 0; k < blocks; ++k) {
    const long i1 = (k + 1) * kBlock < n ? (k + 1) * kBlock : n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (long i = k * kBlock; i < i1; ++i) s += static_cast<double>(g[i]) * g[i];
    partial[k] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void CpuBackend::do_sum_squares_tensors(double* total, const float* base, const FlatTensor* table,
                                        int count, int64_t /*values*/) {
  double s = 0.0;
  for (int t = 0; t < count; ++t) s += do_sum_squares(base + table[t].offset, long(table[t].n));
  *total = s;
}

void CpuBackend::do_adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                                         const FlatTensor* table, int count, int64_t /*values*/,
                                         float lr, int step, const AdamWConfig& c, float grad_scale,
                                         bf16* low, int64_t low_count) {
  for (int t = 0; t < count; ++t) {
    const FlatTensor& f = table[t];
    DENDRITE_CHECK(!low || f.offset + f.n <= low_count || f.offset >= low_count,
                   "adamw_update_tensors: the bf16 copy ends inside tensor ", t, " (values ",
                   f.offset, " to ", f.offset + f.n, ", copy of ", low_count,
                   "); lay the tensors out so that the copy ends between two");
    bf16* copy = low && f.offset < low_count ? low + f.offset : nullptr;
    do_adamw_update(param + f.offset, grad + f.offset, m + f.offset, v + f.offset, long(f.n), lr,
                    step, f.decay != 0, c, grad_scale, copy);
  }
}

void CpuBackend::do_scale(float* g, float s, long n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMin)
  for (long i = 0; i < n; ++i) g[i] *= s;
}
}  // namespace dendrite::cpu
