// Math that must give the same bits on every backend: the CPU's kernels and
// the CUDA kernels both include this header, so an op's result does not
// depend on the device it ran on. Compilers contract a * b + c into a fused
// multiply-add where they choose to, and two compilers need not choose
// alike, so the device forms spell each rounding out.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DENDRITE_EXACT __host__ __device__ __forceinline__
#else
#include <cmath>
#define DENDRITE_EXACT inline
#endif

namespace dendrite::exact {

DENDRITE_EXACT int32_t bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(x);
#else
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return i;
#endif
}

DENDRITE_EXACT float from_bits(int32_t i) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(i);
#else
  float x;
  std::memcpy(&x, &i, sizeof x);
  return x;
#endif
}

// One rounding each: a fused multiply-add, an add, a product.
DENDRITE_EXACT float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

DENDRITE_EXACT float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

DENDRITE_EXACT float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// e^x for x in [-87, 88] (clamped outside), about 1 ulp: n = round(x / ln 2)
// by the 1.5 * 2^23 trick, then Cephes' degree-7 polynomial on r = x - n ln 2
// (ln 2 split in two). Branch-free, so CPU loops vectorise it (glibc's expf
// does not vectorise without -ffast-math).
//
// The polynomial with each rounding spelled out: the fused multiply-adds
// that GCC forms from exp_approx's host form below (-O3 -march=native
// contracts a * b + c), and no others. A GPU runs this form, so nvcc cannot
// contract otherwise; tests/ops_basic_test.cpp checks on the CPU that both
// forms give the same bits.
DENDRITE_EXACT float exp_approx_rounded(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float t = fma_rn(x, 1.44269504088896341f, 12582912.0f);
  const int32_t n = bits(t) - 0x4B400000;
  const float nf = add_rn(t, -12582912.0f);
  float r = fma_rn(-nf, 0.693359375f, x);
  r = fma_rn(nf, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fma_rn(p, r, 1.3981999507e-3f);
  p = fma_rn(p, r, 8.3334519073e-3f);
  p = fma_rn(p, r, 4.1665795894e-2f);
  p = fma_rn(p, r, 1.6666665459e-1f);
  p = fma_rn(p, r, 5.0000001201e-1f);
  p = add_rn(fma_rn(r, mul_rn(p, r), r), 1.0f);
  return mul_rn(p, from_bits((n + 127) << 23));
}

// The exponential the ops use: exp_approx_rounded on a GPU; on the CPU the
// plain expression, which the compiler vectorises and contracts as above.
DENDRITE_EXACT float exp_approx(float x) {
#if defined(__CUDA_ARCH__)
  return exp_approx_rounded(x);
#else
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float t = x * 1.44269504088896341f + 12582912.0f;
  int32_t n = bits(t) - 0x4B400000;
  float nf = t - 12582912.0f;
  float r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * from_bits((n + 127) << 23);
#endif
}

}  // namespace dendrite::exact
