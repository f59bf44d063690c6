// Names of the collectives and element types, and the Request handle: one
// pending MPI request (or none, for a collective that completed at once),
// waited exactly once, with the blocked time charged to the communicator that
// posted it. The implementations live in mpi_communicator.cpp.
#include "dendrite/comm/communicator.h"

#include <mpi.h>

#include "dendrite/comm/mpi_communicator.h"
#include "dendrite/core/check.h"

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
  }
  fail("dtype_size: unknown DType ", static_cast<int>(t));
}

Request::Request() = default;
Request::Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Request::Request(Request&&) noexcept = default;

// The request being overwritten is finished first, so no MPI request leaks.
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Request::~Request() { wait(); }

void Request::wait() {
  if (!pending()) return;
  const double start = MPI_Wtime();
  check_mpi(MPI_Wait(&impl_->req, MPI_STATUS_IGNORE), "MPI_Wait");
  impl_->req = MPI_REQUEST_NULL;  // MPI_Wait sets this too; idempotence must not rely on it
  if (impl_->stats) {
    const double end = MPI_Wtime();
    impl_->stats->wait_seconds += end - start;
    impl_->stats->exposed_seconds[impl_->kind] += end - start;
    impl_->stats->total_seconds[impl_->kind] += end - impl_->posted;
  }
}

bool Request::test() {
  if (!pending()) return true;
  int done = 0;
  check_mpi(MPI_Test(&impl_->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (!done) return false;
  impl_->req = MPI_REQUEST_NULL;
  if (impl_->stats) impl_->stats->total_seconds[impl_->kind] += MPI_Wtime() - impl_->posted;
  return true;
}

bool Request::pending() const { return impl_ && impl_->req != MPI_REQUEST_NULL; }

}  // namespace dendrite
