// Reliability of `dendrite train` end to end, each failure injected for real:
// --keep pruning, --on-nan skip-step (NaN gradients injected by a test hook,
// on one rank of two), the collective watchdog (--timeout) against a rank
// stuck by a test hook, SIGKILL in the middle of a checkpoint write (paused by
// a test hook), a full disk (a file-size limit), a data folder of another
// vocabulary or tokenizer, token files of either width, and exact restarts
// (same losses bit for bit; a killed and resumed run ends with the same
// weights, byte for byte, as one that ran straight through).
// The failures are injected by dendrite_faults, the `dendrite` program with
// test hooks (train/hooks.h) read from DENDRITE_TEST_* variables
// (tests/fault_injection_main.cpp); `dendrite` itself reads none.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/io/token_file.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;
using Result = test::CommandResult;
using Clock = std::chrono::steady_clock;

// One process: `env dendrite args` with one thread, stdout+stderr captured.
Result dendrite(const std::string& args, const std::string& env = "") {
  return test::run_command("OMP_NUM_THREADS=1 " + env + " timeout 120 " +
                           DENDRITE_FAULTS_BINARY + " " + args);
}

// mpirun -np ranks, one thread per rank; env is passed to every rank.
Result mpirun(int ranks, const std::string& args, const std::string& env = "") {
  return test::mpirun_dendrite(ranks, args, env, DENDRITE_FAULTS_BINARY);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<nlohmann::json> metrics(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The losses of a metrics file as printed, so that equality is bitwise.
std::vector<std::string> losses(const fs::path& p) {
  std::vector<std::string> out;
  for (const auto& j : metrics(p)) out.push_back(j.at("loss").dump());
  return out;
}

// The ckpt-<step> folders of a run, sorted.
std::vector<std::string> checkpoints(const fs::path& run) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(run))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0)
      out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Opens both files of a checkpoint (the reader verifies every checksum) and
// counts the non-finite values of the weights.
void expect_loadable_and_finite(const fs::path& ckpt) {
  SafetensorsReader weights((ckpt / "model.safetensors").string());
  SafetensorsReader state((ckpt / "optimizer.safetensors").string());
  EXPECT_TRUE(weights.has("transformer.wte.weight")) << ckpt;
  int64_t bad = 0;
  for (const std::string& name : weights.names()) {
    const TensorInfo& t = weights.info(name);
    std::vector<float> v(t.bytes / 4);
    weights.read_f32(name, t.shape, v.data());
    for (float x : v) bad += !std::isfinite(x);
  }
  EXPECT_EQ(bad, 0) << ckpt;
}

void expect_error(const Result& r, const std::string& needle) {
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.out;
}

// `dendrite args` in the background (own process group, output to log, env
// set), stopped with SIGKILL by kill_group().
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::vector<std::string>& env,
             const fs::path& log)
      : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      setenv("OMP_NUM_THREADS", "1", 1);
      for (const std::string& kv : env) putenv(strdup(kv.c_str()));
      FILE* out = std::freopen(log.c_str(), "w", stdout);
      if (out == nullptr || dup2(fileno(stdout), 2) < 0) _exit(127);
      std::vector<std::string> argv = {DENDRITE_FAULTS_BINARY};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    if (pid_ > 0) setpgid(pid_, pid_);
  }
  ~Background() { kill_group(); }
  // Waits (at most limit_s) until the log holds `marker`; false if the process ended first.
  bool wait_for(const std::string& marker, double limit_s) {
    auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < limit_s) {
      if (read_file(log_).find(marker) != std::string::npos) return true;
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return read_file(log_).find(marker) != std::string::npos;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void kill_group() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  std::string log() const { return read_file(log_); }

 private:
  fs::path log_;
  pid_t pid_ = -1;
};

// A temporary folder with Genesis tokenized (vocab 512) and a tiny GPT-2.
class Reliability : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dendrite-rel-XXXXXX";
    dir_ = mkdtemp(tmpl);
    genesis_ = test::book_data("genesis", dir_.string());
    std::ofstream(dir_ / "gpt2.json") << R"({"arch": "gpt2", "n_layer": 2, "n_embd": 64,
                                             "n_head": 4, "block_size": 32})";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // Tokenizes the text file `text` into the folder `out` of dir_.
  static void tokenize(const std::string& text, int vocab, const std::string& out) {
    Result r = dendrite("tokenize --input " + text + " --vocab-size " + std::to_string(vocab) +
                        " --out " + (dir_ / out).string());
    ASSERT_EQ(r.rc, 0) << r.out;
  }
  // The train command line on the tiny model, without the step count: on
  // Genesis, or on the data folder `data`.
  static std::string train(const std::string& data = "") {
    return "train --model " + (dir_ / "gpt2.json").string() + " --data " +
           (data.empty() ? genesis_.data : data) +
           " --batch 4 --seq 32 --eval-every 0 --warmup 2 --lr 3e-3";
  }
  // The same, as the argument list of a Background job.
  static std::vector<std::string> train_args() {
    std::istringstream in(train());
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static fs::path dir_;
  static test::BookData genesis_;  // read only
};
fs::path Reliability::dir_;
test::BookData Reliability::genesis_;

TEST_F(Reliability, KeepLeavesTheNewestCheckpointsAndNeverLatest) {
  const fs::path run = dir_ / "keep";
  Result a = dendrite(train() + " --steps 5 --save-every 1 --keep 2 --out " + run.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  EXPECT_EQ(checkpoints(run), (std::vector<std::string>{"ckpt-00000004", "ckpt-00000005"}));
  EXPECT_EQ(read_file(run / "latest"), "ckpt-00000005\n");
  EXPECT_NE(a.out.find("removed old checkpoint ckpt-00000003 (--keep 2)"), std::string::npos)
      << a.out;
  // The JSON key works too, and the resume continues from the newest.
  std::ofstream(dir_ / "keep.json") << R"({"keep": 2, "save_every": 1})";
  Result b = dendrite(train() + " --steps 7 --config " + path("keep.json") + " --resume " +
                      run.string() + " --out " + run.string());
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("ckpt-00000005 at step 5"), std::string::npos) << b.out;
  EXPECT_EQ(checkpoints(run), (std::vector<std::string>{"ckpt-00000006", "ckpt-00000007"}));
  // A newer folder left by an earlier life of the run (restarted from an older
  // checkpoint): with --keep 1, the folder `latest` names survives anyway.
  fs::copy(run / "ckpt-00000007", run / "ckpt-00000099", fs::copy_options::recursive);
  Result c =
      dendrite(train() + " --steps 8 --keep 1 --resume " + run.string() + " --out " + run.string());
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_EQ(read_file(run / "latest"), "ckpt-00000008\n");
  EXPECT_EQ(checkpoints(run), (std::vector<std::string>{"ckpt-00000008", "ckpt-00000099"}));
  expect_loadable_and_finite(run / "ckpt-00000008");
}

// NaN gradients on rank 1 only at step 3, on a grid z=2: the gradient norm is
// a global sum, so both ranks skip the update; had either applied it, the
// weights of ckpt-3 would differ from ckpt-2 (or hold NaN).
TEST_F(Reliability, SkipStepSkipsANonFiniteUpdateOnEveryRank) {
  const fs::path run = dir_ / "skip", m = dir_ / "skip.jsonl";
  Result r = mpirun(2,
                    train() + " --grid z=2 --steps 6 --save-every 1 --on-nan skip-step --out " +
                        run.string() + " --metrics " + m.string(),
                    "DENDRITE_TEST_NAN_STEPS=3 DENDRITE_TEST_NAN_RANK=1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("warning: step 3: the gradient norm is not finite"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("skipped its update"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| skipped 1"), std::string::npos) << r.out;
  auto lines = metrics(m);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_TRUE(lines[2].value("skipped", false));
  EXPECT_FALSE(lines[3].value("skipped", false));
  for (int s = 3; s < 6; ++s) {
    EXPECT_TRUE(lines[s].at("loss").is_number() &&
                std::isfinite(lines[s].at("loss").get<double>()) &&
                std::isfinite(lines[s].at("grad_norm").get<double>()))
        << lines[s].dump();
    EXPECT_EQ(lines[s].value("skipped_steps", 0), 1) << lines[s].dump();
  }
  EXPECT_LT(lines[5].at("loss").get<double>(), lines[0].at("loss").get<double>());
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(read_file(run / "ckpt-00000003" / file), read_file(run / "ckpt-00000002" / file))
        << file;
  auto state = nlohmann::json::parse(read_file(run / "ckpt-00000003" / "trainer_state.json"));
  EXPECT_EQ(state.at("step"), 3);
  EXPECT_EQ(state.at("optimizer_steps"), 2);
  expect_loadable_and_finite(run / "ckpt-00000006");
  Result resumed =
      dendrite(train() + " --steps 7 --resume " + run.string() + " --out " + run.string());
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
}

// The failure switches live only in the test binary: `dendrite` itself,
// given the same variables, trains through without NaNs or a hang.
TEST_F(Reliability, DendriteItselfReadsNoTestSwitches) {
  Result r = test::run_command("OMP_NUM_THREADS=1 DENDRITE_TEST_NAN_STEPS=1-3 "
                               "DENDRITE_TEST_HANG_STEP=2 DENDRITE_TEST_PAUSE_CHECKPOINT=3 "
                               "timeout 60 " + std::string(DENDRITE_BINARY) + " " + train() +
                               " --steps 3 --out " + (dir_ / "plain").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("not finite"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("test hook"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "plain" / "ckpt-00000003"));
}

TEST_F(Reliability, SkipStepGivesUpAfterTenInARow) {
  const fs::path run = dir_ / "skip10";
  Result r =
      dendrite(train() + " --steps 20 --save-every 1 --on-nan skip-step --out " + run.string(),
               "DENDRITE_TEST_NAN_STEPS=2-30");
  expect_error(r, "10 steps in a row (2 to 11)");
  EXPECT_FALSE(fs::exists(run / "ckpt-00000011"));
  EXPECT_EQ(read_file(run / "latest"), "ckpt-00000010\n");
  EXPECT_EQ(read_file(run / "ckpt-00000010" / "model.safetensors"),
            read_file(run / "ckpt-00000001" / "model.safetensors"));
}

TEST_F(Reliability, StopModeFailsAtTheBadStepAndKeepsTheLastCheckpoint) {
  const fs::path run = dir_ / "stop";
  Result r = dendrite(train() + " --steps 6 --save-every 1 --out " + run.string(),
                      "DENDRITE_TEST_NAN_STEPS=3");
  expect_error(r, "step 3: the gradient norm is not finite");
  expect_error(r, "--on-nan skip-step");
  EXPECT_EQ(read_file(run / "latest"), "ckpt-00000002\n");
  EXPECT_FALSE(fs::exists(run / "ckpt-00000003"));
  expect_loadable_and_finite(run / "ckpt-00000002");
}

// Rank 1 sleeps at the start of step 2; rank 0 waits in a collective over z.
TEST_F(Reliability, WatchdogEndsAJobWithAStuckRank) {
  Result r = mpirun(2, train() + " --grid z=2 --steps 4 --timeout 3",
                    "DENDRITE_TEST_HANG_RANK=1 DENDRITE_TEST_HANG_STEP=2");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "the job hung:\n" << r.out;
  EXPECT_LT(r.seconds, 20) << r.out;
  EXPECT_NE(r.out.find("test hook: hanging at the start of step 2"), std::string::npos) << r.out;
  const std::regex what(R"(\[rank 0\] error: (all_reduce|all_gather|reduce_scatter|broadcast|)"
                        R"(barrier) on grid axis z \(2 ranks\) did not complete after 3(\.\d)? s )"
                        R"(\(--timeout 3\))");
  EXPECT_TRUE(std::regex_search(r.out, what)) << r.out;
  std::printf("the job ended %.1f s after its start\n", r.seconds);
}

// The same on GPUs over NCCL (the emulated GPU of dendrite_emulated, its
// streams concurrent, so that a collective waiting for the stuck rank is in
// flight), on y=2: rank 0 posts the device collectives of its forward over
// y, then waits on the GPU (a stream synchronisation, which no watchdog of
// the host times) before any host collective. (Over z the first collective
// of a step is the host gather of the token ids, and over d the loss's host
// sum follows the gradients' device all-reduce within microseconds: the MPI
// watchdog could end those first.) NCCL's watchdog ends the job, naming the
// collective, the axis and the time.
TEST_F(Reliability, NcclWatchdogEndsAJobWithAStuckRank) {
  Result r = test::mpirun_dendrite(
      2, train() + " --grid y=2 --steps 4 --timeout 3 --device cuda",
      "DENDRITE_TEST_HANG_RANK=1 DENDRITE_TEST_HANG_STEP=2 DENDRITE_GPU_TRANSPORT=nccl "
      "DENDRITE_EMULATED_STREAMS=concurrent",
      DENDRITE_EMULATED_BINARY);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "the job hung:\n" << r.out;
  EXPECT_LT(r.seconds, 30) << r.out;
  EXPECT_NE(r.out.find("collectives over NCCL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test hook: hanging at the start of step 2"), std::string::npos) << r.out;
  const std::regex what(R"(\[rank 0\] error: nccl watchdog: (all_reduce|all_gather|)"
                        R"(reduce_scatter|broadcast) of \d+ bytes on grid axis y )"
                        R"(\(2 ranks, NCCL\) did not complete after 3(\.\d)? s \(--timeout 3\): )"
                        R"(a rank of this group is stuck or dead.*; aborting the job)");
  EXPECT_TRUE(std::regex_search(r.out, what)) << r.out;
  std::printf("the job ended %.1f s after its start\n", r.seconds);
}

// Rank 0 takes 2 s to write a checkpoint (a slow disk, by a test hook)
// while rank 1 waits: that wait is not timed, so --timeout 1 does not fire.
TEST_F(Reliability, WatchdogDoesNotTimeACheckpointWrite) {
  const fs::path run = dir_ / "slow-save";
  Result r = mpirun(2, train() + " --grid z=2 --steps 3 --save-every 2 --timeout 1 --out " +
                           run.string(),
                    "DENDRITE_TEST_PAUSE_CHECKPOINT=2:2");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("test hook: paused saving step 2"), std::string::npos) << r.out;
  EXPECT_EQ(checkpoints(run), (std::vector<std::string>{"ckpt-00000002", "ckpt-00000003"}));
}

TEST_F(Reliability, KillDuringACheckpointWriteKeepsThePreviousOne) {
  const fs::path run = dir_ / "killed-save";
  {
    std::vector<std::string> args = train_args();
    args.insert(args.end(), {"--steps", "6", "--save-every", "2", "--out", run.string()});
    Background job(args, {"DENDRITE_TEST_PAUSE_CHECKPOINT=4"}, dir_ / "killed-save.log");
    ASSERT_TRUE(job.wait_for("test hook: paused saving step 4", 60)) << job.log();
    job.kill_group();
  }
  const fs::path tmp = run / ".ckpt-00000004.tmp";
  EXPECT_TRUE(fs::exists(tmp / "model.safetensors")) << "the kill was not inside the write";
  EXPECT_FALSE(fs::exists(run / "ckpt-00000004"));
  EXPECT_EQ(read_file(run / "latest"), "ckpt-00000002\n");
  expect_loadable_and_finite(run / "ckpt-00000002");
  Result r = dendrite(train() + " --steps 6 --resume " + run.string() + " --out " + run.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("resuming from " + (run / "ckpt-00000002").string() + " at step 2"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(tmp)) << "the next save leaves the stale temporary folder";
  EXPECT_EQ(checkpoints(run), (std::vector<std::string>{"ckpt-00000002", "ckpt-00000006"}));
  expect_loadable_and_finite(run / "ckpt-00000006");
}

TEST_F(Reliability, DiskFullKeepsThePreviousCheckpointAndLatest) {
  const fs::path run = dir_ / "full";
  Result a = dendrite(train() + " --steps 2 --out " + run.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  const std::string before = read_file(run / "ckpt-00000002" / "model.safetensors");
  ASSERT_GT(before.size(), 100000u);
  // 64 blocks of 512 bytes: the 0.5 MB model file cannot be written. (gds=hash
  // keeps OpenMPI's PMIx data store out of a file, which the limit would cap.)
  Result b =
      test::run_command("/bin/sh -c 'ulimit -f 64; OMP_NUM_THREADS=1 PMIX_MCA_gds=hash exec " +
                        std::string(DENDRITE_FAULTS_BINARY) + " " + train() + " --steps 4 --resume " +
                        run.string() + " --out " + run.string() + "'");
  expect_error(b, "could not write checkpoint ckpt-00000004");
  expect_error(b, "File too large");
  EXPECT_EQ(read_file(run / "latest"), "ckpt-00000002\n");
  EXPECT_EQ(read_file(run / "ckpt-00000002" / "model.safetensors"), before);
  EXPECT_EQ(checkpoints(run), std::vector<std::string>{"ckpt-00000002"});
  EXPECT_FALSE(fs::exists(run / ".ckpt-00000004.tmp"));
}

TEST_F(Reliability, DataOfAnotherVocabularyOrTokenizerIsRefused) {
  const fs::path run = dir_ / "vocab";
  Result a = dendrite(train() + " --steps 2 --out " + run.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  const std::string before = read_file(run / "ckpt-00000002" / "model.safetensors");
  tokenize(genesis_.text, 384, "data384");
  Result b = dendrite(train(path("data384")) + " --steps 4 --resume " + run.string() + " --out " +
                      run.string());
  expect_error(b, "has a vocabulary of 512 tokens but the data folder " + path("data384") +
                      " was tokenized with a vocabulary of 384");
  expect_error(
      b, "dendrite tokenize --tokenizer " + (run / "ckpt-00000002" / "tokenizer.model").string());
  // The same size from another text: another tokenizer, so other token ids.
  const test::BookData exodus = test::book_data("exodus", dir_.string());
  Result c = dendrite(train(exodus.data) + " --steps 4 --resume " + run.string() + " --out " +
                      run.string());
  expect_error(c, "was made with another tokenizer than checkpoint");
  EXPECT_EQ(read_file(run / "ckpt-00000002" / "model.safetensors"), before);
  EXPECT_EQ(read_file(run / "latest"), "ckpt-00000002\n");
  EXPECT_EQ(checkpoints(run), std::vector<std::string>{"ckpt-00000002"});
}

// The same ids stored 4 bytes wide train exactly alike; a width of 3 is refused.
TEST_F(Reliability, TokenFilesOfEitherWidthTrainAlike) {
  fs::copy(genesis_.data, dir_ / "wide", fs::copy_options::recursive);
  {
    TokenFile narrow((fs::path(genesis_.data) / "train.bin").string());
    ASSERT_EQ(narrow.width(), 2);
    std::vector<int32_t> ids(narrow.size());
    narrow.copy(0, ids.size(), ids.data());
    write_token_file((dir_ / "wide" / "train.bin").string(), ids, 4);
  }
  ASSERT_EQ(TokenFile((dir_ / "wide" / "train.bin").string()).width(), 4);
  Result a = dendrite(train() + " --steps 3 --metrics " + path("narrow.jsonl"));
  ASSERT_EQ(a.rc, 0) << a.out;
  Result b = dendrite(train(path("wide")) + " --steps 3 --metrics " + path("wide.jsonl"));
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_EQ(losses(dir_ / "narrow.jsonl"), losses(dir_ / "wide.jsonl"));
  std::string bytes = read_file(dir_ / "wide" / "train.bin");
  bytes[12] = 3;
  std::ofstream(dir_ / "wide" / "train.bin", std::ios::binary) << bytes;
  expect_error(dendrite(train(path("wide")) + " --steps 3"), "has token width 3");
}

TEST_F(Reliability, SameSeedAndGridGiveBitIdenticalLosses) {
  for (const char* name : {"same1.jsonl", "same2.jsonl"}) {
    Result r = mpirun(2, train() + " --grid z=2 --steps 4 --metrics " + path(name));
    ASSERT_EQ(r.rc, 0) << r.out;
  }
  auto first = losses(dir_ / "same1.jsonl");
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first, losses(dir_ / "same2.jsonl"));
}

// A real SIGKILL (while the run waits at the start of step 6, held there by
// a test hook, after ckpt-4 was saved), then a resume: the final weights and
// optimizer state equal, byte for byte, those of a run that was never killed.
TEST_F(Reliability, KilledAndResumedRunEndsWithBitIdenticalWeights) {
  const fs::path straight = dir_ / "straight", killed = dir_ / "killed";
  Result a = dendrite(train() + " --steps 8 --save-every 2 --out " + straight.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  {
    std::vector<std::string> args = train_args();
    args.insert(args.end(), {"--steps", "8", "--save-every", "2", "--out", killed.string()});
    Background job(args, {"DENDRITE_TEST_HANG_STEP=6"}, dir_ / "killed.log");
    ASSERT_TRUE(job.wait_for("hanging at the start of step 6", 60)) << job.log();
    job.kill_group();
  }
  EXPECT_EQ(read_file(killed / "latest"), "ckpt-00000004\n");
  EXPECT_FALSE(fs::exists(killed / "ckpt-00000008"));
  Result b = dendrite(train() + " --steps 8 --save-every 2 --resume " + killed.string() +
                      " --out " + killed.string());
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("at step 4"), std::string::npos) << b.out;
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"}) {
    const std::string want = read_file(straight / "ckpt-00000008" / file);
    EXPECT_GT(want.size(), 0u);
    EXPECT_TRUE(want == read_file(killed / "ckpt-00000008" / file)) << file << " differs";
  }
}

}  // namespace
}  // namespace dendrite
