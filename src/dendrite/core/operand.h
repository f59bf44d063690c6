// A read-only GEMM operand (an activation, a gradient or a weight block) in
// the run's precision (DESIGN.md section 10): fp32 values, or their bf16
// rounding under bf16 precision. Exactly one pointer is set; code that only
// passes operands along needs no branch on the precision; a backend's op
// reads the typed pointer (Backend checks that an op's operands agree).
#pragma once

#include <cstdint>

#include "dendrite/core/bf16.h"

namespace dendrite {

struct Operand {
  const float* f32 = nullptr;
  const bf16* b16 = nullptr;

  Operand() = default;
  Operand(const float* p) : f32(p) {}  // NOLINT: implicit, as a pointer converts
  Operand(const bf16* p) : b16(p) {}   // NOLINT
  bool is_bf16() const { return b16 != nullptr; }
  bool empty() const { return !f32 && !b16; }
  // The operand that starts `elements` further on.
  Operand plus(int64_t elements) const {
    return b16 ? Operand(b16 + elements) : Operand(f32 + elements);
  }
};

}  // namespace dendrite
