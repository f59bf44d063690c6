// The collective watchdog (Communicator::set_timeout) under mpirun -np 8, on
// the Z axis (2 ranks) of the grid z=2,d=4: rank z=0 enters a collective
// alone and must get, after its timeout, an error naming the collective, the
// axis and the seconds waited; only then does rank z=1 join (told by a message
// on MPI_COMM_WORLD), which completes the operation z=0 left posted, so the
// job ends cleanly. Every path is covered: the blocking collectives in their
// MPI and ring forms, and Request::wait. (The ring all-reduce is two ring
// passes; a late partner would wait for a second pass that never comes, so it
// is not run here: its exchanges are the same code as the ring all-gather's.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/grid.h"
#include "dendrite/comm/mpi/world.h"
#include "dendrite/core/check.h"

namespace dendrite {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* kind;
  std::function<void(Communicator&)> run;
};

// Rank z=0 runs c alone with a 0.1 s timeout and expects the error.
void expect_timeout(const Case& c) {
  const std::unique_ptr<Communicator> world = make_mpi_world(MPI_COMM_WORLD, CommOptions{});
  ProcessGrid grid(GridShape{1, 1, 2, 4}, *world);
  Communicator& z = grid.Z();
  const int partner = grid.rank() ^ 1;  // z is bit 0 of the rank here
  if (grid.z() == 0) {
    z.set_timeout(0.1);
    std::string message;
    try {
      c.run(z);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_THAT(message, HasSubstr(std::string(c.kind) + " on grid axis z (2 ranks) did not "
                                                         "complete after "));
    EXPECT_THAT(message, HasSubstr(" s (--timeout 0.1): a rank of this group is stuck or dead"));
    MPI_Send(nullptr, 0, MPI_INT, partner, 99, MPI_COMM_WORLD);
  } else {
    z.set_timeout(0);
    MPI_Recv(nullptr, 0, MPI_INT, partner, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    c.run(z);  // completes against the operation z=0 posted
  }
  MPI_Barrier(MPI_COMM_WORLD);  // progresses z=0's posted operation meanwhile
}

TEST(WatchdogMpi, EveryWaitTimesOutNamingTheCollectiveAndAxis) {
  const int64_t big = 16384;  // 2 * 64 KB: the ring forms
  std::vector<float> in(2 * big, 1.0f), out(2 * big);
  double value = 1;
  const std::vector<Case> cases = {
      {"all_reduce", [&](Communicator& c) { c.all_reduce(&value, 1); }},
      {"all_gather", [&](Communicator& c) { c.all_gather(in.data(), out.data(), 4, DType::kF32); }},
      {"all_gather",
       [&](Communicator& c) { c.all_gather(in.data(), out.data(), big, DType::kF32); }},
      {"reduce_scatter",
       [&](Communicator& c) { c.reduce_scatter(in.data(), out.data(), 4, DType::kF32); }},
      {"reduce_scatter",
       [&](Communicator& c) { c.reduce_scatter(in.data(), out.data(), big, DType::kF32); }},
      {"broadcast", [&](Communicator& c) { c.broadcast(in.data(), 4, DType::kF32, 1); }},
      {"barrier", [&](Communicator& c) { c.barrier(); }},
      {"all_gather",
       [&](Communicator& c) { c.iall_gather(in.data(), out.data(), big, DType::kF32).wait(); }},
  };
  for (const Case& c : cases) expect_timeout(c);
}

}  // namespace
}  // namespace dendrite
