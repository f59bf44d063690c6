// main() of the MPI test binaries (run under `mpirun -np 8`): initialises MPI,
// runs the tests on every rank, prints the normal GoogleTest output from rank 0
// only, prints every failure of any other rank prefixed with "[rank r]" (a
// failure that happens only on rank 5 must not pass unseen), and makes the
// exit code of every rank the same (failed anywhere = failed everywhere).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

namespace {

// On ranks other than 0: the failed assertions and failed tests, nothing else.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    // One printf per line, each prefixed, so lines of different ranks interleave legibly.
    std::string text = std::string(result.file_name() ? result.file_name() : "unknown") + ":" +
                       std::to_string(result.line_number()) + ": Failure\n" + result.message();
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::printf("[rank %d] %s\n", rank_, text.substr(start, end - start).c_str());
      start = end + 1;
    }
    std::fflush(stdout);
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::printf("[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
    std::fflush(stdout);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  // As the dendrite binary does: the progress engine's rings across nodes need it.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));  // owned by GoogleTest
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, ranks_failed = 0;
  MPI_Allreduce(&failed, &ranks_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && ranks_failed > 0) {
    std::printf("%d rank(s) failed%s; see the [rank r] lines above\n", ranks_failed,
                failed ? "" : " (not rank 0, whose summary says PASSED)");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return ranks_failed > 0 ? 1 : 0;
}
