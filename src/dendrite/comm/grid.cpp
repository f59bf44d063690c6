// The 4D process grid (DESIGN.md section 1): parsing "--grid x=2,y=2,z=1,d=2",
// a rank's coordinates (x fastest, then y, z, d), and one communicator per axis
// split from the base communicator, plus a duplicate of the base as "world".
// Axes of extent 1 get the base's group of one and cost no collective.
#include "dendrite/comm/grid.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <vector>

#include "dendrite/comm/self_communicator.h"
#include "dendrite/core/check.h"

namespace dendrite {

std::string GridShape::str() const {
  return ::dendrite::str("x=", x, ",y=", y, ",z=", z, ",d=", d);
}

namespace {

// Parses one "a=v" item into shape; `seen` tracks which axes were given.
void parse_item(const std::string& text, const std::string& item, GridShape& shape,
                std::string& seen) {
  const std::string grid = "grid \"" + text + "\"";
  const size_t eq = item.find('=');
  DENDRITE_CHECK(!item.empty(), "GridShape::parse: ", grid,
                 " has an empty item; write axis=extent items separated by commas, e.g. "
                 "x=2,y=2,z=1,d=2");
  DENDRITE_CHECK(eq == 1, "GridShape::parse: ", grid, ": item \"", item,
                 "\" is not axis=extent; write e.g. x=2,y=2,z=1,d=2");
  const char axis = item[0];
  int* slot = axis == 'x'   ? &shape.x
              : axis == 'y' ? &shape.y
              : axis == 'z' ? &shape.z
              : axis == 'd' ? &shape.d
                            : nullptr;
  DENDRITE_CHECK(slot, "GridShape::parse: ", grid, ": unknown axis '", axis,
                 "'; the axes are x, y, z and d");
  DENDRITE_CHECK(seen.find(axis) == std::string::npos, "GridShape::parse: ", grid, ": axis ", axis,
                 " is given twice; give each axis at most once");
  seen += axis;
  const char* begin = item.data() + 2;
  const char* end = item.data() + item.size();
  long long value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  DENDRITE_CHECK(ec != std::errc::invalid_argument && ptr == end && begin != end,
                 "GridShape::parse: ", grid, ": extent of ", axis, " \"", item.substr(2),
                 "\" is not an integer; give a positive integer, e.g. ", axis, "=2");
  DENDRITE_CHECK(ec != std::errc::result_out_of_range && value > 0 && value <= INT_MAX,
                 "GridShape::parse: ", grid, ": extent of ", axis, " is ", item.substr(2),
                 "; give a positive integer, e.g. ", axis, "=2");
  *slot = static_cast<int>(value);
}

}  // namespace

GridShape GridShape::parse(const std::string& text, int world_size) {
  DENDRITE_CHECK(world_size >= 0, "GridShape::parse: world size ", world_size,
                 " is negative; pass the job's rank count, or 0 for none");
  GridShape shape;
  std::string seen;
  if (!text.empty()) {
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      parse_item(text, text.substr(start, comma - start), shape, seen);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  const int64_t xyz = int64_t{shape.x} * shape.y * shape.z;
  const int64_t ranks = xyz * shape.d;
  const std::string grid = "grid \"" + text + "\"";
  DENDRITE_CHECK(ranks <= INT_MAX, "GridShape::parse: ", grid, " has ", ranks,
                 " ranks, more than INT_MAX; use smaller extents");
  if (world_size == 0) return shape;
  const bool d_given = seen.find('d') != std::string::npos;
  if (!d_given) {
    DENDRITE_CHECK(world_size % xyz == 0, "GridShape::parse: ", grid, " has ", xyz,
                   " ranks but the job has ", world_size, ": run mpirun -np ", xyz,
                   " (or a multiple of it, which fills d) or change --grid");
    shape.d = static_cast<int>(world_size / xyz);
    return shape;
  }
  DENDRITE_CHECK(ranks == world_size, "GridShape::parse: ", grid, " has ", ranks,
                 " ranks but the job has ", world_size, ": run mpirun -np ", ranks,
                 " or change --grid");
  return shape;
}

namespace {

// All ranks must pass the same shape; checked with one collective before any
// rank can throw on its own, so a mismatch fails everywhere instead of hanging.
void check_same_shape(const GridShape& shape, Communicator& base) {
  const int64_t mine[4] = {shape.x, shape.y, shape.z, shape.d};
  std::vector<int64_t> all(size_t(4) * base.size());
  base.all_gather(mine, all.data(), 4, DType::kI64);
  for (int i = 0; i < 4; ++i) {
    int64_t lo = all[i], hi = all[i];
    for (int r = 1; r < base.size(); ++r) {
      lo = std::min(lo, all[size_t(4) * r + i]);
      hi = std::max(hi, all[size_t(4) * r + i]);
    }
    DENDRITE_CHECK(lo == hi, "ProcessGrid: ranks were given different grids (", "axis ", "xyzd"[i],
                   " ranges from ", lo, " to ", hi, "); pass the same --grid to every rank");
  }
}

}  // namespace

ProcessGrid::ProcessGrid(const GridShape& shape, Communicator& base) : shape_(shape) {
  rank_ = base.rank();
  const int base_size = base.size();
  check_same_shape(shape, base);
  DENDRITE_CHECK(shape.x > 0 && shape.y > 0 && shape.z > 0 && shape.d > 0, "ProcessGrid: grid ",
                 shape.str(), " has an extent below 1; every extent must be positive");
  DENDRITE_CHECK(shape.size() == base_size, "ProcessGrid: grid ", shape.str(), " has ",
                 shape.size(), " ranks but the communicator has ", base_size, ": run mpirun -np ",
                 shape.size(), " or change --grid");
  const int gx = shape.x, gy = shape.y, gz = shape.z;
  x_ = rank_ % gx;
  y_ = (rank_ / gx) % gy;
  z_ = (rank_ / (gx * gy)) % gz;
  d_ = rank_ / (gx * gy * gz);

  // Axis communicator: color = the other three coordinates, key = this one, so
  // the axis rank equals the coordinate. An axis of extent 1 is so on every
  // rank, so skipping its split keeps the ranks' collectives matched.
  const auto split = [&](int extent, int coord, int color,
                         const char* name) -> std::unique_ptr<Communicator> {
    if (extent == 1) return base.group_of_one(name);
    auto c = base.split(color, coord, name);
    DENDRITE_CHECK(c->size() == extent && c->rank() == coord, "ProcessGrid: axis ", name,
                   " has rank ", c->rank(), " of ", c->size(), ", expected ", coord, " of ",
                   extent);
    return c;
  };
  ax_ = split(gx, x_, (d_ * gz + z_) * gy + y_, "x");
  ay_ = split(gy, y_, (d_ * gz + z_) * gx + x_, "y");
  az_ = split(gz, z_, (d_ * gy + y_) * gx + x_, "z");
  ad_ = split(shape.d, d_, (z_ * gy + y_) * gx + x_, "d");
  world_ = base.split(0, rank_, "world");
}

void ProcessGrid::connect() {
  for (Communicator* axis : {ax_.get(), ay_.get(), az_.get(), ad_.get()}) axis->connect();
}

std::unique_ptr<ProcessGrid> ProcessGrid::single() {
  std::unique_ptr<ProcessGrid> grid(new ProcessGrid());
  grid->ax_ = std::make_unique<SelfCommunicator>("x");
  grid->ay_ = std::make_unique<SelfCommunicator>("y");
  grid->az_ = std::make_unique<SelfCommunicator>("z");
  grid->ad_ = std::make_unique<SelfCommunicator>("d");
  grid->world_ = std::make_unique<SelfCommunicator>("world");
  return grid;
}

ProcessGrid::~ProcessGrid() = default;

void ProcessGrid::set_timeout(double seconds) {
  for (Communicator* c : {ax_.get(), ay_.get(), az_.get(), ad_.get(), world_.get()})
    c->set_timeout(seconds);
}

void ProcessGrid::reset_stats() {
  for (Communicator* c : {ax_.get(), ay_.get(), az_.get(), ad_.get(), world_.get()}) {
    c->reset_stats();
  }
}

}  // namespace dendrite
