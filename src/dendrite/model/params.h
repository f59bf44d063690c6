// The parameter table: every tensor of a model as a named slice of one flat
// buffer, so the optimizer, clipping and checkpoints each run one loop over
// all parameters. Shapes follow DESIGN.md: a linear weight is [out, in].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/core/buffer.h"

namespace dendrite {

enum class Init { kNormal, kOnes, kZeros };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into the flat buffer, in floats
  int64_t numel = 0;
  bool decay = true;   // AdamW weight decay (off for norms and biases)
  Init init = Init::kNormal;
  float init_std = 0.0f;
  int64_t init_rows = -1;  // rows filled at init (-1: all); the rest stay zero (vocab padding)
};

class ParamTable {
 public:
  // Appends a tensor; offsets are 16-float aligned so every tensor starts on a cache line.
  const ParamSpec& add(const std::string& name, std::vector<int64_t> shape, bool decay, Init init,
                       float init_std = 0.0f, int64_t init_rows = -1);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& find(const std::string& name) const;  // throws if unknown
  int64_t total() const { return total_; }                // floats, padding included
  // Fills values from the counter-based RNG keyed by (seed, name, element index).
  void initialize(float* values, uint64_t seed) const;

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

}  // namespace dendrite
