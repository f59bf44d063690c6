// safetensors files: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the raw little-endian tensor bytes. Dendrite adds one metadata entry per
// tensor, "checksum.<name>" (CRC-32C of its bytes, 8 hex digits), which the
// reader verifies, naming the tensor on a mismatch.
// Writes are crash-safe: a temporary file in the same folder, fsync, rename,
// fsync of the folder. A failed write (disk full, ...) removes the temporary
// and leaves any earlier file of that name untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dendrite {

// CRC-32C (Castagnoli) of n bytes.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

class SafetensorsWriter {
 public:
  // dtype is "F32", "I32", "I64" or "U8"; bytes must equal numel * dtype size.
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const void* data, size_t bytes);
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void set_metadata(const std::string& key, const std::string& value);
  // A tensor whose bytes write_streamed asks for when the file reaches it.
  void add_deferred(const std::string& name, const std::string& dtype,
                    const std::vector<int64_t>& shape);
  // Writes atomically to path (see above). Throws dendrite::Error naming the
  // path and the system error on failure.
  void write(const std::string& path) const;
  // The same, each deferred tensor's bytes taken in pieces as the file
  // reaches them, so a caller holds one piece at a time (a block of rows of a
  // large tensor): source(i, offset) returns the next piece of tensor i (its
  // index in the order of adding) from byte `offset`, which need only live
  // until the next call; it is asked again until the tensor's bytes are
  // complete. The header is written with blank checksums first, then
  // rewritten in place.
  struct Piece {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  using TensorSource = std::function<Piece(size_t index, size_t offset)>;
  void write_streamed(const std::string& path, const TensorSource& source) const;

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct TensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapped file
  size_t bytes = 0;
};

// Memory-maps a file and validates it fully on open: header length within the
// file, JSON well formed, every tensor's offsets in bounds, non-overlapping and
// of the size its dtype and shape imply, and every checksum present matches.
// Errors name the file, the tensor and what is wrong.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws if missing
  std::vector<std::string> names() const;                // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Copies an F32 tensor after checking its shape equals `shape`; the error
  // names the file, tensor, and both shapes.
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // The same for a tensor of F32, BF16 or F16, widened to fp32 (exactly);
  // another dtype is an error naming the file, the tensor and the dtype.
  void read_float(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // The elements at flat indices idx[0..n) of a tensor of F32, BF16 or F16
  // (checked as read_float checks it), widened to fp32: only the pages of the
  // mapped file holding those elements are touched (a rank reading its shard).
  void gather_float(const std::string& name, const std::vector<int64_t>& shape, const int64_t* idx,
                    int64_t n, float* out) const;
  // Bytes of tensor data read so far by read_f32, read_float and gather_float.
  int64_t bytes_read() const { return bytes_read_; }
  const std::string& path() const { return path_; }

 private:
  // The tensor of read_float's checks (dtype F32, BF16 or F16, and shape).
  const TensorInfo& float_tensor(const std::string& name, const std::vector<int64_t>& shape) const;
  mutable int64_t bytes_read_ = 0;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dendrite
