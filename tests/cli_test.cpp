// End-to-end tests of the `dendrite` command on real text (the Book of
// Genesis from Debian's bible-kjv): training lowers the validation loss,
// an interrupted and resumed run gives bit-identical losses, and every kind of
// bad input gets a clear error, a non-zero exit, and leaves files untouched.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_support.h"
#include "dendrite/backend/backend.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/io/token_file.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;

using Result = test::CommandResult;

// Runs the dendrite binary with args (a shell fragment), capturing stdout+stderr.
Result dendrite(const std::string& args) {
  return test::run_command(std::string("OMP_NUM_THREADS=2 ") + DENDRITE_BINARY + " " + args);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// The loss of every step in a metrics file, as printed (so equality is bitwise).
std::vector<std::string> losses(const fs::path& metrics) {
  std::vector<std::string> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line).at("loss").dump());
  return out;
}

// A temporary folder with Genesis tokenized (vocab 512) and two small models.
class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dendrite-cli-XXXXXX";
    dir_ = mkdtemp(tmpl);
    genesis_ = test::book_data("genesis", dir_.string());
    ASSERT_GT(fs::file_size(genesis_.text), 100000u);
    write_file(dir_ / "gpt2.json", R"({"arch": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                                       "block_size": 64})");
    write_file(dir_ / "llama.json", R"({"arch": "llama", "n_layer": 2, "n_embd": 64, "n_head": 4,
                                        "n_kv_head": 2, "ffn_hidden": 128, "block_size": 64})");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string data() { return " --data " + genesis_.data; }
  static std::string model(const char* name) { return " --model " + (dir_ / name).string(); }

  static fs::path dir_;
  static test::BookData genesis_;  // read only
};
fs::path Cli::dir_;
test::BookData Cli::genesis_;

TEST_F(Cli, TrainingLowersValidationLoss) {
  // ln(512) = 6.24 at the start; this model reaches about 4.16 after 80 steps
  // (4.40 after 60): below 4.4 it has learned more than the tokens' frequencies
  // (their entropy is 5.0 nats).
  const fs::path metrics = dir_ / "learn.jsonl";
  Result r = dendrite("train" + model("gpt2.json") + data() + " --steps 80 --batch 8 --seq 64" +
                      " --lr 3e-3 --eval-every 80 --log-every 40 --metrics " + metrics.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  double val = nlohmann::json::parse(last).at("val_loss");
  EXPECT_LT(val, 4.4) << r.out;
}

TEST_F(Cli, ResumedRunHasBitIdenticalLosses) {
  for (const char* arch : {"gpt2.json", "llama.json"}) {
    const std::string base = std::string(arch) + "-";
    const fs::path straight = dir_ / (base + "straight.jsonl"), parts = dir_ / (base + "parts.jsonl");
    const std::string common = "train" + model(arch) + data() + " --steps 12 --batch 4 --seq 32 --eval-every 0";
    Result a = dendrite(common + " --metrics " + straight.string());
    ASSERT_EQ(a.rc, 0) << a.out;
    const std::string run = (dir_ / (base + "run")).string();
    Result b = dendrite(common + " --stop-at 5 --out " + run + " --metrics " + parts.string());
    ASSERT_EQ(b.rc, 0) << b.out;
    Result c = dendrite(common + " --resume " + run + " --out " + run + " --metrics " + parts.string());
    ASSERT_EQ(c.rc, 0) << c.out;
    EXPECT_NE(c.out.find("resuming from"), std::string::npos) << c.out;
    auto l1 = losses(straight), l2 = losses(parts);
    ASSERT_EQ(l1.size(), 12u);
    EXPECT_EQ(l1, l2) << arch;
  }
}

// --gemm-tune keeps only ways that give the same bits: the same losses, and
// the choices reported after the first step.
TEST_F(Cli, GemmTuningReportsItsChoicesAndKeepsTheLosses) {
  const fs::path plain = dir_ / "plain.jsonl", tuned = dir_ / "tuned.jsonl";
  const std::string common =
      "train" + model("gpt2.json") + data() + " --steps 4 --batch 4 --seq 32 --eval-every 0";
  Result a = dendrite(common + " --metrics " + plain.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  Result b = dendrite(common + " --gemm-tune --metrics " + tuned.string());
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("gemm tuning: "), std::string::npos) << b.out;
  EXPECT_NE(b.out.find(" GEMM shapes timed in "), std::string::npos) << b.out;
  EXPECT_EQ(a.out.find("gemm tuning: "), std::string::npos) << a.out;
  EXPECT_EQ(losses(plain), losses(tuned));
  ASSERT_EQ(losses(tuned).size(), 4u);
}

// Expects a failed run whose output names the problem.
void expect_error(const Result& r, const std::string& needle) {
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << "expected '" << needle << "' in:\n" << r.out;
}

TEST_F(Cli, BadDataIsReported) {
  const std::string train = "train" + model("gpt2.json") + " --steps 2 --batch 2 --seq 16";
  expect_error(dendrite(train + " --data " + (dir_ / "nowhere").string()), "does not exist");

  const fs::path bad = dir_ / "bad-data";
  fs::copy(genesis_.data, bad, fs::copy_options::recursive);
  const fs::path bin = bad / "train.bin";
  fs::resize_file(bin, fs::file_size(bin) - 3);
  expect_error(dendrite(train + " --data " + bad.string()), "truncated");

  write_file(bin, std::string(4096, 'x'));
  expect_error(dendrite(train + " --data " + bad.string()), "bad magic");

  std::vector<int32_t> ids(1000, 7);
  ids[500] = 600;  // the vocabulary has 512 ids
  write_token_file(bin.string(), ids);
  expect_error(dendrite(train + " --data " + bad.string()), "has id 600");
}

// A bad communication setting in the environment ends the command with exit
// code 1 and the message (not an abort), on one rank and under mpirun.
TEST_F(Cli, BadEnvironmentSettingsAreReported) {
  const std::string train = "train" + model("gpt2.json") + data() + " --steps 1";
  // One setting on one rank, the other on two (every rank reads them alike).
  const auto r1 = test::mpirun_dendrite(1, train, "DENDRITE_RANKS_PER_NODE=two");
  EXPECT_EQ(r1.rc, 1) << r1.out;
  EXPECT_NE(r1.out.find("DENDRITE_RANKS_PER_NODE='two'"), std::string::npos) << r1.out;
  const auto r2 = test::mpirun_dendrite(2, train, "DENDRITE_GPU_TRANSPORT=fast");
  EXPECT_EQ(r2.rc, 1) << r2.out;
  EXPECT_NE(r2.out.find("give auto, nccl or staged"), std::string::npos) << r2.out;
}

TEST_F(Cli, BadConfigIsReported) {
  const fs::path cfg = dir_ / "typo.json";
  write_file(cfg, R"({"steps": 2, "stepz": 3})");
  expect_error(dendrite("train --config " + cfg.string() + model("gpt2.json") + data()),
                        "unknown key 'stepz'");
  const fs::path m = dir_ / "odd.json";
  write_file(m, R"({"arch": "gpt2", "n_layer": 1, "n_embd": 30, "n_head": 4})");
  expect_error(dendrite("train --steps 2 --model " + m.string() + data()), "not divisible");
  write_file(m, R"({"arch": "gpt2", "n_layers": 1})");
  expect_error(dendrite("train --steps 2 --model " + m.string() + data()), "unknown key 'n_layers'");
  expect_error(dendrite("train --steps 2 --model gpt9" + data()), "neither a preset");
  expect_error(dendrite("train --steps 2 --precision fp16" + model("gpt2.json") + data()),
               "unknown precision 'fp16'; use fp32 or bf16");
#ifdef DENDRITE_HAVE_CUDA
  // A build with the CUDA backend refuses --device cuda only where no GPU is found.
  if (default_device() != Device::kCuda)
    expect_error(dendrite("train --steps 2 --device cuda" + model("gpt2.json") + data()),
                 "no CUDA GPU is visible here");
#else
  expect_error(dendrite("train --steps 2 --device cuda" + model("gpt2.json") + data()),
               "no CUDA backend; rebuild with `cmake -DDENDRITE_CUDA=ON`");
#endif
  expect_error(dendrite("train --steps 2 --device tpu" + model("gpt2.json") + data()),
               "unknown device 'tpu'; use cpu, cuda or auto");
  write_file(cfg, R"({"steps": 2, "precision": "half"})");
  expect_error(dendrite("train --config " + cfg.string() + model("gpt2.json") + data()),
               "unknown precision 'half'");
}

TEST_F(Cli, CheckpointOfAnotherShapeIsRefusedAndKept) {
  const std::string run = (dir_ / "shape-run").string();
  Result a = dendrite("train" + model("gpt2.json") + data() + " --steps 2 --batch 2 --seq 16 --out " + run);
  ASSERT_EQ(a.rc, 0) << a.out;
  const fs::path ckpt = fs::path(run) / "ckpt-00000002" / "model.safetensors";
  const std::string before = read_file(ckpt);
  Result b = dendrite("train" + model("llama.json") + data() + " --steps 4 --batch 2 --seq 16 --resume " +
                   run + " --out " + run);
  expect_error(b, "holds a model with");
  EXPECT_EQ(read_file(ckpt), before);
  EXPECT_FALSE(fs::exists(fs::path(run) / "ckpt-00000004"));
}

TEST_F(Cli, NonFiniteLossStopsTrainingAndKeepsLastCheckpoint) {
  // A learning rate of 1e20 overflows the weights after the first update.
  const std::string run = (dir_ / "nan-run").string();
  Result r = dendrite("train" + model("gpt2.json") + data() + " --steps 6 --batch 2 --seq 16" +
                   " --lr 1e20 --warmup 0 --grad-clip 0 --save-every 1 --out " + run);
  expect_error(r, "not finite");
  EXPECT_NE(r.out.find("step 2"), std::string::npos) << r.out;
  const fs::path ckpt = fs::path(run) / "ckpt-00000001";
  EXPECT_FALSE(fs::exists(fs::path(run) / "ckpt-00000002"));
  EXPECT_EQ(read_file(fs::path(run) / "latest"), "ckpt-00000001\n");
  SafetensorsReader reader((ckpt / "model.safetensors").string());  // checksums verified
  EXPECT_TRUE(reader.has("transformer.wte.weight"));
}

// Goldfish from the command line and from a config file: the metrics and the
// progress line show the supervised fraction; a bad setting is refused.
TEST_F(Cli, GoldfishReportsTheSupervisedFraction) {
  const fs::path metrics = dir_ / "goldfish.jsonl";
  const std::string train = "train" + model("gpt2.json") + data() + " --steps 3 --batch 4 --seq 16" +
                            " --eval-every 0 --log-every 1 --metrics " + metrics.string();
  Result r = dendrite(train + " --goldfish k=4,h=4,mode=hash");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("| supervised 0."), std::string::npos) << r.out;
  std::ifstream in(metrics);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    double f = nlohmann::json::parse(line).at("supervised");
    EXPECT_GT(f, 0.6);  // 1 - 1/4 of the 13 of 16 positions with a full window: ~0.8
    EXPECT_LT(f, 1.0);
    ++n;
  }
  EXPECT_EQ(n, 3);
  const fs::path cfg = dir_ / "goldfish.json";
  write_file(cfg, R"({"goldfish": "k=4,mode=static"})");
  r = dendrite(train + " --config " + cfg.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream again(metrics);
  std::getline(again, line);
  EXPECT_EQ(nlohmann::json::parse(line).at("supervised"), 0.75);  // 4 of every 16 positions
  expect_error(dendrite(train + " --goldfish k=4,mode=random"), "mode=random");
}

TEST_F(Cli, GenerateStreamsTextFromACheckpoint) {
  const std::string run = (dir_ / "gen-run").string();
  Result a = dendrite("train" + model("gpt2.json") + data() + " --steps 3 --batch 2 --seq 16 --out " + run);
  ASSERT_EQ(a.rc, 0) << a.out;
  Result g = dendrite("generate --checkpoint " + run + " --prompt 'And God said' --tokens 20 --greedy");
  ASSERT_EQ(g.rc, 0) << g.out;
  EXPECT_EQ(g.out.rfind("And God said", 0), 0u) << g.out;
  EXPECT_GT(g.out.size(), std::string("And God said").size() + 5);
  Result again = dendrite("generate --checkpoint " + run + " --prompt 'And God said' --tokens 20 --greedy");
  EXPECT_EQ(again.out, g.out);  // greedy decoding is deterministic
  // Without the key/value cache: the same text; sampled, the same with and without.
  Result slow = dendrite("generate --checkpoint " + run +
                         " --prompt 'And God said' --tokens 20 --greedy --no-cache");
  EXPECT_EQ(slow.out, g.out);
  const std::string sampled = "generate --checkpoint " + run + " --prompt 'In the' --tokens 30 --seed 5";
  Result s1 = dendrite(sampled), s2 = dendrite(sampled + " --no-cache");
  ASSERT_EQ(s1.rc, 0) << s1.out;
  EXPECT_EQ(s1.out, s2.out);
  // Several samples of one prompt, each printed whole; the first is the single one's.
  Result three = dendrite(sampled + " --samples 3");
  ASSERT_EQ(three.rc, 0) << three.out;
  EXPECT_NE(three.out.find("--- sample 3 ---\nIn the"), std::string::npos) << three.out;
  EXPECT_NE(three.out.find("--- sample 1 ---\n" + s1.out), std::string::npos) << three.out;
  expect_error(dendrite("generate --checkpoint " + run + " --samples 0"), "--samples");
}

TEST_F(Cli, CheckpointKeepsAHuggingFaceSentencePieceTokenizer) {
  // tests/data/hf/sp holds a tokenizer.model alone, which the library encodes whole
  // (not line by line as Dendrite's own): the checkpoint must say so.
  const std::string sp = std::string(DENDRITE_SOURCE_DIR) + "/tests/data/hf/sp";
  const fs::path data = dir_ / "sp-data", run = dir_ / "sp-run";
  Result t = dendrite("tokenize --tokenizer " + sp + " --input " + genesis_.text + " --out " +
                      data.string());
  ASSERT_EQ(t.rc, 0) << t.out;
  Result a = dendrite("train" + model("gpt2.json") + " --data " + data.string() +
                      " --steps 1 --batch 2 --seq 16 --out " + run.string());
  ASSERT_EQ(a.rc, 0) << a.out;
  const std::string ckpt = (run / "ckpt-00000001").string();
  std::unique_ptr<TextTokenizer> theirs = open_tokenizer(sp),
                                 kept = open_tokenizer(checkpoint_tokenizer(ckpt));
  EXPECT_EQ(kept->format(), "hf-sentencepiece");
  const std::string text = "And God said,\n  Let there be light.\n\n";
  EXPECT_EQ(kept->encode(text), theirs->encode(text));
}

}  // namespace
}  // namespace dendrite
