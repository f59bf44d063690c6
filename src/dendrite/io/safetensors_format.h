// What the safetensors reader and writer share (safetensors.h describes the
// format): the header's reserved keys, the size of each dtype, a shape's
// bytes and the pieces of their error messages. Internal to io/.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "dendrite/core/check.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors: the format is little-endian; this code reads it in place");

namespace dendrite::safetensors_format {

inline constexpr const char* kMetadataKey = "__metadata__";
inline constexpr const char* kChecksumPrefix = "checksum.";

// Bytes per element of every dtype the safetensors format defines; 0 if unknown.
inline size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// numel * elem_size, or false on a negative dimension or on overflow.
inline bool shape_bytes(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* bytes) {
  uint64_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *bytes = n;
  return true;
}

inline std::string sys_error(int err) { return str(std::strerror(err), " (errno ", err, ")"); }

}  // namespace dendrite::safetensors_format
