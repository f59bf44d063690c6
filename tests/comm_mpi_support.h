// Shared by the communicator tests under mpirun -np 8 (comm_mpi_test): every
// grid of P = 1, 2, 4 and 8 ranks, the axes of a grid with the world ranks of
// their members, and values that encode the world rank that sent them, with
// the sums and slots the collectives must give and the counters they must
// record.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/grid.h"
#include "dendrite/comm/options.h"
#include "grid_support.h"

namespace dendrite::comm_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// One axis of a grid as the tests see it: its communicator and the world
// ranks of its members in axis-rank order (computed from the formula of
// DESIGN.md section 1, not asked of MPI).
struct Axis {
  Communicator* comm;
  std::vector<int> members;
};

// The five communicators of `grid`, whose base group holds world ranks
// first .. first + P - 1 in order.
inline std::vector<Axis> axes_of(ProcessGrid& grid) {
  const GridShape& s = grid.shape();
  const int first = world_rank() - grid.rank();
  const int extent[4] = {s.x, s.y, s.z, s.d};
  const int coord[4] = {grid.x(), grid.y(), grid.z(), grid.d()};
  Communicator* comm[4] = {&grid.X(), &grid.Y(), &grid.Z(), &grid.D()};
  std::vector<Axis> axes;
  for (int a = 0; a < 4; ++a) {
    Axis axis{comm[a], {}};
    for (int j = 0; j < extent[a]; ++j) {
      int c[4] = {coord[0], coord[1], coord[2], coord[3]};
      c[a] = j;
      axis.members.push_back(first + c[0] + s.x * (c[1] + s.y * (c[2] + s.z * c[3])));
    }
    axes.push_back(axis);
  }
  Axis world{&grid.world(), {}};
  for (int j = 0; j < s.size(); ++j) world.members.push_back(first + j);
  axes.push_back(world);
  return axes;
}

// Calls body(grid) for every grid of P = 1, 2, 4 and 8 ranks, on every rank,
// communicating as `options` say.
inline void for_each_grid(const std::function<void(ProcessGrid&)>& body,
                          const CommOptions& options = CommOptions{}) {
  for (int p : {1, 2, 4, 8}) {
    if (world_size() % p != 0) continue;
    const std::unique_ptr<Communicator> group = test::group_of(p, options);
    for (const GridShape& shape : test::grids_of(p)) {
      SCOPED_TRACE("grid " + shape.str());
      ProcessGrid grid(shape, *group);
      body(grid);
    }
  }
}

inline CommOptions with_shared_memory(bool on) {
  CommOptions o;
  o.shared_memory = on;
  return o;
}

template <typename T>
DType dtype_of();
template <>
inline DType dtype_of<float>() {
  return DType::kF32;
}
template <>
inline DType dtype_of<double>() {
  return DType::kF64;
}
template <>
inline DType dtype_of<int64_t>() {
  return DType::kI64;
}

// Element i of slot j sent by world rank w; exact in every type (floats keep
// the .25; int64 needs its high bits and mixes signs, so it cannot pass when
// summed as if it were doubles or 32-bit ints).
template <typename T>
T value(int w, int j, int i) {
  if constexpr (std::is_integral_v<T>) {
    return (w % 2 ? -1 : 1) * (int64_t{w + 1} << 40) + w * 1000 + j * 100 + i;
  }
  return static_cast<T>(w * 1000 + j * 100 + i + 0.25);
}

inline constexpr int64_t kN = 5;  // elements per rank
// Past OpenMPI's eager limit (4 KiB on shared memory) and its small-message
// algorithm switch points, so the large-message paths run too; values stay
// exact in float (multiples of 0.25 below 2^20).
inline constexpr int64_t kLarge = 20011;
inline constexpr int64_t kPieces = 600007;  // > 2 MB of floats, > 4 MB of doubles: several pieces

inline void add_expected(CommStats& expect, int size, Collective c, int64_t bytes) {
  if (size == 1) return;
  expect.bytes[static_cast<int>(c)] += bytes;
  expect.calls[static_cast<int>(c)] += 1;
}

// One failure per wrong buffer (not one per element), naming the first wrong
// element and how many differ.
template <typename T>
void expect_values(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t wrong = 0, first = 0;
  for (size_t i = got.size(); i-- > 0;) {
    if (got[i] != want[i]) ++wrong, first = i;
  }
  if (wrong > 0) {
    ADD_FAILURE() << what << ": " << wrong << " of " << got.size() << " elements differ; element "
                  << first << " is " << got[first] << ", expected " << want[first];
  }
}

// Element i of the sum over the axis of every member's slot j.
template <typename T>
std::vector<T> axis_sum(const Axis& axis, int j, int64_t n) {
  std::vector<T> sum(n, T(0));
  for (int m : axis.members)
    for (int64_t i = 0; i < n; ++i) sum[i] += value<T>(m, j, i);
  return sum;
}

// Slot j of world rank w: n elements.
template <typename T>
std::vector<T> slot(int w, int j, int64_t n) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value<T>(w, j, i);
  return v;
}

// The byte and call counters of c, kind by kind, against expect.
inline void expect_stats(const Communicator& c, const CommStats& expect) {
  for (int k = 0; k < static_cast<int>(Collective::kCount); ++k) {
    const char* kind = collective_name(static_cast<Collective>(k));
    EXPECT_EQ(c.stats().bytes[k], expect.bytes[k]) << c.name() << " bytes of " << kind;
    EXPECT_EQ(c.stats().calls[k], expect.calls[k]) << c.name() << " calls of " << kind;
  }
}

}  // namespace dendrite::comm_test
