// The two kinds of pending collective of the MPI backend: an MPI request,
// which moves only when polled, and a task on the progress engine, which runs
// on its own thread. Each charges the time its waiter blocked to the
// communicator that posted it.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>

#include "dendrite/comm/mpi/mpi_communicator.h"
#include "dendrite/core/check.h"
#include "dendrite/core/trace.h"

namespace dendrite {

namespace {

// A rank's wait for a posted collective, [begin, end) on the trace's clock.
void trace_wait(int kind, const Communicator& group, double begin, double end, int64_t bytes) {
  if (!trace::on()) return;
  trace::add({"wait", str("wait ", collective_name(static_cast<Collective>(kind)), " ", group.name()),
              begin, end, trace::Lane::kRank, bytes, -1, -1});
}

}  // namespace

MpiRequest::MpiRequest(CommStats& stats, const Communicator& group, Collective kind)
    : stats_(stats), group_(group), kind_(static_cast<int>(kind)), posted_(MPI_Wtime()) {}

void MpiRequest::wait() {
  if (!pending()) return;
  const double start = MPI_Wtime();
  wait_or_timeout(&req, collective_name(static_cast<Collective>(kind_)), group_);
  req = MPI_REQUEST_NULL;  // MPI_Wait sets this too; idempotence must not rely on it
  const double end = MPI_Wtime();
  stats_.wait_seconds += end - start;
  stats_.exposed_seconds[kind_] += end - start;
  stats_.total_seconds[kind_] += end - posted_;
  if (trace::on()) {  // MPI_Wtime's clock may not be the trace's: the wait ends now on the latter
    const double now = trace::now();
    trace_wait(kind_, group_, now - (end - start), now, bytes);
  }
}

bool MpiRequest::test() {
  if (!pending()) return true;
  int done = 0;
  check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (!done) return false;
  req = MPI_REQUEST_NULL;
  stats_.total_seconds[kind_] += MPI_Wtime() - posted_;
  return true;
}

void MpiRequest::abort_job() noexcept {
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; the compiler cannot know
}

TaskRequest::TaskRequest(CommStats& stats, const Communicator& group, Collective kind,
                         std::shared_ptr<TaskState> task, unsigned spin, int64_t bytes)
    : stats_(stats),
      group_(group),
      kind_(static_cast<int>(kind)),
      task_(std::move(task)),
      spin_(spin),
      bytes_(bytes) {}

// A short spin, then the waiter sleeps until the engine marks the task done.
// Every second of the wait is exposed, including the time the task sat in
// the engine's queue behind earlier ones: the rank paid it. Its total is its
// run time on the engine. The watchdog applies as to MPI requests: a task
// stuck (its barrier waiting for a dead or stuck peer) fails after the
// group's timeout.
void TaskRequest::wait() {
  if (!pending()) return;
  TaskState& t = *task_;
  const double start = steady_seconds(), timeout = group_.timeout();
  if (!wait_done(t, timeout, spin_))
    fail_timeout(collective_name(static_cast<Collective>(kind_)), group_, steady_seconds() - start,
                 true);
  const double end = steady_seconds(), waited = end - start;
  stats_.wait_seconds += waited;
  stats_.exposed_seconds[kind_] += waited;
  trace_wait(kind_, group_, start, end, bytes_);
  finish();
}

void TaskRequest::finish() {
  std::shared_ptr<TaskState> t = std::move(task_);
  stats_.total_seconds[kind_] += t->finish - t->start;
  stats_.queued_seconds[kind_] += t->start - t->posted;
  stats_.engine_cpu_seconds += t->cpu;
  // The task ran on the engine's thread; its span goes on the engine's lane.
  if (trace::on())
    trace::add({"engine", str(collective_name(static_cast<Collective>(kind_)), " ", group_.name()),
                t->start, t->finish, trace::Lane::kEngine, bytes_, -1,
                (t->start - t->posted) * 1e3});
  if (t->error) std::rethrow_exception(t->error);
}

bool TaskRequest::test() {
  if (!pending()) return true;
  if (!task_->done.load(std::memory_order_acquire)) return false;
  finish();
  return true;
}

void TaskRequest::abort_job() noexcept {
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; the compiler cannot know
}

}  // namespace dendrite
