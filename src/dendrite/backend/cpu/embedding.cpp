// CPU token + position embedding. B: sequences, T: positions per sequence,
// C: channels; row r = b*T + t of the [B*T, C] activations. The forward is a
// gather, parallel over rows. The backward is a scatter-add, where two rows with
// the same token would race, so threads split the C columns instead: each
// thread owns a 64-byte aligned range of columns and walks all rows in order.
// No atomics, and every dwte/dwpe element is summed in row order, so the
// result is the same on every run and for every thread count.
#include "dendrite/ops/embedding.h"

#include <omp.h>

#include "dendrite/core/check.h"

namespace dendrite::ops {

namespace {

constexpr int kColumnAlign = 16;  // floats per 64-byte cache line

void check_tokens(const char* op, const int32_t* tokens, long rows) {
  int32_t lowest = 0;
#pragma omp parallel for reduction(min : lowest) schedule(static) if (rows >= 4096)
  for (long r = 0; r < rows; ++r) lowest = tokens[r] < lowest ? tokens[r] : lowest;
  DENDRITE_CHECK(lowest >= 0, op, ": token id ", lowest,
                 " is negative; token ids must lie in [0, V)");
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  DENDRITE_CHECK(B >= 0 && T > 0 && C > 0,
                 "embedding_forward: need B >= 0, T > 0, C > 0, got B=", B, " T=", T, " C=", C);
  const long rows = static_cast<long>(B) * T;
  check_tokens("embedding_forward", tokens, rows);
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    float* __restrict o = out + r * C;
    const float* __restrict e = wte + static_cast<long>(tokens[r]) * C;
    if (wpe) {
      const float* __restrict p = wpe + (r % T) * C;
#pragma omp simd
      for (int j = 0; j < C; ++j) o[j] = e[j] + p[j];
    } else {
#pragma omp simd
      for (int j = 0; j < C; ++j) o[j] = e[j];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) {
  DENDRITE_CHECK(B >= 0 && T > 0 && C > 0,
                 "embedding_backward: need B >= 0, T > 0, C > 0, got B=", B, " T=", T, " C=", C);
  const long rows = static_cast<long>(B) * T;
  check_tokens("embedding_backward", tokens, rows);
#pragma omp parallel
  {
    // This thread's columns [c0, c1): an even share, rounded up to whole cache lines.
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int share = (C + nt - 1) / nt;
    share = (share + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
    int c0 = id * share < C ? id * share : C;
    int c1 = c0 + share < C ? c0 + share : C;
    for (long r = 0; r < rows && c0 < c1; ++r) {
      const float* __restrict d = dout + r * C;
      float* __restrict e = dwte + static_cast<long>(tokens[r]) * C;
#pragma omp simd
      for (int j = c0; j < c1; ++j) e[j] += d[j];
      if (dwpe) {
        float* __restrict p = dwpe + (r % T) * C;
#pragma omp simd
        for (int j = c0; j < c1; ++j) p[j] += d[j];
      }
    }
  }
}

}  // namespace dendrite::ops
