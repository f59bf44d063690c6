// The watchdog of an NCCL communicator (nccl_watchdog.h): its thread, what
// it folds into the counters, and how it ends the job.
#include "dendrite/comm/nccl/nccl_watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"

namespace dendrite::nccl {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Elapsed seconds between two completed events.
double elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return std::max(0.0f, ms) * 1e-3;
}

}  // namespace

Watchdog::Watchdog(const Communicator& group, int device, const std::atomic<ncclComm_t>& comm,
                   const std::atomic<double>& timeout)
    : group_(group), device_(device), comm_(comm), timeout_(timeout), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::follow(std::shared_ptr<Op> op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::move(op));
  }
  wake_.notify_all();
}

void Watchdog::fold_into(CommStats& s, bool reset) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int k = 0; k < static_cast<int>(Collective::kCount); ++k) {
    s.total_seconds[k] += total_[k];
    s.exposed_seconds[k] += exposed_[k];
    s.queued_seconds[k] += queued_[k];
    s.wait_seconds += exposed_[k];
    if (reset) total_[k] = exposed_[k] = queued_[k] = 0;
  }
}

// Called with mu_ held. An op counts once its collective is done and, when
// the compute stream has been told to wait for it, that wait has ended too.
bool Watchdog::settle(Op& op) {
  if (cudaEventQuery(op.done) != cudaSuccess) return false;
  if (!op.waited.load(std::memory_order_acquire)) return false;  // not waited for yet
  if (cudaEventQuery(op.wait_end) != cudaSuccess) return false;
  if (group_.size() == 1) return true;  // a group of one times no collective, as it counts none
  const int k = static_cast<int>(op.kind);
  total_[k] += elapsed(op.start, op.done);
  // From the moment its inputs were ready (the compute stream reached the
  // post) until its axis stream started it: the collectives ahead of it there.
  queued_[k] += std::max(0.0, elapsed(op.ready, op.start));
  // A blocking call's compute stream waits from the post on (ready); a
  // posted one's from its wait().
  exposed_[k] += elapsed(op.wait_begin, op.wait_end);
  return true;
}

void Watchdog::run() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ || !ops_.empty()) {
    if (ops_.empty()) {
      wake_.wait(lock, [this] { return stop_ || !ops_.empty(); });
      continue;
    }
    std::erase_if(ops_, [this](const std::shared_ptr<Op>& op) { return settle(*op); });
    if (ncclComm_t nccl = comm_.load()) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(nccl, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail(str("NCCL reported an asynchronous error on grid axis ", group_.name(), " (",
                 group_.size(), " ranks): ", ncclGetErrorString(async)));
    }
    // A collective is timed from when its axis stream started it: before
    // that it waits for the compute stream or for the collectives ahead of
    // it on its stream, and the one that waits for a peer is among those.
    const double timeout = timeout_.load();
    for (const std::shared_ptr<Op>& op : ops_) {
      if (cudaEventQuery(op->done) == cudaSuccess) continue;
      if (!op->started) {
        if (cudaEventQuery(op->start) != cudaSuccess) continue;
        op->started = true;
        op->started_at = std::chrono::steady_clock::now();
      }
      const double waited = seconds_since(op->started_at);
      if (timeout > 0 && waited >= timeout)
        fail(str(collective_name(op->kind), " of ", op->bytes, " bytes on grid axis ",
                 group_.name(), " (", group_.size(), " ranks, NCCL) did not complete after ",
                 std::round(waited * 10) / 10, " s (--timeout ", timeout,
                 "): a rank of this group is stuck or dead; see the other ranks' errors, or ",
                 "raise --timeout if a step takes that long"));
    }
    if (stop_) {  // the communicator is going away: its stream was synchronised
      ops_.clear();
      break;
    }
    wake_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

void Watchdog::fail(const std::string& why) {
  log_error(str("error: nccl watchdog: ", why, "; aborting the job"));
  if (ncclComm_t nccl = comm_.load()) ncclCommAbort(nccl);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

}  // namespace dendrite::nccl
