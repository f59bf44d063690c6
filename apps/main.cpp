// The `dendrite` command: one MPI program with subcommands.
#include <cstdio>
#include <string>

#include "dendrite/comm/mpi_env.h"

int main(int argc, char** argv) {
  dendrite::MpiEnv env(&argc, &argv);
  return env.run_or_abort([&] {
    std::puts("dendrite: subcommands coming");
    return 0;
  });
}
