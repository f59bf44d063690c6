// Names of the collectives and element types, and the Request handle: a
// pending MPI request, or a task on the progress engine (comm/progress.h), or
// nothing (a collective that completed at once). Waiting is idempotent and
// charges the time to the counters (CommStats) of the communicator that
// posted it. The collectives themselves live in
// mpi_communicator.cpp (MPI groups and the group of one) and shared_array.cpp
// (shared-memory windows and the engine's tasks).
#include "dendrite/comm/communicator.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <cmath>

#include <exception>

#include "dendrite/comm/mpi_communicator.h"
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
  }
  fail("dtype_size: unknown DType ", static_cast<int>(t));
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
    wait();
  } catch (const std::exception& e) {
    log_error(std::string("error: ") + e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// The request being overwritten is finished first, so no MPI request leaks.
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait_noexcept();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Request::~Request() { wait_noexcept(); }

void Request::wait() {
  if (!pending()) return;
  if (impl_->task) return wait_task();
  const double start = MPI_Wtime();
  wait_or_timeout(&impl_->req, collective_name(static_cast<Collective>(impl_->kind)),
                  *impl_->group);
  impl_->req = MPI_REQUEST_NULL;  // MPI_Wait sets this too; idempotence must not rely on it
  if (impl_->stats) {
    const double end = MPI_Wtime();
    impl_->stats->wait_seconds += end - start;
    impl_->stats->exposed_seconds[impl_->kind] += end - start;
    impl_->stats->total_seconds[impl_->kind] += end - impl_->posted;
  }
}

// An engine task: a short spin, then the waiter sleeps until the engine marks
// it done. Its total time is the time it ran on the engine; what the caller
// waited for is exposed. The watchdog applies as to MPI requests: a task stuck
// (its barrier waiting for a dead or stuck peer) fails after the group's timeout.
void Request::wait_task() {
  TaskState& t = *impl_->task;
  const double start = steady_seconds(), timeout = impl_->group->timeout();
  if (!wait_done(t, timeout))
    fail_timeout(collective_name(static_cast<Collective>(impl_->kind)), *impl_->group,
                 steady_seconds() - start, true);
  const double waited = std::min(steady_seconds() - start, t.finish - t.start);
  finish_task();
  impl_->stats->wait_seconds += waited;
  impl_->stats->exposed_seconds[impl_->kind] += waited;
}

void Request::finish_task() {
  std::shared_ptr<TaskState> t = std::move(impl_->task);
  impl_->stats->total_seconds[impl_->kind] += t->finish - t->start;
  impl_->stats->queued_seconds[impl_->kind] += t->start - t->posted;
  if (t->error) std::rethrow_exception(t->error);
}

bool Request::test() {
  if (!pending()) return true;
  if (impl_->task) {
    if (!impl_->task->done.load(std::memory_order_acquire)) return false;
    finish_task();
    return true;
  }
  int done = 0;
  check_mpi(MPI_Test(&impl_->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (!done) return false;
  impl_->req = MPI_REQUEST_NULL;
  if (impl_->stats) impl_->stats->total_seconds[impl_->kind] += MPI_Wtime() - impl_->posted;
  return true;
}

bool Request::pending() const { return impl_ && (impl_->req != MPI_REQUEST_NULL || impl_->task); }

bool Request::needs_polling() const { return impl_ && impl_->req != MPI_REQUEST_NULL; }

}  // namespace dendrite
