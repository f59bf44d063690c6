// The communicators without MPI: the process grid of one process (its
// groups of one copy and count nothing), the names and sizes of the
// collectives and element types, and GridShape::parse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/grid.h"
#include "dendrite/core/check.h"

namespace dendrite {
namespace {

using ::testing::HasSubstr;

// Nothing counted: a group of one's collectives are no calls.
void expect_nothing_counted(const Communicator& c) {
  for (int k = 0; k < static_cast<int>(Collective::kCount); ++k) {
    const char* kind = collective_name(static_cast<Collective>(k));
    EXPECT_EQ(c.stats().bytes[k], 0) << c.name() << " bytes of " << kind;
    EXPECT_EQ(c.stats().calls[k], 0) << c.name() << " calls of " << kind;
  }
}

TEST(ProcessGridSingle, SelfCommunicatorsCopyAndCountNothing) {
  auto grid = ProcessGrid::single();
  EXPECT_EQ(grid->shape().size(), 1);
  EXPECT_EQ(grid->rank(), 0);
  EXPECT_EQ(grid->x() + grid->y() + grid->z() + grid->d(), 0);
  for (Communicator* c : {&grid->X(), &grid->Y(), &grid->Z(), &grid->D(), &grid->world()}) {
    SCOPED_TRACE(c->name());
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->size(), 1);
    double buf[3] = {1.5, 2.5, 3.5}, out[3] = {};
    c->all_reduce(buf, 3);
    EXPECT_THAT(buf, ::testing::ElementsAre(1.5, 2.5, 3.5));
    c->all_gather(buf, out, 3, DType::kF64);
    EXPECT_THAT(out, ::testing::ElementsAre(1.5, 2.5, 3.5));
    int64_t ints[2] = {7, 9}, iout[2] = {};
    Request q = c->ireduce_scatter(ints, iout, 2, DType::kI64);
    EXPECT_FALSE(q.pending());
    EXPECT_THAT(iout, ::testing::ElementsAre(7, 9));
    c->broadcast(buf, 3, DType::kF64, 0);
    EXPECT_THROW(c->broadcast(buf, 3, DType::kF64, 1), Error);
    c->barrier();
    expect_nothing_counted(*c);
    EXPECT_EQ(c->stats().wait_seconds, 0.0);
  }
  EXPECT_EQ(grid->X().name(), "x");
  EXPECT_EQ(grid->world().name(), "world");
}

TEST(Collective, NamesAndSizes) {
  EXPECT_STREQ(collective_name(Collective::kAllReduce), "all_reduce");
  EXPECT_STREQ(collective_name(Collective::kAllGather), "all_gather");
  EXPECT_STREQ(collective_name(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(collective_name(Collective::kBroadcast), "broadcast");
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
}

// ---- GridShape::parse: no MPI involved ----

void expect_shape(const GridShape& s, int x, int y, int z, int d) {
  EXPECT_EQ(s.x, x);
  EXPECT_EQ(s.y, y);
  EXPECT_EQ(s.z, z);
  EXPECT_EQ(s.d, d);
}

TEST(GridShapeParse, ValidGrids) {
  expect_shape(GridShape::parse(""), 1, 1, 1, 1);
  expect_shape(GridShape::parse("x=2,y=2,z=1,d=2"), 2, 2, 1, 2);
  expect_shape(GridShape::parse("y=2,d=2"), 1, 2, 1, 2);
  expect_shape(GridShape::parse("d=3,x=5"), 5, 1, 1, 3);
  expect_shape(GridShape::parse("x=2,y=2,z=1,d=2", 8), 2, 2, 1, 2);
  expect_shape(GridShape::parse("x=2", 8), 2, 1, 1, 4);  // d fills the job
  expect_shape(GridShape::parse("z=4,y=2", 8), 1, 2, 4, 1);
  expect_shape(GridShape::parse("", 6), 1, 1, 1, 6);
  expect_shape(GridShape::parse("x=2,d=3", 6), 2, 1, 1, 3);
  EXPECT_EQ(GridShape::parse("x=2,y=2,z=1,d=2").str(), "x=2,y=2,z=1,d=2");
  EXPECT_EQ(GridShape::parse("z=3").str(), "x=1,y=1,z=3,d=1");
  const GridShape s{3, 1, 2, 4};
  expect_shape(GridShape::parse(s.str(), 24), 3, 1, 2, 4);
}

std::string parse_error(const std::string& text, int world_size = 0) {
  try {
    GridShape::parse(text, world_size);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "GridShape::parse(\"" << text << "\", " << world_size << ") did not throw";
  return "";
}

TEST(GridShapeParse, InvalidGridsNameTheProblemAndTheFix) {
  EXPECT_THAT(parse_error("q=2"), HasSubstr("unknown axis 'q'"));
  EXPECT_THAT(parse_error("X=2"), HasSubstr("unknown axis 'X'"));
  EXPECT_THAT(parse_error("x=0"), HasSubstr("positive integer"));
  EXPECT_THAT(parse_error("y=-2"), HasSubstr("positive integer"));
  EXPECT_THAT(parse_error("x=2.5"), HasSubstr("not an integer"));
  EXPECT_THAT(parse_error("x=two"), HasSubstr("not an integer"));
  EXPECT_THAT(parse_error("x="), HasSubstr("not an integer"));
  EXPECT_THAT(parse_error("x=2 "), HasSubstr("not an integer"));
  EXPECT_THAT(parse_error("x=99999999999"), HasSubstr("positive integer"));
  EXPECT_THAT(parse_error("x=99999999999999999999999"), HasSubstr("positive integer"));
  EXPECT_THAT(parse_error("x"), HasSubstr("not axis=extent"));
  EXPECT_THAT(parse_error("xy=2"), HasSubstr("not axis=extent"));
  EXPECT_THAT(parse_error("x=2,y=2,x=2"), HasSubstr("axis x is given twice"));
  EXPECT_THAT(parse_error("x=2,,y=2"), HasSubstr("empty item"));
  EXPECT_THAT(parse_error("x=2,"), HasSubstr("empty item"));
  EXPECT_THAT(parse_error("x=65536,y=65536"), HasSubstr("more than INT_MAX"));
  const std::string wrong = parse_error("x=2,y=2", 6);
  EXPECT_THAT(wrong, HasSubstr("x=2,y=2"));
  EXPECT_THAT(wrong, HasSubstr("has 4 ranks but the job has 6"));
  EXPECT_THAT(wrong, HasSubstr("mpirun -np 4"));
  EXPECT_THAT(wrong, HasSubstr("--grid"));
  EXPECT_THAT(parse_error("x=2,y=2,d=2", 4), HasSubstr("has 8 ranks but the job has 4"));
  EXPECT_THAT(parse_error("x=3", 8), HasSubstr("has 3 ranks but the job has 8"));
  EXPECT_THAT(parse_error("", -1), HasSubstr("negative"));
}

}  // namespace
}  // namespace dendrite
