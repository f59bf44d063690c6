// The machine description of the performance model (DESIGN.md section 6): what
// one rank computes per second (GEMM rate by shape, FMA peak, memory
// bandwidth), how much memory it holds, and what collectives cost inside a
// node and across nodes. Stored as a JSON file that `dendrite calibrate`
// writes for the machine it runs on; machines/*.json hold public figures.
// GEMM shapes are (m, n, k) of C[m, n] = A[m, k] * B[k, n]: 2*m*n*k flops.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dendrite/core/precision.h"

namespace dendrite {

struct GemmRate {
  int64_t m = 0, n = 0, k = 0;
  double gflops = 0;  // measured GFLOP/s of one rank at this shape
};

// Cost of one collective call over a group of g ranks. Without measured
// points: the ring cost latency + f (g-1)/g * bytes / bandwidth (f = 2 for an
// all-reduce, which moves its bytes twice). With points (calibrate measures
// several message sizes; the middle sizes do not lie on the line through the
// smallest and the largest): the measured seconds per call interpolated
// linearly in bytes between them, extended beyond the largest by its
// bandwidth, for a group of `group` ranks; another group size g looks up the
// bytes that put as much data on each link, bytes * ((g-1)/g) / ((group-1)/group).
struct LinkCost {
  LinkCost() = default;
  LinkCost(double bandwidth_, double latency_) : bandwidth(bandwidth_), latency(latency_) {}
  double bandwidth = 0;  // bytes/s
  double latency = 0;    // s per call
  std::vector<std::pair<double, double>> points;  // (bytes per call, seconds), ascending
  int group = 0;                                  // ranks the points were measured over
  // Seconds of one call moving `bytes` (as step_volume counts them) over g ranks;
  // f = 2 for an all-reduce, 1 otherwise.
  double seconds(double bytes, int g, double f) const;
};

// One level of the machine ("node": ranks sharing a node, as the trainer runs
// its collectives there; "messages": the same ranks over MPI messages only
// (shared memory off, or a simulated node boundary); "network": across
// nodes); per-kind figures ("all_reduce", "all_gather", "reduce_scatter")
// override the level's default where given.
// by_group: figures measured over groups of other sizes (calibrate keeps every
// size it forms; by_kind holds the largest): a group of g ranks uses its own
// size's where measured, else by_kind's scaled by bytes per link.
struct LevelCost {
  LinkCost all;
  std::map<std::string, LinkCost> by_kind;
  std::map<int, std::map<std::string, LinkCost>> by_group;
  const LinkCost& get(const std::string& kind) const;
  const LinkCost& get(const std::string& kind, int g) const;
};

struct Machine {
  std::string name;
  std::string notes;            // where the figures come from
  int ranks_per_node = 1;
  int threads_per_rank = 1;
  int cores_per_node = 0;       // 0: no oversubscription model (one core per thread)
  // > 0: jobs that simulate nodes of this many ranks on the machine's nodes
  // (DENDRITE_RANKS_PER_NODE, plan --simulate-nodes): groups that cross those
  // bounds use the network figures, while oversubscription still counts every
  // rank of the physical node (ranks_per_node).
  int simulated_ranks_per_node = 0;
  // When the node's ranks need more threads than it has cores, each collective
  // call waits this long on top of its ring cost (a descheduled peer gets the
  // core back after about one scheduler slice): the generic node's estimate.
  // `calibrate` writes 0: it measures the collectives with the run's own ranks
  // (calibrate --compute-from for an oversubscribed node), which includes it.
  double oversubscribed_call_penalty_s = 0;
  // The wait for peers: over a step, the blocking collectives of a group of g
  // ranks wait for the group's last rank this fraction of the compute between them
  // (the ranks drift apart while they compute: noise, and on an oversubscribed
  // node their turns on the cores). Keyed by group size; a group looks up the
  // largest size measured not above its own (the smallest otherwise). Empty
  // (files of published figures): no wait. `calibrate` measures it.
  std::map<int, double> peer_wait_fraction;
  // The compute between calls the fraction was measured over (s; 0: none). A
  // group whose calls lie further apart waits as if they were this far apart:
  // over longer spans the scheduler shares the cores fairly, so the drift does
  // not keep growing (oversubscribed D groups, two calls a step, wait ~1 ms).
  double peer_wait_interval_s = 0;
  double memory_per_rank_bytes = 0;
  // Each rank drives a GPU whose memory is memory_per_rank_bytes (the LM
  // head's chunks are then sized from it, parallel/head_chunk.h), rather than
  // a share of a CPU node's.
  bool gpu = false;
  double peak_gflops = 0;       // per rank
  double memory_bandwidth = 0;  // bytes/s per rank
  // Seconds per local parameter of the optimizer step (gradient zeroing, norm
  // and AdamW) as measured; 0: 36 bytes per parameter over memory_bandwidth.
  double optimizer_seconds_per_param = 0;
  std::vector<GemmRate> gemm;   // empty: GEMMs run at peak_gflops * gemm_efficiency
  // The same for bf16 operands (--precision bf16); empty: the fp32 rates
  // (a machine file without them predicts bf16 no faster than fp32).
  std::vector<GemmRate> gemm_bf16;
  double gemm_efficiency = 1.0; // used only when the table is empty
  LevelCost node, network;
  // Collectives over MPI-3 shared memory (Communicator::allocate_shared): the
  // trainer's Z all-gather and reduce-scatter and its D all-reduce when the
  // group is inside one node. has_shm false (older files, or calibrate without
  // shared windows): those fall back to the node's message figures.
  LevelCost shm;
  bool has_shm = false;
  // Collectives of a group inside one node as MPI messages (what the trainer
  // does with DENDRITE_SHARED_MEMORY=0); has_messages false (older files,
  // machines/*.json): the node's figures.
  LevelCost messages;
  bool has_messages = false;

  // Ranks per node as the job's groups see them: the simulated node where set.
  int node_span() const;
  // GFLOP/s of one rank for a GEMM of this shape: the measured shape nearest in
  // log distance (sum over m, n, k of log(a/b)^2), scaled down linearly in m
  // (or n, k) when the asked size is below every measured one (fixed
  // per-call overheads dominate small products).
  double gemm_gflops(int64_t m, int64_t n, int64_t k, Precision p = Precision::kF32) const;
  // The cost of a collective over a group of g ranks at stride s (ranks
  // r, r+s, ..., r+(g-1)s): inside one node when s*g <= ranks_per_node.
  const LinkCost& link(const std::string& kind, int stride, int g) const;
  // As link(), but a group inside one node moves its data through shared
  // memory when shared is true and the machine has shm figures, and over
  // MPI messages (the messages level, where measured) when shared_memory is
  // false (the trainer's DENDRITE_SHARED_MEMORY=0).
  const LinkCost& link(const std::string& kind, int stride, int g, bool shared,
                       bool shared_memory = true) const;
  // Whether such a group runs its collective over shared memory.
  bool uses_shm(int stride, int g, bool shared) const;
  // peer_wait_fraction for a group of g ranks (0 when none is measured).
  double peer_wait(int g) const;
  // Compute slowdown when the node's ranks need more threads than it has cores.
  double oversubscription() const;
  // Throws dendrite::Error naming the field and the fix.
  void validate() const;
};

// A generic description of one node when no machine file is given (train
// --grid auto): the cores, memory and ranks the process sees, nominal rates
// (peak 8 GFLOP/s per thread and GEMMs at half of it, 5 GB/s memory bandwidth
// per rank, shared-memory collectives at 2 GB/s and 20 us, a 5 ms penalty per
// call when oversubscribed). Good enough to rank grids, not to predict times.
Machine generic_machine(int ranks_per_node, int threads_per_rank, int cores_per_node,
                        double memory_bytes);

Machine machine_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Machine& m);
Machine load_machine(const std::string& path);
void save_machine(const Machine& m, const std::string& path);

}  // namespace dendrite
