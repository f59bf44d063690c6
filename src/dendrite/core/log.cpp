#include "dendrite/core/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace dendrite {

namespace {
int g_rank = 0;  // set once in main before any thread starts
}

void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }

void log_info(const std::string& line) {
  if (g_rank != 0) return;
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void log_error(const std::string& line) {
  std::fprintf(stderr, "[rank %d] %s\n", g_rank, line.c_str());
  std::fflush(stderr);
}

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

bool started_by_mpi_launcher() {
  // OpenMPI, PMIx (OpenMPI 5, Slurm's PMIx plugin), MPICH's Hydra and PMI-1/2, Slurm's srun.
  for (const char* v :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_ID"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

}  // namespace dendrite
