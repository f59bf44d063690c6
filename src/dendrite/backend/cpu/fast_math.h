// Vectorisable float math shared by the CPU kernels: glibc's expf does not
// vectorise without -ffast-math, so the kernels use this polynomial instead.
#pragma once

#include <bit>
#include <cstdint>

namespace dendrite::ops::cpu {

// e^x for x in [-87, 88] (clamped outside), about 1 ulp: n = round(x / ln 2)
// by the 1.5 * 2^23 trick, then Cephes' degree-7 polynomial on x - n ln 2.
inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float t = x * 1.44269504088896341f + 12582912.0f;
  int32_t n = std::bit_cast<int32_t>(t) - 0x4B400000;
  float nf = t - 12582912.0f;
  float r = x - nf * 0.693359375f + nf * 2.12194440e-4f;  // x - n ln2, ln2 split in two
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((n + 127) << 23);
}

}  // namespace dendrite::ops::cpu
