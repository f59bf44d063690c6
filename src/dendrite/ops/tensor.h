// Data movement on a rank's buffers, as ops so that the layers and the model
// never loop over elements themselves (DESIGN.md section 10): fills, strided
// row copies, and the interleave of the vocabulary parts of gathered logits.
#pragma once

#include <cstdint>

namespace dendrite::ops {

// Logits of `parts` vocabulary parts of Vloc ids each, m rows, V real ids.
struct VocabParts {
  int parts, m, Vloc, V;
};
// Throw, naming the op, unless the sizes are valid.
void check_vocab_parts(const VocabParts& s);
void check_rows(int64_t rows, int64_t cols, int64_t src_stride);
// n >= 0 elements; m >= 0 rows of n >= 0 columns.
void check_count(int64_t n, const char* op);
void check_matrix(int m, int n, const char* op);

// The ops (Backend's methods of these names):
//
// fill(x, value, n):  x[n] = value
// copy_rows(dst, src, rows, cols, src_stride):
//   dst[r, :cols] = src[r * src_stride, :cols] for r < rows  (dst [rows, cols])
// interleave_vocab_parts(out, parts, s): the logits of s.parts vocabulary
//   parts, gathered part-major (part p is [m, Vloc]: ids p*Vloc .. p*Vloc +
//   Vloc - 1), into out [m, V] in id order; ids at or above V (padding) are dropped.
// count_nonfinite(x, n): how many of x[n] are not finite (NaN or infinite).

}  // namespace dendrite::ops
