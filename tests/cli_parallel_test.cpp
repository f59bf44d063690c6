// The `dendrite` command under mpirun: a run saved on one grid resumes on
// another with the losses of the run that did not move, and bad input on a
// grid ends the whole job at once with a clear error on the ranks.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_support.h"
#include "dendrite/io/token_file.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;

using Result = test::CommandResult;

Result mpirun(int ranks, const std::string& args) { return test::mpirun_dendrite(ranks, args); }

std::vector<double> losses(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line).at("loss"));
  return out;
}

class CliParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dendrite-mpi-XXXXXX";
    dir_ = mkdtemp(tmpl);
    exodus_ = test::book_data("exodus", dir_.string());
    std::ofstream(dir_ / "gpt2.json") << R"({"arch": "gpt2", "n_layer": 2, "n_embd": 64,
                                            "n_head": 4, "block_size": 32})";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string train() {
    return "train --model " + (dir_ / "gpt2.json").string() + " --data " + exodus_.data +
           " --batch 8 --seq 32 --eval-every 0";
  }
  static fs::path dir_;
  static test::BookData exodus_;  // read only
};
fs::path CliParallel::dir_;
test::BookData CliParallel::exodus_;

TEST_F(CliParallel, ResumeOnAnotherGridMatchesTheRunThatStayed) {
  const fs::path stayed = dir_ / "stayed.jsonl", moved = dir_ / "moved.jsonl";
  const std::string run = (dir_ / "run").string();
  Result a = mpirun(8, train() + " --steps 8 --grid x=2,y=2,z=2 --metrics " + stayed.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  // mpirun's output goes to a pipe here, as to a log under Slurm, though each
  // rank's stdout is a pseudo-terminal of mpirun's: plain progress lines, no
  // live line's carriage returns or escape codes.
  EXPECT_EQ(a.out.find('\r'), std::string::npos) << a.out;
  EXPECT_EQ(a.out.find('\033'), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("step     8/8 | loss"), std::string::npos) << a.out;
  Result b = mpirun(8, train() + " --steps 8 --stop-at 4 --grid x=2,y=2,z=2 --out " + run +
                           " --metrics " + moved.string());
  ASSERT_EQ(b.rc, 0) << b.out;
  Result c = mpirun(4, train() + " --steps 8 --grid y=2,d=2 --resume " + run + " --out " + run +
                           " --metrics " + moved.string());
  ASSERT_EQ(c.rc, 0) << c.out;
  auto want = losses(stayed), got = losses(moved);
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  for (int s = 0; s < 8; ++s) EXPECT_NEAR(got[s], want[s], 1e-5 * want[s]) << "step " << s + 1;
}

// A failed job: non-zero exit, well before the 120 s timeout, with the message.
void expect_job_error(const Result& r, const std::string& needle) {
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "the job hung:\n" << r.out;
  EXPECT_LT(r.seconds, 30) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.out;
  // Each rank that finds the error prints it with its rank; the first MPI_Abort
  // may end the others before they print (seen under the sanitizers), so at
  // least one rank's line is required, not rank 0's.
  bool found = false;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    found = found || (std::regex_search(line, std::regex(R"(\[rank [0-9]+\] error: )")) &&
                      line.find(needle) != std::string::npos);
  EXPECT_TRUE(found) << "no '[rank N] error: ..." << needle << "' line in:\n" << r.out;
}

TEST_F(CliParallel, BadGridsEndTheJobWithAClearError) {
  expect_job_error(mpirun(6, train() + " --steps 2 --grid x=2,y=2"), "has 4 ranks but the job has 6");
  std::ofstream(dir_ / "odd.json") << R"({"arch": "gpt2", "n_layer": 1, "n_embd": 60,
                                         "n_head": 4, "block_size": 32})";
  expect_job_error(mpirun(8, "train --model " + (dir_ / "odd.json").string() + " --data " +
                                 exodus_.data + " --steps 2 --batch 8 --seq 32 --grid x=8"),
                   "not divisible by x=8");
  expect_job_error(mpirun(4, train() + " --steps 2 --grid y=8"), "has 8 ranks but the job has 4");
  expect_job_error(mpirun(8, train() + " --steps 2 --grid y=8"), "do not split into y=8");
  expect_job_error(mpirun(4, "train --model " + (dir_ / "gpt2.json").string() + " --data " +
                                 exodus_.data + " --steps 2 --batch 6 --seq 32 --grid z=4"),
                   "not divisible by d*z=4");
}

// --grad-accum 4 runs each batch of 16 as 4 micro-batches of 4 on a grid
// with D and Z > 1: the losses (and validation losses) of the run that took
// each batch at once, to 1e-5 relative.
TEST_F(CliParallel, GradAccumMatchesTheWholeBatch) {
  const fs::path whole = dir_ / "whole.jsonl", micro = dir_ / "micro.jsonl";
  const std::string args = train() + " --steps 4 --batch 16 --grid z=2,d=2 --eval-every 2 " +
                           "--eval-batches 2 --metrics ";
  Result a = mpirun(4, args + whole.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  Result b = mpirun(4, args + micro.string() + " --grad-accum 4");
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("batch 16 in 4 micro-batches of 4 sequences"), std::string::npos) << b.out;
  for (const char* key : {"loss", "val_loss"}) {
    std::vector<double> want, got;
    for (auto [file, out] : {std::pair{whole, &want}, std::pair{micro, &got}}) {
      std::ifstream in(file);
      for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains(key)) out->push_back(j.at(key));
      }
    }
    ASSERT_EQ(want.size(), std::string(key) == "loss" ? 4u : 2u) << key;
    ASSERT_EQ(got.size(), want.size()) << key;
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 1e-5 * want[s]) << key << " " << s;
  }
}

// Checkpoints hold the fp32 masters whatever the precision: a bf16 run saved
// on one grid resumes in fp32 on another and continues, and its losses
// follow a run that stayed in bf16 on the first grid (the two precisions
// differ by bf16 rounding, well within 2%).
TEST_F(CliParallel, Bf16CheckpointResumesInFp32OnAnotherGrid) {
  const fs::path stayed = dir_ / "bf16-stayed.jsonl", moved = dir_ / "bf16-moved.jsonl";
  const std::string run = (dir_ / "bf16-run").string();
  Result a = mpirun(4, train() + " --steps 8 --precision bf16 --grid y=2,z=2 --metrics " +
                           stayed.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  Result b = mpirun(4, train() + " --steps 8 --stop-at 4 --precision bf16 --grid y=2,z=2 --out " +
                           run + " --metrics " + moved.string());
  ASSERT_EQ(b.rc, 0) << b.out;
  Result c = mpirun(2, train() + " --steps 8 --precision fp32 --grid x=2 --resume " + run +
                           " --out " + run + " --metrics " + moved.string());
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("\"precision\":\"fp32\""), std::string::npos) << c.out;
  auto want = losses(stayed), got = losses(moved);
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(got[s], want[s]) << "step " << s + 1;  // the same bf16 run
  for (int s = 4; s < 8; ++s) {
    EXPECT_NEAR(got[s], want[s], 0.02 * want[s]) << "step " << s + 1;
    EXPECT_NE(got[s], want[s]) << "step " << s + 1 << " did not run in fp32";
  }
}

TEST_F(CliParallel, BatchesThatDoNotSplitAreRefused) {
  expect_job_error(mpirun(2, train() + " --steps 2 --grid d=2 --grad-accum 0"),
                   "--grad-accum must be 1 or more");
  expect_job_error(mpirun(2, train() + " --steps 2 --grid d=2 --grad-accum 3"),
                   "--batch 8 does not split into --grad-accum 3 micro-batches");
  expect_job_error(mpirun(4, train() + " --steps 2 --grid z=2,d=2 --grad-accum 4"),
                   "a micro-batch of 2 sequences (--batch 8 / --grad-accum 4) is not divisible by "
                   "d*z=4");
}

TEST_F(CliParallel, CheckpointOfAnotherModelIsRefusedOnEveryGrid) {
  const std::string run = (dir_ / "other").string();
  Result a = mpirun(2, train() + " --steps 2 --grid x=2 --out " + run);
  ASSERT_EQ(a.rc, 0) << a.out;
  std::ofstream(dir_ / "wider.json") << R"({"arch": "gpt2", "n_layer": 2, "n_embd": 128,
                                           "n_head": 4, "block_size": 32})";
  expect_job_error(mpirun(4, "train --model " + (dir_ / "wider.json").string() + " --data " +
                                 exodus_.data + " --steps 4 --batch 8 --seq 32 " +
                                 "--grid x=2,y=2 --resume " + run + " --out " + run),
                   "holds a model with");
}

// A Hugging Face folder (transformers' GPT2LMHeadModel, tests/data/hf/) as
// the start of a run on a grid of 8: its weights load on every rank's shards
// (the first steps' losses are one process's from the same folder: random or
// misplaced weights would give others), and 20 steps on text tokenized within
// its vocabulary lower the loss.
TEST_F(CliParallel, InitFromAHuggingFaceFolderTrainsOnAGridOf8) {
  // The folder's vocabulary has 320 ids, fewer than a SentencePiece model with
  // byte fallback needs for this text: the test's token files fold the 512
  // ids of the suite's data into 320 (a text with structure all the same).
  const fs::path data = dir_ / "data320", metrics = dir_ / "hf.jsonl";
  fs::create_directories(data);
  for (const char* f : {"train.bin", "val.bin"}) {
    const TokenFile in((fs::path(exodus_.data) / f).string());
    std::vector<int32_t> ids(in.size());
    in.copy(0, in.size(), ids.data());
    for (int32_t& id : ids) id %= 320;
    write_token_file((data / f).string(), ids);
  }
  std::ofstream(data / "meta.json") << R"({"vocab_size": 320})";
  const std::string folder = std::string(DENDRITE_SOURCE_DIR) + "/tests/data/hf/gpt2-tiny";
  const std::string run = "train --init-from " + folder + " --data " + data.string() +
                          " --batch 8 --seq 32 --steps 20 --lr 3e-3 --warmup 2 --eval-every 0 ";
  Result r = mpirun(8, run + "--grid x=2,y=2,z=2 --metrics " + metrics.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("weights from " + folder), std::string::npos) << r.out;
  const std::vector<double> l = losses(metrics);
  ASSERT_EQ(l.size(), 20u);
  const fs::path alone = dir_ / "hf-one-process.jsonl";
  Result one = mpirun(1, run + "--stop-at 2 --metrics " + alone.string());
  ASSERT_EQ(one.rc, 0) << one.out;
  const std::vector<double> want = losses(alone);
  ASSERT_EQ(want.size(), 2u);
  for (int s = 0; s < 2; ++s) EXPECT_NEAR(l[s], want[s], 1e-5 * want[s]) << "step " << s + 1;
  EXPECT_LT(l.back(), l.front() - 0.5) << "first " << l.front() << ", last " << l.back();
  expect_job_error(mpirun(2, "train --init-from " + folder + " --data " + exodus_.data +
                                 " --steps 2 --batch 8 --seq 32"),
                   "tokenize the data with that model's tokenizer");
}

// `bench step --json` on a grid of 4 (x=2, y=2): rank 0's figures per axis and
// kind of collective, and the same over all the ranks (comm_ranks): every
// kind rank 0 reports is there, its mean lies between the least and the most
// rank, rank 0 among them, and the ranks' wait for their group is reported.
TEST_F(CliParallel, BenchStepReportsTheCollectivesOverEveryRank) {
  Result r = mpirun(4, "bench step --model " + (dir_ / "gpt2.json").string() +
                           " --batch 8 --seq 32 --steps 2 --warmup 1 --threads 1 --overlap none"
                           " --grid x=2,y=2 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1));
  const nlohmann::json &comm = j.at("comm"), &ranks = j.at("comm_ranks");
  ASSERT_TRUE(comm.contains("x") && comm.contains("y")) << j.dump();
  EXPECT_FALSE(comm.contains("z") || comm.contains("d")) << j.dump();
  for (const char* axis : {"x", "y"}) {
    ASSERT_EQ(comm[axis].size(), ranks.at(axis).size()) << j.dump();
    for (auto& [kind, mine] : comm[axis].items()) {
      const nlohmann::json& all = ranks[axis].at(kind);
      const double lo = all.at("total_ms_min"), hi = all.at("total_ms_max");
      const double mean = all.at("total_ms"), rank0 = mine.at("total_ms");
      EXPECT_GT(hi, 0) << axis << " " << kind;
      EXPECT_LE(lo, mean) << axis << " " << kind;
      EXPECT_LE(mean, hi) << axis << " " << kind;
      EXPECT_LE(lo, rank0) << axis << " " << kind;
      EXPECT_LE(rank0, hi) << axis << " " << kind;
      EXPECT_NEAR(all.at("hidden_ms").get<double>(),
                  mean - all.at("exposed_ms").get<double>(), 1e-9);
      EXPECT_EQ(mine.contains("peer_wait_ms"), all.contains("peer_wait_ms")) << axis << " " << kind;
    }
  }
}

// The trace of `bench step --trace` holds, on every rank, the timed steps with
// their parts inside them, and every second the rank was blocked by a
// collective: per axis and kind, its blocking calls and waits add up to the
// exposed time `--json` reports, and their waits for peers to its peer wait.
TEST_F(CliParallel, BenchStepTraceHoldsTheStepsAndEveryBlockedSecond) {
  const fs::path trace = dir_ / "traces" / "bench.json";
  Result r = mpirun(4, "bench step --model " + (dir_ / "gpt2.json").string() +
                           " --batch 8 --seq 32 --steps 2 --warmup 1 --threads 1 --overlap all"
                           " --grid x=2,z=2 --json --trace " + trace.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1));
  std::ifstream in(trace);
  ASSERT_TRUE(in.good()) << r.out;
  const nlohmann::json events = nlohmann::json::parse(in).at("traceEvents");
  EXPECT_FALSE(fs::exists(trace.string() + ".tmp"));
  // Per rank: the step spans, the parts, and per "kind axis" the blocked time
  // and the wait for peers (milliseconds).
  struct Rank {
    std::vector<std::pair<double, double>> steps, parts;
    std::map<std::string, int> part_names;
    std::map<std::string, double> blocked, peer_wait;
    int engine_tasks = 0;
    bool named = false;
  };
  std::map<int, Rank> ranks;
  for (const nlohmann::json& e : events) {
    Rank& k = ranks[e.at("pid").get<int>()];
    if (e.at("ph") == "M") {
      if (e.at("name") == "process_name") k.named = true;
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X") << e.dump();
    const std::string name = e.at("name"), cat = e.at("cat");
    const double ts = e.at("ts"), dur = e.at("dur");
    EXPECT_GE(dur, 0) << e.dump();
    if (cat == "step") {
      const bool step = name.rfind("step ", 0) == 0;
      (step ? k.steps : k.parts).push_back({ts, ts + dur});
      if (!step) ++k.part_names[name];
    } else if (cat == "collective" || cat == "wait") {
      const std::string key = cat == "wait" ? name.substr(5) : name;  // "all_gather z"
      if (name.rfind("barrier", 0) == 0) continue;
      k.blocked[key] += dur / 1e3;
      if (e.contains("args") && e["args"].contains("peer_wait_ms"))
        k.peer_wait[key] += e["args"]["peer_wait_ms"].get<double>();
    } else {
      EXPECT_EQ(cat, "engine") << e.dump();
      EXPECT_EQ(e.at("tid"), 1) << e.dump();
      ++k.engine_tasks;
    }
  }
  ASSERT_EQ(ranks.size(), 4u);
  for (auto& [rank, k] : ranks) {
    EXPECT_TRUE(k.named) << "rank " << rank;
    ASSERT_EQ(k.steps.size(), 2u) << "rank " << rank;
    for (const char* part : {"forward and backward", "gradient norm", "optimizer",
                             "embedding forward", "layer 0 forward", "layer 1 forward",
                             "head and loss", "layer 1 backward", "layer 0 backward",
                             "embedding backward and gradient sync"})
      EXPECT_EQ(k.part_names[part], 2) << "rank " << rank << ": " << part;
    for (const auto& [b, e] : k.parts) {
      const bool inside = std::any_of(k.steps.begin(), k.steps.end(), [&](const auto& s) {
        return b >= s.first - 1e-3 && e <= s.second + 1e-3;
      });
      EXPECT_TRUE(inside) << "rank " << rank << ": a part at " << b << " us is in no step";
    }
    EXPECT_GT(k.engine_tasks, 0) << "rank " << rank << ": --overlap all posts to the engine";
  }
  // Rank 0's report against rank 0's trace (both per step in the report).
  const Rank& zero = ranks[0];
  int kinds = 0;
  for (auto& [axis, by_kind] : j.at("comm").items()) {
    for (auto& [kind, f] : by_kind.items()) {
      const std::string key = kind + " " + axis;
      const double exposed = f.at("exposed_ms").get<double>() * 2;
      const auto it = zero.blocked.find(key);
      const double traced = it == zero.blocked.end() ? 0 : it->second;
      EXPECT_NEAR(traced, exposed, 1e-6 * exposed + 1e-6) << key;
      if (f.contains("peer_wait_ms")) {
        const auto w = zero.peer_wait.find(key);
        EXPECT_NEAR(w == zero.peer_wait.end() ? 0 : w->second,
                    f["peer_wait_ms"].get<double>() * 2, 1e-6 * exposed + 1e-6)
            << key;
      }
      ++kinds;
    }
  }
  EXPECT_GE(kinds, 3) << j.dump();
}

// `train --trace` covers --trace-steps steps from the second, on every rank,
// and names them; a trace path that cannot be written fails before training.
TEST_F(CliParallel, TrainTraceCoversTheStepsAskedFor) {
  const fs::path trace = dir_ / "train_trace.json";
  Result r = mpirun(2, train() + " --steps 5 --trace-steps 2 --grid d=2 --trace " + trace.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("trace of steps 2-3"), std::string::npos) << r.out;
  std::ifstream in(trace);
  ASSERT_TRUE(in.good()) << r.out;
  std::map<int, std::vector<std::string>> steps;
  const nlohmann::json file = nlohmann::json::parse(in);
  for (const nlohmann::json& e : file.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("cat") == "step" &&
        e.at("name").get<std::string>().rfind("step ", 0) == 0)
      steps[e.at("pid").get<int>()].push_back(e.at("name"));
  ASSERT_EQ(steps.size(), 2u);
  for (auto& [rank, names] : steps)
    EXPECT_EQ(names, (std::vector<std::string>{"step 2", "step 3"})) << "rank " << rank;

  const fs::path blocked = fs::path(exodus_.text) / "trace.json";  // a file is not a folder
  Result bad = mpirun(2, train() + " --steps 2 --grid d=2 --trace " + blocked.string());
  EXPECT_NE(bad.rc, 0) << bad.out;
  EXPECT_NE(bad.out.find("--trace: cannot write"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace dendrite
