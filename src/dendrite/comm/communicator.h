// Communicators: one group of ranks (an axis of the process grid) with the
// collectives Dendrite needs, blocking and non-blocking. A group of size 1 is
// a real object whose collectives copy (or do nothing) and count no bytes, so
// one code path serves 1 and P ranks.
//
// Every communicator counts the payload bytes of each collective it runs on a
// group larger than one, per kind: the byte count of the buffer a rank hands
// in (all-reduce: the buffer; all-gather: the gathered output; reduce-scatter:
// the full input; broadcast: the buffer). The performance model predicts the
// same quantity in closed form (DESIGN.md section 6).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dendrite {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kCount };
const char* collective_name(Collective c);

enum class DType { kF32, kF64, kI64 };

struct CommStats {
  int64_t bytes[static_cast<int>(Collective::kCount)] = {};
  int64_t calls[static_cast<int>(Collective::kCount)] = {};
  double wait_seconds = 0;  // time spent blocked in waits and blocking calls
  // Per kind: total = from the call (or post) until the rank saw it complete;
  // exposed = the part of it the rank spent blocked. total - exposed is the
  // time a non-blocking collective was in flight while the rank computed (an
  // upper bound on what it hid: it may have finished before the wait).
  double total_seconds[static_cast<int>(Collective::kCount)] = {};
  double exposed_seconds[static_cast<int>(Collective::kCount)] = {};
  // Progress-engine tasks only: from the post until the engine started it
  // (tasks ahead of it in the queue, or the engine thread waiting for a core).
  double queued_seconds[static_cast<int>(Collective::kCount)] = {};
};

// n floats per rank that every rank of a group can read and write in place
// when the group's ranks share a node: one MPI-3 shared-memory window, so the
// collectives over it below are loads and stores (one pass over memory)
// instead of messages copied through MPI's buffers. Where the ranks do not
// share memory (or the window cannot be made) it is private memory and the
// same calls send messages. Either way they compute the same sums.
class SharedArray {
 public:
  virtual ~SharedArray() = default;
  float* data() { return local_; }
  const float* data() const { return local_; }
  int64_t size() const { return n_; }
  // Whether peer() reaches the other ranks' arrays.
  bool shared() const { return !peers_.empty(); }
  float* peer(int rank) const { return peers_[rank]; }
  float* const* peers() const { return peers_.data(); }

 protected:
  float* local_ = nullptr;
  int64_t n_ = 0;
  std::vector<float*> peers_;  // every rank's array, when shared
};

// A pending non-blocking collective. wait() is idempotent; destroying an
// unfinished request waits for it.
class Request {
 public:
  Request();  // a completed request
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  ~Request();
  // Blocks until the collective completes; throws (naming it, its group and
  // the seconds waited) after the group's timeout. The destructor and move
  // assignment wait too, but cannot throw: a timeout there prints the error and
  // aborts the job; while an exception unwinds they do not wait (the job is
  // failing, and the peer may be dead).
  void wait();
  // Returns true once the collective has completed; for an MPI request it
  // also lets MPI progress it (it moves only inside MPI calls).
  bool test();
  bool pending() const;
  // Whether it moves only when polled (an MPI request), not on the engine's thread.
  bool needs_polling() const;

  struct Impl;
  explicit Request(std::unique_ptr<Impl> impl);

 private:
  void wait_task();
  void finish_task();
  void wait_noexcept() noexcept;
  std::unique_ptr<Impl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& name() const { return name_; }  // "x", "y", "z", "d", "world", ...

  // In place, sum over the group: buf[n].
  virtual void all_reduce(void* buf, int64_t n, DType t) = 0;
  virtual Request iall_reduce(void* buf, int64_t n, DType t) = 0;
  // out[size * n] = concatenation of every rank's in[n], in rank order.
  virtual void all_gather(const void* in, void* out, int64_t n, DType t) = 0;
  virtual Request iall_gather(const void* in, void* out, int64_t n, DType t) = 0;
  // out[n] = sum over ranks of in[rank * n .. (rank+1) * n); in holds size * n.
  virtual void reduce_scatter(const void* in, void* out, int64_t n, DType t) = 0;
  virtual Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) = 0;
  virtual void broadcast(void* buf, int64_t n, DType t, int root) = 0;
  virtual void barrier() = 0;

  // n floats per rank, shared over the group where its ranks share a node
  // (zero-filled). Collective: every rank calls it with the same n.
  virtual std::unique_ptr<SharedArray> allocate_shared(int64_t n);
  // The collectives above on a SharedArray's range [offset, offset + n) (n per
  // rank), counted as the same collectives. Synchronisation: all_gather reads
  // the peers' values without waiting, so the caller fences writes with
  // barrier(); reduce_scatter waits for every rank to arrive (their values are
  // then final) and the caller must not overwrite its range before the group's
  // next barrier (alternate two ranges); all_reduce synchronises fully.
  // out[size * n] = every rank's a[offset, offset + n), in rank order.
  void all_gather(const SharedArray& a, int64_t offset, float* out, int64_t n);
  // out[n] (+)= sum over ranks r of a_r[offset + rank() * n, + n), summed in rank order.
  void reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                      bool accumulate);
  // a[offset, offset + n) summed over the group, the same bits on every rank.
  void all_reduce(SharedArray& a, int64_t offset, int64_t n);
  // The same three, non-blocking: on a shared array they run on the progress
  // engine's thread (comm/progress.h) in the order posted, so they overlap the
  // caller's computation; the ranges must stay untouched until wait(). On a
  // private array (a group across nodes) they are rings of MPI messages on
  // the engine's thread where MPI provides MPI_THREAD_MULTIPLE, and complete
  // before returning where it does not, or on a group of one.
  Request iall_gather(const SharedArray& a, int64_t offset, float* out, int64_t n);
  Request ireduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                          bool accumulate);
  Request iall_reduce(SharedArray& a, int64_t offset, int64_t n);

  // Convenience for floats.
  void all_reduce(float* buf, int64_t n) { all_reduce(buf, n, DType::kF32); }
  void all_reduce(double* buf, int64_t n) { all_reduce(buf, n, DType::kF64); }

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

  // Watchdog: a blocking collective, or a wait on a non-blocking one, that has
  // not completed after this many seconds throws an error naming the
  // collective, the group and the time (a peer is stuck or dead; the caller's
  // error path then aborts the job). 0: wait forever.
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

 protected:
  explicit Communicator(std::string name) : name_(std::move(name)) {}
  void count(Collective c, int64_t bytes) {
    stats_.bytes[static_cast<int>(c)] += bytes;
    stats_.calls[static_cast<int>(c)] += 1;
  }
  // Charges the blocking collective that began at `start` (MPI_Wtime) with the
  // counters' wait_seconds then at `wait_before` (barriers inside it count once).
  void charge(Collective c, double start, double wait_before);
  std::string name_;
  CommStats stats_;
  double timeout_s_ = 600;

  // Where the group's ranks share a node: per thread that synchronises the
  // group, one shared window per rank holding a 64-byte barrier slot and two
  // slots of kShmSlotBytes for the all-reduces of private buffers (comm/
  // shared_array.cpp): a sum is one copy in, one barrier and one pass over the
  // peers' slots, where MPI's transport needs several round trips.
  struct ShmChannel {
    static constexpr int64_t kSlotBytes = int64_t(1) << 20;  // a longer sum goes in pieces
    std::unique_ptr<SharedArray> window;  // null: no shared memory for this group
    int64_t generation = 0;              // of the barrier slot
    int slot = 0;                        // the data slot the next piece uses
  };
  // Sums buf[n] (f32 or f64) over the group through ch, in rank order (the
  // same bits on every rank). False when `seconds` (> 0) passed in a barrier.
  bool shm_all_reduce(ShmChannel& ch, void* buf, int64_t n, DType t, double seconds);
  // The progress engine's channel: its tasks run in post order on every rank.
  ShmChannel engine_;

  // Queues fn on the progress engine as collective c of `bytes` (counted now).
  Request post(Collective c, int64_t bytes, std::function<void()> fn);
  // The non-blocking collectives of a private (not shared) array, where the
  // group spans nodes: rings of MPI messages on the engine's thread
  // (MpiCommunicator). The default completes at once.
  virtual Request iall_gather_private(const SharedArray& a, int64_t offset, float* out,
                                      int64_t n);
  virtual Request ireduce_scatter_private(const SharedArray& a, int64_t offset, float* out,
                                          int64_t n, bool accumulate);
};

size_t dtype_size(DType t);

}  // namespace dendrite
