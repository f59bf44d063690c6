// Shared by the MPI tests: every process grid of P ranks, and the groups of
// ranks they are built on.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "dendrite/comm/grid.h"
#include "dendrite/comm/mpi/world.h"
#include "dendrite/comm/options.h"

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

// The ranks of MPI_COMM_WORLD in groups of P consecutive ranks (this rank's
// group: world rank / P), communicating as `options` say; by default as the
// environment says, like the program (DENDRITE_SHARED_MEMORY=0: no shared
// memory). Its world, made here, hands its progress engine on to the group.
inline std::unique_ptr<Communicator> group_of(
    int P, const CommOptions& options = comm_options_from_environment()) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return make_mpi_world(MPI_COMM_WORLD, options)->split(rank / P, rank, "group");
}

}  // namespace dendrite::test
