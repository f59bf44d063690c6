// Data movement on a rank's buffers, as ops so that the layers and the model
// never loop over elements themselves (DESIGN.md section 10): fills, strided
// row copies, and the interleave of the vocabulary parts of gathered logits.
#pragma once

#include <cstdint>

namespace dendrite::ops {

// x[n] = value
void fill(float* x, float value, int64_t n);
// dst[r, :cols] = src[r * src_stride, :cols] for r < rows  (dst [rows, cols])
void copy_rows(float* dst, const float* src, int64_t rows, int64_t cols, int64_t src_stride);
// The logits of `parts` vocabulary parts, gathered part-major (parts[p] is
// [m, Vloc]: ids p*Vloc .. p*Vloc + Vloc - 1), into out [m, V] in id order;
// ids at or above V (padding) are dropped.
void interleave_vocab_parts(float* out, const float* parts, int num_parts, int m, int Vloc, int V);
// How many of x[n] are not finite (NaN or infinite).
int64_t count_nonfinite(const float* x, int64_t n);

}  // namespace dendrite::ops
