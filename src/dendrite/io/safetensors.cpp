// safetensors reader and writer (see safetensors.h for the format and the
// crash-safety contract). No dimension letters here: tensors are opaque byte
// ranges with a dtype and a shape.
// The writer pads the JSON header with spaces to a multiple of 8 bytes so that
// tensor data starts 8-byte aligned in the file, and lays the tensors out in the
// order they were added, contiguous. The reader accepts any safetensors file
// (gaps between tensors, files without checksums); it rejects overlaps.
#include "dendrite/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "dendrite/core/check.h"

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

static_assert(std::endian::native == std::endian::little,
              "safetensors: the format is little-endian; this code reads it in place");

namespace dendrite {

namespace {

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kChecksumPrefix = "checksum.";

// Bytes per element of every dtype the safetensors format defines; 0 if unknown.
size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// numel * elem_size, or false on a negative dimension or on overflow.
bool shape_bytes(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* bytes) {
  uint64_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *bytes = n;
  return true;
}

std::string sys_error(int err) { return str(std::strerror(err), " (errno ", err, ")"); }

}  // namespace

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

// ---------------------------------------------------------------- reader

namespace {

// The JSON header of a mapped file; checks the 8-byte size prefix first.
nlohmann::json parse_header(const std::string& path, const uint8_t* base, size_t size,
                            size_t* data_start) {
  uint64_t n = 0;
  std::memcpy(&n, base, 8);
  DENDRITE_CHECK(n <= size - 8, "safetensors: '", path, "' declares a ", n,
                 "-byte JSON header but the file holds only ", size,
                 " bytes; the file is truncated or not a safetensors file");
  *data_start = 8 + n;
  const char* begin = reinterpret_cast<const char*>(base + 8);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(begin, begin + n);
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors: '", path, "' has a malformed JSON header: ", e.what(),
         "; the file is corrupt or not a safetensors file");
  }
  DENDRITE_CHECK(j.is_object(), "safetensors: '", path,
                 "' has a JSON header that is not an object; the file is corrupt");
  return j;
}

// Reads a non-negative JSON integer field, naming the file and tensor on error.
uint64_t json_uint(const std::string& path, const std::string& name, const char* field,
                   const nlohmann::json& v) {
  DENDRITE_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t{INT64_MAX},
                 "safetensors: tensor '", name, "' of '", path, "' has ", field, " entry ",
                 v.dump(), " that is not a non-negative integer; the file is corrupt");
  return v.get<uint64_t>();
}

TensorInfo parse_tensor(const std::string& path, const std::string& name, const nlohmann::json& t,
                        const uint8_t* data, size_t data_size) {
  const std::string where = str("safetensors: tensor '", name, "' of '", path, "' ");
  DENDRITE_CHECK(t.is_object(), where, "is not a JSON object; the file is corrupt");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    DENDRITE_CHECK(t.contains(field), where, "lacks the field '", field, "'; the file is corrupt");
  }
  TensorInfo info;
  const nlohmann::json& dtype = t["dtype"];
  DENDRITE_CHECK(dtype.is_string(), where, "has a dtype that is not a string: ", dtype.dump());
  info.dtype = dtype.get<std::string>();
  const size_t elem = dtype_size(info.dtype);
  DENDRITE_CHECK(elem > 0, where, "has unknown dtype '", info.dtype, "'");
  const nlohmann::json& shape = t["shape"];
  DENDRITE_CHECK(shape.is_array(), where, "has a shape that is not an array: ", shape.dump());
  for (const auto& d : shape)
    info.shape.push_back(static_cast<int64_t>(json_uint(path, name, "shape", d)));
  const nlohmann::json& off = t["data_offsets"];
  DENDRITE_CHECK(off.is_array() && off.size() == 2, where,
                 "has data_offsets that are not a [begin, end] pair: ", off.dump());
  const uint64_t begin = json_uint(path, name, "data_offsets", off[0]);
  const uint64_t end = json_uint(path, name, "data_offsets", off[1]);
  DENDRITE_CHECK(begin <= end, where, "has data_offsets [", begin, ", ", end,
                 "] with end before begin; the file is corrupt");
  DENDRITE_CHECK(end <= data_size, where, "has data_offsets [", begin, ", ", end, "] beyond the ",
                 data_size, " data bytes in the file; the file is truncated");
  uint64_t expected = 0;
  DENDRITE_CHECK(shape_bytes(info.shape, elem, &expected) && expected == end - begin, where,
                 "holds ", end - begin, " bytes but dtype ", info.dtype, " and shape ",
                 shape_str(info.shape), " need ", expected, "; the file is corrupt");
  info.data = data + begin;
  info.bytes = end - begin;
  return info;
}

void check_no_overlap(const std::string& path, const std::map<std::string, TensorInfo>& tensors) {
  std::vector<std::pair<const uint8_t*, const std::string*>> starts;
  for (const auto& [name, info] : tensors) {
    if (info.bytes > 0) starts.push_back({info.data, &name});  // empty tensors hold no bytes
  }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) {
    const TensorInfo& prev = tensors.at(*starts[i - 1].second);
    DENDRITE_CHECK(prev.data + prev.bytes <= starts[i].first, "safetensors: tensors '",
                   *starts[i - 1].second, "' and '", *starts[i].second, "' of '", path,
                   "' overlap; the file is corrupt");
  }
}

std::map<std::string, std::string> parse_metadata(const std::string& path,
                                                  const nlohmann::json& m) {
  DENDRITE_CHECK(m.is_object(), "safetensors: __metadata__ of '", path,
                 "' is not a JSON object; the file is corrupt");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    DENDRITE_CHECK(value.is_string(), "safetensors: metadata entry '", key, "' of '", path,
                   "' is not a string: ", value.dump(), "; metadata values must be strings");
    out[key] = value.get<std::string>();
  }
  return out;
}

bool parse_hex8(const std::string& s, uint32_t* v) {
  if (s.size() != 8) return false;
  uint32_t x = 0;
  for (char ch : s) {
    int d = -1;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
    if (d < 0) return false;
    x = x << 4 | static_cast<uint32_t>(d);
  }
  *v = x;
  return true;
}

void verify_checksums(const std::string& path, const std::map<std::string, TensorInfo>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  struct Job {
    const std::string* name;
    const TensorInfo* info;
    uint32_t stored, computed;
  };
  std::vector<Job> jobs;
  const std::string prefix = kChecksumPrefix;
  for (const auto& [key, value] : metadata) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string name = key.substr(prefix.size());
    auto it = tensors.find(name);
    DENDRITE_CHECK(it != tensors.end(), "safetensors: '", path, "' has metadata '", key,
                   "' for tensor '", name, "' that the file lacks; the file is corrupt");
    uint32_t stored = 0;
    DENDRITE_CHECK(parse_hex8(value, &stored), "safetensors: checksum of tensor '", name, "' of '",
                   path, "' is '", value, "', not 8 hex digits; the file is corrupt");
    jobs.push_back({&it->first, &it->second, stored, 0});
  }
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < jobs.size(); ++i)
    jobs[i].computed = crc32c(jobs[i].info->data, jobs[i].info->bytes);
  for (const Job& job : jobs) {
    DENDRITE_CHECK(job.stored == job.computed, "checksum mismatch in tensor '", *job.name, "' of ",
                   path, ": the file is corrupt (stored crc32c ", hex8(job.stored), ", computed ",
                   hex8(job.computed), ")");
  }
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DENDRITE_CHECK(fd >= 0, "safetensors: cannot open '", path, "': ", sys_error(errno),
                 "; check the path");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("safetensors: cannot stat '", path, "': ", sys_error(err));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail("safetensors: '", path, "' holds only ", size,
         " bytes, less than the 8-byte header size; the file is truncated or not a safetensors "
         "file");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  DENDRITE_CHECK(map != MAP_FAILED, "safetensors: cannot mmap '", path, "' (", size,
                 " bytes): ", sys_error(map_err));
  map_ = map;
  map_bytes_ = size;
  try {
    const auto* base = static_cast<const uint8_t*>(map_);
    size_t data_start = 0;
    const nlohmann::json header = parse_header(path, base, size, &data_start);
    for (const auto& [name, value] : header.items()) {
      if (name == kMetadataKey) {
        metadata_ = parse_metadata(path, value);
      } else {
        tensors_[name] = parse_tensor(path, name, value, base + data_start, size - data_start);
      }
    }
    check_no_overlap(path, tensors_);
    verify_checksums(path, tensors_, metadata_);
  } catch (...) {
    ::munmap(map_, map_bytes_);  // the destructor does not run for a throwing constructor
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (map_) ::munmap(map_, map_bytes_);
}

bool SafetensorsReader::has(const std::string& name) const { return tensors_.count(name) > 0; }

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  std::string known;
  size_t listed = 0;
  for (const auto& [n, unused] : tensors_) {
    if (listed++ == 8) {
      known += ", ...";
      break;
    }
    known += (known.empty() ? "" : ", ") + n;
  }
  fail("safetensors: tensor '", name, "' is not in '", path_, "', which holds ", tensors_.size(),
       " tensors (", known, "); check the name");
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, unused] : tensors_) out.push_back(name);
  return out;  // std::map iterates in sorted order
}

void SafetensorsReader::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                                 float* out) const {
  const TensorInfo& t = info(name);
  DENDRITE_CHECK(t.dtype == "F32", "safetensors read_f32: tensor '", name, "' of '", path_,
                 "' has dtype ", t.dtype, ", not F32; convert it or read it with info()");
  DENDRITE_CHECK(t.shape == shape, "safetensors read_f32: tensor '", name, "' of '", path_,
                 "' has shape ", shape_str(t.shape), " but shape ", shape_str(shape),
                 " was expected; check the model config against the checkpoint");
  if (t.bytes > 0) std::memcpy(out, t.data, t.bytes);
  bytes_read_ += int64_t(t.bytes);
}

namespace {

// IEEE half -> float, exact (subnormals, infinities and NaN included).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf, NaN
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while (!(man & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

const TensorInfo& SafetensorsReader::float_tensor(const std::string& name,
                                                 const std::vector<int64_t>& shape) const {
  const TensorInfo& t = info(name);
  DENDRITE_CHECK(t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16", "safetensors: tensor '",
                 name, "' of '", path_, "' has dtype ", t.dtype,
                 "; weights must be F32, BF16 or F16");
  DENDRITE_CHECK(t.shape == shape, "safetensors: tensor '", name, "' of '", path_, "' has shape ",
                 shape_str(t.shape), " but shape ", shape_str(shape),
                 " was expected; check the model config against the weights");
  return t;
}

void SafetensorsReader::read_float(const std::string& name, const std::vector<int64_t>& shape,
                                   float* out) const {
  const TensorInfo& t = float_tensor(name, shape);
  if (t.dtype == "F32") return read_f32(name, shape, out);
  const size_t n = t.bytes / 2;
  const bool bf16 = t.dtype == "BF16";
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, t.data + 2 * i, 2);
    if (bf16) {
      const uint32_t u = uint32_t(v) << 16;
      std::memcpy(out + i, &u, 4);
    } else {
      out[i] = half_to_float(v);
    }
  }
  bytes_read_ += int64_t(t.bytes);
}

void SafetensorsReader::gather_float(const std::string& name, const std::vector<int64_t>& shape,
                                     const int64_t* idx, int64_t n, float* out) const {
  const TensorInfo& t = float_tensor(name, shape);
  const int64_t size = t.dtype == "F32" ? 4 : 2, count = int64_t(t.bytes) / size;
  for (int64_t i = 0; i < n; ++i)
    DENDRITE_CHECK(idx[i] >= 0 && idx[i] < count, "safetensors: element ", idx[i], " of tensor '",
                   name, "' of '", path_, "' is out of its ", count, " elements");
  if (t.dtype == "F32") {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + i, t.data + 4 * idx[i], 4);
  } else {
    const bool bf16 = t.dtype == "BF16";
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, t.data + 2 * idx[i], 2);
      if (bf16) {
        const uint32_t u = uint32_t(v) << 16;
        std::memcpy(out + i, &u, 4);
      } else {
        out[i] = half_to_float(v);
      }
    }
  }
  bytes_read_ += n * size;
}

}  // namespace dendrite
