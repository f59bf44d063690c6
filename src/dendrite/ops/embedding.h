// Token and position embedding. tokens [m] (m = B*T rows, row r = b*T + t),
// the token table [V, C] (its rows may be split over ranks: the
// vocabulary-parallel lookup of DESIGN.md section 4), positions wpe [T_max, C]
// (GPT-2 only; Llama uses rotary positions instead). The lookup over the whole
// vocabulary is the range form with v0 = 0 and rows = V.
#pragma once

#include <cstdint>

#include "dendrite/core/bf16.h"

namespace dendrite::ops {

// The forward lookups read a table of fp32 or, under bf16 precision, bf16
// values (an overload for each); outputs and gradients are fp32.

// Vocabulary-parallel lookup: this rank holds rows [v0, v0 + rows) of the
// table (w [rows, C]); out[r,:] = w[tokens[r] - v0,:] when the token falls in
// that range, else 0 (the caller sums over the ranks of the split).
void embedding_range_forward(float* out, const int32_t* tokens, const float* w, int v0, int rows,
                             int m, int C);
void embedding_range_forward(float* out, const int32_t* tokens, const bf16* w, int v0, int rows,
                             int m, int C);
// dw[tokens[r] - v0,:] += dout[r,:] for the tokens in range.
void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens, int v0, int rows,
                              int m, int C);
// The same lookup from one Z chunk of the block: the chunk holds floats
// [c0, c0 + n) of the row-major block [rows, C]. out[r,:] gets the part of
// row tokens[r] - v0 that lies in the chunk, zeros elsewhere (the caller sums
// the chunks' parts over Z); the backward adds that part of dout[r,:] into
// the chunk (dchunk [n]). The ranges of all chunks partition each row, so
// the sum over Z is the row itself.
void embedding_chunk_forward(float* out, const int32_t* tokens, const float* chunk, int64_t c0,
                             int64_t n, int v0, int rows, int m, int C);
void embedding_chunk_forward(float* out, const int32_t* tokens, const bf16* chunk, int64_t c0,
                             int64_t n, int v0, int rows, int m, int C);
void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens, int64_t c0,
                              int64_t n, int v0, int rows, int m, int C);
// out[r,:] += wpe[r % T,:]  and its backward dwpe[r % T,:] += dout[r,:]   (out [m, C], m = B*T)
void position_add(float* out, const float* wpe, int m, int T, int C);
void position_add(float* out, const bf16* wpe, int m, int T, int C);
void position_backward(float* dwpe, const float* dout, int m, int T, int C);

}  // namespace dendrite::ops
