// The NCCL transport of DESIGN.md section 10: a Communicator whose
// collectives on device memory run on NVIDIA's NCCL, on a CUDA stream of the
// communicator's own (one per grid axis), ordered against the backend's
// compute stream by events:
//   - a blocking collective: the axis stream waits for the work the compute
//     stream has issued, runs the NCCL call, and the compute stream waits for
//     it; the host does not block (the values are final for every op the
//     compute stream runs next, and for a download);
//   - a posted one (OAR, ORS, OAG, the D buckets) returns a Request whose
//     wait() makes the compute stream wait for it (an event wait): the
//     compute stream runs on meanwhile, and so does the host.
// Every rank posts in the same order (SPMD), so each axis' NCCL communicator
// meets its peers in the same order. Host buffers (losses, norms, the
// trainer's control data) go to the MPI communicator inside, which also
// broadcasts the NCCL unique id that makes the NCCL communicator and carries
// the barrier. The grid's four axes make theirs when the model is built
// (ProcessGrid::connect), so no step calls ncclCommInitRank; a group that is
// never connected (world, which carries host data only) makes one at its
// first device collective. NCCL has no accumulating reduce-scatter: it reduces into
// a scratch buffer that a kernel then adds, on the axis stream; the weight
// stream reserves that buffer when it is made (reserve_accumulating). A group of one (the
// grid's axes of extent 1) makes no NCCL communicator unless asked to
// (NcclDevice::groups_of_one): its copies run on the compute stream itself.
//
// The watchdog (nccl_watchdog.h): a thread per communicator follows every
// collective in flight through its CUDA events; one that has not finished
// `timeout()` seconds after its axis stream started it, or an asynchronous
// NCCL error, prints the rank, the collective, the group and the time,
// aborts the NCCL communicator (which ends its kernels) and the whole job
// (MPI_Abort), as the CPU path does.
//
// The counters: bytes and calls as every communicator counts them (so the
// planner's closed-form volume still agrees to the byte); per kind, total is
// the time the NCCL call ran on its stream, exposed the time the compute
// stream stood waiting for it (both from CUDA events, folded in once the
// events have completed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dendrite/comm/communicator.h"
#include "dendrite/core/buffer.h"

namespace dendrite {

// What the CUDA backend lends its communicators: device memory (SharedArrays,
// scratch) and the compute stream they order against (a cudaStream_t).
struct NcclDevice {
  Allocator* memory = nullptr;
  void* compute_stream = nullptr;
  int device = 0;  // the CUDA device of this rank
  // Make an NCCL communicator for groups of one too (tests of the NCCL path
  // on one GPU); otherwise a group of one copies on the compute stream.
  bool groups_of_one = false;
};

// The transport over `world` (MPI, or the group of one), which the caller
// keeps alive. Collective at connect() and at its first device collective;
// until then it touches no GPU (its host collectives are world's).
namespace nccl {
std::unique_ptr<Communicator> make_communicator(Communicator& world, const NcclDevice& dev);
}  // namespace nccl

}  // namespace dendrite
