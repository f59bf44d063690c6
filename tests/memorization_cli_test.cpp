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

// The fixture memorization_data (tests/make_memorization_data.sh) made the
// text, the canaries, the control text, the data and the trained model once
// for every test; what a test writes goes to a folder of its own.
class Memorization : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dendrite-mem-XXXXXX";
    scratch_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(scratch_); }
  static std::string made(const char* name) { return (fs::path(kMade) / name).string(); }
  static std::string data() { return made("data"); }
  static std::string canary_data() { return made("canary-data"); }
  static std::string memorize() {
    return "memorization --checkpoint " + made("run") + " --data " + data() + " --control " +
           made("control.txt") + " --prefix 12 --suffix 12 --samples 12 --batch 4";
  }
  static constexpr const char* kMade = DENDRITE_MEMORIZATION_DATA;
  fs::path scratch_;
};

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
  const std::string dose = (scratch_ / "dose-data").string();
  Result r = dendrite("tokenize --input " + made("text.txt") + " --vocab-size 300 --out " + dose +
                      " --canaries " + made("canaries.txt") + " --canary-repeat 1,3");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("4 copies"), std::string::npos) << r.out;
  nlohmann::json c = nlohmann::json::parse(std::ifstream(dose + "/canaries.json"));
  EXPECT_EQ(c.at("repeat"), nlohmann::json({1, 3}));
  EXPECT_EQ(c.at("canaries").size(), 4u);
  r = dendrite("memorization --checkpoint " + made("run") + " --data " + dose +
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
  Result bad = dendrite("tokenize --input " + made("text.txt") + " --out " + dose +
                        "-bad --canaries " + made("canaries.txt") + " --canary-repeat 1,0");
  EXPECT_NE(bad.rc, 0);
}

}  // namespace
}  // namespace dendrite
