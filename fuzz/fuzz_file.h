// Shared by the libFuzzer targets whose readers take a path: the input bytes
// are written to a file of this process's own, which the reader then opens.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace dendrite::fuzz {

// Writes the n bytes to /tmp/dendrite-fuzz-<pid><suffix> and returns its path.
inline std::string write_input(const uint8_t* data, size_t n, const std::string& suffix) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("dendrite-fuzz-" + std::to_string(getpid()) + suffix)).string();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();  // cannot run at all: stop loudly
  if (n > 0 && std::fwrite(data, 1, n, f) != n) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace dendrite::fuzz
