// safetensors writer (see safetensors.h for the format and the crash-safety
// contract) and the CRC-32C of its checksums, which the reader verifies. No
// dimension letters here: tensors are opaque byte ranges with a dtype and a
// shape.
// The writer pads the JSON header with spaces to a multiple of 8 bytes so that
// tensor data starts 8-byte aligned in the file, and lays the tensors out in the
// order they were added, contiguous.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "dendrite/core/check.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/io/safetensors_format.h"

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace dendrite {

using namespace safetensors_format;

// ---------------------------------------------------------------- CRC-32C

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__SSE4_2__)
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
#else
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t v = i;
      for (int k = 0; k < 8; ++k) v = (v >> 1) ^ (0x82F63B78u & (0u - (v & 1u)));
      t[i] = v;
    }
    return t;
  }();
  for (; n > 0; --n) c = table[(c ^ *p++) & 0xFFu] ^ (c >> 8);
#endif
  return ~c;
}

// ---------------------------------------------------------------- writer

void SafetensorsWriter::add(const std::string& name, const std::string& dtype,
                            const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  DENDRITE_CHECK(!name.empty() && name != kMetadataKey, "safetensors add: invalid tensor name '",
                 name, "'; use a non-empty name other than __metadata__");
  const size_t elem = dtype_size(dtype);
  DENDRITE_CHECK(elem > 0, "safetensors add: tensor '", name, "' has unknown dtype '", dtype,
                 "'; use F32, I32, I64, U8 (or another safetensors dtype)");
  uint64_t expected = 0;
  DENDRITE_CHECK(shape_bytes(shape, elem, &expected), "safetensors add: tensor '", name,
                 "' has an invalid shape ", shape_str(shape),
                 "; dimensions must be non-negative and the size must fit in 64 bits");
  DENDRITE_CHECK(expected == bytes, "safetensors add: tensor '", name, "' of dtype ", dtype,
                 " and shape ", shape_str(shape), " needs ", expected, " bytes but ", bytes,
                 " were given; pass numel * dtype size");
  DENDRITE_CHECK(data != nullptr || bytes == 0, "safetensors add: tensor '", name,
                 "' has a null data pointer for ", bytes, " bytes");
  for (const Entry& e : entries_) {
    DENDRITE_CHECK(e.name != name, "safetensors add: tensor '", name,
                   "' was added twice; tensor names must be unique");
  }
  entries_.push_back({name, dtype, shape, data, bytes});
}

void SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                                const float* data) {
  uint64_t bytes = 0;
  DENDRITE_CHECK(shape_bytes(shape, sizeof(float), &bytes), "safetensors add_f32: tensor '", name,
                 "' has an invalid shape ", shape_str(shape), "; dimensions must be non-negative");
  add(name, "F32", shape, data, bytes);
}

void SafetensorsWriter::add_deferred(const std::string& name, const std::string& dtype,
                                     const std::vector<int64_t>& shape) {
  uint64_t bytes = 0;
  const size_t elem = dtype_size(dtype);
  DENDRITE_CHECK(elem > 0 && shape_bytes(shape, elem, &bytes), "safetensors add: tensor '", name,
                 "' has unknown dtype '", dtype, "' or an invalid shape ", shape_str(shape));
  // add()'s checks of the name, with no bytes yet; then the size.
  add(name, dtype, std::vector<int64_t>(std::max<size_t>(shape.size(), 1), 0), nullptr, 0);
  entries_.back().shape = shape;
  entries_.back().bytes = size_t(bytes);
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  DENDRITE_CHECK(key.rfind(kChecksumPrefix, 0) != 0, "safetensors set_metadata: key '", key,
                 "' is reserved (the writer records checksum.<tensor> itself); use another key");
  metadata_[key] = value;
}

namespace {

// A temporary file that is closed and removed unless commit() ran.
struct TempFile {
  std::string path;
  int fd = -1;
  bool committed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!committed) ::unlink(path.c_str());
  }
};

[[noreturn]] void write_fail(const std::string& path, const std::string& tmp, const char* op,
                             int err) {
  fail("safetensors write: cannot write '", path, "': ", op, " of '", tmp,
       "' failed: ", sys_error(err),
       "; check free disk space, quotas and permissions of the folder (any earlier '", path,
       "' is untouched)");
}

// Writes all n bytes, retrying short writes and EINTR; returns 0 or an errno.
int write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;  // no progress on a regular file: treat as an I/O error
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

// The JSON header, padded with spaces to a multiple of 8 bytes. Entries is the
// writer's private entry list (a template so that it need not be named here).
template <typename Entries>
std::string build_header(const std::string& path, const Entries& entries,
                         const std::map<std::string, std::string>& metadata,
                         const std::vector<uint32_t>& crcs) {
  std::string header;
  try {
    nlohmann::ordered_json meta(metadata);
    for (size_t i = 0; i < entries.size(); ++i) {
      meta[kChecksumPrefix + entries[i].name] = hex8(crcs[i]);
    }
    nlohmann::ordered_json j = {{kMetadataKey, std::move(meta)}};
    uint64_t offset = 0;
    for (const auto& e : entries) {
      j[e.name] = {
          {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
      offset += e.bytes;
    }
    header = j.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors write: cannot write '", path,
         "': building the JSON header failed: ", e.what(),
         "; tensor names and metadata must be valid UTF-8");
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

// The rename is only durable once the folder itself is on disk.
void fsync_folder(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DENDRITE_CHECK(dir >= 0, "safetensors write: wrote '", path, "' but cannot open its folder '",
                 folder, "' to fsync it: ", sys_error(errno));
  const int sync_rc = ::fsync(dir);
  const int sync_err = errno;
  ::close(dir);
  DENDRITE_CHECK(sync_rc == 0, "safetensors write: wrote '", path, "' but fsync of its folder '",
                 folder, "' failed: ", sys_error(sync_err), "; the file may not survive a crash");
}

}  // namespace

void SafetensorsWriter::write(const std::string& path) const {
  for (const Entry& e : entries_)
    DENDRITE_CHECK(e.data != nullptr || e.bytes == 0, "safetensors write: tensor '", e.name,
                   "' was added without its bytes; use write_streamed");
  write_streamed(path, [this](size_t i, size_t offset) {
    return Piece{static_cast<const uint8_t*>(entries_[i].data) + offset,
                 entries_[i].bytes - offset};
  });
}

void SafetensorsWriter::write_streamed(const std::string& path, const TensorSource& source) const {
  // The header comes first: a bad name or metadata fails before any file
  // exists. Checksums are 8 hex digits, so the final header has its length.
  std::vector<uint32_t> crcs(entries_.size(), 0);
  std::string header = build_header(path, entries_, metadata_, crcs);
  uint8_t size_le[8];
  const uint64_t header_size = header.size();
  std::memcpy(size_le, &header_size, 8);

  TempFile tmp;
  tmp.path = path + ".tmp." + std::to_string(::getpid());
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (tmp.fd < 0) write_fail(path, tmp.path, "open", errno);
  int err = write_all(tmp.fd, size_le, 8);
  if (!err) err = write_all(tmp.fd, header.data(), header.size());
  for (size_t i = 0; i < entries_.size() && !err; ++i) {
    const Entry& e = entries_[i];
    for (size_t offset = 0; offset < e.bytes && !err;) {
      const Piece piece =
          e.data ? Piece{static_cast<const uint8_t*>(e.data) + offset, e.bytes - offset}
                 : source(i, offset);
      DENDRITE_CHECK(piece.data != nullptr && piece.bytes > 0 && piece.bytes <= e.bytes - offset,
                     "safetensors write: tensor '", e.name, "' was given ",
                     piece.data ? piece.bytes : 0, " bytes at byte ", offset, " of its ", e.bytes,
                     " (need 1 to ", e.bytes - offset, ")");
      crcs[i] = crc32c(piece.data, piece.bytes, crcs[i]);
      err = write_all(tmp.fd, piece.data, piece.bytes);
      offset += piece.bytes;
    }
  }
  if (err) write_fail(path, tmp.path, "write", err);
  header = build_header(path, entries_, metadata_, crcs);
  DENDRITE_CHECK(header.size() == header_size, "safetensors write: the header of '", path,
                 "' changed length with its checksums");
  if (::lseek(tmp.fd, 8, SEEK_SET) != 8) write_fail(path, tmp.path, "seek", errno);
  err = write_all(tmp.fd, header.data(), header.size());
  if (err) write_fail(path, tmp.path, "write", err);
  if (::fsync(tmp.fd) != 0) write_fail(path, tmp.path, "fsync", errno);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) write_fail(path, tmp.path, "close", errno);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) write_fail(path, tmp.path, "rename", errno);
  tmp.committed = true;
  fsync_folder(path);
}

}  // namespace dendrite
