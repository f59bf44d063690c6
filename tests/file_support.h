// Shared by the tests that write files: a temporary folder removed at the
// end, whole-file reads and writes, and the check that a call fails with a
// dendrite::Error naming given words.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dendrite/core/check.h"

namespace dendrite::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "dendrite_test") {
    std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
    char* made = mkdtemp(tmpl.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs fn and checks it throws dendrite::Error whose message holds every word.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& words) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& w : words)
      EXPECT_NE(what.find(w), std::string::npos) << "message lacks \"" << w << "\": " << what;
    return;
  }
  ADD_FAILURE() << "expected a dendrite::Error";
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace dendrite::test
