// Conversions between fp32 and bf16 arrays (bf16 precision, DESIGN.md
// section 10): weights before the Z gathers and GEMMs, activations and
// gradients before GEMMs. n counts elements. The ops (Backend's methods of
// these names):
//
// to_bf16(out, in, n):   out[n] = in[n] rounded to nearest-even bf16 (as dendrite::to_bf16).
// to_float(out, in, n):  out[n] = in[n] (exact).
// to_bf16_column_sums(out, db, in, m, n): a bias gradient and its layer's
//   output gradient as a bf16 GEMM operand, in one pass on a GPU: out [m, n] =
//   in rounded to bf16 (to_bf16), and db [n] += the column sums of the fp32 in
//   (add_column_sums, matmul.h). The same bits as those two calls, which the
//   CPU makes.
#pragma once
