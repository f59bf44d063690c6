// Communicators: one group of ranks (an axis of the process grid) with the
// collectives Dendrite needs, blocking and non-blocking. This is the interface
// a backend implements (MPI: comm/mpi/; a group of one: comm/self_communicator.h);
// the parallel layers see only it. A group of size 1 is a real object whose
// collectives copy (or do nothing) and count no bytes, so one code path serves
// 1 and P ranks.
//
// Every communicator counts the payload bytes of each collective it runs on a
// group larger than one, per kind: the byte count of the buffer a rank hands
// in (all-reduce: the buffer; all-gather: the gathered output; reduce-scatter:
// the full input; broadcast: the buffer). The performance model predicts the
// same quantity in closed form (DESIGN.md section 6).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dendrite {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kCount };
const char* collective_name(Collective c);

// kBF16: bfloat16 (2 bytes, the upper half of an fp32), moved by gathers and
// broadcasts only; the sums reject it (its partial sums are fp32, DESIGN.md
// section 10).
enum class DType { kF32, kF64, kI64, kBF16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct CommStats {
  int64_t bytes[static_cast<int>(Collective::kCount)] = {};
  int64_t calls[static_cast<int>(Collective::kCount)] = {};
  double wait_seconds = 0;  // time spent blocked in waits and blocking calls
  // Per kind: total = the time the collectives took: a blocking call's
  // duration, a progress-engine task's run time on the engine (start to
  // finish), an MPI request's time from post until the rank saw it complete.
  // exposed = every second the rank spent blocked in the call or in the wait
  // for it, whatever it waited behind: a task queued behind others on the
  // engine waits for them too, and that wait is charged to the task waited
  // for. Summed over the kinds, total - exposed is the communication time
  // the rank did not pay (hidden); per kind it can be negative (a kind
  // waited for behind others).
  double total_seconds[static_cast<int>(Collective::kCount)] = {};
  double exposed_seconds[static_cast<int>(Collective::kCount)] = {};
  // Progress-engine tasks: from the post until the engine started it (tasks
  // ahead of it in the queue, or the engine thread waiting for a core), and
  // the CPU time its thread used running them (what the overlap costs the
  // cores that compute). Device collectives on an axis stream (NCCL): from
  // the moment the compute stream reached the post until the axis stream
  // started it (the collectives ahead of it there).
  double queued_seconds[static_cast<int>(Collective::kCount)] = {};
  double engine_cpu_seconds = 0;
  // Blocking calls only, per kind: the part of the call before the last rank
  // of the group had entered it (the wait for peers: their compute, their
  // drift, or their turn on an oversubscribed core), from arrival stamps the
  // ranks leave in shared memory. exposed - peer_wait is then the time the
  // collective took once the whole group had arrived. The MPI backend stamps
  // where the group's ranks share a machine (whatever the shared-memory
  // option or the simulated nodes); peer_wait_measured says whether any call
  // since the last reset did.
  double peer_wait_seconds[static_cast<int>(Collective::kCount)] = {};
  bool peer_wait_measured = false;
};

// n elements of one DType per rank that every rank of a group can read in
// place when the group's ranks share a node (the MPI backend: one MPI-3
// shared-memory window), so the collectives over it are loads and stores
// instead of messages; elsewhere it is private memory and the same calls send
// messages. Either way they compute the same values. The memory is bytes;
// data() views it as floats (the parameters and gradients), data_as<T>() as
// any element type.
class SharedArray {
 public:
  virtual ~SharedArray() = default;
  float* data() { return data_as<float>(); }
  const float* data() const { return data_as<float>(); }
  template <class T>
  T* data_as() {
    return reinterpret_cast<T*>(bytes_);
  }
  template <class T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes_);
  }
  std::byte* bytes() { return bytes_; }
  const std::byte* bytes() const { return bytes_; }
  int64_t size() const { return n_; }  // elements of dtype()
  DType dtype() const { return dtype_; }
  // Whether the group's ranks reach each other's arrays in place.
  virtual bool shared() const = 0;

 protected:
  std::byte* bytes_ = nullptr;
  int64_t n_ = 0;
  DType dtype_ = DType::kF32;
};

// A pending non-blocking collective. wait() is idempotent; destroying an
// unfinished request waits for it.
class Request {
 public:
  // What a backend's pending collective does; Request only forwards.
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;
    virtual bool pending() const = 0;
    virtual bool needs_polling() const = 0;
    // The wait of a destructor failed (a watchdog timeout): end the whole job.
    [[noreturn]] virtual void abort_job() noexcept = 0;
  };

  Request();  // a completed request
  explicit Request(std::unique_ptr<Impl> impl);
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  ~Request();
  // Blocks until the collective completes; throws (naming it, its group and
  // the seconds waited) after the group's timeout. The destructor and move
  // assignment wait too, but cannot throw: a timeout there prints the error and
  // aborts the job; while an exception unwinds they do not wait (the job is
  // failing, and the peer may be dead).
  void wait();
  // Lets the backend progress the collective (MPI moves it only inside MPI
  // calls) and returns true once it has completed.
  bool test();
  bool pending() const;
  // Whether it moves only when polled (an MPI request), not on a thread of its own.
  bool needs_polling() const;

 private:
  void wait_noexcept() noexcept;
  std::unique_ptr<Impl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& name() const { return name_; }  // "x", "y", "z", "d", "world", ...
  // How many ranks of this group share this rank's node (1 for a group of one).
  virtual int ranks_on_node() const = 0;

  // The ranks passing the same color form one new group, ordered by key (ties
  // by rank here), with this group's backend and settings. Collective.
  virtual std::unique_ptr<Communicator> split(int color, int key, std::string name) = 0;
  // A group of this rank alone with this group's transport (the process
  // grid's axes of extent 1). Local, not collective. The default is a
  // SelfCommunicator (host memory); a transport that moves device memory
  // returns one of its own that does.
  virtual std::unique_ptr<Communicator> group_of_one(std::string name);

  // In place, sum over the group: buf[n] (not kBF16).
  virtual void all_reduce(void* buf, int64_t n, DType t) = 0;
  virtual Request iall_reduce(void* buf, int64_t n, DType t) = 0;
  // out[size * n] = concatenation of every rank's in[n], in rank order.
  virtual void all_gather(const void* in, void* out, int64_t n, DType t) = 0;
  virtual Request iall_gather(const void* in, void* out, int64_t n, DType t) = 0;
  // out[n] = sum over ranks of in[rank * n .. (rank+1) * n); in holds size * n (not kBF16).
  virtual void reduce_scatter(const void* in, void* out, int64_t n, DType t) = 0;
  virtual Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) = 0;
  virtual void broadcast(void* buf, int64_t n, DType t, int root) = 0;
  virtual void barrier() = 0;

  // n elements of t per rank, shared over the group where its ranks share a
  // node (zero-filled). Collective: every rank calls it with the same n and t.
  virtual std::unique_ptr<SharedArray> allocate_shared(int64_t n, DType t = DType::kF32) = 0;
  // The collectives above on a SharedArray's range [offset, offset + n) (n per
  // rank, in elements of a.dtype()), counted as the same collectives.
  // Synchronisation: all_gather reads the peers' values without waiting, so
  // the caller fences writes with barrier(); reduce_scatter waits for every
  // rank to arrive (their values are then final) and the caller must not
  // overwrite its range before the group's next barrier (alternate two
  // ranges); all_reduce synchronises fully. The sums need a kF32 array.
  // out[size * n] = every rank's a[offset, offset + n), in rank order.
  virtual void all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) = 0;
  // out[n] (+)= sum over ranks r of a_r[offset + rank() * n, + n), summed in rank order.
  virtual void reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                              bool accumulate) = 0;
  // a[offset, offset + n) summed over the group, the same bits on every rank.
  virtual void all_reduce(SharedArray& a, int64_t offset, int64_t n) = 0;
  // The same three, non-blocking: the ranges must stay untouched until wait().
  // The MPI backend runs them on its progress engine's thread in the order
  // posted (comm/mpi/engine.h), so they overlap the caller's computation.
  virtual Request iall_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) = 0;
  virtual Request ireduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                                  bool accumulate) = 0;
  virtual Request iall_reduce(SharedArray& a, int64_t offset, int64_t n) = 0;

  // Makes now, collectively, what the group's device collectives need (NCCL:
  // its communicator and axis stream), instead of at the first of them, so
  // that no training step sets anything up (ProcessGrid::connect, when the
  // model is built). A transport with nothing to make ignores it.
  virtual void connect() {}
  // Accumulating reduce-scatters of at most n floats per rank will follow; a
  // transport that reduces them in scratch memory (NCCL) allocates it now.
  virtual void reserve_accumulating(int64_t n) { (void)n; }

  // Convenience for floats.
  void all_reduce(float* buf, int64_t n) { all_reduce(buf, n, DType::kF32); }
  void all_reduce(double* buf, int64_t n) { all_reduce(buf, n, DType::kF64); }

  // Virtual, with the timeout below, so that a transport over another
  // communicator (backend.h: Backend::transport) can forward them.
  virtual const CommStats& stats() const { return stats_; }
  virtual void reset_stats() { stats_ = CommStats{}; }

  // Watchdog: a blocking collective, or a wait on a non-blocking one, that has
  // not completed after this many seconds throws an error naming the
  // collective, the group and the time (a peer is stuck or dead; the caller's
  // error path then aborts the job). 0: wait forever.
  virtual void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

 protected:
  explicit Communicator(std::string name) : name_(std::move(name)) {}
  void count(Collective c, int64_t bytes) {
    stats_.bytes[static_cast<int>(c)] += bytes;
    stats_.calls[static_cast<int>(c)] += 1;
  }
  std::string name_;
  CommStats stats_;
  double timeout_s_ = 600;
};

// Throws, naming op, the group and the fix, unless t can be summed (not kBF16).
void check_summable(const char* op, const Communicator& c, DType t);

// This rank's index among the ranks of `world` on its host (by host name, in
// rank order; real nodes, whatever the simulated ones) and their number.
// Collective over world.
struct NodePlace {
  int rank = 0, ranks = 1;
};
NodePlace node_place(Communicator& world);

}  // namespace dendrite
