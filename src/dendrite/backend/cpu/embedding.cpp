// CPU token + position embedding. B: sequences, T: positions per sequence,
// C: channels; row r = b*T + t of the [B*T, C] activations (m = B*T rows).
// The lookup serves the vocabulary-parallel embedding (DESIGN.md section 4):
// a rank holds table rows [v0, v0 + rows) and contributes only their tokens.
// The forward is a gather, parallel over rows. The backward is a scatter-add,
// where two rows with the same token would race, so threads split the C
// columns instead: each thread owns a 64-byte aligned range of columns and
// walks all rows in order. The position backward splits positions instead
// (rows of one position are added in row order by one thread). No atomics,
// and every gradient element is summed in row order, so the result is the
// same on every run and for every thread count.
#include "dendrite/ops/embedding.h"

#include <algorithm>

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

void check_sizes(const char* op, long m, int C) {
  DENDRITE_CHECK(m >= 0 && C > 0, op, ": need m >= 0 rows and C > 0 channels, got m=", m, " C=", C);
}

// This thread's columns [*c0, *c1) of C: an even share, rounded up to whole cache lines.
void thread_columns(int C, int* c0, int* c1) {
  const int nt = omp_get_num_threads(), id = omp_get_thread_num();
  int share = (C + nt - 1) / nt;
  share = (share + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
  *c0 = id * share < C ? id * share : C;
  *c1 = *c0 + share < C ? *c0 + share : C;
}

}  // namespace

namespace {

inline float widen(float x) { return x; }
inline float widen(bf16 x) { return to_float(x); }

// The lookups below for a table of fp32 or bf16 (bf16 precision) values.
template <typename W>
void range_forward(float* out, const int32_t* tokens, const W* w, int v0, int rows, int m, int C) {
  check_sizes("embedding_range_forward", m, C);
  DENDRITE_CHECK(v0 >= 0 && rows >= 0,
                 "embedding_range_forward: need v0 >= 0 and rows >= 0, got v0=", v0, " rows=", rows,
                 "; pass this rank's first vocabulary id and block size");
  check_tokens("embedding_range_forward", tokens, m);
#pragma omp parallel for schedule(static)
  for (long r = 0; r < m; ++r) {
    float* __restrict o = out + r * C;
    const long t = static_cast<long>(tokens[r]) - v0;  // row of this rank's block
    if (t >= 0 && t < rows) {
      const W* __restrict e = w + t * C;
#pragma omp simd
      for (int j = 0; j < C; ++j) o[j] = widen(e[j]);
    } else {
#pragma omp simd
      for (int j = 0; j < C; ++j) o[j] = 0.0f;
    }
  }
}

template <typename W>
void chunk_forward(float* out, const int32_t* tokens, const W* chunk, int64_t c0, int64_t n,
                   int v0, int rows, int m, int C) {
  check_sizes("embedding_chunk_forward", m, C);
  check_tokens("embedding_chunk_forward", tokens, m);
#pragma omp parallel for schedule(static)
  for (long r = 0; r < m; ++r) {
    float* __restrict o = out + r * C;
    std::fill(o, o + C, 0.0f);
    const long t = static_cast<long>(tokens[r]) - v0;
    if (t < 0 || t >= rows) continue;
    const int64_t b0 = std::max<int64_t>(t * C, c0), b1 = std::min<int64_t>((t + 1) * C, c0 + n);
    for (int64_t b = b0; b < b1; ++b) o[b - t * C] = widen(chunk[b - c0]);
  }
}

template <typename W>
void positions_forward(float* out, const W* wpe, int m, int T, int C) {
  check_sizes("position_add", m, C);
  DENDRITE_CHECK(T > 0, "position_add: need T > 0 positions, got T=", T);
#pragma omp parallel for schedule(static)
  for (long r = 0; r < m; ++r) {
    float* __restrict o = out + r * C;
    const W* __restrict p = wpe + (r % T) * C;
#pragma omp simd
    for (int j = 0; j < C; ++j) o[j] += widen(p[j]);
  }
}

}  // namespace

void embedding_range_forward(float* out, const int32_t* tokens, const float* w, int v0, int rows,
                             int m, int C) {
  range_forward(out, tokens, w, v0, rows, m, C);
}

void embedding_range_forward(float* out, const int32_t* tokens, const bf16* w, int v0, int rows,
                             int m, int C) {
  range_forward(out, tokens, w, v0, rows, m, C);
}

void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens, int v0, int rows,
                              int m, int C) {
  check_sizes("embedding_range_backward", m, C);
  DENDRITE_CHECK(v0 >= 0 && rows >= 0,
                 "embedding_range_backward: need v0 >= 0 and rows >= 0, got v0=", v0,
                 " rows=", rows, "; pass this rank's first vocabulary id and block size");
  check_tokens("embedding_range_backward", tokens, m);
#pragma omp parallel
  {
    int c0, c1;
    thread_columns(C, &c0, &c1);
    for (long r = 0; r < m && c0 < c1; ++r) {
      const long t = static_cast<long>(tokens[r]) - v0;
      if (t < 0 || t >= rows) continue;  // another rank's token
      const float* __restrict d = dout + r * C;
      float* __restrict e = dw + t * C;
#pragma omp simd
      for (int j = c0; j < c1; ++j) e[j] += d[j];
    }
  }
}

void embedding_chunk_forward(float* out, const int32_t* tokens, const float* chunk, int64_t c0,
                             int64_t n, int v0, int rows, int m, int C) {
  chunk_forward(out, tokens, chunk, c0, n, v0, rows, m, C);
}

void embedding_chunk_forward(float* out, const int32_t* tokens, const bf16* chunk, int64_t c0,
                             int64_t n, int v0, int rows, int m, int C) {
  chunk_forward(out, tokens, chunk, c0, n, v0, rows, m, C);
}

void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens, int64_t c0,
                              int64_t n, int v0, int rows, int m, int C) {
  check_sizes("embedding_chunk_backward", m, C);
  check_tokens("embedding_chunk_backward", tokens, m);
#pragma omp parallel
  {
    int j0, j1;  // this thread's columns: rows sharing a token add in row order
    thread_columns(C, &j0, &j1);
    for (long r = 0; r < m && j0 < j1; ++r) {
      const long t = static_cast<long>(tokens[r]) - v0;
      if (t < 0 || t >= rows) continue;
      const int64_t b0 = std::max<int64_t>(t * C + j0, c0);
      const int64_t b1 = std::min<int64_t>(t * C + j1, c0 + n);
      const float* __restrict d = dout + r * C;
      for (int64_t b = b0; b < b1; ++b) dchunk[b - c0] += d[b - t * C];
    }
  }
}

void position_add(float* out, const float* wpe, int m, int T, int C) {
  positions_forward(out, wpe, m, T, C);
}

void position_add(float* out, const bf16* wpe, int m, int T, int C) {
  positions_forward(out, wpe, m, T, C);
}

void position_backward(float* dwpe, const float* dout, int m, int T, int C) {
  check_sizes("position_backward", m, C);
  DENDRITE_CHECK(T > 0, "position_backward: need T > 0 positions, got T=", T);
  const int positions = m < T ? m : T;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < positions; ++t) {
    float* __restrict p = dwpe + static_cast<long>(t) * C;
    for (long r = t; r < m; r += T) {  // the rows of position t, in row order
      const float* __restrict d = dout + r * C;
#pragma omp simd
      for (int j = 0; j < C; ++j) p[j] += d[j];
    }
  }
}

}  // namespace dendrite::ops
