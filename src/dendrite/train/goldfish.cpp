// Goldfish loss masks (see goldfish.h). B sequences, T targets each, window h.
#include "dendrite/train/goldfish.h"

#include <cstdlib>
#include <sstream>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"

namespace dendrite {

namespace {

constexpr uint64_t kGoldfishStream = 0x676f6c6466697368ULL;  // "goldfish"

int parse_int(const std::string& key, const std::string& value, int lo, int hi) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  DENDRITE_CHECK(!value.empty() && *end == '\0' && v >= lo && v <= hi, "goldfish: ", key, "=",
                 value, " must be an integer from ", lo, " to ", hi, " (e.g. k=4,h=13,mode=hash)");
  return int(v);
}

}  // namespace

GoldfishOptions GoldfishOptions::parse(const std::string& text) {
  GoldfishOptions o;
  if (text.empty() || text == "off" || text == "none") return o;
  o.mode = Mode::kHash;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    DENDRITE_CHECK(eq != std::string::npos, "goldfish: '", item, "' in '", text,
                   "' is not key=value; write e.g. k=4,h=13,mode=hash,seed=0 (or off)");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "k") {
      o.k = parse_int(key, value, 2, 1 << 20);
    } else if (key == "h") {
      o.h = parse_int(key, value, 1, 1 << 16);
    } else if (key == "seed") {
      char* end = nullptr;
      o.seed = std::strtoull(value.c_str(), &end, 10);
      DENDRITE_CHECK(!value.empty() && *end == '\0' && value[0] != '-', "goldfish: seed=", value,
                     " must be a non-negative integer");
    } else if (key == "mode") {
      DENDRITE_CHECK(value == "hash" || value == "static", "goldfish: mode=", value,
                     " is not a mode; use mode=hash or mode=static");
      o.mode = value == "hash" ? Mode::kHash : Mode::kStatic;
    } else {
      fail("goldfish: unknown key '", key, "' in '", text, "'; the keys are k, h, mode and seed");
    }
  }
  return o;
}

std::string GoldfishOptions::str() const {
  if (mode == Mode::kOff) return "off";
  std::string s = "k=" + std::to_string(k);
  if (mode == Mode::kStatic) return s + ",mode=static";
  return s + ",h=" + std::to_string(h) + ",mode=hash,seed=" + std::to_string(seed);
}

double goldfish_window_hash(const int32_t* ids, int n, uint64_t seed) {
  uint64_t z = mix64(seed ^ kGoldfishStream);
  for (int i = 0; i < n; ++i) z = mix64(z ^ uint64_t(uint32_t(ids[i])));  // order matters
  return double(z >> 11) * 0x1.0p-53;
}

int64_t goldfish_weights(const GoldfishOptions& opt, const int32_t* targets, int B, int T,
                         float* weights) {
  const double threshold = 1.0 / opt.k;
  int64_t kept = 0;
#pragma omp parallel for reduction(+ : kept) schedule(static)
  for (int b = 0; b < B; ++b) {
    const int32_t* seq = targets + int64_t(b) * T;
    float* w = weights + int64_t(b) * T;
    for (int t = 0; t < T; ++t) {
      bool drop = false;
      if (opt.mode == GoldfishOptions::Mode::kStatic)
        drop = t % opt.k == opt.k - 1;
      else if (opt.mode == GoldfishOptions::Mode::kHash && t >= opt.h - 1)
        drop = goldfish_window_hash(seq + t - opt.h + 1, opt.h, opt.seed) < threshold;
      w[t] = drop ? 0.0f : 1.0f;
      kept += drop ? 0 : 1;
    }
  }
  return kept;
}

}  // namespace dendrite
