// fp32 <-> bf16 arrays on the CPU. With AVX512_BF16 (Zen 4/5, Cooper Lake,
// Sapphire Rapids) one instruction rounds 16 floats to nearest-even, with the
// same results as the scalar rule in core/bf16.h (NaN included: both keep it
// a quiet NaN); elsewhere the scalar rule, which the compiler vectorises.
#include <immintrin.h>

#include "dendrite/backend/cpu/cpu_backend.h"

namespace dendrite::cpu {

namespace {
constexpr int64_t kParallelMin = int64_t(1) << 16;  // below this one thread is faster
}

void CpuBackend::do_to_bf16(bf16* out, const float* in, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i0 = 0; i0 < n; i0 += 4096) {
    const int64_t i1 = i0 + 4096 < n ? i0 + 4096 : n;
    int64_t i = i0;
#ifdef __AVX512BF16__
    for (; i + 16 <= i1; i += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
    }
#endif
    for (; i < i1; ++i) out[i] = dendrite::to_bf16(in[i]);
  }
}

void CpuBackend::do_to_float(float* out, const bf16* in, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = dendrite::to_float(in[i]);
}

void CpuBackend::do_to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) {
  do_to_bf16(out, in, int64_t(m) * n);
  do_add_column_sums(db, in, m, n);
}

}  // namespace dendrite::cpu
