// Internal to comm/: the two Communicator implementations and the body of a
// Request. MpiCommunicator runs the collectives of one MPI group (an axis x, y,
// z or d of the process grid, or the whole world); SelfCommunicator is the
// group of one process, whose collectives copy or do nothing and count no
// bytes. Code outside comm/ sees only communicator.h and grid.h.
#pragma once

#include <mpi.h>

#include <vector>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/progress.h"

namespace dendrite {

// A non-blocking collective in flight. `req` is MPI_REQUEST_NULL once waited
// (or for a request that never needed MPI); wait() charges the time it blocks
// to `stats`, the counters of the communicator that posted it, which must
// outlive the request.
struct Request::Impl {
  MPI_Request req = MPI_REQUEST_NULL;
  CommStats* stats = nullptr;
  const Communicator* group = nullptr;  // for the watchdog's timeout and message
  int kind = 0;        // Collective
  double posted = 0;   // MPI_Wtime() at the post
  // MPI_Ireduce_scatter reads its recvcounts until completion, so they live here.
  std::vector<int> counts;
  // Or a task on the progress engine (comm/progress.h) instead of an MPI request.
  std::shared_ptr<TaskState> task;
};

// Throws a dendrite::Error naming `call` when rc is not MPI_SUCCESS. (The
// default handler MPI_ERRORS_ARE_FATAL aborts first; this guards any
// communicator whose handler was changed.)
void check_mpi(int rc, const char* call);

// Completes *req like MPI_Wait, but by polling MPI_Test (the clock is read
// every few hundred polls), and throws an error naming `kind`, the group and
// the seconds waited once group.timeout() > 0 seconds pass: the watchdog that
// turns a stuck or dead peer into an error instead of a hang.
void wait_or_timeout(MPI_Request* req, const char* kind, const Communicator& group);

// The watchdog's error: `kind` on the group did not complete after `waited`
// seconds (shared_memory: it ran over the shared-memory path).
[[noreturn]] void fail_timeout(const char* kind, const Communicator& group, double waited,
                               bool shared_memory);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor).
  MpiCommunicator(MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  using Communicator::all_reduce;
  void all_reduce(void* buf, int64_t n, DType t) override;
  Request iall_reduce(void* buf, int64_t n, DType t) override;
  void all_gather(const void* in, void* out, int64_t n, DType t) override;
  Request iall_gather(const void* in, void* out, int64_t n, DType t) override;
  void reduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  void broadcast(void* buf, int64_t n, DType t, int root) override;
  void barrier() override;
  std::unique_ptr<SharedArray> allocate_shared(int64_t n) override;
  Request iall_gather_private(const SharedArray& a, int64_t offset, float* out,
                              int64_t n) override;
  Request ireduce_scatter_private(const SharedArray& a, int64_t offset, float* out, int64_t n,
                                  bool accumulate) override;

 private:
  std::unique_ptr<SharedArray> make_window(int64_t n);
  // The calling thread's and the engine's channels, when the group shares a node.
  void make_channels();
  // Records the payload of one collective (only on groups larger than one).
  void record(Collective c, int64_t bytes);
  Request make_request(std::unique_ptr<Request::Impl> impl, Collective kind);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<float> ring_acc_, ring_recv_;  // scratch of the calling thread's rings
  // The engine's duplicate of comm_ (MPI_THREAD_MULTIPLE only) and its scratch.
  MPI_Comm engine_comm_ = MPI_COMM_NULL;
  std::vector<float> engine_acc_, engine_recv_;
  // recvcounts of the blocking reduce_scatter: MPI reads them until it completes,
  // which after a watchdog timeout is later than the call.
  std::vector<int> counts_;
  ShmChannel own_;  // the calling thread's shared-memory channel
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : Communicator(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  using Communicator::all_reduce;
  void all_reduce(void* buf, int64_t n, DType t) override;
  Request iall_reduce(void* buf, int64_t n, DType t) override;
  void all_gather(const void* in, void* out, int64_t n, DType t) override;
  Request iall_gather(const void* in, void* out, int64_t n, DType t) override;
  void reduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  void broadcast(void* buf, int64_t n, DType t, int root) override;
  void barrier() override {}
};

// Wraps `comm` (taking ownership): a SelfCommunicator when the group has one
// rank (the handle is freed at once), else an MpiCommunicator.
std::unique_ptr<Communicator> wrap_mpi_comm(MPI_Comm comm, std::string name);

}  // namespace dendrite
