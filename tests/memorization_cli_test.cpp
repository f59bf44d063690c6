// `dendrite tokenize --canaries` and `dendrite memorization` end to end: the
// canaries land in train.bin (never val.bin) where canaries.json says; a tiny
// model trained on a tiny repeated text scores exact match 1.0 on it, on one
// process and on a grid under mpirun (the same figures); --json and the table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.h"
#include "dendrite/io/token_file.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;
using Result = test::CommandResult;

// One thread: these models are tiny, and on a busy machine two threads wait on each other.
Result dendrite(const std::string& args) {
  return test::run_command(std::string("OMP_NUM_THREADS=1 ") + DENDRITE_BINARY + " " + args);
}

Result mpirun(int ranks, const std::string& args) { return test::mpirun_dendrite(ranks, args); }

const char* kPassage =
    "The quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire, "
    "and seven bold wizards quietly hex the jumping frogs before dawn breaks over the hills.";

class Memorization : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dendrite-mem-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::ofstream text(dir_ / "text.txt");
    for (int i = 0; i < 300; ++i) text << kPassage << "\n";
    text.close();
    std::ofstream(dir_ / "canaries.txt") << "Zebras eat kiwis.\n%\nA xylophone plays jazz quietly.\n";
    std::ofstream(dir_ / "control.txt")
        << "Violet mushrooms grow under ancient oak trees beside a quiet river bank every spring "
           "while owls hoot softly and foxes wander past the old stone bridge at night.\n";
    const std::string tokenize = "tokenize --input " + (dir_ / "text.txt").string() + " --vocab-size 300";
    Result r = dendrite(tokenize + " --out " + data());
    ASSERT_EQ(r.rc, 0) << r.out;
    r = dendrite(tokenize + " --out " + canary_data() + " --canaries " +
                 (dir_ / "canaries.txt").string() + " --canary-repeat 3");
    ASSERT_EQ(r.rc, 0) << r.out;
  }
  // Trains the tiny model once per process, for the tests that need it (ctest
  // runs each test in a process of its own).
  static void train_once() {
    if (fs::exists(dir_ / "run" / "latest")) return;
    std::ofstream(dir_ / "tiny.json") << R"({"arch": "gpt2", "n_layer": 2, "n_embd": 64,
                                            "n_head": 4, "block_size": 32})";
    Result r = dendrite("train --model " + (dir_ / "tiny.json").string() + " --data " + data() +
                        " --steps 200 --batch 8 --seq 32 --lr 1e-2 --warmup 10 --eval-every 0 --out " +
                        (dir_ / "run").string());
    ASSERT_EQ(r.rc, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string data() { return (dir_ / "data").string(); }
  static std::string canary_data() { return (dir_ / "canary-data").string(); }
  static std::string memorize() {
    return "memorization --checkpoint " + (dir_ / "run").string() + " --data " + data() +
           " --control " + (dir_ / "control.txt").string() +
           " --prefix 12 --suffix 12 --samples 12 --batch 4";
  }
  static fs::path dir_;
};
fs::path Memorization::dir_;

TEST_F(Memorization, CanariesSitInTrainWhereTheLocationsSay) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(canary_data() + "/canaries.json"));
  ASSERT_EQ(j.at("canaries").size(), 6u);  // 2 passages x 3
  EXPECT_EQ(j.at("repeat"), 3);
  TokenFile train(canary_data() + "/train.bin"), val(canary_data() + "/val.bin");
  Tokenizer tok(canary_data() + "/tokenizer.model");
  for (const auto& c : j.at("canaries")) {
    const std::vector<int32_t> ids = tok.encode(c.at("text").get<std::string>());
    ASSERT_EQ(int64_t(ids.size()), c.at("length").get<int64_t>());
    std::vector<int32_t> got(ids.size());
    train.copy(c.at("offset").get<uint64_t>(), ids.size(), got.data());
    EXPECT_EQ(got, ids) << c.dump();
  }
  std::vector<int32_t> v(val.size());
  val.copy(0, v.size(), v.data());
  EXPECT_EQ(tok.decode(v).find("Zebras"), std::string::npos);
  EXPECT_EQ(tok.decode(v).find("xylophone"), std::string::npos);
}

TEST_F(Memorization, TinyModelReproducesItsTextOnAnyGrid) {
  ASSERT_NO_FATAL_FAILURE(train_once());
  Result one = dendrite(memorize() + " --json");
  ASSERT_EQ(one.rc, 0) << one.out;
  nlohmann::json j = nlohmann::json::parse(one.out);
  EXPECT_EQ(j.at("train").at("n"), 12);
  EXPECT_EQ(j.at("train").at("exact_match").at("value"), 1.0) << one.out;
  EXPECT_EQ(j.at("train").at("rouge_l").at("value"), 1.0) << one.out;
  EXPECT_FALSE(j.contains("canaries"));  // no canaries.json beside this data
  EXPECT_EQ(j.at("control").at("n"), 1);
  EXPECT_LT(j.at("control").at("exact_match").at("value"), 1.0) << one.out;
  // The same figures on a grid that splits the batch over z and the vocabulary over y.
  Result grid = mpirun(4, memorize() + " --grid y=2,z=2 --json");
  ASSERT_EQ(grid.rc, 0) << grid.out;
  nlohmann::json g = nlohmann::json::parse(grid.out);
  for (const char* set : {"train", "control"})
    EXPECT_EQ(g.at(set).at("token_match"), j.at(set).at("token_match")) << set << "\n" << grid.out;
  // The table.
  Result table = dendrite(memorize());
  ASSERT_EQ(table.rc, 0) << table.out;
  EXPECT_NE(table.out.find("exact match"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("control"), std::string::npos) << table.out;
}

TEST_F(Memorization, BadOptionsAreReported) {
  ASSERT_NO_FATAL_FAILURE(train_once());
  Result r = dendrite(memorize() + " --prefix 30 --suffix 10");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("block size"), std::string::npos) << r.out;
  r = mpirun(2, memorize() + " --grid z=2 --batch 3");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("not divisible"), std::string::npos) << r.out;
}

// tokenize --canary-repeat 1,3: passage 0 once, passage 1 three times; the
// memorization report scores all canaries and each copy count on its own,
// from the same decoded continuations.
TEST_F(Memorization, CanariesByCopyCount) {
  ASSERT_NO_FATAL_FAILURE(train_once());
  const std::string dose = (dir_ / "dose-data").string();
  Result r = dendrite("tokenize --input " + (dir_ / "text.txt").string() +
                      " --vocab-size 300 --out " + dose + " --canaries " +
                      (dir_ / "canaries.txt").string() + " --canary-repeat 1,3");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("4 copies"), std::string::npos) << r.out;
  nlohmann::json c = nlohmann::json::parse(std::ifstream(dose + "/canaries.json"));
  EXPECT_EQ(c.at("repeat"), nlohmann::json({1, 3}));
  EXPECT_EQ(c.at("canaries").size(), 4u);
  r = dendrite("memorization --checkpoint " + (dir_ / "run").string() + " --data " + dose +
               " --prefix 3 --suffix 4 --samples 4 --batch 2 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("canaries x1") && j.contains("canaries x3")) << r.out;
  EXPECT_EQ(j.at("canaries").at("n"), 2);
  EXPECT_EQ(j.at("canaries x1").at("n"), 1);
  EXPECT_EQ(j.at("canaries x3").at("n"), 1);
  const double all = j.at("canaries").at("token_match").at("value").get<double>();
  const double one = j.at("canaries x1").at("token_match").at("value").get<double>();
  const double three = j.at("canaries x3").at("token_match").at("value").get<double>();
  EXPECT_NEAR(all, (one + three) / 2, 1e-12);
  Result bad = dendrite("tokenize --input " + (dir_ / "text.txt").string() + " --out " + dose +
                        "-bad --canaries " + (dir_ / "canaries.txt").string() +
                        " --canary-repeat 1,0");
  EXPECT_NE(bad.rc, 0);
}

}  // namespace
}  // namespace dendrite
