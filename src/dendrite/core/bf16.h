// bfloat16: the upper 16 bits of an IEEE fp32 (8 exponent bits, 7 mantissa
// bits), the storage type of bf16 precision (DESIGN.md section 10). A struct,
// not an integer alias, so that a bf16 buffer cannot be passed where floats
// or token ids are expected. Conversions here are scalar and exact to the
// rule; the vectorised array forms are ops (ops/convert.h).
#pragma once

#include <cstdint>
#include <cstring>

namespace dendrite {

struct bf16 {
  uint16_t bits = 0;
};

// fp32 -> bf16, rounding to nearest, ties to even; NaN stays a (quiet) NaN;
// denormal inputs become zeros of their sign, as the AVX512_BF16 instruction
// does (so the scalar and vector paths give the same bits).
inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  if ((u & 0x7f800000u) == 0) return bf16{uint16_t((u >> 16) & 0x8000u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// bf16 -> fp32, exact.
inline float to_float(bf16 b) {
  const uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace dendrite
