// The collective figures of a machine file (plan/machine.h), measured with
// this job's ranks: latency and bandwidth of all-reduce, all-gather and
// reduce-scatter per group size, over the backend's transport ("node"), over
// a node's shared memory ("shm") and as MPI messages ("messages", the
// network's stand-in on one node), and the wait for peers of each group size.
#pragma once

#include <string>

#include "dendrite/backend/backend.h"
#include "dendrite/comm/communicator.h"
#include "dendrite/plan/machine.h"

namespace dendrite {

// Times every collective kind over groups of every size g that divides
// world's and fits the node (mach.ranks_per_node), from a few hundred bytes
// to 256 MB, each right after a step-sized GEMM on be, and fits each kind's
// latency and bandwidth; writes mach's node, shm, messages and network
// levels and its peer_wait_fraction, printing each fit on rank 0.
// messages: the same ranks with shared memory off (every collective an MPI
// message, as DENDRITE_SHARED_MEMORY=0 and simulated node bounds run them),
// or null (GPUs: one node cannot stand in for their network). quick: fewer
// sizes and shorter waits. Collective over world (and messages).
void calibrate_links(Communicator& world, Communicator* messages, Backend& be, Machine& mach,
                     bool quick);

// calibrate --links-from FILE: what a run of `ranks` ranks on part of one node
// cannot measure comes from `from` (published figures of the whole node,
// machines/*.json, read from `path`): the network always (one node's own
// messages only stand in for it); the node's ranks (GPUs) where from's node
// holds more than this run had; and the node level where this run had one
// rank, so measured no collective. Says what it took in mach.notes.
void take_links(Machine& mach, const Machine& from, const std::string& path, int ranks);

}  // namespace dendrite
