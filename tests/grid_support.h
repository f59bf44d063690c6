// Shared by the MPI tests: every process grid of P ranks.
#pragma once

#include <vector>

#include "dendrite/comm/grid.h"

namespace dendrite::test {

// Every shape {x, y, z, d} with x*y*z*d = P, x fastest, then y, then z.
inline std::vector<GridShape> grids_of(int P) {
  std::vector<GridShape> out;
  for (int z = 1; z <= P; ++z)
    for (int y = 1; y <= P; ++y)
      for (int x = 1; x <= P; ++x)
        if (P % (x * y * z) == 0) out.push_back({x, y, z, P / (x * y * z)});
  return out;
}

}  // namespace dendrite::test
