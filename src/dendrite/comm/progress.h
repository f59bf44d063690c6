// Internal to comm/: the progress engine, one background thread per process
// that runs the non-blocking collectives over shared memory (SharedArray) in
// the order they were posted, while the posting thread computes.
//
// Why a thread and not polling: MPI moves a non-blocking message collective
// only inside MPI calls, so overlap by polling needs progress calls sprinkled
// through the compute loops, and the GEMMs (oneDNN) cannot host them. A
// collective over shared memory is plain loads and stores plus a barrier
// between the ranks' engine threads, so a thread that owns it needs no MPI
// call at all (MPI stays single-threaded) and moves it while the GEMMs run.
// Its tasks run one at a time, FIFO, on every rank in the same order, so the
// sums are the same whatever the timing. The thread sleeps when idle.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>

namespace dendrite {

struct TaskState {
  std::atomic<bool> done{false};
  double start = 0, finish = 0;  // seconds (steady clock) the task ran
  std::exception_ptr error;
};

// Seconds on a steady clock (the engine does not call MPI_Wtime: MPI is not
// initialised for threads).
double steady_seconds();

// Queues fn on the process's engine thread (started on first use).
std::shared_ptr<TaskState> post_task(std::function<void()> fn);

// Waiting without stealing the core for long: spin a few microseconds (a peer
// that is about to arrive), then yield, then sleep in 20 us naps, so a waiting
// thread leaves its core to the computing threads of its own and other ranks.
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

// Spins (then yields, then naps) until every rank of a shared group has arrived: each
// rank bumps its own 64-byte slot to the next generation and waits for every
// peer's slot to reach it. Called by the engine thread only.
void shm_barrier(float* const* slots, int ranks, int me, int64_t& generation);

}  // namespace dendrite
