// Rotary embedding's frequencies: the spec a model's config gives (a base
// theta and an optional scaling of Llama 3 or linear kind) and the one
// function that turns it into the frequency of pair i of a head of hs values.
// Every backend (the CPU ops, the CUDA kernels, the reference) calls
// rope_frequency, so that all of them rotate by the same angles to the bit.
//
// The scalings are those of transformers' modeling_rope_utils.py, computed in
// double (transformers computes them in fp32; the two differ by fp32
// rounding, far inside the tests' 1e-5):
//   f_i     = theta^(-2i/hs)                                   (default)
//   linear: f_i / factor
//   llama3: with wavelength w = 2 pi / f_i, L = original_max_positions,
//           f_i                    where w < L / high_freq_factor,
//           f_i / factor           where w > L / low_freq_factor,
//           (1 - s) f_i / factor + s f_i, s = (L / w - low) / (high - low), between.
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define DENDRITE_HOST_DEVICE __host__ __device__
#else
#define DENDRITE_HOST_DEVICE
#endif

namespace dendrite::ops {

enum class RopeScaling : int { kNone = 0, kLinear = 1, kLlama3 = 2 };

struct RopeSpec {
  float theta = 10000.0f;
  RopeScaling scaling = RopeScaling::kNone;
  float factor = 1.0f;                                    // linear and llama3
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;  // llama3
  int original_max_positions = 8192;                      // llama3
};

// The angle of pair i (< hs/2) per position.
DENDRITE_HOST_DEVICE inline double rope_frequency(const RopeSpec& r, int i, int hs) {
  const double f = pow(static_cast<double>(r.theta), -2.0 * i / hs);
  if (r.scaling == RopeScaling::kLinear) return f / r.factor;
  if (r.scaling != RopeScaling::kLlama3) return f;
  const double pi = 3.141592653589793;  // math.pi
  const double L = r.original_max_positions, low = r.low_freq_factor, high = r.high_freq_factor;
  const double wavelength = 2 * pi / f;
  if (wavelength < L / high) return f;
  if (wavelength > L / low) return f / r.factor;
  const double s = (L / wavelength - low) / (high - low);
  return (1 - s) * f / r.factor + s * f;
}

// What is wrong with a spec (null: nothing), for the ops' checks.
inline const char* rope_spec_problem(const RopeSpec& r) {
  if (!(r.theta > 0.0f)) return "theta must be positive (typically 10000)";
  if (r.scaling != RopeScaling::kNone && !(r.factor > 0.0f)) return "factor must be positive";
  if (r.scaling == RopeScaling::kLlama3 &&
      !(r.low_freq_factor > 0.0f && r.high_freq_factor > r.low_freq_factor &&
        r.original_max_positions > 0))
    return "llama3 scaling needs 0 < low_freq_factor < high_freq_factor and "
           "original_max_positions > 0";
  return nullptr;
}

}  // namespace dendrite::ops
