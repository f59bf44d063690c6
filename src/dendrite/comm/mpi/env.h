// The MPI environment of one process: initialised once in main, it owns the
// world rank and size and the world communicator (with it the progress
// engine), and turns any fatal error on any rank into an abort of the whole
// job (a message with the rank, then MPI_Abort), so that no rank waits
// forever for a peer that died.
#pragma once

#include <functional>
#include <memory>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/options.h"

namespace dendrite {

class MpiEnv {
 public:
  // options: how the world communicator and every group split from it
  // communicate (comm_options_from_environment() in the program).
  MpiEnv(int* argc, char*** argv, const CommOptions& options);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommOptions& options() const { return options_; }
  // The communicator over every rank of the job, made at the first call
  // (collective: every rank makes it at the same point of the program, once
  // the run's thread count is set, as its spin policy depends on it).
  Communicator& world();
  // Another communicator over every rank, with other options (e.g. shared
  // memory off, to time the message path); collective.
  std::unique_ptr<Communicator> make_world(const CommOptions& options);

  // Runs body; on any exception prints "[rank r] error: ..." and aborts the
  // whole job with exit code 1 (with one rank, simply exits 1).
  int run_or_abort(const std::function<int()>& body);

 private:
  int rank_ = 0, size_ = 1;
  CommOptions options_;
  std::unique_ptr<Communicator> world_;
};

}  // namespace dendrite
