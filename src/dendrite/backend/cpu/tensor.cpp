// CPU data movement (ops/tensor.h): plain loops, parallel over rows or
// blocks where the buffers are large.
#include <algorithm>
#include <cmath>

#include "dendrite/backend/cpu/cpu_backend.h"

namespace dendrite::cpu {

namespace {
constexpr int64_t kParallelMin = int64_t(1) << 16;  // below this one thread is faster
}

void CpuBackend::do_fill(float* x, float value, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void CpuBackend::do_copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                              int64_t src_stride) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * src_stride, cols, dst + r * cols);
}

void CpuBackend::do_interleave_vocab_parts(float* out, const float* parts,
                                           const ops::VocabParts& s) {
  const int num_parts = s.parts, m = s.m, Vloc = s.Vloc, V = s.V;
#pragma omp parallel for schedule(static) if (int64_t(m) * V >= kParallelMin)
  for (int r = 0; r < m; ++r)
    for (int p = 0; p < num_parts; ++p) {
      const int ids = std::min(Vloc, V - p * Vloc);  // real ids in this part
      if (ids > 0)
        std::copy_n(parts + (int64_t(p) * m + r) * Vloc, ids, out + int64_t(r) * V + p * Vloc);
    }
}

int64_t CpuBackend::do_count_nonfinite(const float* x, int64_t n) {
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(x[i]);
  return bad;
}

}  // namespace dendrite::cpu
