// The collective figures of a machine file (links.h): each kind timed at
// sizes from a layer's activations to a model's gradients as a training step
// meets it (right after a GEMM, timed from the group's last arrival), and a
// line fitted through the largest sizes.
#include "dendrite/calibrate/links.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "dendrite/calibrate/timing.h"
#include "dendrite/comm/grid.h"
#include "dendrite/core/check.h"

namespace dendrite {

namespace {

using calibration::after_arrival;
using calibration::Clock;
using calibration::mean_over;
using calibration::peer_wait;
using calibration::seconds_since;
using calibration::slowest_trial;

// Payload sizes (floats per call, as step_volume counts bytes) at which the
// collectives are timed: 256 B per rank up to 256 MB, as a step's calls range
// from a layer's activations to a whole model's gradients. The middle sizes
// matter: MPI changes algorithm with the size, so they do not lie on the line
// through the two ends.
std::vector<int64_t> collective_sizes(int g, bool quick) {
  std::vector<int64_t> n = {64 * g};
  for (int e = 10; e <= 26; e += 2) n.push_back(int64_t(1) << e);  // 4 KB to 256 MB, x4
  if (quick) n = {64 * g, int64_t(1) << 18};
  for (int64_t& v : n) v = std::max<int64_t>(g, v / g * g);
  return n;
}

// The points (bytes, seconds per call) of one kind over a group of g ranks,
// and latency and bandwidth of the line through the last two (the smallest
// call's time where that is below the line).
LinkCost fit_points(const std::vector<int64_t>& sizes, const std::vector<double>& t, int g,
                    const std::string& kind) {
  const double coef = (kind == "all_reduce" ? 2.0 : 1.0) * (g - 1.0) / g * 4.0;
  LinkCost c;
  c.group = g;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double b = 4.0 * double(sizes[i]);
    // Seconds never fall as bytes grow (timing noise on a busy node can say so).
    const double s = std::max(t[i], c.points.empty() ? 0.0 : c.points.back().second);
    c.points.push_back({b, std::max(s, 1e-9)});
  }
  const size_t k = sizes.size() - 1;
  c.bandwidth = coef * double(sizes[k] - sizes[k - 1]) /
                std::max(c.points[k].second - c.points[k - 1].second, 1e-9);
  c.latency = std::max(0.0, c.points[0].second - coef * double(sizes[0]) / c.bandwidth);
  return c;
}

// A collective as a training step meets it: right after a GEMM of the step's
// size (a GPT-2 linear of 256 rows, about a millisecond or two), timed from
// the moment the group's last rank arrived (the wait before it, the ranks'
// drift or a descheduled peer, is not the collective's: bench step reports it
// apart as peer_wait_ms). The call after a GEMM still costs more than in a
// tight loop (its buffers are out of cache, a waiting rank may have slept),
// so each size is timed both ways and the larger kept.
struct StepContext {
  Backend* be = nullptr;
  Buffer<float> A, B, C;
  static constexpr int m = 256, n = 768, k = 768;
  void gemm() {
    be->gemm(false, true, m, n, k, 1.0f, A.data(), k, B.data(), k, 0.0f, C.data(), n);
    be->ready_for_host();
  }
  // How long each size is timed: 1, or a quarter under --quick.
  double time_scale = 1.0;
  StepContext(Backend& backend, double scale)
      : be(&backend),
        A(backend.alloc<float>(m * k)),
        B(backend.alloc<float>(n * k)),
        C(backend.alloc<float>(m * n)),
        time_scale(scale) {
    be->fill(A.data(), 0.01f, A.size());
    be->fill(B.data(), 0.02f, B.size());
  }
  // Seconds of one call of fn (on comm) in a step: calls of 16 MB and more
  // take long enough for the loop to tell.
  template <typename Fn>
  double seconds(Communicator& world, Communicator& comm, Fn&& fn, int64_t bytes) {
    const double loop = after_arrival(
        world, comm, [] {}, fn, 0.2 * time_scale);
    if (bytes >= (int64_t(16) << 20)) return loop;
    return std::max(loop, after_arrival(
                              world, comm, [&] { gemm(); }, fn, 0.3 * time_scale));
  }
};

// Times one collective kind over comm (a group of g) at every size of
// collective_sizes, as a step meets it (StepContext): MPI messages (or the
// node's shared-memory channel for an all-reduce of private arrays, where the
// trainer uses it).
LinkCost calibrate_collective(Communicator& world, Communicator& comm, const std::string& kind,
                              bool quick, StepContext& step) {
  const int g = comm.size();
  const std::vector<int64_t> sizes = collective_sizes(g, quick);
  // In the backend's memory (a GPU's: NCCL moves it), as the step's are.
  Backend& be = *step.be;
  Buffer<float> in = be.alloc<float>(sizes.back()), out = be.alloc<float>(sizes.back());
  be.fill(in.data(), 1.0f, in.size());
  be.fill(out.data(), 0.0f, out.size());
  std::vector<double> t;
  for (int64_t n : sizes) {
    const int64_t part = n / g;
    // Successive calls move successive ranges of the buffers: a step's calls
    // move data it has not touched for a while (a layer's weights, another
    // layer's activations), not the same few megabytes from cache.
    const int64_t ranges = std::max<int64_t>(1, sizes.back() / n);
    int64_t call = 0;
    auto fn = [&] {
      const int64_t at = (call++ % ranges) * n;
      float *i = in.data() + at, *o = out.data() + at;
      if (kind == "all_reduce") comm.all_reduce(i, n, DType::kF32);
      if (kind == "all_gather") comm.all_gather(i, o, part, DType::kF32);
      if (kind == "reduce_scatter") comm.reduce_scatter(i, o, part, DType::kF32);
      be.ready_for_host();  // a transport on streams returns before the call is done
    };
    t.push_back(step.seconds(world, comm, fn, 4 * n));
  }
  return fit_points(sizes, t, g, kind);
}

// The same for the collectives over a SharedArray (shared_array.cpp) of a
// group inside one node: all-gather of n/g floats per rank, reduce-scatter of
// n per rank to n/g, all-reduce of n in place. Returns false (and writes
// nothing) when the group's array is not shared (DENDRITE_SHARED_MEMORY=0).
bool calibrate_shm_collective(Communicator& world, Communicator& comm, const std::string& kind,
                              bool quick, StepContext& step, LinkCost& c) {
  const int g = comm.size();
  const std::vector<int64_t> sizes = collective_sizes(g, quick);
  std::vector<double> t;
  for (int64_t n : sizes) {
    const int64_t part = n / g;
    // Successive ranges, as calibrate_collective's (the arrays about as large).
    const int64_t ranges = std::max<int64_t>(1, sizes.back() / n);
    const int64_t len = kind == "all_gather" ? part : n, out_len = kind == "all_gather" ? n : part;
    // Zero-filled: repeated sums stay finite.
    std::unique_ptr<SharedArray> a = comm.allocate_shared(len * ranges);
    comm.barrier();
    if (!a->shared()) return false;
    std::vector<float> out(out_len * ranges);
    int64_t call = 0;
    auto fn = [&] {
      const int64_t k = call++ % ranges, at = k * len;
      float* o = out.data() + k * out_len;
      if (kind == "all_reduce") comm.all_reduce(*a, at, n);
      if (kind == "all_gather") comm.all_gather(*a, at, o, part);
      if (kind == "reduce_scatter") comm.reduce_scatter(*a, at, o, part, false);
    };
    t.push_back(step.seconds(world, comm, fn, 4 * n));
    comm.barrier();
  }
  c = fit_points(sizes, t, g, kind);
  return true;
}

// The wait for peers (Machine::peer_wait_fraction) of groups of comm's size:
// every group at once runs GPT-2's GEMM, then a one-element all-reduce,
// `seconds` long; the calls' wait for the group's last rank (arrival stamps)
// over the time in GEMMs, averaged over the ranks (-1 where the communicator
// has no stamps: its ranks on several machines), and the seconds of one GEMM.
std::pair<double, double> calibrate_peer_wait(Communicator& world, Communicator& comm,
                                              StepContext& step, double seconds) {
  double one = 1.0;
  const double trial = slowest_trial(
      world, [&] { step.gemm(); }, false);
  const int reps = std::clamp(int(seconds / trial), 5, 10000);
  world.barrier();
  comm.reset_stats();
  double gemm = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    step.gemm();
    gemm += seconds_since(t0);
    comm.all_reduce(&one, 1, DType::kF64);
  }
  const double wait = peer_wait(comm);  // -1: no stamps (the same on every rank of the group)
  comm.reset_stats();
  const double f = mean_over(world, std::max(wait, 0.0) / std::max(gemm, 1e-9));
  return {wait < 0 ? -1 : f, mean_over(world, gemm / reps)};
}

void print_link(const char* level, const char* kind, int g, const LinkCost& c) {
  std::string pts;
  for (auto [b, t] : c.points)
    pts += str(" ",
               b >= 1048576 ? str(std::lround(b / 1048576), "M") : str(std::lround(b / 1024), "K"),
               ":", std::lround(t * 1e6));
  std::printf(
      "calibrate: %-8s %-14s g=%d  latency %.1f us, bandwidth %.2f GB/s; us per call at"
      "%s\n",
      level, kind, g, c.latency * 1e6, c.bandwidth / 1e9, pts.c_str());
}

// The grid of groups of g ranks along X over base (of P ranks), d = P / g.
ProcessGrid groups_of(Communicator& base, int g) {
  GridShape shape;
  shape.x = g;
  shape.d = base.size() / g;
  return ProcessGrid(shape, base);
}

}  // namespace

void calibrate_links(Communicator& world, Communicator* messages, Backend& be, Machine& mach,
                     bool quick) {
  const int P = world.size();
  const char* kinds[] = {"all_reduce", "all_gather", "reduce_scatter"};
  StepContext step(be, quick ? 0.25 : 1.0);
  mach.peer_wait_fraction.clear();
  for (int g = 2; g <= P; ++g) {  // the largest group within the node is kept
    if (P % g != 0 || g > mach.ranks_per_node) continue;
    ProcessGrid sub = groups_of(world, g);
    const auto [wait, interval] = calibrate_peer_wait(world, sub.X(), step, quick ? 0.2 : 1.5);
    if (wait >= 0) {
      mach.peer_wait_fraction[g] = wait;
      mach.peer_wait_interval_s = interval;
      if (world.rank() == 0)
        std::printf(
            "calibrate: groups of %d wait for their last rank %.1f%% of the compute "
            "(%.1f ms GEMMs between calls)\n",
            g, 100 * wait, interval * 1e3);
    }
    for (const char* kind : kinds) {
      LinkCost c = calibrate_collective(world, sub.X(), kind, quick, step);
      mach.node.by_kind[kind] = mach.node.by_group[g][kind] = c;
      if (world.rank() == 0) print_link("node", kind, g, c);
    }
    for (const char* kind : kinds) {  // the same over shared memory, where it is on
      LinkCost c;
      if (!calibrate_shm_collective(world, sub.X(), kind, quick, step, c)) continue;
      mach.shm.by_kind[kind] = mach.shm.by_group[g][kind] = c;
      mach.has_shm = true;
      if (world.rank() == 0) print_link("shm", kind, g, c);
    }
    if (!messages) continue;
    ProcessGrid msub = groups_of(*messages, g);
    for (const char* kind : kinds) {
      LinkCost c = calibrate_collective(*messages, msub.X(), kind, quick, step);
      mach.messages.by_kind[kind] = mach.messages.by_group[g][kind] = c;
      mach.has_messages = true;
      if (world.rank() == 0) print_link("messages", kind, g, c);
    }
  }
  // by_kind holds the largest group's figures; by_group the smaller ones.
  for (LevelCost* l : {&mach.node, &mach.shm, &mach.messages})
    if (!l->by_group.empty()) l->by_group.erase(std::prev(l->by_group.end()));
  if (mach.has_shm) mach.shm.all = mach.shm.get("all_reduce");
  if (mach.node.by_kind.empty()) mach.node.by_kind["all_reduce"] = {1e12, 0};  // one rank: free
  mach.node.all = mach.node.by_kind["all_reduce"];
  // One node cannot measure the network: its ranks' MPI messages stand in (what
  // simulated nodes use; a real network is slower).
  if (mach.has_messages) {
    mach.messages.all = mach.messages.get("all_reduce");
    mach.network = mach.messages;
  } else {
    mach.network = mach.node;
  }
}

void take_links(Machine& mach, const Machine& from, const std::string& path, int ranks) {
  std::string taken = "network";
  mach.network = from.network;
  if (from.ranks_per_node > mach.ranks_per_node) {
    mach.ranks_per_node = from.ranks_per_node;
    taken += str(", ", from.ranks_per_node, " ranks per node");
  }
  if (ranks == 1) {
    mach.node = from.node;
    mach.shm = from.shm;
    mach.has_shm = from.has_shm;
    mach.messages = from.messages;
    mach.has_messages = from.has_messages;
    taken += ", the node's collectives";
  }
  mach.notes += str("; from ", path, " (", from.name, "): ", taken);
}

}  // namespace dendrite
