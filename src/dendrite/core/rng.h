// Counter-based random numbers: every value is a pure function of
// (seed, stream, index), so any rank can fill any slice of a tensor without
// generating the rest, and the model is the same on every process grid.
#pragma once

#include <cstdint>

namespace dendrite {

// SplitMix64 finaliser: a bijective 64-bit mixer with full avalanche.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A 64-bit random word for (seed, stream, index).
inline uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ULL)) + index);
}

// Uniform in [0, 1) with 53 bits.
inline double random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<double>(random_bits(seed, stream, index) >> 11) * 0x1.0p-53;
}

// Standard normal (Box-Muller on two independent counters).
double random_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Stable 64-bit hash of a name, used as the stream id of a parameter.
uint64_t hash_name(const char* name);

}  // namespace dendrite
