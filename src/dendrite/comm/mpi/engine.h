// Internal to comm/mpi/: the progress engine, one background thread made once
// per process with the world communicator and shared by every communicator
// split from it (MpiCommunicator holds it). It runs the non-blocking
// collectives in the order they were posted while the posting thread
// computes: over shared memory (loads, stores and a barrier between the
// ranks' engine threads, no MPI call) on a node; across nodes, rings of MPI
// messages on a duplicate communicator, where MPI granted MPI_THREAD_MULTIPLE
// (MpiEnv asks for it; without it those collectives complete when posted).
//
// Why a thread and not polling: MPI moves a non-blocking message collective
// only inside MPI calls, so overlap by polling needs progress calls sprinkled
// through the compute loops, and the GEMMs (oneDNN) cannot host them
// (measured: docs/overlap.md). Its tasks run one at a time, FIFO, on every
// rank in the same order, so the sums are the same whatever the timing. The
// thread sleeps when idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace dendrite {

struct TaskState {
  std::atomic<uint32_t> done{0};  // 1 once finished; a futex word the waiter sleeps on
  uint32_t waiters = 0;           // threads asleep on it (atomic_ref)
  double posted = 0, start = 0, finish = 0;  // seconds (steady clock): queued, ran
  double cpu = 0;  // CPU seconds of the engine thread while it ran the task
  std::exception_ptr error;
};

// Seconds on a steady clock (the engine does not call MPI_Wtime: MPI is not
// initialised for threads).
double steady_seconds();
// CPU seconds used by the calling thread.
double thread_cpu_seconds();

// The engine thread and its FIFO of tasks; the destructor finishes the queue
// and joins the thread.
class ProgressEngine {
 public:
  ProgressEngine();
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;
  // Queues fn; the returned state is marked done once it has run.
  std::shared_ptr<TaskState> post(std::function<void()> fn);

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<TaskState>>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

// The pause instructions a waiter spins before it yields and sleeps
// (SpinPolicy, comm/options.h; kAuto resolved by the world that made the
// communicators).
constexpr unsigned kLongSpin = 2000, kShortSpin = 16;

// Waiting without stealing the core for long: spin `spin` rounds (a peer that
// is about to arrive), then yield, then sleep in 20 us naps, so a waiting
// thread leaves its core to the computing threads of its own and other ranks.
class Backoff {
 public:
  explicit Backoff(unsigned spin) : spin_(spin) {}
  void pause();
  unsigned rounds() const { return rounds_; }

 private:
  unsigned spin_;
  unsigned rounds_ = 0;
};

// Blocks until `word` is no longer `seen` (or a spurious wake-up, or
// `seconds` pass; <= 0: no limit). shared: the word lies in memory mapped by
// several processes (a shared-memory window); else private to this process.
void futex_wait(uint32_t* word, uint32_t seen, double seconds, bool shared);
void futex_wake(uint32_t* word, bool shared);

// Waits until a task is done: a short spin, then sleeps on its futex word, so
// the waiter costs no CPU. Returns false if `seconds` (> 0) passed first.
bool wait_done(TaskState& t, double seconds, unsigned spin);
// Marks a task done and wakes its waiter.
void mark_done(TaskState& t);

// Until every rank of a shared group has arrived: each rank bumps the
// generation word of its own 64-byte slot and waits for every peer's to reach
// it, spinning briefly and then sleeping on the peer's word (a futex in the
// shared window, woken by the peer's arrival: no polling, no naps). Each
// thread that synchronises a group has its own slots and generation (the
// calling thread and the engine thread never share them). Returns false if
// `seconds` (> 0) passed before every peer arrived; the caller reports it.
bool shm_barrier(std::byte* const* slots, int ranks, int me, int64_t& generation, double seconds,
                 unsigned spin);

}  // namespace dendrite
