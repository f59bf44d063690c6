// A timeline of what each rank did, step by step: its collectives (blocking
// calls, waits for posted ones, the progress engine's tasks) and the parts of
// its training steps, in the Trace Event format that chrome://tracing and
// Perfetto (ui.perfetto.dev) open. `train --trace FILE` and `bench step
// --trace FILE` record a few steps and write one file with every rank's
// events (a process per rank, a lane per thread).
//
// Off, recording costs one relaxed atomic load per collective. On, a span is
// appended under a mutex (a few hundred per step).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace dendrite::trace {

// The thread a span ran on: the rank's own (the one that calls the
// collectives and runs the steps) or its progress engine's.
// The device's work (bench step --profile: core/device_profile.h) is a third.
enum class Lane { kRank = 0, kEngine = 1, kDevice = 2 };

struct Span {
  const char* category;  // "step", "collective", "wait", "engine"
  std::string name;
  double begin, end;  // seconds on now()'s clock
  Lane lane;
  int64_t bytes;        // a collective's payload; -1: none
  double peer_wait_ms;  // a blocking collective's wait for its group's last rank; -1: not measured
  double queued_ms;     // an engine task's time in the queue; -1: none
};

// Seconds on the monotonic clock every span uses (the same for every process
// of a machine).
double now();

namespace detail {
extern std::atomic<bool> recording;
}
// Whether spans are being recorded (between start() and stop()).
inline bool on() { return detail::recording.load(std::memory_order_relaxed); }

// Clears the spans and records from now on; `zero` (now()'s clock) is the
// timeline's origin: the callers take it right after a barrier, so that the
// ranks' timelines line up.
void start(double zero);
void stop();
// Records a span (ignored unless on()).
void add(Span s);
// The spans recorded, in the order added.
std::vector<Span> spans();
double zero();

// One rank's spans as Trace Event objects, comma-separated (no brackets):
// complete events ("ph": "X") with pid = rank, tid = lane, microseconds from
// zero(); then the process and lane names. `process` names the rank's process
// ("rank 3 x=1 y=1 z=1 d=0").
std::string events_json(int rank, const std::string& process);

// A whole trace file from the ranks' events_json() pieces.
std::string file_json(const std::vector<std::string>& pieces);

// RAII: a span on the rank's lane from construction to destruction (when on()).
class Scope {
 public:
  Scope(const char* category, std::string name);
  // "layer 3 forward": the name is made only when recording.
  Scope(const char* category, int layer, const char* what);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* category_;
  std::string name_;
  double begin_ = -1;
};

}  // namespace dendrite::trace
