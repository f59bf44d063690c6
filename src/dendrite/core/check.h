// Errors: every failure becomes a dendrite::Error whose message names the
// operation, the values involved and the fix. The command's main() catches it,
// prints it with the rank, and aborts the whole MPI job (see comm/mpi/env.h).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dendrite {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
}  // namespace detail

// Builds a message from any streamable pieces: str("layer ", i, " has ", n).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str(args...));
}

}  // namespace dendrite

// DENDRITE_CHECK(cond, "op: what is wrong; how to fix", values...)
#define DENDRITE_CHECK(cond, ...)              \
  do {                                         \
    if (!(cond)) ::dendrite::fail(__VA_ARGS__); \
  } while (0)
