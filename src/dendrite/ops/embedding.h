// Token and position embedding. tokens [B*T] (row r = b*T + t), wte [V,C],
// wpe [T_max,C] (null for Llama, which uses rotary positions instead).
#pragma once

#include <cstdint>

namespace dendrite::ops {

// out[r,:] = wte[tokens[r],:] + (wpe ? wpe[r % T,:] : 0);  out [B*T, C]
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
// dwte[tokens[r],:] += dout[r,:];  dwpe[r % T,:] += dout[r,:]  (dwpe may be null)
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C);

// Vocabulary-parallel lookup: this rank holds rows [v0, v0 + rows) of the
// table (w [rows, C]); out[r,:] = w[tokens[r] - v0,:] when the token falls in
// that range, else 0 (the caller sums over the ranks of the split).
void embedding_range_forward(float* out, const int32_t* tokens, const float* w, int v0, int rows,
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
void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens, int64_t c0,
                              int64_t n, int v0, int rows, int m, int C);
// out[r,:] += wpe[r % T,:]  and its backward dwpe[r % T,:] += dout[r,:]   (out [m, C], m = B*T)
void position_add(float* out, const float* wpe, int m, int T, int C);
void position_backward(float* dwpe, const float* dout, int m, int T, int C);

}  // namespace dendrite::ops
