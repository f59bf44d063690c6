// The MPI environment of one process: initialised once in main, it owns the
// world rank and size, and turns any fatal error on any rank into an abort of
// the whole job (a message with the rank, then MPI_Abort), so that no rank
// waits forever for a peer that died.
#pragma once

#include <functional>

namespace dendrite {

class MpiEnv {
 public:
  MpiEnv(int* argc, char*** argv);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Runs body; on any exception prints "[rank r] error: ..." and aborts the
  // whole job with exit code 1 (with one rank, simply exits 1).
  int run_or_abort(const std::function<int()>& body);

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace dendrite
