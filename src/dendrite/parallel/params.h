// Sharded parameters: every tensor of a model as a named slice of one flat
// buffer per rank, with a sharding spec that says which grid axes split it and
// which axes sum its gradient (DESIGN.md sections 3 and 4).
//
// A 2-D weight [R, K] splits its rows over one axis and its columns over
// another (or neither); the rank's [R/G_rows, K/G_cols] block, flattened
// row-major, is cut into Gz equal chunks when chunk_z, and this rank stores
// chunk z. Its gradient is reduce-scattered over Z by the layer that uses it,
// then summed over D. A vector (bias, norm gain) splits over one axis and is
// replicated over the others; its gradient is summed over Z and D.
//
// Layout of the flat buffer: Z-chunked tensors first, then the replicated
// ones, so each gradient reduction is one call on one contiguous range.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dendrite/comm/grid.h"
#include "dendrite/core/buffer.h"
#include "dendrite/ops/optim.h"

namespace dendrite {

class Backend;

enum class Axis { kNone, kX, kY };
enum class Init { kNormal, kOnes, kZeros };

struct Sharding {
  Axis rows = Axis::kNone, cols = Axis::kNone;  // for a vector: rows only
  bool chunk_z = false;
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // global: [R, K] or [R]
  Sharding sharding;
  bool decay = true;           // AdamW weight decay (off for norms and biases)
  Init init = Init::kNormal;
  float init_std = 0.0f;
  int64_t init_rows = -1;      // global rows filled at init (-1: all); the rest stay zero

  // Set by the table for this rank:
  int64_t block_rows = 0, block_cols = 0;  // the rank's block before Z chunking
  int64_t row_offset = 0, col_offset = 0;  // of the block in the global tensor
  int64_t numel = 0;                       // stored on this rank
  int64_t chunk_offset = 0;                // of the stored chunk within the block
  int64_t offset = 0;                      // in the flat buffer, in floats

  int64_t global_rows() const { return shape[0]; }
  int64_t global_cols() const { return shape.size() > 1 ? shape[1] : 1; }
  int64_t block_numel() const { return block_rows * block_cols; }
  // Global flat index (row * cols + col) of local element i.
  int64_t global_index(int64_t i) const {
    const int64_t b = chunk_offset + i;
    return (row_offset + b / block_cols) * global_cols() + col_offset + b % block_cols;
  }
};

// The spec of s as stored by the rank at grid coordinates (x, y, z): its block
// and chunk offsets. Throws when the grid does not divide the tensor.
ParamSpec locate(const ParamSpec& s, const GridShape& grid, int x, int y, int z);

class ParamTable {
 public:
  explicit ParamTable(const GridShape& shape = {}, int x = 0, int y = 0, int z = 0);
  // Declares a tensor (before finalize()). Throws when the grid does not divide it.
  void add(const std::string& name, std::vector<int64_t> shape, Sharding sharding, bool decay,
           Init init, float init_std = 0.0f, int64_t init_rows = -1);
  // Lays out the flat buffer: chunked tensors, then replicated ones.
  void finalize();

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& find(const std::string& name) const;  // throws if unknown
  int64_t offset(const std::string& name) const { return find(name).offset; }
  int64_t total() const { return total_; }  // floats, padding included
  // The replicated range [replicated_begin, total): gradients summed over Z.
  int64_t replicated_begin() const { return replicated_begin_; }
  // Fills this rank's values from the counter-based RNG keyed by
  // (seed, name, global element index), so every grid builds the same model:
  // every tensor into the flat host buffer `values`, or one tensor s into
  // out [s.numel] (host memory).
  void initialize(float* values, uint64_t seed) const;
  void initialize(const ParamSpec& s, float* out, uint64_t seed) const;
  // Whether this rank counts a tensor in the global gradient norm: each value
  // once over the X, Y, Z ranks (replicas at coordinate 0 of the axes that do not split it).
  bool counts_in_norm(const ParamSpec& s) const;
  const GridShape& grid() const { return grid_; }

 private:
  GridShape grid_;
  int x_, y_, z_;
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0, replicated_begin_ = 0;
  bool finalized_ = false;
};

// The whole global tensor of s (shape[0] x shape[1] floats, host memory) on
// every rank, from every rank's stored chunk in `flat` (laid out like the
// parameters; the backend's memory, read by an all-gather over the world).
void gather_global(ProcessGrid& grid, const ParamSpec& s, const float* flat, float* global);
// Global rows [row0, row1) of s on world rank 0 only, row-major into `rows`
// ((row1 - row0) x shape[1] floats; other ranks may pass null). Each rank of
// the first data-parallel slice whose chunk holds some of those rows reads
// them (read(i, n, dst): its stored elements i to i + n, a contiguous run, into
// host memory) and broadcasts them in turn; a block held alike by several
// ranks (replicated) is sent once. So no rank holds more than the rows asked,
// however large the tensor. Every rank must call it with the same arguments.
using ReadChunk = std::function<void(int64_t first, int64_t count, float* dst)>;
void gather_rows_to_root(ProcessGrid& grid, const ParamSpec& s, int64_t row0, int64_t row1,
                         const ReadChunk& read, float* rows);

// A table of a ParamTable's tensors (ops/optim.h) in a backend's memory, made
// once, for the ops that run over many tensors at a time (the gradient norm,
// AdamW): every tensor with its decay flag, or (norm_only) those this rank
// counts in the gradient norm.
struct TensorTable {
  Buffer<ops::FlatTensor> table;
  int count = 0;
  int64_t values = 0;  // ops::number_tensors
};
TensorTable make_tensor_table(Backend& backend, const ParamTable& t, bool norm_only);

}  // namespace dendrite
