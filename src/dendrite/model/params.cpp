#include "dendrite/model/params.h"

#include <algorithm>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"

namespace dendrite {

const ParamSpec& ParamTable::add(const std::string& name, std::vector<int64_t> shape, bool decay,
                                 Init init, float init_std, int64_t init_rows) {
  ParamSpec s;
  s.name = name;
  s.shape = std::move(shape);
  s.numel = 1;
  for (int64_t d : s.shape) s.numel *= d;
  s.offset = total_;
  s.decay = decay;
  s.init = init;
  s.init_std = init_std;
  s.init_rows = init_rows;
  total_ += (s.numel + 15) / 16 * 16;
  specs_.push_back(std::move(s));
  return specs_.back();
}

const ParamSpec& ParamTable::find(const std::string& name) const {
  for (auto& s : specs_)
    if (s.name == name) return s;
  fail("parameters: no tensor named '", name, "'");
}

void ParamTable::initialize(float* values, uint64_t seed) const {
  for (auto& s : specs_) {
    float* p = values + s.offset;
    std::fill(p, p + s.numel, 0.0f);
    int64_t row = s.shape.size() > 1 ? s.numel / s.shape[0] : 1;
    int64_t n = s.init_rows < 0 ? s.numel : s.init_rows * row;
    if (s.init == Init::kOnes) std::fill(p, p + n, 1.0f);
    if (s.init == Init::kNormal) fill_normal(p, n, 0.0f, s.init_std, seed, hash_name(s.name.c_str()), 0);
  }
}

}  // namespace dendrite
