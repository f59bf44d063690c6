// Token and position embedding. tokens [m] (m = B*T rows, row r = b*T + t),
// the token table [V, C] (its rows may be split over ranks: the
// vocabulary-parallel lookup of DESIGN.md section 4), positions wpe [T_max, C]
// (GPT-2 only; Llama uses rotary positions instead). The lookup over the whole
// vocabulary is the range form with v0 = 0 and rows = V.
#pragma once

#include <cstdint>

#include "dendrite/core/bf16.h"

namespace dendrite::ops {

// m token rows of C channels looked up in this rank's rows [v0, v0 + rows)
// of the table.
struct EmbeddingShape {
  int v0, rows, m, C;
};
// One Z chunk of the table block: its floats [c0, c0 + n) of the row-major [rows, C].
struct TableChunk {
  int64_t c0, n;
};
// m rows (m = B*T) of C channels at positions r % T.
struct PositionShape {
  int m, T, C;
};
// Throw, naming the op, unless the sizes are valid (m >= 0, C > 0, v0 >= 0,
// rows >= 0; c0 >= 0, n >= 0; T > 0).
void check_embedding(const EmbeddingShape& s, const char* op);
void check_chunk(const TableChunk& piece, const EmbeddingShape& s, const char* op);
void check_positions(const PositionShape& s, const char* op);

// The ops (Backend's methods of these names). The forward lookups read a
// table operand of fp32 or, under bf16 precision, bf16 values; outputs and
// gradients are fp32.
//
// embedding_range_forward(out, tokens, w, s): the vocabulary-parallel lookup:
//   this rank holds rows [v0, v0 + rows) of the table (w [rows, C]); out[r,:] =
//   w[tokens[r] - v0,:] when the token falls in that range, else 0 (the caller
//   sums over the ranks of the split). Token ids must not be negative.
// embedding_range_backward(dw, dout, tokens, s): dw[tokens[r] - v0,:] +=
//   dout[r,:] for the tokens in range.
// embedding_chunk_forward(out, tokens, chunk, piece, s): the same lookup from
//   one Z chunk of the block: the chunk holds floats [c0, c0 + n) of the
//   row-major block [rows, C]. out[r,:] gets the part of row tokens[r] - v0
//   that lies in the chunk, zeros elsewhere (the caller sums the chunks'
//   parts over Z).
// embedding_chunk_backward(dchunk, dout, tokens, piece, s): adds that part of
//   dout[r,:] into the chunk (dchunk [n]). The ranges of all chunks partition
//   each row, so the sum over Z is the row itself.
// position_add(out, wpe, s): out[r,:] += wpe[r % T,:]   (out [m, C], m = B*T)
// position_backward(dwpe, dout, s): dwpe[r % T,:] += dout[r,:]

}  // namespace dendrite::ops
