// Internal to comm/nccl/: the watchdog of one NCCL communicator, a thread
// that follows every collective in flight through its CUDA events (nccl_op.h)
// until they complete. It folds their times into the communicator's counters
// (total: the NCCL call on its stream; exposed: the compute stream's wait;
// queued: behind the collectives ahead of it), and ends the whole job on an
// asynchronous NCCL error or on a collective that has not finished `timeout`
// seconds after its axis stream started it: it prints the rank, the
// collective, the group and the time, aborts the NCCL communicator (which
// ends its kernels) and the job (MPI_Abort), as the CPU path does.
// The thread sleeps while nothing is in flight.
#pragma once

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/nccl/nccl_op.h"

namespace dendrite::nccl {

class Watchdog {
 public:
  // group: the communicator followed (its name and size in messages);
  // device: its CUDA device; comm: its NCCL communicator (null until made);
  // timeout: its --timeout in seconds (0: none). All outlive the watchdog.
  Watchdog(const Communicator& group, int device, const std::atomic<ncclComm_t>& comm,
           const std::atomic<double>& timeout);
  ~Watchdog();  // after the axis stream was synchronised: drops what is left
  void follow(std::shared_ptr<Op> op);
  // Adds the times folded so far into s; zeroes them when `reset`.
  void fold_into(CommStats& s, bool reset);

 private:
  void run();
  bool settle(Op& op);  // true once every event of op that counts has completed
  [[noreturn]] void fail(const std::string& why);

  const Communicator& group_;
  const int device_;
  const std::atomic<ncclComm_t>& comm_;
  const std::atomic<double>& timeout_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Op>> ops_;
  double total_[static_cast<int>(Collective::kCount)] = {};
  double exposed_[static_cast<int>(Collective::kCount)] = {};
  double queued_[static_cast<int>(Collective::kCount)] = {};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dendrite::nccl
