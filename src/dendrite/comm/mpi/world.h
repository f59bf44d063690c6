// Making the MPI communicators: the one entry point from outside comm/mpi/.
// The world is made once per process (MpiEnv::world() in the program, a test
// where it needs one) and every other communicator is split from it
// (Communicator::split, ProcessGrid), sharing its options and progress engine.
#pragma once

#include <mpi.h>

#include <memory>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/options.h"

namespace dendrite {

// A communicator over the ranks of `base` (a duplicate; base stays the
// caller's), with a new progress engine that it and its splits share; a
// SelfCommunicator when base has one rank. Resolves SpinPolicy::kAuto from the
// ranks on this node and the OpenMP threads per rank now. Collective over base.
std::unique_ptr<Communicator> make_mpi_world(MPI_Comm base, const CommOptions& options,
                                             std::string name = "world");

}  // namespace dendrite
