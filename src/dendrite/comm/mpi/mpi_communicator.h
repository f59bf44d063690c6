// Internal to comm/mpi/: the MPI implementation of Communicator. One
// MpiCommunicator runs the collectives of one MPI group (an axis x, y, z or d
// of the process grid, or the whole world) and owns what they need: the MPI
// communicator and a duplicate for the engine's thread, the shared-memory
// windows of its channels, and a share of the world's progress engine. Code
// outside comm/ sees only communicator.h, grid.h and what makes the world
// (world.h, env.h).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/mpi/engine.h"
#include "dendrite/comm/options.h"

namespace dendrite {

// What every communicator split from one world shares: its options, the spin
// they resolve to, and the progress engine (one thread for all of them, so
// their non-blocking collectives run in the one order every rank posts them).
struct MpiWorldState {
  CommOptions options;
  unsigned spin = kLongSpin;
  ProgressEngine engine;
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

// How many ranks of comm share this rank's node (collective over comm): the
// one place that asks. simulated > 0: nodes of that many consecutive ranks of
// MPI_COMM_WORLD within the real ones (CommOptions::ranks_per_node).
int ranks_on_node(MPI_Comm comm, int simulated);

MPI_Datatype mpi_type(DType t);

// A posted MPI collective: waited once, with the blocked time charged to the
// counters of the communicator that posted it, which must outlive it.
class MpiRequest final : public Request::Impl {
 public:
  MpiRequest(CommStats& stats, const Communicator& group, Collective kind);
  MPI_Request req = MPI_REQUEST_NULL;
  // MPI_Ireduce_scatter reads its recvcounts until completion, so they live here.
  std::vector<int> counts;
  int64_t bytes = -1;  // the payload, for the trace (core/trace.h)

  void wait() override;
  bool test() override;
  bool pending() const override { return req != MPI_REQUEST_NULL; }
  bool needs_polling() const override { return pending(); }
  [[noreturn]] void abort_job() noexcept override;

 private:
  CommStats& stats_;
  const Communicator& group_;  // for the watchdog's timeout and message
  int kind_;
  double posted_;  // MPI_Wtime() at the post
};

// A task on the progress engine: it needs no polling, and its waiter sleeps.
class TaskRequest final : public Request::Impl {
 public:
  TaskRequest(CommStats& stats, const Communicator& group, Collective kind,
              std::shared_ptr<TaskState> task, unsigned spin, int64_t bytes = -1);
  void wait() override;
  bool test() override;
  bool pending() const override { return task_ != nullptr; }
  bool needs_polling() const override { return false; }
  [[noreturn]] void abort_job() noexcept override;

 private:
  void finish();  // charges the stats
  CommStats& stats_;
  const Communicator& group_;
  int kind_;
  std::shared_ptr<TaskState> task_;
  unsigned spin_;
  int64_t bytes_;  // the payload, for the trace
};

// A SharedArray in an MPI-3 shared-memory window over a group on one node:
// every rank's segment is mapped in every process (peers()).
class WindowArray final : public SharedArray {
 public:
  WindowArray(MPI_Win win, std::byte* local, int64_t n, DType t, std::vector<std::byte*> peers);
  // Freeing a window is collective: every rank destroys its arrays in the same
  // order (not while an error unwinds the stack; see shared_array.cpp).
  ~WindowArray() override;
  bool shared() const override { return true; }
  std::byte* peer(int rank) const { return peers_[rank]; }
  std::byte* const* peers() const { return peers_.data(); }

 private:
  MPI_Win win_;
  std::vector<std::byte*> peers_;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor). Collective over comm.
  MpiCommunicator(MPI_Comm comm, std::string name, std::shared_ptr<MpiWorldState> world);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int ranks_on_node() const override { return node_ranks_; }

  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;
  using Communicator::all_reduce;
  void all_reduce(void* buf, int64_t n, DType t) override;
  Request iall_reduce(void* buf, int64_t n, DType t) override;
  void all_gather(const void* in, void* out, int64_t n, DType t) override;
  Request iall_gather(const void* in, void* out, int64_t n, DType t) override;
  void reduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  void broadcast(void* buf, int64_t n, DType t, int root) override;
  void barrier() override;

  // comm/mpi/shared_array.cpp
  std::unique_ptr<SharedArray> allocate_shared(int64_t n, DType t) override;
  void all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override;
  void reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                      bool accumulate) override;
  void all_reduce(SharedArray& a, int64_t offset, int64_t n) override;
  Request iall_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override;
  Request ireduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                          bool accumulate) override;
  Request iall_reduce(SharedArray& a, int64_t offset, int64_t n) override;

  // Arrival stamps of the blocking calls (arrivals_): stamp() at the start of
  // a blocking call returns this rank's arrival time (steady seconds; -1 for
  // a call nested in another or a group without a board); settle() at its
  // end charges to kind c the time until the last peer arrived.
  double stamp();
  void settle(Collective c, double arrived);
  // Adds the blocking collective c that just ended after `seconds` to the
  // trace (core/trace.h) when one is recording and the call was not nested in
  // another (a barrier inside a shared-memory collective); peer_wait: its
  // wait for the group's last rank (seconds; < 0: not measured).
  void trace_blocking(Collective c, double seconds, double peer_wait);

 private:
  // Where the group's ranks share a node: per thread that synchronises the
  // group, one shared window per rank holding a 64-byte barrier slot and two
  // slots of kSlotBytes for the all-reduces of private buffers: a sum is one
  // copy in, one barrier and one pass over the peers' slots, where MPI's
  // transport needs several round trips.
  struct ShmChannel {
    static constexpr int64_t kSlotBytes = int64_t(1) << 20;  // a longer sum goes in pieces
    std::unique_ptr<WindowArray> window;  // null: no shared memory for this group
    int64_t generation = 0;               // of the barrier slot
    int slot = 0;                         // the data slot the next piece uses
  };

  // A window where every rank of the group is on this node (DENDRITE's
  // shared-memory option and simulated nodes decide, unless `machine`: then
  // only whether the ranks share this machine); else a private array. Its
  // owner zeroes (first touches) the first `zeroed` bytes of its segment, all
  // of them when negative.
  std::unique_ptr<SharedArray> make_window(int64_t n, DType t, bool machine = false,
                                           int64_t zeroed = -1);
  // The calling thread's and the engine's channels, when the group shares a node.
  void make_channels();
  // Sums buf[n] (f32 or f64) over the group through ch, in rank order (the
  // same bits on every rank). False when `seconds` (> 0) passed in a barrier.
  bool shm_all_reduce(ShmChannel& ch, void* buf, int64_t n, DType t, double seconds);
  // Records the payload of one collective (only on groups larger than one).
  void record(Collective c, int64_t bytes);
  // Charges the blocking collective that began at `start` (MPI_Wtime) with the
  // counters' wait_seconds then at `wait_before` (barriers inside it count
  // once), and settles its arrival stamp (stamp() at its start).
  void charge(Collective c, double start, double wait_before, double arrived);
  // Queues fn on the progress engine as collective c of `bytes` (counted now).
  Request post(Collective c, int64_t bytes, std::function<void()> fn);
  // The non-blocking collectives of a private (not shared) array, where the
  // group spans nodes: rings of MPI messages on the engine's thread, or
  // complete at once without MPI_THREAD_MULTIPLE.
  Request iall_gather_private(const SharedArray& a, int64_t offset, void* out, int64_t n);
  Request ireduce_scatter_private(const SharedArray& a, int64_t offset, float* out, int64_t n,
                                  bool accumulate);

  MPI_Comm comm_;
  std::shared_ptr<MpiWorldState> world_;
  int rank_ = 0, size_ = 1, node_ranks_ = 1, machine_ranks_ = 1;
  std::vector<float> ring_acc_, ring_recv_;  // scratch of the calling thread's rings
  // The engine's duplicate of comm_ (MPI_THREAD_MULTIPLE only) and its scratch.
  MPI_Comm engine_comm_ = MPI_COMM_NULL;
  std::vector<float> engine_acc_, engine_recv_;
  // recvcounts of the blocking reduce_scatter: MPI reads them until it completes,
  // which after a watchdog timeout is later than the call.
  std::vector<int> counts_;
  ShmChannel own_;     // the calling thread's shared-memory channel
  ShmChannel engine_;  // the engine's: its tasks run in post order on every rank
  // Where the group's ranks share a machine: per rank kArrivalSlots stamps
  // (the call's sequence number, then its arrival time), in a window of their
  // own. Every rank makes the same outermost blocking calls in the same order,
  // so the n-th call has sequence number n everywhere; a peer cannot be
  // kArrivalSlots calls ahead of a rank still in one of them.
  static constexpr int kArrivalSlots = 8;
  std::unique_ptr<WindowArray> arrivals_;
  int64_t arrival_seq_ = 0;
  int arrival_depth_ = 0;
  // The payload of the blocking collective being called, for the trace.
  int64_t trace_bytes_ = -1;
};

}  // namespace dendrite
