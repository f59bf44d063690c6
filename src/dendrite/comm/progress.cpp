// The progress engine thread and the shared-memory barrier (progress.h).
#include "dendrite/comm/progress.h"

#include <sched.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace dendrite {
namespace {

class Engine {
 public:
  Engine() : thread_([this] { run(); }) {}
  ~Engine() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  std::shared_ptr<TaskState> post(std::function<void()> fn) {
    auto state = std::make_shared<TaskState>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back(std::move(fn), state);
    }
    wake_.notify_one();
    return state;
  }

 private:
  void run() {
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
      try {
        task.first();
      } catch (...) {
        s.error = std::current_exception();
      }
      s.finish = steady_seconds();
      s.done.store(true, std::memory_order_release);
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<TaskState>>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<TaskState> post_task(std::function<void()> fn) {
  static Engine engine;  // a process resource, like the MPI library itself
  return engine.post(std::move(fn));
}

namespace {
std::atomic<unsigned> spin_rounds{2000};
}  // namespace

void set_oversubscribed(bool yes) { spin_rounds.store(yes ? 16 : 2000, std::memory_order_relaxed); }

void Backoff::pause() {
  ++rounds_;
  const unsigned spin = spin_rounds.load(std::memory_order_relaxed);
  if (rounds_ < spin) {
    __builtin_ia32_pause();
  } else if (rounds_ < spin + 100) {
    sched_yield();
  } else {
    const timespec nap{0, 20000};  // 20 us: the core goes to the GEMMs meanwhile
    nanosleep(&nap, nullptr);
  }
}

void shm_barrier(float* const* slots, int ranks, int me, int64_t& generation) {
  const int64_t next = ++generation;
  std::atomic_ref<int64_t>(*reinterpret_cast<int64_t*>(slots[me])).store(next,
                                                                         std::memory_order_release);
  for (int r = 0; r < ranks; ++r) {
    std::atomic_ref<int64_t> peer(*reinterpret_cast<int64_t*>(slots[r]));
    Backoff backoff;
    while (peer.load(std::memory_order_acquire) < next) backoff.pause();
  }
}

}  // namespace dendrite
