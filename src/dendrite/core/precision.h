// The arithmetic precision of a run (DESIGN.md section 10):
//   fp32: every value fp32 (accumulations of sums in double where they are today);
//   bf16: GEMM operands (the parameters used by GEMMs, the activations and
//         gradients feeding GEMMs) and the Z all-gathers of weights in bf16,
//         accumulation in fp32; norms, softmax, losses and their statistics,
//         the X/Y partial sums, all gradients, master weights and AdamW state
//         stay fp32.
#pragma once

#include <string>

namespace dendrite {

enum class Precision { kF32, kBF16 };

// "fp32" or "bf16"; anything else is an error naming both.
Precision parse_precision(const std::string& text);
// Bytes of a GEMM operand or gathered weight element.
inline int operand_bytes(Precision p) { return p == Precision::kBF16 ? 2 : 4; }

}  // namespace dendrite
