// Token files (DESIGN.md section 8): a 24-byte header, then the token ids.
//   bytes 0-7   magic "DNDRTOKS"
//   bytes 8-11  version (uint32, 1)
//   bytes 12-15 token width in bytes (uint32, 2 or 4)
//   bytes 16-23 token count (uint64)
// then count little-endian unsigned ids of that width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dendrite {

// Writes atomically (temporary name, fsync, rename). width 2 needs every
// id < 65536; width 0 picks 2 when that holds, else 4.
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens, int width = 0);

// Memory-maps a token file and validates magic, version, width and that the
// file size equals header + count * width. Errors name the file and the fix.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  uint64_t size() const { return count_; }
  int width() const { return width_; }
  int32_t at(uint64_t i) const;
  // out[j] = at(first + j) for j < n
  void copy(uint64_t first, uint64_t n, int32_t* out) const;
  // Throws if any id >= vocab_size, naming the file, position, id and vocab.
  void check_vocab(int vocab_size) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* ids_ = nullptr;
  uint64_t count_ = 0;
  int width_ = 0;
};

// Which sequences form a batch depends only on (seed, step): sequence i of step
// s starts at random_bits(seed, kBatchStream, s * B + i) % (size - T). Each
// sequence holds T inputs and the T targets shifted by one.
class BatchSampler {
 public:
  BatchSampler(const TokenFile& file, int B, int T, uint64_t seed);
  // inputs, targets [B*T]
  void batch(int64_t step, int32_t* inputs, int32_t* targets) const;
  // Validation batches are fixed: batch j takes B sequences at evenly spaced
  // offsets (no randomness), so every evaluation sees the same text.
  void eval_batch(int j, int num_batches, int32_t* inputs, int32_t* targets) const;

 private:
  const TokenFile& file_;
  int B_, T_;
  uint64_t seed_;
};

}  // namespace dendrite
