// Token files: atomic writing, memory-mapped reading with full validation, and
// the deterministic batch sampler that reads training sequences out of them.
// B: sequences per batch, T: tokens per sequence. A sequence is T + 1
// consecutive tokens: T inputs and the same T shifted by one as targets.
#include "dendrite/io/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"

namespace dendrite {

namespace {

constexpr char kMagic[8] = {'D', 'N', 'D', 'R', 'T', 'O', 'K', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 24;
// Random stream of the batch offsets; fixed so (seed, step) always names the same batch.
constexpr uint64_t kBatchStream = 0x62617463685f7331ULL;  // "batch_s1"

void put_le(uint8_t* out, uint64_t value, int bytes) {
  for (int b = 0; b < bytes; ++b) out[b] = static_cast<uint8_t>(value >> (8 * b));
}

uint64_t get_le(const uint8_t* in, int bytes) {
  uint64_t value = 0;
  for (int b = 0; b < bytes; ++b) value |= static_cast<uint64_t>(in[b]) << (8 * b);
  return value;
}

int choose_width(const std::vector<int32_t>& tokens, int width, const std::string& path) {
  DENDRITE_CHECK(width == 0 || width == 2 || width == 4, "write_token_file: width ", width, " for ",
                 path, " is not 0 (auto), 2 or 4");
  int32_t max_id = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    DENDRITE_CHECK(tokens[i] >= 0, "write_token_file: token ", i, " is negative (", tokens[i],
                   ") in ", path, "; ids must be >= 0");
    if (tokens[i] > max_id) max_id = tokens[i];
  }
  if (width == 0) return max_id < 65536 ? 2 : 4;
  DENDRITE_CHECK(width == 4 || max_id < 65536, "write_token_file: id ", max_id,
                 " does not fit in width 2 for ", path, "; use width 4 or 0 (auto)");
  return width;
}

// Writes header and ids to an open file; false on any I/O error (errno set).
bool write_contents(FILE* f, const std::vector<int32_t>& tokens, int width) {
  uint8_t header[kHeaderBytes];
  std::memcpy(header, kMagic, 8);
  put_le(header + 8, kVersion, 4);
  put_le(header + 12, static_cast<uint64_t>(width), 4);
  put_le(header + 16, tokens.size(), 8);
  if (std::fwrite(header, 1, kHeaderBytes, f) != kHeaderBytes) return false;
  constexpr size_t kChunk = 1 << 16;
  std::vector<uint8_t> buf(kChunk * width);
  for (size_t first = 0; first < tokens.size(); first += kChunk) {
    size_t n = std::min(kChunk, tokens.size() - first);
    for (size_t j = 0; j < n; ++j)
      put_le(buf.data() + j * width, static_cast<uint32_t>(tokens[first + j]), width);
    if (std::fwrite(buf.data(), width, n, f) != n) return false;
  }
  return std::fflush(f) == 0 && fsync(fileno(f)) == 0;
}

// Makes the rename durable; a failure here is not worth failing the write.
void sync_parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens, int width) {
  width = choose_width(tokens, width, path);
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  DENDRITE_CHECK(f != nullptr, "write_token_file: cannot create ", tmp, ": ", std::strerror(errno),
                 "; check that the directory exists and is writable");
  bool ok = write_contents(f, tokens, width);
  int saved_errno = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    saved_errno = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    saved_errno = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    fail("write_token_file: writing ", path, " failed: ", std::strerror(saved_errno),
         "; check free disk space and permissions");
  }
  sync_parent_dir(path);
}

// Checks the mapped bytes; returns "" when they form a valid token file, else
// what is wrong with it (the caller prefixes the path).
static std::string header_problem(const uint8_t* base, uint64_t bytes) {
  if (bytes >= 8 && std::memcmp(base, kMagic, 8) != 0)
    return "is not a Dendrite token file (bad magic); token files come from `dendrite tokenize`";
  if (bytes < kHeaderBytes)
    return str("is truncated: ", bytes, " bytes, shorter than the ", kHeaderBytes,
               "-byte header; re-run `dendrite tokenize`");
  uint64_t version = get_le(base + 8, 4);
  if (version != kVersion)
    return str("has version ", version, ", this build reads version ", kVersion,
               "; re-run `dendrite tokenize`");
  uint64_t width = get_le(base + 12, 4);
  if (width != 2 && width != 4)
    return str("has token width ", width, " (must be 2 or 4); the file is corrupt");
  uint64_t count = get_le(base + 16, 8);
  uint64_t payload = bytes - kHeaderBytes;
  if (count > payload / width)
    return str("is truncated: the header promises ", count, " tokens of ", width,
               " bytes but only ", payload, " bytes follow; re-run `dendrite tokenize`");
  if (payload > count * width)
    return str("has ", payload - count * width, " extra bytes after its ", count,
               " tokens; the file is corrupt, re-run `dendrite tokenize`");
  return "";
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0 && errno == ENOENT)
    fail("token file ", path, " does not exist; run `dendrite tokenize` to create it");
  DENDRITE_CHECK(fd >= 0, "token file ", path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    fail("token file ", path, ": cannot stat: ", std::strerror(e));
  }
  uint64_t bytes = static_cast<uint64_t>(st.st_size);
  if (bytes == 0) {
    close(fd);
    fail("token file ", path, " is empty (truncated); re-run `dendrite tokenize`");
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  close(fd);  // the mapping keeps the file open
  DENDRITE_CHECK(map != MAP_FAILED, "token file ", path,
                 ": mmap failed: ", std::strerror(map_errno));
  const uint8_t* base = static_cast<const uint8_t*>(map);
  std::string problem = header_problem(base, bytes);
  if (!problem.empty()) {
    munmap(map, bytes);  // the destructor does not run when the constructor throws
    fail("token file ", path, " ", problem);
  }
  map_ = map;
  map_bytes_ = bytes;
  ids_ = base + kHeaderBytes;
  count_ = get_le(base + 16, 8);
  width_ = static_cast<int>(get_le(base + 12, 4));
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

int32_t TokenFile::at(uint64_t i) const {
  DENDRITE_CHECK(i < count_, "TokenFile::at: index ", i, " is past the end of ", path_, " (",
                 count_, " tokens)");
  return static_cast<int32_t>(get_le(ids_ + i * width_, width_));
}

void TokenFile::copy(uint64_t first, uint64_t n, int32_t* out) const {
  DENDRITE_CHECK(n <= count_ && first <= count_ - n, "TokenFile::copy: tokens [", first, ", ",
                 first + n, ") are past the end of ", path_, " (", count_, " tokens)");
  const uint8_t* p = ids_ + first * width_;
  if (width_ == 2) {
    for (uint64_t j = 0; j < n; ++j) out[j] = static_cast<int32_t>(get_le(p + 2 * j, 2));
  } else {
    for (uint64_t j = 0; j < n; ++j) out[j] = static_cast<int32_t>(get_le(p + 4 * j, 4));
  }
}

void TokenFile::check_vocab(int vocab_size) const {
  for (uint64_t i = 0; i < count_; ++i) {
    uint64_t id = get_le(ids_ + i * width_, width_);
    DENDRITE_CHECK(id < static_cast<uint64_t>(vocab_size), "token file ", path_, ": token ", i,
                   " has id ", id, " >= vocab size ", vocab_size,
                   "; the file was made with a different tokenizer, re-run `dendrite tokenize`");
  }
}

BatchSampler::BatchSampler(const TokenFile& file, int B, int T, uint64_t seed)
    : file_(file), B_(B), T_(T), seed_(seed) {
  DENDRITE_CHECK(B > 0 && T > 0, "BatchSampler: batch size B=", B, " and sequence length T=", T,
                 " must be positive");
  DENDRITE_CHECK(file.size() > static_cast<uint64_t>(T) + 1, "BatchSampler: ", file.path(),
                 " holds ", file.size(), " tokens, too few for sequences of T=", T,
                 " (needs more than T+1 = ", T + 1,
                 "); use a shorter sequence length or more text");
}

void BatchSampler::batch(int64_t step, int32_t* inputs, int32_t* targets) const {
  DENDRITE_CHECK(step >= 0, "BatchSampler::batch: step ", step, " is negative");
  uint64_t span = file_.size() - static_cast<uint64_t>(T_);
  for (int i = 0; i < B_; ++i) {
    uint64_t index = static_cast<uint64_t>(step) * B_ + i;
    uint64_t offset = random_bits(seed_, kBatchStream, index) % span;
    file_.copy(offset, T_, inputs + static_cast<size_t>(i) * T_);
    file_.copy(offset + 1, T_, targets + static_cast<size_t>(i) * T_);
  }
}

void BatchSampler::eval_batch(int j, int num_batches, int32_t* inputs, int32_t* targets) const {
  DENDRITE_CHECK(num_batches > 0 && j >= 0 && j < num_batches, "BatchSampler::eval_batch: batch ",
                 j, " is outside [0, ", num_batches, ")");
  using u128 = unsigned __int128;
  uint64_t span = file_.size() - static_cast<uint64_t>(T_) - 1;
  uint64_t total = static_cast<uint64_t>(num_batches) * B_;
  for (int i = 0; i < B_; ++i) {
    uint64_t seq = static_cast<uint64_t>(j) * B_ + i;
    uint64_t offset = static_cast<uint64_t>(static_cast<u128>(seq) * span / total);
    file_.copy(offset, T_, inputs + static_cast<size_t>(i) * T_);
    file_.copy(offset + 1, T_, targets + static_cast<size_t>(i) * T_);
  }
}

}  // namespace dendrite
