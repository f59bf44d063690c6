// The GPU transports' host side, on the CPU (mpirun -np 8; built with the
// CUDA backend, run without a GPU): the staged transport
// (backend/cuda/staged_communicator.h) and the NCCL one
// (comm/nccl/nccl_communicator.h) over MPI groups, on every grid of 1, 2, 4
// and 8 ranks. Host buffers (the trainer's losses, norms and checks) pass to
// the MPI communicator inside untouched: the same values, and the bytes and
// calls counted by the same rule; the grid's axes come from the transport's
// split() and group_of_one(), so every axis stays the transport's. Values
// encode the sender's world rank, so data from the wrong peer shows up.
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/backend/cuda/staged_communicator.h"
#include "dendrite/comm/grid.h"
#include "grid_support.h"
#ifdef DENDRITE_HAVE_NCCL
#include "dendrite/comm/nccl/nccl_communicator.h"
#endif

namespace dendrite {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

float value(int w, int i) { return float(w * 100 + i) + 0.25f; }

constexpr int64_t kN = 6;

// Every collective of the interface on host buffers of one axis, blocking
// and posted: values against the members' world ranks, then the counters.
void check_axis(Communicator& c, const std::vector<int>& members) {
  const int g = c.size(), me = world_rank();
  ASSERT_EQ(int(members.size()), g);
  SCOPED_TRACE(c.name() + " of " + std::to_string(g));
  c.reset_stats();
  for (bool posted : {false, true}) {
    std::vector<float> sum(kN), gathered(size_t(g) * kN), whole(size_t(g) * kN), part(kN);
    for (int64_t i = 0; i < kN; ++i) sum[i] = value(me, int(i));
    for (int64_t i = 0; i < g * kN; ++i) whole[i] = value(me, int(i));
    if (posted) {
      c.iall_reduce(sum.data(), kN, DType::kF32).wait();
    } else {
      c.all_reduce(sum.data(), kN, DType::kF32);
    }
    std::vector<float> mine(kN);
    for (int64_t i = 0; i < kN; ++i) mine[i] = value(me, int(i));
    if (posted) {
      c.iall_gather(mine.data(), gathered.data(), kN, DType::kF32).wait();
      c.ireduce_scatter(whole.data(), part.data(), kN, DType::kF32).wait();
    } else {
      c.all_gather(mine.data(), gathered.data(), kN, DType::kF32);
      c.reduce_scatter(whole.data(), part.data(), kN, DType::kF32);
    }
    const int rank = c.rank();
    for (int64_t i = 0; i < kN; ++i) {
      float want_sum = 0, want_part = 0;
      for (int m : members) {
        want_sum += value(m, int(i));
        want_part += value(m, int(rank * kN + i));
      }
      EXPECT_FLOAT_EQ(sum[i], want_sum) << "all_reduce, element " << i;
      EXPECT_FLOAT_EQ(part[i], want_part) << "reduce_scatter, element " << i;
      for (int j = 0; j < g; ++j)
        EXPECT_EQ(gathered[j * kN + i], value(members[j], int(i))) << "all_gather, rank " << j;
    }
  }
  double root_value = me;
  c.broadcast(&root_value, 1, DType::kF64, g - 1);
  EXPECT_EQ(root_value, double(members.back()));
  c.barrier();
  // Two calls of each kind (blocking, posted) and a broadcast, counted by
  // the communicators' rule; a group of one counts none.
  const CommStats& s = c.stats();
  const int64_t calls = g > 1 ? 1 : 0;
  EXPECT_EQ(s.calls[int(Collective::kAllReduce)], 2 * calls);
  EXPECT_EQ(s.bytes[int(Collective::kAllReduce)], 2 * calls * kN * 4);
  EXPECT_EQ(s.calls[int(Collective::kAllGather)], 2 * calls);
  EXPECT_EQ(s.bytes[int(Collective::kAllGather)], 2 * calls * g * kN * 4);
  EXPECT_EQ(s.calls[int(Collective::kReduceScatter)], 2 * calls);
  EXPECT_EQ(s.bytes[int(Collective::kReduceScatter)], 2 * calls * g * kN * 4);
  EXPECT_EQ(s.bytes[int(Collective::kBroadcast)], calls * 8);
}

// The world ranks of each axis of `grid`, whose base holds world ranks
// first .. first + P - 1 (DESIGN.md section 1's formula).
std::vector<std::pair<Communicator*, std::vector<int>>> axes(ProcessGrid& grid) {
  const GridShape& s = grid.shape();
  const int first = world_rank() - grid.rank();
  const int extent[4] = {s.x, s.y, s.z, s.d};
  int coord[4] = {grid.x(), grid.y(), grid.z(), grid.d()};
  Communicator* comm[4] = {&grid.X(), &grid.Y(), &grid.Z(), &grid.D()};
  std::vector<std::pair<Communicator*, std::vector<int>>> out;
  for (int a = 0; a < 4; ++a) {
    std::vector<int> members;
    for (int j = 0; j < extent[a]; ++j) {
      int c[4] = {coord[0], coord[1], coord[2], coord[3]};
      c[a] = j;
      members.push_back(first + c[0] + s.x * (c[1] + s.y * (c[2] + s.z * c[3])));
    }
    out.push_back({comm[a], members});
  }
  std::vector<int> all;
  for (int j = 0; j < s.size(); ++j) all.push_back(first + j);
  out.push_back({&grid.world(), all});
  return out;
}

// Over every grid of 1-8 ranks, with `wrap` making the transport over a group.
void every_grid_over(const std::function<std::unique_ptr<Communicator>(Communicator&)>& wrap) {
  for (int p : {1, 2, 4, 8}) {
    const std::unique_ptr<Communicator> group = test::group_of(p);
    const std::unique_ptr<Communicator> transport = wrap(*group);
    for (const GridShape& shape : test::grids_of(p)) {
      SCOPED_TRACE("grid " + shape.str());
      ProcessGrid grid(shape, *transport);
      for (auto& [comm, members] : axes(grid)) check_axis(*comm, members);
    }
  }
}

TEST(GpuTransportHost, StagedPassesHostBuffersToMpiOnEveryGrid) {
  std::unique_ptr<Backend> cpu = make_backend(Device::kCpu);
  every_grid_over([&](Communicator& group) -> std::unique_ptr<Communicator> {
    return std::make_unique<cuda::StagedCommunicator>(group, *cpu);
  });
}

#ifdef DENDRITE_HAVE_NCCL
// Until its first device collective the NCCL transport touches no GPU, so
// this runs here: only its host side, which must not need one.
TEST(GpuTransportHost, NcclPassesHostBuffersToMpiOnEveryGrid) {
  std::unique_ptr<Backend> cpu = make_backend(Device::kCpu);
  int stream_stand_in = 0;  // never used: no device collective runs
  NcclDevice dev;
  dev.memory = cpu.get();
  dev.compute_stream = &stream_stand_in;
  every_grid_over([&](Communicator& group) { return nccl::make_communicator(group, dev); });
}
#endif

}  // namespace
}  // namespace dendrite
