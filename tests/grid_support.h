// Shared by the MPI tests: every process grid of P ranks, and the groups of
// ranks they are built on.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <thread>
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

// The groups of P ranks share out the grids they test: group k (world rank /
// P) takes the grids k, k + G, k + 2G, ... of a list, G = world / P groups, so
// that each grid runs once and the groups run side by side on different
// grids. turn(i) says whether the i-th is this rank's group's; ran_by_all
// counts the grids all groups ran (collective over MPI_COMM_WORLD).
class SharedGrids {
 public:
  explicit SharedGrids(int P) : P_(P) {
    int rank = 0, world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    group_ = rank / P, groups_ = world / P;
  }
  bool turn(int i) {
    const bool mine = i % groups_ == group_;
    mine_ += mine;
    return mine;
  }
  // Each group's count once (every rank of a group counts its grids). A
  // group done first waits asleep, not spinning in MPI beside the groups
  // still at work (mpirun runs more ranks than cores here).
  int ran_by_all() const {
    int sum = 0;
    MPI_Request done = MPI_REQUEST_NULL;
    MPI_Iallreduce(&mine_, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &done);
    for (int finished = 0;;) {
      MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
      if (finished) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return sum / P_;
  }

 private:
  int P_, group_ = 0, groups_ = 1, mine_ = 0;
};

}  // namespace dendrite::test
