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
#include <omp.h>

#include <algorithm>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/core/check.h"

namespace dendrite::cpu {

namespace {

constexpr int kColumnAlign = 16;  // floats per 64-byte cache line

void check_tokens(const char* op, const int32_t* tokens, long rows) {
  int32_t lowest = 0;
#pragma omp parallel for reduction(min : lowest) schedule(static) if (rows >= 4096)
  for (long r = 0; r < rows; ++r) lowest = tokens[r] < lowest ? tokens[r] : lowest;
  DENDRITE_CHECK(lowest >= 0, op, ": token id ", lowest,
                 " is negative; token ids must lie in [0, V)");
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
void chunk_forward(float* out, const int32_t* tokens, const W* chunk, int64_t c0, int64_t n, int v0,
                   int rows, int m, int C) {
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
#pragma omp parallel for schedule(static)
  for (long r = 0; r < m; ++r) {
    float* __restrict o = out + r * C;
    const W* __restrict p = wpe + (r % T) * C;
#pragma omp simd
    for (int j = 0; j < C; ++j) o[j] += widen(p[j]);
  }
}

}  // namespace

void CpuBackend::do_embedding_range_forward(float* out, const int32_t* tokens, Operand w,
                                            const ops::EmbeddingShape& s) {
  if (w.is_bf16())
    range_forward(out, tokens, w.b16, s.v0, s.rows, s.m, s.C);
  else
    range_forward(out, tokens, w.f32, s.v0, s.rows, s.m, s.C);
}

void CpuBackend::do_embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                                             const ops::EmbeddingShape& s) {
  const int v0 = s.v0, rows = s.rows, m = s.m, C = s.C;
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

void CpuBackend::do_embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk,
                                            const ops::TableChunk& piece,
                                            const ops::EmbeddingShape& s) {
  if (chunk.is_bf16())
    chunk_forward(out, tokens, chunk.b16, piece.c0, piece.n, s.v0, s.rows, s.m, s.C);
  else
    chunk_forward(out, tokens, chunk.f32, piece.c0, piece.n, s.v0, s.rows, s.m, s.C);
}

void CpuBackend::do_embedding_chunk_backward(float* dchunk, const float* dout,
                                             const int32_t* tokens, const ops::TableChunk& piece,
                                             const ops::EmbeddingShape& s) {
  const int64_t c0 = piece.c0, n = piece.n;
  const int v0 = s.v0, rows = s.rows, m = s.m, C = s.C;
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

void CpuBackend::do_position_add(float* out, Operand wpe, const ops::PositionShape& s) {
  if (wpe.is_bf16())
    positions_forward(out, wpe.b16, s.m, s.T, s.C);
  else
    positions_forward(out, wpe.f32, s.m, s.T, s.C);
}

void CpuBackend::do_position_backward(float* dwpe, const float* dout, const ops::PositionShape& s) {
  const int m = s.m, T = s.T, C = s.C;
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

}  // namespace dendrite::cpu
