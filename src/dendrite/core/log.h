// Logging: rank 0 prints; other ranks stay quiet unless they fail.
#pragma once

#include <string>

namespace dendrite {

void set_log_rank(int rank);
int log_rank();
// Prints one line to stdout on rank 0.
void log_info(const std::string& line);
// Prints one line to stderr on every rank, prefixed with the rank.
void log_error(const std::string& line);
// True when stdout is a terminal (live progress lines use \r).
bool stdout_is_terminal();
// True when an MPI launcher (mpirun, mpiexec, srun) started this process: its
// stdout may be a pseudo-terminal of the launcher's even when the launcher's
// own output goes to a file.
bool started_by_mpi_launcher();

}  // namespace dendrite
