// Communicators and the 4D process grid (axes x, y, z, d) under mpirun -np 8
// (what needs no MPI: comm_test.cpp).
// Each MPI test walks every grid of P = 1, 2, 4 and 8 ranks: MPI_COMM_WORLD is
// split into 8/P groups of P ranks and each group builds every shape with
// x*y*z*d = P (1 + 4 + 10 + 20 grids), so one launch checks all of them on
// every rank. Values encode the world rank of the rank that sent them, so data
// from the wrong peer, slot or group shows up as a wrong number.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "comm_mpi_support.h"
#include "dendrite/comm/communicator.h"
#include "dendrite/comm/grid.h"
#include "dendrite/comm/mpi/world.h"
#include "dendrite/comm/options.h"
#include "dendrite/core/check.h"
#include "grid_support.h"

namespace dendrite {
namespace {

using ::testing::HasSubstr;

using namespace comm_test;  // comm_mpi_support.h

// Broadcast from the last rank and from rank 0 of the axis.
template <typename T>
void check_broadcast(const Axis& axis, CommStats& expect, int64_t n) {
  Communicator& c = *axis.comm;
  for (int root : {c.size() - 1, 0}) {
    std::vector<T> buf = slot<T>(world_rank(), 0, n);
    c.broadcast(buf.data(), n, dtype_of<T>(), root);
    add_expected(expect, c.size(), Collective::kBroadcast, n * int64_t{sizeof(T)});
    expect_values(buf, slot<T>(axis.members[root], 0, n), "broadcast from " + std::to_string(root));
  }
}

// Runs every collective on one axis (blocking or not) and checks the values;
// adds what the byte counters should record to `expect`.
template <typename T>
void check_collectives(const Axis& axis, bool nonblocking, CommStats& expect, int64_t n = kN) {
  Communicator& c = *axis.comm;
  const int s = c.size(), r = c.rank(), me = world_rank();
  const DType t = dtype_of<T>();
  const int64_t es = sizeof(T);
  SCOPED_TRACE(c.name() + (nonblocking ? " non-blocking, " : " blocking, ") + std::to_string(es) +
               "-byte elements, n = " + std::to_string(n));

  std::vector<T> buf = slot<T>(me, 0, n);
  if (nonblocking) {
    c.iall_reduce(buf.data(), n, t).wait();
  } else {
    c.all_reduce(buf.data(), n, t);
  }
  add_expected(expect, s, Collective::kAllReduce, n * es);
  expect_values(buf, axis_sum<T>(axis, 0, n), "all_reduce");

  const std::vector<T> in = slot<T>(me, 0, n);
  std::vector<T> out(s * n), want;
  if (nonblocking) {
    c.iall_gather(in.data(), out.data(), n, t).wait();
  } else {
    c.all_gather(in.data(), out.data(), n, t);
  }
  add_expected(expect, s, Collective::kAllGather, s * n * es);
  for (int m : axis.members) {
    const std::vector<T> part = slot<T>(m, 0, n);
    want.insert(want.end(), part.begin(), part.end());
  }
  expect_values(out, want, "all_gather");

  std::vector<T> full, part(n);  // full: slot j of this rank goes to axis rank j
  for (int j = 0; j < s; ++j) {
    const std::vector<T> piece = slot<T>(me, j, n);
    full.insert(full.end(), piece.begin(), piece.end());
  }
  if (nonblocking) {
    c.ireduce_scatter(full.data(), part.data(), n, t).wait();
  } else {
    c.reduce_scatter(full.data(), part.data(), n, t);
  }
  add_expected(expect, s, Collective::kReduceScatter, s * n * es);
  expect_values(part, axis_sum<T>(axis, r, n), "reduce_scatter");

  if (!nonblocking) check_broadcast<T>(axis, expect, n);  // there is no non-blocking one
}

// all_gather from this rank's slot of out, reduce_scatter with in == out.
void check_in_place(const Axis& axis, CommStats& expect) {
  Communicator& c = *axis.comm;
  const int s = c.size(), r = c.rank(), me = world_rank();
  SCOPED_TRACE(c.name() + " in place");
  std::vector<double> buf(s * kN, -1.0), want;
  for (int i = 0; i < kN; ++i) buf[r * kN + i] = value<double>(me, 0, i);
  c.iall_gather(buf.data() + r * kN, buf.data(), kN, DType::kF64).wait();
  add_expected(expect, s, Collective::kAllGather, s * kN * 8);
  for (int m : axis.members) {
    const std::vector<double> part = slot<double>(m, 0, kN);
    want.insert(want.end(), part.begin(), part.end());
  }
  expect_values(buf, want, "in-place all_gather");

  for (int j = 0; j < s; ++j)
    for (int i = 0; i < kN; ++i) buf[j * kN + i] = value<double>(me, j, i);
  c.reduce_scatter(buf.data(), buf.data(), kN, DType::kF64);
  add_expected(expect, s, Collective::kReduceScatter, s * kN * 8);
  buf.resize(kN);
  expect_values(buf, axis_sum<double>(axis, r, kN), "in-place reduce_scatter");
}

TEST(ProcessGridMpi, CoordinatesAndAxisGroups) {
  EXPECT_EQ(world_size(), 8) << "run under mpirun -np 8 to cover every grid";
  int grids = 0;
  for_each_grid([&](ProcessGrid& grid) {
    ++grids;
    const GridShape& s = grid.shape();
    const int r = world_rank() % s.size();
    EXPECT_EQ(grid.rank(), r);
    EXPECT_EQ(grid.x(), r % s.x);
    EXPECT_EQ(grid.y(), (r / s.x) % s.y);
    EXPECT_EQ(grid.z(), (r / (s.x * s.y)) % s.z);
    EXPECT_EQ(grid.d(), r / (s.x * s.y * s.z));
    const int coord[5] = {grid.x(), grid.y(), grid.z(), grid.d(), grid.rank()};
    const char* names[5] = {"x", "y", "z", "d", "world"};
    const std::vector<Axis> axes = axes_of(grid);
    for (int a = 0; a < 5; ++a) {
      Communicator& c = *axes[a].comm;
      EXPECT_EQ(c.name(), names[a]);
      EXPECT_EQ(c.rank(), coord[a]) << names[a];
      EXPECT_EQ(c.size(), static_cast<int>(axes[a].members.size())) << names[a];
      // Membership: every rank of the group reports its world rank.
      int64_t mine = world_rank();
      std::vector<int64_t> all(c.size(), -1);
      c.all_gather(&mine, all.data(), 1, DType::kI64);
      EXPECT_THAT(all, ::testing::ElementsAreArray(
                           std::vector<int64_t>(axes[a].members.begin(), axes[a].members.end())))
          << names[a];
    }
  });
  EXPECT_EQ(grids, 35);
}

// Where a group shares a node its all-reduces and barriers go through shared
// memory; without it (CommOptions::shared_memory) the MPI paths, checked the
// same way.
TEST(ProcessGridMpi, CollectiveValuesAndCounters) {
  for (bool shared : {true, false}) {
  SCOPED_TRACE(shared ? "shared memory" : "messages");
  for_each_grid([](ProcessGrid& grid) {
    const std::vector<Axis> axes = axes_of(grid);
    for (const Axis& axis : axes) {
      grid.reset_stats();
      CommStats expect;
      for (bool nonblocking : {false, true}) {
        check_collectives<float>(axis, nonblocking, expect);
        check_collectives<double>(axis, nonblocking, expect);
        check_collectives<int64_t>(axis, nonblocking, expect);
      }
      // The large paths once per group size: every grid of P ranks has the
      // same world; its first grid (x = y = z = 1) runs them.
      const GridShape& g = grid.shape();
      if (axis.comm == &grid.world() && g.x == 1 && g.y == 1 && g.z == 1) {
        check_collectives<float>(axis, false, expect, kLarge);
        check_collectives<float>(axis, true, expect, kLarge);
      }
      // All-reduces of several shared-memory pieces (1 MB each) over Z, on the
      // grids where Z is every extent, contiguous (x = 1) and strided (x > 1).
      if (axis.comm == &grid.Z() && g.y == 1 && g.d == 1) {
        check_collectives<float>(axis, false, expect, kPieces);
        check_collectives<float>(axis, true, expect, kPieces);
        check_collectives<double>(axis, false, expect, kPieces);
      }
      check_in_place(axis, expect);
      axis.comm->barrier();
      // This axis counted by the rule; the other four counted nothing.
      for (const Axis& other : axes)
        expect_stats(*other.comm, other.comm == axis.comm ? expect : CommStats{});
      if (axis.comm->size() > 1) {
        EXPECT_GT(axis.comm->stats().wait_seconds, 0.0);
      } else {
        EXPECT_EQ(axis.comm->stats().wait_seconds, 0.0);
      }
    }
    grid.reset_stats();
    for (const Axis& axis : axes) {
      expect_stats(*axis.comm, CommStats{});
      EXPECT_EQ(axis.comm->stats().wait_seconds, 0.0);
    }
  }, with_shared_memory(shared));
  }
}

// The collectives over SharedArrays, in shared memory (every group here is on
// one node) and without it (private arrays, messages): the
// same values as by the rule, the same counters as the message collectives.
void check_shared_collectives(const Axis& axis, bool expect_shared) {
  Communicator& c = *axis.comm;
  const int g = c.size(), me = c.rank();
  const int64_t n = 37, off = 5;  // per-rank count and a range that does not start at 0
  std::unique_ptr<SharedArray> a = c.allocate_shared(off + g * n);
  EXPECT_EQ(a->shared(), expect_shared && g > 1);
  auto fill = [&] {
    for (int64_t i = 0; i < a->size(); ++i) a->data()[i] = value<float>(axis.members[me], 0, int(i));
    c.barrier();
  };
  fill();
  c.reset_stats();
  std::vector<float> out(size_t(g * n));
  c.all_gather(*a, off, out.data(), n);
  for (int r = 0; r < g; ++r)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out[r * n + i], value<float>(axis.members[r], 0, int(off + i)));
  for (bool accumulate : {false, true}) {
    std::vector<float> chunk(size_t(n), 0.5f);
    c.reduce_scatter(*a, off, chunk.data(), n, accumulate);
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < g; ++r) sum += value<float>(axis.members[r], 0, int(off + me * n + i));
      ASSERT_EQ(chunk[i], accumulate ? 0.5f + sum : sum);
    }
    c.barrier();
  }
  c.all_reduce(*a, off, g * n);
  for (int64_t i = 0; i < g * n; ++i) {
    float sum = 0;
    for (int r = 0; r < g; ++r) sum += value<float>(axis.members[r], 0, int(off + i));
    ASSERT_EQ(a->data()[off + i], sum);
  }
  EXPECT_EQ(a->data()[0], value<float>(axis.members[me], 0, 0));  // outside the range: untouched
  const int64_t bytes = g > 1 ? g * n * 4 : 0, calls = g > 1 ? 1 : 0;
  const CommStats& st = c.stats();
  EXPECT_EQ(st.bytes[int(Collective::kAllGather)], bytes);
  EXPECT_EQ(st.calls[int(Collective::kAllGather)], calls);
  EXPECT_EQ(st.bytes[int(Collective::kReduceScatter)], 2 * bytes);
  EXPECT_EQ(st.calls[int(Collective::kReduceScatter)], 2 * calls);
  EXPECT_EQ(st.bytes[int(Collective::kAllReduce)], bytes);
  EXPECT_EQ(st.calls[int(Collective::kAllReduce)], calls);
  c.barrier();

  // Non-blocking, several in flight at once (engine tasks: over shared memory,
  // or rings of messages), finished out of order: the same values as the
  // blocking forms.
  fill();
  std::vector<float> gathered(size_t(g * n)), sum(size_t(n), 0.5f), acc(size_t(n), 0.5f);
  Request rs = c.ireduce_scatter(*a, off, sum.data(), n, false);
  Request ag = c.iall_gather(*a, off, gathered.data(), n);
  Request rs_acc = c.ireduce_scatter(*a, off, acc.data(), n, true);
  rs_acc.wait();
  ag.wait();
  if (!rs.test()) rs.wait();  // the first one posted, finished last
  EXPECT_FALSE(rs.pending());
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < g; ++r) want += value<float>(axis.members[r], 0, int(off + me * n + i));
    ASSERT_EQ(sum[i], want) << "ireduce_scatter, element " << i;
    ASSERT_EQ(acc[i], 0.5f + want) << "ireduce_scatter accumulating, element " << i;
  }
  for (int r = 0; r < g; ++r)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(gathered[r * n + i], value<float>(axis.members[r], 0, int(off + i)));
  EXPECT_FALSE(rs.pending() || ag.pending() || rs_acc.pending());
  c.barrier();
}

TEST(ProcessGridMpi, SharedArrayCollectives) {
  for (bool shared : {true, false}) {
    for_each_grid([&](ProcessGrid& grid) {
      for (const Axis& axis : axes_of(grid)) check_shared_collectives(axis, shared);
    }, with_shared_memory(shared));
  }
}

// DENDRITE_SHARED_MEMORY=0 reaches the communicators through the options the
// environment gives, as in the program.
TEST(ProcessGridMpi, SharedMemoryOffFromTheEnvironment) {
  setenv("DENDRITE_SHARED_MEMORY", "0", 1);
  const CommOptions off = comm_options_from_environment();
  unsetenv("DENDRITE_SHARED_MEMORY");
  EXPECT_FALSE(off.shared_memory);
  EXPECT_TRUE(comm_options_from_environment().shared_memory);
  const std::unique_ptr<Communicator> group = test::group_of(8, off);
  EXPECT_FALSE(group->allocate_shared(16)->shared());
}

// bf16 elements as bit patterns (gathers move them, nothing computes with
// them): finite and positive, distinct for nearby ranks and elements.
uint16_t bf16_value(int w, int64_t i) { return uint16_t(0x3f80 + (w * 2053 + i) % 0x3f00); }

// The bf16 all-gathers (buffers and a SharedArray, blocking and not) move the
// exact bits, from element offsets in bf16 (odd: not 4-byte aligned), and
// count 2 bytes an element; its sums are refused, naming the type.
void check_bf16_gathers(const Axis& axis, bool expect_shared, int64_t n) {
  Communicator& c = *axis.comm;
  const int g = c.size(), me = world_rank();
  const int64_t off = 5;
  SCOPED_TRACE(c.name() + " bf16, n = " + std::to_string(n));
  std::vector<uint16_t> in(static_cast<size_t>(n)), out(static_cast<size_t>(g * n)), want;
  for (int64_t i = 0; i < n; ++i) in[i] = bf16_value(me, off + i);
  for (int m : axis.members)
    for (int64_t i = 0; i < n; ++i) want.push_back(bf16_value(m, off + i));
  std::unique_ptr<SharedArray> a = c.allocate_shared(off + n + 3, DType::kBF16);
  EXPECT_EQ(a->dtype(), DType::kBF16);
  EXPECT_EQ(a->size(), off + n + 3);
  EXPECT_EQ(a->shared(), expect_shared && g > 1);
  for (int64_t i = 0; i < a->size(); ++i) a->data_as<uint16_t>()[i] = bf16_value(me, i);
  c.barrier();
  c.reset_stats();
  const std::vector<std::pair<const char*, std::function<void()>>> gathers = {
      {"all_gather", [&] { c.all_gather(in.data(), out.data(), n, DType::kBF16); }},
      {"iall_gather", [&] { c.iall_gather(in.data(), out.data(), n, DType::kBF16).wait(); }},
      {"all_gather of a SharedArray", [&] { c.all_gather(*a, off, out.data(), n); }},
      {"iall_gather of a SharedArray", [&] { c.iall_gather(*a, off, out.data(), n).wait(); }},
  };
  for (const auto& [what, gather] : gathers) {
    std::fill(out.begin(), out.end(), uint16_t(0));
    gather();
    expect_values(out, want, what);
  }
  const int64_t calls = g > 1 ? 4 : 0;
  EXPECT_EQ(c.stats().bytes[int(Collective::kAllGather)], calls * g * n * 2);
  EXPECT_EQ(c.stats().calls[int(Collective::kAllGather)], calls);
  float sums[1] = {0};
  for (const std::function<void()>& sum : std::vector<std::function<void()>>{
           [&] { c.all_reduce(in.data(), n, DType::kBF16); },
           [&] { c.reduce_scatter(out.data(), in.data(), n, DType::kBF16); },
           [&] { c.reduce_scatter(*a, 0, sums, 1, false); },
           [&] { c.all_reduce(*a, 0, 1); }}) {
    try {
      sum();
      ADD_FAILURE() << "a sum of bf16 did not throw";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("bf16 elements cannot be summed"));
    }
  }
  c.barrier();
}

TEST(ProcessGridMpi, Bf16GathersMoveExactBits) {
  for (bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared memory" : "messages");
    for_each_grid([&](ProcessGrid& grid) {
      for (const Axis& axis : axes_of(grid)) {
        check_bf16_gathers(axis, shared, kN);
        // Past the eager limit, and the engine's rings where there is no shared memory.
        if (axis.comm == &grid.Z() || axis.comm == &grid.world())
          check_bf16_gathers(axis, shared, kLarge);
      }
    }, with_shared_memory(shared));
  }
}

TEST(ProcessGridMpi, RequestsCompleteOnWaitMoveAndDestruction) {
  for_each_grid([](ProcessGrid& grid) {
    for (const Axis& axis : axes_of(grid)) {
      Communicator& c = *axis.comm;
      const int s = c.size(), me = world_rank();
      SCOPED_TRACE(c.name());
      c.reset_stats();
      float sum = 0;
      for (int m : axis.members) sum += value<float>(m, 0, 0);
      std::vector<float> a(kN, value<float>(me, 0, 0)), b = a, d = a, e = a;
      std::vector<float> gathered(s * kN);
      {
        Request dropped = c.iall_reduce(a.data(), kN, DType::kF32);
        EXPECT_EQ(dropped.pending(), s > 1);
      }  // destroyed without wait()
      EXPECT_THAT(a, ::testing::Each(sum));

      Request first = c.iall_reduce(b.data(), kN, DType::kF32);
      Request moved(std::move(first));
      EXPECT_FALSE(first.pending());
      EXPECT_EQ(moved.pending(), s > 1);
      first = c.iall_gather(e.data(), gathered.data(), kN, DType::kF32);
      first = c.iall_reduce(d.data(), kN, DType::kF32);  // finishes the gather first
      for (int j = 0; j < s; ++j) EXPECT_EQ(gathered[j * kN], value<float>(axis.members[j], 0, 0));
      moved.wait();
      moved.wait();  // idempotent
      EXPECT_FALSE(moved.pending());
      first.wait();
      EXPECT_FALSE(first.pending());
      EXPECT_THAT(b, ::testing::Each(sum));
      EXPECT_THAT(d, ::testing::Each(sum));
      first.wait();  // a waited request stays done
      EXPECT_FALSE(first.pending());
      // Only waits blocked here, and they charge the communicator that posted.
      if (s > 1) {
        EXPECT_GT(c.stats().wait_seconds, 0.0);
      } else {
        EXPECT_EQ(c.stats().wait_seconds, 0.0);
      }
      EXPECT_EQ(c.stats().calls[static_cast<int>(Collective::kAllReduce)], s > 1 ? 3 : 0);
    }
  });
}

// The wait for peers (CommStats::peer_wait_seconds): in groups of 2, the odd
// rank arrives 150 ms late at each blocking kind, over messages and over
// shared memory; the even rank's calls charge about that wait to the kind,
// the late rank's almost none, and a barrier charges no kind.
TEST(ProcessGridMpi, PeerWaitIsTheTimeBeforeTheLastRankArrived) {
  for (bool shared : {true, false}) {
    CommOptions o;
    o.shared_memory = shared;
    const std::unique_ptr<Communicator> c = test::group_of(2, o);
    const bool late = c->rank() == 1;
    const double delay = 0.15;
    std::unique_ptr<SharedArray> a = c->allocate_shared(2 * kN);
    std::vector<float> buf(2 * kN, 1.0f), out(2 * kN);
    const std::vector<std::pair<Collective, std::function<void()>>> calls = {
        {Collective::kAllReduce, [&] { c->all_reduce(buf.data(), kN); }},
        {Collective::kAllGather, [&] { c->all_gather(buf.data(), out.data(), kN, DType::kF32); }},
        {Collective::kReduceScatter,
         [&] { c->reduce_scatter(buf.data(), out.data(), kN, DType::kF32); }},
        {Collective::kAllReduce, [&] { c->all_reduce(*a, 0, kN); }},
        {Collective::kReduceScatter, [&] { c->reduce_scatter(*a, 0, out.data(), kN, false); }},
    };
    for (const auto& [kind, call] : calls) {
      SCOPED_TRACE(std::string(collective_name(kind)) + (shared ? ", shared memory" : ", messages"));
      c->barrier();
      c->reset_stats();
      if (late) usleep(useconds_t(delay * 1e6));
      call();
      c->barrier();
      const CommStats& s = c->stats();
      ASSERT_TRUE(s.peer_wait_measured);
      const double wait = s.peer_wait_seconds[int(kind)];
      if (late) {
        EXPECT_LT(wait, 0.05);
      } else {
        EXPECT_GT(wait, 0.8 * delay);
        EXPECT_LE(wait, s.total_seconds[int(kind)] + 1e-6);
      }
      for (int k = 0; k < int(Collective::kCount); ++k) {
        if (k != int(kind)) {
          EXPECT_EQ(s.peer_wait_seconds[k], 0.0) << collective_name(Collective(k));
        }
      }
    }
  }
}

TEST(ProcessGridMpi, BadCountsAndRootsThrowWithoutCounting) {
  for_each_grid([](ProcessGrid& grid) {
    for (const Axis& axis : axes_of(grid)) {
      Communicator& c = *axis.comm;
      c.reset_stats();
      float dummy[1] = {0};
      EXPECT_THROW(c.all_reduce(dummy, -1, DType::kF32), Error);
      EXPECT_THROW(c.broadcast(dummy, 1, DType::kF32, c.size()), Error);
      EXPECT_THROW(c.broadcast(dummy, 1, DType::kF32, -1), Error);
      if (c.size() > 1) {  // a group of one moves nothing, so it has no count limit
        const int64_t big = int64_t{INT_MAX} + 1;
        try {
          c.all_reduce(dummy, big, DType::kF32);
          ADD_FAILURE() << "all_reduce of INT_MAX + 1 elements did not throw";
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("INT_MAX"));
        }
        EXPECT_THROW(c.iall_reduce(dummy, big, DType::kF32), Error);
        EXPECT_THROW(c.all_gather(dummy, dummy, big, DType::kF64), Error);
        EXPECT_THROW(c.iall_gather(dummy, dummy, big, DType::kF64), Error);
        EXPECT_THROW(c.reduce_scatter(dummy, dummy, big, DType::kI64), Error);
        EXPECT_THROW(c.ireduce_scatter(dummy, dummy, big, DType::kI64), Error);
        EXPECT_THROW(c.broadcast(dummy, big, DType::kF32, 0), Error);
      }
      expect_stats(c, CommStats{});
    }
  });
}

TEST(ProcessGridMpi, WrongSizeOrDisagreeingShapesThrowOnEveryRank) {
  const std::unique_ptr<Communicator> all = make_mpi_world(MPI_COMM_WORLD, CommOptions{});
  Communicator& world = *all;
  try {
    ProcessGrid grid(GridShape{2, 2, 1, 1}, world);
    ADD_FAILURE() << "a 4-rank grid on 8 ranks did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x=2,y=2,z=1,d=1 has 4 ranks but the communicator has 8"));
    EXPECT_THAT(e.what(), HasSubstr("mpirun -np 4"));
  }
  // Same size, different shapes on even and odd ranks: every rank must throw.
  const GridShape mine = world_rank() % 2 ? GridShape{2, 1, 1, 4} : GridShape{4, 1, 1, 2};
  try {
    ProcessGrid grid(mine, world);
    ADD_FAILURE() << "disagreeing grids did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("different grids"));
  }
  EXPECT_THROW(ProcessGrid(GridShape{0, 1, 1, 8}, world), Error);
}

}  // namespace
}  // namespace dendrite
