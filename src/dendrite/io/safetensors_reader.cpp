// safetensors reader (see safetensors.h for the format). No dimension letters
// here: tensors are opaque byte ranges with a dtype and a shape.
// The reader accepts any safetensors file (gaps between tensors, files
// without checksums); it rejects overlaps.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "dendrite/core/check.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/io/safetensors_format.h"

namespace dendrite {

using namespace safetensors_format;

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
