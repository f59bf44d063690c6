// Names of the collectives and element types, and the Request handle, which
// forwards to the backend's pending collective (comm/mpi/request.cpp).
#include "dendrite/comm/communicator.h"

#include <unistd.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "dendrite/comm/self_communicator.h"
#include "dendrite/core/check.h"
#include "dendrite/core/log.h"

namespace dendrite {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kCount:
      break;
  }
  return "unknown";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kI64:
      return 8;
    case DType::kBF16:
      return 2;
  }
  fail("dtype_size: unknown DType ", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kI64:
      return "i64";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

std::unique_ptr<Communicator> Communicator::group_of_one(std::string name) {
  return std::make_unique<SelfCommunicator>(std::move(name));
}

void check_summable(const char* op, const Communicator& c, DType t) {
  DENDRITE_CHECK(t != DType::kBF16, op, " on ", c.name(), ": bf16 elements cannot be summed ",
                 "(partial sums and gradients are f32); sum f32 values and convert after");
}

Request::Request() = default;
Request::Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Request::Request(Request&&) noexcept = default;

// A wait that must not throw (destructor, move assignment): while an
// exception unwinds the job is failing anyway and the peer may be dead, so it
// does not wait; a watchdog timeout prints the error and aborts the job.
void Request::wait_noexcept() noexcept {
  if (!pending() || std::uncaught_exceptions() > 0) return;
  try {
    impl_->wait();
  } catch (const std::exception& e) {
    log_error(std::string("error: ") + e.what());
    impl_->abort_job();
  }
}

// The request being overwritten is finished first, so no backend request leaks.
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait_noexcept();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Request::~Request() { wait_noexcept(); }

void Request::wait() {
  if (pending()) impl_->wait();
}

bool Request::test() { return !pending() || impl_->test(); }

bool Request::pending() const { return impl_ && impl_->pending(); }

bool Request::needs_polling() const { return impl_ && impl_->needs_polling(); }

NodePlace node_place(Communicator& world) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const int64_t mine = int64_t(std::hash<std::string>{}(host) & 0x7fffffffffffffff);
  std::vector<int64_t> all(size_t(world.size()));
  world.all_gather(&mine, all.data(), 1, DType::kI64);
  NodePlace p;
  p.ranks = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (all[size_t(r)] != mine) continue;
    if (r < world.rank()) ++p.rank;
    ++p.ranks;
  }
  return p;
}

}  // namespace dendrite
