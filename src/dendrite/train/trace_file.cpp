#include "dendrite/train/trace_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/core/trace.h"

namespace dendrite {

namespace fs = std::filesystem;

void check_trace_path(const std::string& path, const char* option) {
  const fs::path folder = fs::path(path).parent_path();
  std::error_code ec;
  if (!folder.empty()) fs::create_directories(folder, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    DENDRITE_CHECK(f.is_open(), option, ": cannot write ", tmp,
                   "; give a path in a folder you can write to");
  }
  fs::remove(tmp, ec);
}

void write_file_whole(const std::string& path, const std::string& text, const char* option) {
  check_trace_path(path, option);
  const fs::path tmp = fs::path(path + ".tmp");
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    DENDRITE_CHECK(f.is_open(), option, ": cannot write ", tmp.string(),
                   "; give a path in a folder you can write to");
    f << text;
    f.close();
    DENDRITE_CHECK(!f.fail(), option, ": writing ", tmp.string(), " failed (disk full?)");
  }
  fs::rename(tmp, path);
}

void start_trace(ProcessGrid& grid) {
  grid.world().barrier();
  trace::start(trace::now());
}

int64_t write_trace(ProcessGrid& grid, const std::string& path) {
  trace::stop();
  const int64_t spans = int64_t(trace::spans().size());
  const std::string process = str("rank ", grid.rank(), " (x=", grid.x(), " y=", grid.y(),
                                  " z=", grid.z(), " d=", grid.d(), ")");
  const std::string mine = trace::events_json(grid.rank(), process);
  Communicator& world = grid.world();
  const int P = world.size();
  // The pieces differ in length: gather the lengths, then every piece padded
  // to the longest, as 8-byte words.
  int64_t len[2] = {int64_t(mine.size()), spans};
  std::vector<int64_t> lens(2 * size_t(P));
  world.all_gather(len, lens.data(), 2, DType::kI64);
  int64_t longest = 0, total = 0;
  for (int r = 0; r < P; ++r) {
    longest = std::max(longest, lens[2 * r]);
    total += lens[2 * r + 1];
  }
  const int64_t words = (longest + 7) / 8;
  std::vector<int64_t> padded(size_t(words), 0), all(size_t(words) * P);
  std::memcpy(padded.data(), mine.data(), mine.size());
  world.all_gather(padded.data(), all.data(), words, DType::kI64);
  if (grid.rank() != 0) return 0;
  std::vector<std::string> pieces(P);
  for (int r = 0; r < P; ++r)
    pieces[r].assign(reinterpret_cast<const char*>(all.data() + size_t(r) * words),
                     size_t(lens[2 * r]));
  write_file_whole(path, trace::file_json(pieces), "--trace");
  return total;
}

}  // namespace dendrite
