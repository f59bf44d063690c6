// Internal to comm/: the progress engine, one background thread per process
// that runs the non-blocking collectives in the order they were posted, while
// the posting thread computes: over shared memory (loads, stores and a barrier
// between the ranks' engine threads, no MPI call) on a node, rings of MPI
// messages on a duplicate communicator across nodes. MpiEnv (and the tests'
// main) initialise MPI asking for MPI_THREAD_MULTIPLE; only where MPI provides
// it does a communicator give the engine message work (mpi_communicator.cpp).
// Elsewhere the collectives of a private array complete before returning and
// a non-blocking all-reduce of a buffer is a plain MPI request.
//
// Why a thread and not polling: MPI moves a non-blocking message collective
// only inside MPI calls, so overlap by polling needs progress calls sprinkled
// through the compute loops, and the GEMMs (oneDNN) cannot host them
// (measured: docs/overlap.md). Its tasks run one at a time, FIFO, on every
// rank in the same order, so the sums are the same whatever the timing. The
// thread sleeps when idle.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>

namespace dendrite {

struct TaskState {
  std::atomic<uint32_t> done{0};  // 1 once finished; a futex word the waiter sleeps on
  uint32_t waiters = 0;           // threads asleep on it (atomic_ref)
  double posted = 0, start = 0, finish = 0;  // seconds (steady clock): queued, ran
  std::exception_ptr error;
};

// Seconds on a steady clock: the engine's timestamps and the waits for its
// tasks do not call MPI_Wtime, as its shared-memory tasks make no MPI call and
// must not need MPI_THREAD_MULTIPLE.
double steady_seconds();

// Queues fn on the process's engine thread (started on first use).
std::shared_ptr<TaskState> post_task(std::function<void()> fn);

// Waiting without stealing the core for long (the engine's rings of messages
// between MPI_Testall calls): spin a few microseconds (a peer that is about to
// arrive), then yield, then sleep in 20 us naps, so a waiting thread leaves its
// core to the computing threads of its own and other ranks.
class Backoff {
 public:
  void pause();
  unsigned rounds() const { return rounds_; }

 private:
  unsigned rounds_ = 0;
};

// When the node runs more threads than it has cores, waiting threads spin only
// briefly: a spinning waiter would take the core from the rank it waits for.
void set_oversubscribed(bool yes);

// Blocks until `word` is no longer `seen` (or a spurious wake-up, or
// `seconds` pass; <= 0: no limit). shared: the word lies in memory mapped by
// several processes (a shared-memory window); else private to this process.
void futex_wait(uint32_t* word, uint32_t seen, double seconds, bool shared);
void futex_wake(uint32_t* word, bool shared);

// Waits until a task is done: a short spin, then sleeps on its futex word, so
// the waiter costs no CPU. Returns false if `seconds` (> 0) passed first.
bool wait_done(TaskState& t, double seconds);
// Marks a task done and wakes its waiter.
void mark_done(TaskState& t);

// Until every rank of a shared group has arrived: each rank bumps the
// generation word of its own 64-byte slot and waits for every peer's to reach
// it, spinning briefly and then sleeping on the peer's word (a futex in the
// shared window, woken by the peer's arrival: no polling, no naps). Each
// thread that synchronises a group has its own slots and generation (the
// calling thread and the engine thread never share them). Returns false if
// `seconds` (> 0) passed before every peer arrived; the caller reports it.
bool shm_barrier(float* const* slots, int ranks, int me, int64_t& generation, double seconds);

}  // namespace dendrite
