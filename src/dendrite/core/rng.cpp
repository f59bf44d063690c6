#include "dendrite/core/rng.h"

#include <cmath>

namespace dendrite {

double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = random_uniform(seed, stream, 2 * index);
  double u2 = random_uniform(seed, stream, 2 * index + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t hash_name(const char* name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 0x100000001b3ULL;
  return mix64(h);
}

}  // namespace dendrite
