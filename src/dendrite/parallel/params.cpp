#include "dendrite/parallel/params.h"

#include <algorithm>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"

namespace dendrite {

ParamTable::ParamTable(const GridShape& shape, int x, int y, int z)
    : grid_(shape), x_(x), y_(y), z_(z) {}

ParamSpec locate(const ParamSpec& spec, const GridShape& grid, int x, int y, int z) {
  ParamSpec s = spec;
  const Sharding& h = s.sharding;
  auto extent = [&](Axis a) { return a == Axis::kX ? grid.x : a == Axis::kY ? grid.y : 1; };
  auto coord = [&](Axis a) { return a == Axis::kX ? x : a == Axis::kY ? y : 0; };
  const int gr = extent(h.rows), gc = extent(h.cols);
  DENDRITE_CHECK(s.global_rows() % gr == 0 && s.global_cols() % gc == 0, "parameters: ", s.name,
                 " [", s.global_rows(), ", ", s.global_cols(), "] is not divisible by the grid (",
                 gr, " row parts, ", gc, " column parts on grid ", grid.str(),
                 "); choose sizes the grid divides or another grid");
  s.block_rows = s.global_rows() / gr;
  s.block_cols = s.global_cols() / gc;
  s.row_offset = coord(h.rows) * s.block_rows;
  s.col_offset = coord(h.cols) * s.block_cols;
  s.numel = s.block_numel();
  s.chunk_offset = 0;
  if (h.chunk_z) {
    DENDRITE_CHECK(s.block_numel() % grid.z == 0, "parameters: the ", s.block_rows, "x",
                   s.block_cols, " block of ", s.name, " does not split into ", grid.z,
                   " equal Z chunks; choose another z");
    s.numel = s.block_numel() / grid.z;
    s.chunk_offset = z * s.numel;
  }
  return s;
}

void ParamTable::add(const std::string& name, std::vector<int64_t> shape, Sharding sharding,
                     bool decay, Init init, float init_std, int64_t init_rows) {
  DENDRITE_CHECK(!finalized_, "parameters: '", name, "' declared after the table was finalized");
  ParamSpec s;
  s.name = name;
  s.shape = std::move(shape);
  s.sharding = sharding;
  s.decay = decay;
  s.init = init;
  s.init_std = init_std;
  s.init_rows = init_rows;
  specs_.push_back(locate(s, grid_, x_, y_, z_));
}

void ParamTable::finalize() {
  // Chunked tensors first, then replicated; each starts on a 64-byte boundary.
  total_ = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) replicated_begin_ = total_;
    for (auto& s : specs_) {
      if (s.sharding.chunk_z != (pass == 0)) continue;
      s.offset = total_;
      total_ += (s.numel + 15) / 16 * 16;
    }
  }
  finalized_ = true;
}

const ParamSpec& ParamTable::find(const std::string& name) const {
  for (auto& s : specs_)
    if (s.name == name) return s;
  fail("parameters: no tensor named '", name, "'");
}

bool ParamTable::counts_in_norm(const ParamSpec& s) const {
  const Sharding& h = s.sharding;
  const bool split_x = h.rows == Axis::kX || h.cols == Axis::kX;
  const bool split_y = h.rows == Axis::kY || h.cols == Axis::kY;
  return (split_x || x_ == 0) && (split_y || y_ == 0) && (h.chunk_z || z_ == 0);
}

void ParamTable::initialize(float* values, uint64_t seed) const {
  for (auto& s : specs_) initialize(s, values + s.offset, seed);
}

void ParamTable::initialize(const ParamSpec& s, float* p, uint64_t seed) const {
  const uint64_t stream = hash_name(s.name.c_str());
  const int64_t limit = s.init_rows < 0 ? INT64_MAX : s.init_rows * s.global_cols();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < s.numel; ++i) {
    const int64_t g = s.global_index(i);
    float v = 0.0f;
    if (g < limit) {
      if (s.init == Init::kOnes) v = 1.0f;
      if (s.init == Init::kNormal)
        v = s.init_std * static_cast<float>(random_normal(seed, stream, uint64_t(g)));
    }
    p[i] = v;
  }
}

}  // namespace dendrite

namespace dendrite {

void gather_global(ProcessGrid& grid, const ParamSpec& s, const float* flat, float* global) {
  const GridShape& g = grid.shape();
  const int P = g.size();
  std::vector<float> all(size_t(P) * s.numel);
  grid.world().all_gather(flat + s.offset, all.data(), s.numel, DType::kF32);
  // Ranks of the first data-parallel slice cover every element once.
  for (int r = 0; r < g.x * g.y * g.z; ++r) {
    const ParamSpec o = locate(s, g, r % g.x, (r / g.x) % g.y, r / (g.x * g.y));
    const float* chunk = all.data() + size_t(r) * s.numel;
    for (int64_t i = 0; i < o.numel; ++i) global[o.global_index(i)] = chunk[i];
  }
}

void gather_rows_to_root(ProcessGrid& grid, const ParamSpec& s, int64_t row0, int64_t row1,
                         const ReadChunk& read, float* rows) {
  const GridShape& g = grid.shape();
  Communicator& world = grid.world();
  const int64_t cols = s.global_cols();
  std::vector<float> buf;
  std::vector<ParamSpec> sent;  // the chunks broadcast so far
  for (int r = 0; r < g.x * g.y * g.z; ++r) {
    const ParamSpec o = locate(s, g, r % g.x, (r / g.x) % g.y, r / (g.x * g.y));
    const bool again = std::any_of(sent.begin(), sent.end(), [&](const ParamSpec& p) {
      return p.row_offset == o.row_offset && p.col_offset == o.col_offset &&
             p.chunk_offset == o.chunk_offset && p.numel == o.numel;
    });
    if (again) continue;
    sent.push_back(o);
    // The chunk's elements in the rows asked: one run of its block's rows.
    const int64_t first_row = std::clamp<int64_t>(row0 - o.row_offset, 0, o.block_rows);
    const int64_t end_row = std::clamp<int64_t>(row1 - o.row_offset, 0, o.block_rows);
    const int64_t lo = std::max(first_row * o.block_cols, o.chunk_offset) - o.chunk_offset;
    const int64_t hi = std::min(end_row * o.block_cols, o.chunk_offset + o.numel) - o.chunk_offset;
    if (hi <= lo) continue;
    buf.resize(size_t(hi - lo));
    if (world.rank() == r) read(lo, hi - lo, buf.data());
    if (r != 0) world.broadcast(buf.data(), hi - lo, DType::kF32, r);
    if (world.rank() != 0) continue;
    for (int64_t i = lo; i < hi; ++i) rows[o.global_index(i) - row0 * cols] = buf[size_t(i - lo)];
  }
}

TensorTable make_tensor_table(Backend& backend, const ParamTable& t, bool norm_only) {
  std::vector<ops::FlatTensor> host;
  for (const ParamSpec& s : t.specs())
    if (!norm_only || t.counts_in_norm(s))
      host.push_back({s.offset, s.numel, 0, s.decay ? 1 : 0, 0});
  TensorTable out;
  out.count = int(host.size());
  out.values = ops::number_tensors(host.data(), out.count);
  AllocationPurpose purpose("the optimizer's table of tensors");
  out.table = backend.alloc<ops::FlatTensor>(std::max<int64_t>(1, out.count));
  backend.upload(out.table.data(), host.data(), host.size() * sizeof(ops::FlatTensor));
  return out;
}

}  // namespace dendrite
