// The CPU backend the tests build models and optimizers on (one per process,
// as `dendrite` makes one per rank).
#pragma once

#include "dendrite/backend/backend.h"

namespace dendrite::test {

inline Backend& cpu_backend() {
  static std::unique_ptr<Backend> backend = make_backend(Device::kCpu);
  return *backend;
}

}  // namespace dendrite::test
