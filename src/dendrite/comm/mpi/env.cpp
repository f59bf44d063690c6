// MpiEnv (env.h): MPI's lifetime, the world communicator, the job-wide abort.
#include "dendrite/comm/mpi/env.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "dendrite/comm/mpi/world.h"
#include "dendrite/core/log.h"

namespace dendrite {

MpiEnv::MpiEnv(int* argc, char*** argv, const CommOptions& options) : options_(options) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  set_log_rank(rank_);
}

// The communicators (their windows, the engine's thread) go before MPI does.
MpiEnv::~MpiEnv() {
  world_.reset();
  MPI_Finalize();
}

Communicator& MpiEnv::world() {
  if (!world_) world_ = make_mpi_world(MPI_COMM_WORLD, options_);
  return *world_;
}

std::unique_ptr<Communicator> MpiEnv::make_world(const CommOptions& options) {
  return make_mpi_world(MPI_COMM_WORLD, options, "world-with-options");
}

int MpiEnv::run_or_abort(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    log_error(std::string("error: ") + e.what());
  }
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

}  // namespace dendrite
