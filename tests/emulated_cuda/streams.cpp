// The CUDA emulator's streams and events (emulator.h, cuda_runtime.h): each
// stream a queue of work, run at once on the calling thread or by a thread
// of its own (set_streams), and events that mark a point of a queue.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "counters.h"
#include "cuda_runtime.h"
#include "emulated_backend.h"
#include "emulator.h"
#include "emulator_internal.h"
#include "race_check.h"

namespace emu {

namespace {
// One piece of a stream's work: what it runs, and what orders it (Ticket).
struct Work {
  std::function<void()> run;
  std::shared_ptr<Ticket::Sync> sync;
};
}  // namespace

// A stream's work, in order. A concurrent stream has a worker thread; the
// work of the others runs on the thread that enqueues it. Under the race
// check its lock, StreamState::mu, orders nothing (race_check.h): each
// piece of work's Ticket does.
struct Queue {
  std::deque<Work> work;
  uint64_t submitted = 0, finished = 0;  // pieces of work
  Ticket last;                           // of the latest piece enqueued
  bool collectives = false;              // it has carried a collective
  bool stop = false;
  std::thread worker;
};

namespace {

using Clock = std::chrono::steady_clock;

struct StreamState {
  std::mutex mu;                    // guards every queue and event
  std::condition_variable changed;  // work enqueued or finished
  bool mode_set = false;
  Streams mode = Streams::kAtOnce;
  std::set<std::shared_ptr<Queue>> live;  // the concurrent queues
  std::shared_ptr<Queue> default_queue = std::make_shared<Queue>();
};
StreamState& streams() {
  static StreamState& s = *new StreamState;  // never destroyed, as sched()
  return s;
}

// Called with the lock held.
Streams mode_locked() {
  StreamState& st = streams();
  if (!st.mode_set) {
    st.mode_set = true;
    const char* v = std::getenv("DENDRITE_EMULATED_STREAMS");
    const std::string m = v ? v : "";
    if (m.empty() || m == "at-once")
      st.mode = Streams::kAtOnce;
    else if (m == "concurrent")
      st.mode = Streams::kConcurrent;
    else if (m == "collectives-late")
      st.mode = Streams::kCollectivesLate;
    else if (m == "compute-late")
      st.mode = Streams::kComputeLate;
    else {
      std::fprintf(stderr,
                   "cuda emulator: DENDRITE_EMULATED_STREAMS=%s is not one of at-once, "
                   "concurrent, collectives-late, compute-late\n",
                   m.c_str());
      std::abort();
    }
  }
  return st.mode;
}

// How long a concurrent stream sleeps before each piece of work.
Clock::duration lateness(const Queue& q, Streams m) {
  if (m == Streams::kCollectivesLate && q.collectives) return std::chrono::microseconds(1000);
  if (m == Streams::kComputeLate && !q.collectives) return std::chrono::microseconds(200);
  return Clock::duration::zero();
}

void work_loop(Queue* q) {
  t_stream_worker = true;
  StreamState& st = streams();
  for (;;) {
    Work w;
    Clock::duration late;
    {
      race::QuietLock<std::mutex> lock(st.mu);
      st.changed.wait(lock.held, [&] { return q->stop || !q->work.empty(); });
      if (q->work.empty()) return;
      w = std::move(q->work.front());
      q->work.pop_front();
      late = lateness(*q, st.mode);
    }
    if (late > Clock::duration::zero()) std::this_thread::sleep_for(late);
    race::acquire(&w.sync->before);
    w.run();
    race::release(&w.sync->after);
    {
      // What it holds is released before the work counts as done, quietly:
      // the counts of the pointers it shares with the host (a ticket, an
      // event's time stamp) order nothing, and what it alone holds (a
      // launch's arguments) is freed unseen.
      const race::Quiet quiet;
      w = Work{};
    }
    race::QuietLock<std::mutex> lock(st.mu);
    ++q->finished;
    st.changed.notify_all();
  }
}

std::shared_ptr<Queue> make_queue() {
  StreamState& st = streams();
  auto q = std::make_shared<Queue>();
  const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
  const bool launches_block = blocking && std::string(blocking) == "1";
  bool concurrent;
  {
    race::QuietLock<std::mutex> lock(st.mu);
    concurrent = mode_locked() != Streams::kAtOnce && !launches_block;
  }
  if (!concurrent) return q;
  // Made outside the lock: what the host did before it comes before the
  // stream's work, as its first piece's Ticket would say.
  q->worker = std::thread(work_loop, q.get());
  race::QuietLock<std::mutex> lock(st.mu);
  st.live.insert(q);
  return q;
}

}  // namespace

// Enqueues work on q; returns its ticket (q has run it once finished reaches it).
Ticket enqueue(const std::shared_ptr<Queue>& q, std::function<void()> work) {
  StreamState& st = streams();
  Ticket t;
  t.sync = std::make_shared<Ticket::Sync>();
  if (!q->worker.joinable()) {  // at once
    {
      race::QuietLock<std::mutex> lock(st.mu);
      t.n = ++q->submitted;
      q->last = t;
    }
    work();
    race::release(&t.sync->after);
    race::QuietLock<std::mutex> lock(st.mu);
    ++q->finished;
    st.changed.notify_all();
    return t;
  }
  race::release(&t.sync->before);
  race::QuietLock<std::mutex> lock(st.mu);
  q->work.push_back(Work{std::move(work), t.sync});
  t.n = ++q->submitted;
  q->last = t;
  st.changed.notify_all();
  return t;
}

void wait_for(const Queue& q, const Ticket& t) {
  if (t.n == 0) return;  // no work
  StreamState& st = streams();
  {
    race::QuietLock<std::mutex> lock(st.mu);
    st.changed.wait(lock.held, [&] { return q.finished >= t.n; });
  }
  race::acquire(&t.sync->after);
}

namespace {
void drain(const Queue& q) {
  Ticket last;
  {
    race::QuietLock<std::mutex> lock(streams().mu);
    last = q.last;
  }
  wait_for(q, last);
}
}  // namespace

// Every stream's work enqueued so far has run (what cudaFree waits for).
void drain_all() {
  std::vector<std::pair<std::shared_ptr<Queue>, Ticket>> all;
  {
    race::QuietLock<std::mutex> lock(streams().mu);
    for (const auto& q : streams().live) all.emplace_back(q, q->last);
  }
  for (const auto& [q, last] : all) wait_for(*q, last);
}

void set_streams(Streams m) {
  race::QuietLock<std::mutex> lock(streams().mu);
  streams().mode = m;
  streams().mode_set = true;
}

}  // namespace emu

struct EmulatedStream {
  std::shared_ptr<emu::Queue> q;
};
struct EmulatedEvent {
  std::shared_ptr<emu::Queue> q;  // of the latest record (none: never recorded)
  emu::Ticket ticket;             // the record's work on q
  std::shared_ptr<std::chrono::steady_clock::time_point> at =
      std::make_shared<std::chrono::steady_clock::time_point>();
};

namespace emu {

const std::shared_ptr<Queue>& queue_of(EmulatedStream* s) {
  return s ? s->q : streams().default_queue;
}
namespace {
// Whether e's latest record has run (one never recorded has); if so, the
// work before it comes before what the caller does next.
bool done(const EmulatedEvent& e) {
  Ticket t;
  {
    race::QuietLock<std::mutex> lock(streams().mu);
    if (e.q && e.q->finished < e.ticket.n) return false;
    t = e.ticket;
  }
  if (t.n > 0) race::acquire(&t.sync->after);
  return true;
}
}  // namespace

void submit(EmulatedStream* s, std::function<void()> work) {
  enqueue(queue_of(s), std::move(work));
}

void carries_collectives(EmulatedStream* s) {
  race::QuietLock<std::mutex> lock(streams().mu);
  queue_of(s)->collectives = true;
}

}  // namespace emu

namespace {

// What a synchronisation returns: a stream's failure, else the thread's last error.
cudaError_t synchronised() {
  const cudaError_t sticky = emu::sticky_error();
  return sticky != cudaSuccess ? sticky : cudaGetLastError();
}

}  // namespace

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new EmulatedStream{emu::make_queue()};
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cudaSuccess;
  emu::drain(*s->q);
  if (s->q->worker.joinable()) {
    emu::StreamState& st = emu::streams();
    {
      emu::race::QuietLock<std::mutex> lock(st.mu);
      s->q->stop = true;
      st.changed.notify_all();
    }
    s->q->worker.join();
    emu::race::QuietLock<std::mutex> lock(st.mu);
    st.live.erase(s->q);
  }
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  emu::counters::sync("cudaStreamSynchronize");
  emu::drain(*emu::queue_of(s));
  return synchronised();
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new EmulatedEvent{};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  // A record still queued keeps its time stamp alive. Quietly: where the
  // record has run, the host freeing the time stamp it wrote is no race.
  const emu::race::Quiet quiet;
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  const auto& q = emu::queue_of(s);
  auto at = e->at;
  emu::Ticket ticket = emu::enqueue(q, [at] { *at = std::chrono::steady_clock::now(); });
  emu::race::QuietLock<std::mutex> lock(emu::streams().mu);
  e->q = q;
  e->ticket = std::move(ticket);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  emu::counters::sync("cudaEventSynchronize");
  std::shared_ptr<emu::Queue> q;
  emu::Ticket ticket;
  {
    emu::race::QuietLock<std::mutex> lock(emu::streams().mu);
    q = e->q, ticket = e->ticket;
  }
  if (q) emu::wait_for(*q, ticket);
  return synchronised();
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  const cudaError_t sticky = emu::sticky_error();
  if (sticky != cudaSuccess) return sticky;
  return emu::done(*e) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  std::shared_ptr<emu::Queue> q;
  emu::Ticket ticket;
  {
    emu::race::QuietLock<std::mutex> lock(emu::streams().mu);
    q = e->q, ticket = e->ticket;
  }
  if (q) emu::submit(s, [q, ticket] { emu::wait_for(*q, ticket); });
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!emu::done(*start) || !emu::done(*end)) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(*end->at - *start->at).count();
  return cudaSuccess;
}
