// Shared by the tests that run the `dendrite` command: a shell command with
// its stdout and stderr captured, its exit code and its duration; the same
// under mpirun.
#pragma once

#include <stdio.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace dendrite::test {

struct CommandResult {
  int rc = -1;  // exit code (-1: killed by a signal)
  std::string out;
  double seconds = 0;
};

inline CommandResult run_command(const std::string& cmd) {
  auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  CommandResult r;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = p ? pclose(p) : -1;
  r.rc = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// `mpirun -np ranks dendrite args` with one thread per rank, as root where
// needed, more ranks than cores allowed, a 120 s limit; env (such as "A=1 B=2")
// reaches every rank. binary: `dendrite`, or the fault-injection build of it.
inline CommandResult mpirun_dendrite(int ranks, const std::string& args,
                                     const std::string& env = "",
                                     const std::string& binary = DENDRITE_BINARY) {
  return run_command(
      "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
      "OMPI_MCA_rmaps_base_oversubscribe=1 " + env + " timeout 120 " +
      std::string(DENDRITE_MPIEXEC) + " -np " + std::to_string(ranks) +
      " --oversubscribe --bind-to none --mca btl self,vader " + binary + " " + args);
}

// A book of the King James Bible (Debian's bible-kjv), "genesis" or
// "exodus", and its tokens with a vocabulary of 512: `text` and the data
// folder `data`. Made once per ctest run by the fixture test_data into the
// folder DENDRITE_TEST_DATA (tests/CMakeLists.txt) and only read by the
// tests; where that folder is not (a test binary run by hand before any
// ctest run), made here under `dir`.
struct BookData {
  std::string text, data;
};
inline BookData book_data(const std::string& book, const std::string& dir) {
#ifdef DENDRITE_TEST_DATA
  const std::string shared = DENDRITE_TEST_DATA;
  if (std::filesystem::exists(shared + "/" + book + "/meta.json"))
    return {shared + "/" + book + ".txt", shared + "/" + book};
#endif
  const BookData d{dir + "/" + book + ".txt", dir + "/" + book};
  const std::string verses = book == "genesis" ? "Gen1:1-Gen50:26" : "Exo1:1-Exo40:38";
  const CommandResult r =
      run_command("bible -l10000 '" + verses + "' > " + d.text + " && " + DENDRITE_BINARY +
                  " tokenize --input " + d.text + " --vocab-size 512 --out " + d.data);
  if (r.rc != 0)
    throw std::runtime_error(
        "making the test data failed (the `bible` command is in Debian's "
        "bible-kjv: run the README's set-up): " +
        r.out);
  return d;
}

}  // namespace dendrite::test
