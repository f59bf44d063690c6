// A dead rank must not hang the job: an 8-rank `dendrite train` on the grid
// x=2,y=2,z=2 is started under mpirun, saving a checkpoint every 2 steps, and
// one rank's process is SIGKILLed once the run has logged a few steps: mpirun
// must exit non-zero, and every other rank be gone, within 30 s; and what
// Dendrite adds to that (OpenMPI ends the job by itself): the checkpoint that
// `latest` names is whole and loads, whatever the kill interrupted. On the
// CPU, and on GPUs over NCCL (the CUDA backend on the tests' emulator).
// Every wait is bounded and every process started here is killed at the end.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dendrite {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t count_lines(const fs::path& path) {
  std::string text = read_text(path);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// Text to train on, made here so that the test needs no package of text (the
// lent GPU machines have none): 4,000 lines of words of one to three of
// sixteen syllables, drawn by a fixed linear congruential sequence.
void write_text(const fs::path& path) {
  static const char* syllables[] = {"ka", "lo", "mi", "ren", "to", "sa", "vel", "du",
                                    "ni", "per", "go", "ash", "el", "bri", "un", "for"};
  std::ofstream out(path);
  uint32_t state = 12345;
  auto next = [&state](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % n;
  };
  for (int line = 0; line < 4000; ++line) {
    for (int w = 0, words = 6 + int(next(10)); w < words; ++w) {
      for (uint32_t s = 0, n = 1 + next(3); s < n; ++s) out << syllables[next(16)];
      out << (w + 1 < words ? " " : ".\n");
    }
  }
}

// The environment mpirun needs here (root, 8 ranks on 2 cores, one thread each).
void set_mpi_env() {
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
}

// Starts `mpirun -np ranks --oversubscribe --mca btl self,vader program args`
// in a process group of its own, with the variables `env` (NAME=value) set,
// stdout and stderr to log; returns its pid.
pid_t start_mpirun(int ranks, const std::vector<std::string>& args, const fs::path& log,
                   const std::string& program = DENDRITE_BINARY,
                   const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {DENDRITE_MPIEXEC, "-np", std::to_string(ranks),
                                   "--oversubscribe", "--mca", "btl", "self,vader", program};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    set_mpi_env();
    for (const std::string& e : env) putenv(strdup(e.c_str()));
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    if (out == nullptr || dup2(fileno(stdout), 2) < 0) _exit(127);
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);  // also here, so the group exists before we signal it
  return pid;
}

// Children of pid, read from /proc/<child>/stat (field 4 is the parent).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_text(entry.path() / "stat");
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// Whether pid runs (a zombie, dead but not yet reaped, does not count).
bool alive(pid_t pid) {
  std::string stat = read_text(fs::path("/proc") / std::to_string(pid) / "stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// OMPI_COMM_WORLD_RANK from the process's environment, or -1.
int mpi_rank_of(pid_t pid) {
  std::string env = read_text(fs::path("/proc") / std::to_string(pid) / "environ");
  const std::string key = "OMPI_COMM_WORLD_RANK=";
  for (size_t at = 0; at < env.size(); at = env.find('\0', at) + 1) {
    if (env.compare(at, key.size(), key) == 0) return std::atoi(env.c_str() + at + key.size());
    if (env.find('\0', at) == std::string::npos) break;
  }
  return -1;
}

// Polls waitpid for up to limit_s; true (with status) once pid has exited.
bool wait_exit(pid_t pid, double limit_s, int* status) {
  auto t0 = Clock::now();
  while (seconds_since(t0) < limit_s) {
    if (waitpid(pid, status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class KillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dendrite-kill-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const fs::path text = dir_ / "text.txt";
    write_text(text);
    pid_t tok = start_mpirun(1, {"tokenize", "--input", text.string(), "--vocab-size", "512",
                                 "--out", (dir_ / "data").string()},
                             dir_ / "tokenize.log");
    int status = 0;
    ASSERT_TRUE(wait_exit(tok, 120, &status)) << "tokenize hung";
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(dir_ / "tokenize.log");
    std::ofstream(dir_ / "gpt2.json") << R"({"arch": "gpt2", "n_layer": 2, "n_embd": 64,
                                             "n_head": 4, "block_size": 32})";
  }
  // Runs 8 ranks of `program train ... --device device` on x=2,y=2,z=2 and
  // SIGKILLs rank 5 once three steps are logged.
  void kill_rank_5(const std::string& program, const std::string& device,
                   const std::vector<std::string>& env);
  // Kills whatever is left of the job, ranks included, and the temporary files.
  void TearDown() override {
    if (job_ > 0) {
      if (ranks_.empty()) ranks_ = children_of(job_);
      for (pid_t r : ranks_)
        if (alive(r)) kill(r, SIGKILL);
      kill(-job_, SIGKILL);
      int status;
      waitpid(job_, &status, 0);
    }
    fs::remove_all(dir_);
  }
  fs::path dir_;
  pid_t job_ = -1;
  std::vector<pid_t> ranks_;
};

// DENDRITE_TEST_DEVICE=cuda (scripts/gpu_check.sh) runs the job on the GPU.
std::string device_under_test() {
  const char* d = std::getenv("DENDRITE_TEST_DEVICE");
  return d && *d ? d : "cpu";
}

void KillTest::kill_rank_5(const std::string& program, const std::string& device,
                           const std::vector<std::string>& env) {
  const fs::path metrics = dir_ / "metrics.jsonl", log = dir_ / "train.log";
  job_ = start_mpirun(8,
                      {"train",
                       "--model",
                       (dir_ / "gpt2.json").string(),
                       "--data",
                       (dir_ / "data").string(),
                       "--steps",
                       "100000",
                       "--batch",
                       "8",
                       "--seq",
                       "32",
                       "--eval-every",
                       "0",
                       "--grid",
                       "x=2,y=2,z=2",
                       "--metrics",
                       metrics.string(),
                       "--device",
                       device,
                       "--out",
                       (dir_ / "run").string(),
                       "--save-every",
                       "2"},
                      log, program, env);
  ASSERT_GT(job_, 0);
  // Wait (at most 120 s) until three steps are logged: the ranks are then in the loop.
  auto t0 = Clock::now();
  int status = 0;
  while (count_lines(metrics) < 3) {
    ASSERT_EQ(waitpid(job_, &status, WNOHANG), 0) << "the job ended before 3 steps:\n"
                                                  << read_text(log);
    ASSERT_LT(seconds_since(t0), 120) << "no 3 steps within 120 s:\n" << read_text(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ranks_ = children_of(job_);
  ASSERT_EQ(ranks_.size(), 8u) << "expected mpirun to have 8 rank processes";
  pid_t victim = ranks_.front();
  for (pid_t r : ranks_)
    if (mpi_rank_of(r) == 5) victim = r;
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  auto killed_at = Clock::now();
  const bool ended = wait_exit(job_, 30, &status);
  const double took = seconds_since(killed_at);
  ASSERT_TRUE(ended) << "the job still runs 30 s after a rank was killed:\n" << read_text(log);
  job_ = -1;  // reaped
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the job exited 0 after losing a rank:\n" << read_text(log);
  EXPECT_LT(took, 30.0);
  // mpirun may return while the ranks it killed are still going down.
  auto any_alive = [&] { return std::any_of(ranks_.begin(), ranks_.end(), alive); };
  while (any_alive() && seconds_since(killed_at) < 30)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (pid_t r : ranks_) EXPECT_FALSE(alive(r)) << "rank process " << r << " still runs 30 s after the kill";
  const size_t steps_logged = count_lines(metrics);
  EXPECT_LT(steps_logged, 100000u) << "the run finished instead of being killed";
  // The checkpoint `latest` names loads: `export` reads its config and every
  // tensor (checksums verified) and writes a Hugging Face folder.
  const std::string latest = read_text(dir_ / "run" / "latest");
  ASSERT_FALSE(latest.empty()) << "no checkpoint was saved before the kill:\n" << read_text(log);
  pid_t exporter = start_mpirun(
      1, {"export", "--checkpoint", (dir_ / "run").string(), "--hf", (dir_ / "hf").string()},
      dir_ / "export.log");
  int export_status = 0;
  ASSERT_TRUE(wait_exit(exporter, 120, &export_status)) << "export hung";
  EXPECT_TRUE(WIFEXITED(export_status) && WEXITSTATUS(export_status) == 0)
      << "the checkpoint " << latest << " left by the killed run does not load:\n"
      << read_text(dir_ / "export.log");
  std::printf("killed rank 5 (pid %d) after %zu logged steps; the job ended %.1f s later, %s %d\n",
              static_cast<int>(victim), steps_logged, took,
              WIFEXITED(status) ? "exit code" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

TEST_F(KillTest, OneRankKilledMidRunEndsTheJobNonZeroWithin30s) {
  kill_rank_5(DENDRITE_BINARY, device_under_test(), {});
}

// The same on GPUs, their collectives over NCCL (the emulated GPU of
// dendrite_emulated, its streams concurrent): the other ranks wait in device
// collectives, not in MPI calls of their own.
TEST_F(KillTest, OneRankKilledOnGpusOverNcclEndsTheJobNonZeroWithin30s) {
  kill_rank_5(DENDRITE_EMULATED_BINARY, "cuda",
              {"DENDRITE_GPU_TRANSPORT=nccl", "DENDRITE_EMULATED_STREAMS=concurrent"});
  EXPECT_NE(read_text(dir_ / "train.log").find("collectives over NCCL"), std::string::npos)
      << read_text(dir_ / "train.log");
}

}  // namespace
}  // namespace dendrite
