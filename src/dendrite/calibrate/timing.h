// How `dendrite calibrate` times a call on every rank at once (as in a
// training step): a warm-up and a trial that size the repetitions alike on
// every rank (collectives must match), batches started at a barrier with the
// fastest kept (a descheduled rank makes single batches slow, which is not
// the cost of the call), and the result averaged over the ranks.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "dendrite/comm/communicator.h"

namespace dendrite::calibration {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Mean over ranks of a per-rank measurement (every rank times the same work at
// once, as in a training step).
inline double mean_over(Communicator& world, double local) {
  world.all_reduce(&local, 1, DType::kF64);
  return local / world.size();
}

// One warm-up call, then one timed call (after a barrier when `barrier`): the
// slowest rank's seconds, the same on every rank, so that repetition counts
// derived from it are the same on every rank (collectives must match).
template <typename Fn>
double slowest_trial(Communicator& world, Fn&& fn, bool barrier) {
  fn();
  if (barrier) world.barrier();
  auto t1 = Clock::now();
  fn();
  double trial = seconds_since(t1);
  std::vector<double> all(world.size());
  world.all_gather(&trial, all.data(), 1, DType::kF64);
  return std::max(*std::max_element(all.begin(), all.end()), 1e-9);
}

// Seconds per call of fn: the slowest_trial above, then 5 batches of
// repetitions of about min_seconds/5 each (at least min_reps calls in all, at
// most 10^6 per batch), each batch started at a barrier, keeping the fastest
// batch: on a shared machine a descheduled rank makes single batches slow,
// which is not the cost of the call. Averaged over the ranks.
template <typename Fn>
double time_call(Communicator& world, Fn&& fn, double min_seconds, int min_reps) {
  const double trial = slowest_trial(world, fn, true);
  const int batches = 5;
  const int reps = std::max((min_reps + batches - 1) / batches,
                            int(std::min(1e6, min_seconds / batches / trial)));
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    world.barrier();
    auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) fn();
    best = std::min(best, seconds_since(t0) / reps);
  }
  return mean_over(world, best);
}

// The seconds a group's blocking calls spent waiting for their last rank to
// arrive, summed over the kinds (CommStats::peer_wait_seconds); -1 where the
// communicator does not measure it.
inline double peer_wait(const Communicator& comm) {
  const CommStats& s = comm.stats();
  if (!s.peer_wait_measured) return -1;
  double w = 0;
  for (double x : s.peer_wait_seconds) w += x;
  return w;
}

// Seconds per call of fn (collectives on comm) once comm's ranks have all
// arrived: each call timed on its own (after `before`, untimed, when given),
// less the time it waited for the group's last rank (arrival stamps; the
// whole call where they are not measured). The fastest of 5 batches of about
// min_seconds/5, averaged over the ranks.
template <typename Before, typename Fn>
double after_arrival(Communicator& world, Communicator& comm, Before&& before, Fn&& fn,
                     double min_seconds) {
  const double trial = slowest_trial(
      world,
      [&] {
        before();
        fn();
      },
      true);
  const int batches = 5;
  const int reps = std::max(2, int(std::min(1e6, min_seconds / batches / trial)));
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    world.barrier();
    comm.reset_stats();
    double calls = 0;
    for (int r = 0; r < reps; ++r) {
      before();
      auto t0 = Clock::now();
      fn();
      calls += seconds_since(t0);
    }
    const double wait = peer_wait(comm);
    best = std::min(best, (calls - std::max(wait, 0.0)) / reps);
  }
  comm.reset_stats();
  return mean_over(world, std::max(best, 1e-9));
}

}  // namespace dendrite::calibration
