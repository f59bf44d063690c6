// `dendrite calibrate`: measure this machine under mpirun (GEMM rates by shape
// (m, n, k), memory bandwidth, FMA peak, collective latency and bandwidth, the
// wait for peers) and write a machine file (src/dendrite/plan/machine.h) that
// `plan` and `train --grid auto` read. The measuring and fitting are
// src/dendrite/calibrate/; this file holds the options and what the run adds
// (the device, the node, the notes, other files' figures).
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "dendrite/backend/backend.h"
#include "dendrite/calibrate/compute.h"
#include "dendrite/calibrate/links.h"
#include "dendrite/core/check.h"
#include "dendrite/plan/machine.h"

namespace dendrite::app {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct CalibrateCmd {
  std::string out, name = "this-machine", compute_from, links_from, device = "auto";
  int threads = 0;
  bool quick = false;
};

// The compute figures: measured on be, or with --compute-from that file's
// (and the rest of it, which the run then overwrites).
Machine compute_figures(const CalibrateCmd& o, Communicator& world, Backend& be) {
  Machine mach;
  if (o.compute_from.empty()) {
    calibrate_compute(world, be, o.quick, mach);
    return mach;
  }
  // --compute-from: that file's compute figures, this run's collectives and
  // waits (an oversubscribed node: compute slows by the model's ratio of
  // threads to cores, collectives and waits by more).
  DENDRITE_CHECK(be.device() == Device::kCpu,
                 "calibrate --compute-from is for CPU ranks sharing "
                 "cores; run it with --device cpu");
  mach = load_machine(o.compute_from);
  DENDRITE_CHECK(mach.threads_per_rank == omp_get_max_threads(), "calibrate --compute-from ",
                 o.compute_from, ": its compute was measured with ", mach.threads_per_rank,
                 " threads per rank; run with --threads ", mach.threads_per_rank);
  return mach;
}

// The machine file's "notes": how, with what and how long it was measured.
// mach.notes holds the --compute-from file's notes, if any.
std::string calibration_notes(const CalibrateCmd& o, const Machine& mach, const Backend& be, int P,
                              double seconds) {
  if (be.device() != Device::kCpu)
    return str("measured by `dendrite calibrate --device cuda` with ", P, " ranks on ",
               be.describe(), " in ", std::lround(seconds),
               " s; network = the node's transport (one node cannot measure it)");
  const std::string compute_note =
      o.compute_from.empty()
          ? ""
          : str("; compute figures from ", o.compute_from, " (", mach.notes, ")");
  return str("measured by `dendrite calibrate` with ", P, " ranks of ", mach.threads_per_rank,
             " threads in ", std::lround(seconds),
             " s; network = the node's MPI messages (one "
             "node)") +
         compute_note;
}

int run_calibrate(const CalibrateCmd& o, MpiEnv& env) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  auto t0 = Clock::now();
  // The machine file describes a node of the device's: its kernels, and its
  // collectives over the backend's transport (NCCL or staged on GPUs).
  std::unique_ptr<Backend> backend = make_rank_backend(o.device, env);
  Backend& be = *backend;
  const bool gpu = be.device() != Device::kCpu;
  ProcessGrid grid = make_grid(be.transport(env.world()), "");
  const int P = grid.shape().size();
  Machine mach = compute_figures(o, grid.world(), be);
  mach.name = o.name;
  mach.ranks_per_node = grid.world().ranks_on_node();
  mach.cores_per_node = int(sysconf(_SC_NPROCESSORS_ONLN));
  mach.has_shm = mach.has_messages = false;
  mach.node = mach.shm = mach.messages = LevelCost{};
  if (gpu) {
    calibrate_links(grid.world(), nullptr, be, mach, o.quick);
  } else {
    // The same ranks with shared memory off: the messages level.
    CommOptions off = env.options();
    off.shared_memory = false;
    std::unique_ptr<Communicator> messages = env.make_world(off);
    calibrate_links(grid.world(), messages.get(), be, mach, o.quick);
  }
  // Collectives and waits measured with this run's ranks already hold what an
  // oversubscribed node adds to each call.
  mach.oversubscribed_call_penalty_s = 0;
  // A GPU's compute does not share the node's cores: no oversubscription model.
  if (gpu) mach.cores_per_node = 0;
  mach.notes = calibration_notes(o, mach, be, P, seconds_since(t0));
  if (!o.links_from.empty()) take_links(mach, load_machine(o.links_from), o.links_from, P);
  if (grid.rank() == 0) {
    save_machine(mach, o.out);
    std::printf(
        "calibrate: peak %.1f GFLOP/s, bandwidth %.2f GB/s per rank, %zu GEMM shapes "
        "(%zu in bf16); wrote %s in %.1f s\n",
        mach.peak_gflops, mach.memory_bandwidth / 1e9, mach.gemm.size(), mach.gemm_bf16.size(),
        o.out.c_str(), seconds_since(t0));
  }
  return 0;
}

}  // namespace

Runner add_calibrate(CLI::App& app, MpiEnv& env) {
  auto o = std::make_shared<CalibrateCmd>();
  app.add_option("--out", o->out, "Machine file to write")->required();
  app.add_option("--name", o->name,
                 "The machine's name, kept in the file's \"name\" and printed by `plan` "
                 "beside its choice")
      ->capture_default_str();
  app.add_option("--threads", o->threads, "Threads per rank (default: OMP_NUM_THREADS)");
  app.add_flag("--quick", o->quick,
               "Fewer GEMM shapes and collective sizes, each timed a quarter as long (tests, a "
               "first look)");
  app.add_option("--device", o->device,
                 "cpu, cuda or auto (as train --device): the node described is one of this "
                 "device's, its GEMMs, memory bandwidth and collectives (NCCL on GPUs) measured")
      ->capture_default_str();
  app.add_option("--compute-from", o->compute_from,
                 "Keep this machine file's compute figures (GEMM rates, peak, memory, optimizer) "
                 "and measure only the collectives and the wait for peers with this run's ranks: "
                 "a node run with more ranks than cores, where the compute of a run with a core "
                 "per rank still holds")
      ->check(CLI::ExistingFile);
  app.add_option("--links-from", o->links_from,
                 "Machine file (e.g. machines/h200-node.json) giving what this run cannot "
                 "measure: the network, the node's ranks when this run has fewer (one GPU of "
                 "a node of 8) and, with one rank, the node's collectives")
      ->check(CLI::ExistingFile);
  return [o, &env] { return run_calibrate(*o, env); };
}

}  // namespace dendrite::app
