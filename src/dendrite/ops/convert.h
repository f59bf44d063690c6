// Conversions between fp32 and bf16 arrays (bf16 precision, DESIGN.md
// section 10): weights before the Z gathers and GEMMs, activations and
// gradients before GEMMs. n counts elements.
#pragma once

#include <cstdint>

#include "dendrite/core/bf16.h"

namespace dendrite::ops {

// out[n] = in[n] rounded to nearest-even bf16 (as dendrite::to_bf16).
void to_bf16(bf16* out, const float* in, int64_t n);
// out[n] = in[n] (exact).
void to_float(float* out, const bf16* in, int64_t n);

// A bias gradient and its layer's output gradient as a bf16 GEMM operand, in
// one pass on a GPU: out [m, n] = in rounded to bf16 (to_bf16), and db [n] +=
// the column sums of the fp32 in (add_column_sums, matmul.h). The same bits
// as those two calls, which the CPU makes.
void to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n);

}  // namespace dendrite::ops
