// The choices a job makes about how its ranks communicate, as data: made once
// where the communicators are made (main reads them from the environment with
// comm_options_from_environment(); tests set them directly) and carried by
// every communicator split from that world, instead of being read from the
// environment or set in a static where they are used.
#pragma once

namespace dendrite {

// How long a thread waiting for a peer (a barrier, a message, an engine task)
// spins before it yields and sleeps. A spinning waiter takes a core, which on
// a node with more threads than cores is the core the peer it waits for needs.
enum class SpinPolicy {
  kAuto,   // kShort when this job's ranks times their threads fill the node's cores
  kLong,   // about 2000 pause instructions: the lowest latency, a core each
  kShort,  // 16: leaves the core to the computing threads at once
};

// How a GPU backend's collectives reach device memory (DESIGN.md section 10).
enum class GpuTransport {
  kAuto,    // NCCL where the build has it and every rank of the node has a GPU of its own
  kNccl,    // NCCL, or an error saying why not
  kStaged,  // through host memory and MPI: any grid, several ranks to a GPU
};

struct CommOptions {
  // Node-local groups use MPI-3 shared-memory windows for SharedArrays and
  // all-reduces; false: private memory and messages everywhere (as across
  // nodes). DENDRITE_SHARED_MEMORY=0 turns it off.
  bool shared_memory = true;
  SpinPolicy spin = SpinPolicy::kAuto;
  // > 0: the ranks act as if each node held this many consecutive ranks of
  // MPI_COMM_WORLD (within the real nodes): groups that cross those bounds
  // use messages instead of shared memory, and ranks_on_node() (the
  // planner's ranks per node, the spin policy) counts the simulated node.
  // Multi-node topologies on one machine. DENDRITE_RANKS_PER_NODE=N sets it.
  int ranks_per_node = 0;
  // DENDRITE_GPU_TRANSPORT=auto|nccl|staged.
  GpuTransport gpu_transport = GpuTransport::kAuto;
};

// The options the environment gives: DENDRITE_SHARED_MEMORY=0 turns shared
// memory off; DENDRITE_RANKS_PER_NODE=N simulates nodes of N ranks (a bad
// value is an error naming it); DENDRITE_GPU_TRANSPORT picks the GPU
// transport. Read once, by the program's main.
CommOptions comm_options_from_environment();

}  // namespace dendrite
