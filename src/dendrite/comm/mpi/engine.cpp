// The progress engine thread and the shared-memory barrier (engine.h).
#include "dendrite/comm/mpi/engine.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

#include <algorithm>
#include <atomic>
#include <chrono>

namespace dendrite {

ProgressEngine::ProgressEngine() : thread_([this] { run(); }) {}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

std::shared_ptr<TaskState> ProgressEngine::post(std::function<void()> fn) {
  auto state = std::make_shared<TaskState>();
  state->posted = steady_seconds();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(fn), state);
  }
  wake_.notify_one();
  return state;
}

void ProgressEngine::run() {
  for (;;) {
    std::pair<std::function<void()>, std::shared_ptr<TaskState>> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    TaskState& s = *task.second;
    s.start = steady_seconds();
    const double cpu0 = thread_cpu_seconds();
    try {
      task.first();
    } catch (...) {
      s.error = std::current_exception();
    }
    s.cpu = thread_cpu_seconds() - cpu0;
    s.finish = steady_seconds();
    mark_done(s);
  }
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Backoff::pause() {
  ++rounds_;
  const unsigned spin = spin_;
  if (rounds_ < spin) {
    __builtin_ia32_pause();
  } else if (rounds_ < spin + 100) {
    sched_yield();
  } else {
    const timespec nap{0, 20000};  // 20 us: the core goes to the GEMMs meanwhile
    nanosleep(&nap, nullptr);
  }
}

void futex_wait(uint32_t* word, uint32_t seen, double seconds, bool shared) {
  timespec limit{};
  if (seconds > 0) {
    limit.tv_sec = time_t(seconds);
    limit.tv_nsec = long((seconds - double(limit.tv_sec)) * 1e9);
  }
  syscall(SYS_futex, word, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, seen,
          seconds > 0 ? &limit : nullptr, nullptr, 0);
}

void futex_wake(uint32_t* word, bool shared) {
  syscall(SYS_futex, word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

namespace {

// Waits until reached() holds: a short spin, then sleeps on `word` (announced
// in `waiters`, so the writer knows to wake it). The writer stores the word and
// then reads waiters, the waiter bumps waiters and then reads the word, both
// sequentially consistent: one of them sees the other, so no wake-up is lost.
template <class Reached>
bool sleep_until(Reached reached, uint32_t* word, uint32_t* waiters, double seconds, bool shared,
                 unsigned spin) {
  for (unsigned i = 0; i < spin; ++i) {
    if (reached()) return true;
    __builtin_ia32_pause();
  }
  const double start = seconds > 0 ? steady_seconds() : 0;
  std::atomic_ref<uint32_t> w(*word), n(*waiters);
  for (;;) {
    n.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = w.load(std::memory_order_seq_cst);
    if (!reached()) futex_wait(word, seen, seconds > 0 ? std::min(seconds, 0.05) : 0, shared);
    n.fetch_sub(1, std::memory_order_seq_cst);
    if (reached()) return true;
    if (seconds > 0 && steady_seconds() - start >= seconds) return false;
  }
}

// A 64-byte barrier slot: the generation word, then its sleepers' count.
uint32_t* slot_words(std::byte* slot) { return reinterpret_cast<uint32_t*>(slot); }

}  // namespace

bool wait_done(TaskState& t, double seconds, unsigned spin) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  // The waiter count lives beside the word in the task; only one thread waits.
  auto* word = reinterpret_cast<uint32_t*>(&t.done);
  return sleep_until([&] { return t.done.load(std::memory_order_acquire) != 0; }, word,
                     &t.waiters, seconds, false, spin);
}

void mark_done(TaskState& t) {
  t.done.store(1, std::memory_order_seq_cst);
  if (std::atomic_ref<uint32_t>(t.waiters).load(std::memory_order_seq_cst) != 0)
    futex_wake(reinterpret_cast<uint32_t*>(&t.done), false);
}

bool shm_barrier(std::byte* const* slots, int ranks, int me, int64_t& generation, double seconds,
                 unsigned spin) {
  const uint32_t next = uint32_t(++generation);
  uint32_t* mine = slot_words(slots[me]);
  std::atomic_ref<uint32_t>(mine[0]).store(next, std::memory_order_seq_cst);
  if (std::atomic_ref<uint32_t>(mine[1]).load(std::memory_order_seq_cst) != 0)
    futex_wake(&mine[0], true);
  const double start = seconds > 0 ? steady_seconds() : 0;
  for (int r = 0; r < ranks; ++r) {
    if (r == me) continue;
    uint32_t* peer = slot_words(slots[r]);
    // Generations wrap after 2^32 barriers: compare by signed difference.
    auto reached = [&] {
      return int32_t(std::atomic_ref<uint32_t>(peer[0]).load(std::memory_order_acquire) - next) >= 0;
    };
    const double left = seconds > 0 ? seconds - (steady_seconds() - start) : 0;
    if (seconds > 0 && left <= 0 && !reached()) return false;
    if (!sleep_until(reached, &peer[0], &peer[1], left, true, spin)) return false;
  }
  return true;
}

}  // namespace dendrite
