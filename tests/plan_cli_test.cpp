// `dendrite train --grid auto` under mpirun: the grid it prints and trains on
// is the one `dendrite plan --json` ranks first for the same job (model, batch,
// sequence, world size, ranks per node, machine file); without --machine it
// says it plans on a generic description of the node, and still trains. Also
// `plan --sweep --json`, calibrate --links-from and --compute-from, and
// the shared-memory level of a machine file with its switch (--no-shared-memory).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>

#include "cli_support.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;
using Result = test::CommandResult;

const std::string kEnv =
    "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
    "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 ";

Result dendrite(const std::string& args) {
  return test::run_command(kEnv + DENDRITE_BINARY + " " + args);
}

Result mpirun(int ranks, const std::string& args) { return test::mpirun_dendrite(ranks, args); }

// `plan --world 2 --json` on a machine file (env: variables before the command,
// flags: more options): the whole answer, and its z=2 row.
nlohmann::json plan_world2(const std::string& env, const std::string& machine,
                           const std::string& flags) {
  Result r = test::run_command(env + kEnv + DENDRITE_BINARY + " plan --model gpt2-124m --world 2 "
                               "--json --machine " + machine + flags);
  EXPECT_EQ(r.rc, 0) << r.out;
  return nlohmann::json::parse(r.out.substr(r.out.find('{')));
}
nlohmann::json z2_row(const nlohmann::json& plan) {
  for (auto& p : plan["ranked"])
    if (p["grid"] == "x=1,y=1,z=2,d=1") return p;
  ADD_FAILURE() << "no z=2 in " << plan.dump();
  return nlohmann::json{};
}

// The grid on the "grid auto: <grid>, predicted" line ("" when absent).
std::string printed_grid(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("grid auto: (x=\\d+,y=\\d+,z=\\d+,d=\\d+), predicted"))
             ? m[1].str() : "";
}

class PlanCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dendrite-plan-cli-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::mt19937 rng(1);  // 200 KB of sentences from a small word list
    const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "aaron", "people", "of",
                           "israel", "go", "forth", "land", "egypt", "pharaoh", "heart", "water",
                           "blood", "river", "day", "night", "house", "bread", "king", "son",
                           "daughter"};
    std::ofstream text(dir_ / "text.txt");
    for (int s = 0; s < 3000; ++s) {
      for (int w = 0; w < 12; ++w) text << words[rng() % std::size(words)] << (w < 11 ? " " : ".\n");
    }
    text.close();
    Result r = dendrite("tokenize --input " + (dir_ / "text.txt").string() +
                        " --vocab-size 512 --out " + (dir_ / "data").string());
    ASSERT_EQ(r.rc, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string job() { return " --model gpt2-mini --batch 4 --seq 32"; }
  static std::string train() {
    return "train" + job() + " --steps 2 --eval-every 0 --data " + (dir_ / "data").string();
  }
  static fs::path dir_;
};
fs::path PlanCli::dir_;

TEST_F(PlanCli, TrainGridAutoIsThePlansFirstChoice) {
  const std::string machine = std::string(DENDRITE_SOURCE_DIR) + "/machines/perlmutter.json";
  for (int P : {2, 4}) {
    Result plan = dendrite("plan --json" + job() + " --world " + std::to_string(P) +
                           " --ranks-per-node " + std::to_string(P) + " --machine " + machine);
    ASSERT_EQ(plan.rc, 0) << plan.out;
    const nlohmann::json j = nlohmann::json::parse(plan.out);
    ASSERT_GE(j.at("ranked").size(), 2u);
    const std::string first = j["ranked"][0]["grid"], second = j["ranked"][1]["grid"];
    Result run = mpirun(P, train() + " --grid auto --machine " + machine);
    ASSERT_EQ(run.rc, 0) << run.out;
    EXPECT_EQ(printed_grid(run.out), first) << run.out;
    EXPECT_NE(run.out.find("runner-up " + second), std::string::npos) << run.out;
    // The trainer ran on that grid (every rank built it: the run finished).
    EXPECT_NE(run.out.find("grid " + first), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("step     2/2"), std::string::npos) << run.out;
  }
}

TEST_F(PlanCli, TrainGridAutoWithoutMachineFileSaysSo) {
  Result run = mpirun(2, train() + " --grid auto");
  ASSERT_EQ(run.rc, 0) << run.out;
  EXPECT_NE(run.out.find("generic description"), std::string::npos) << run.out;
  const std::string grid = printed_grid(run.out);
  ASSERT_FALSE(grid.empty()) << run.out;
  EXPECT_NE(run.out.find("grid " + grid), std::string::npos) << run.out;
  Result bad = mpirun(2, train() + " --grid auto --machine /nonexistent/m.json");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("dendrite calibrate"), std::string::npos) << bad.out;
}

TEST_F(PlanCli, SweepJson) {
  const std::string machines = std::string(DENDRITE_SOURCE_DIR) + "/machines/";
  Result sweep = dendrite("plan --sweep --json --overlap all --machine " + machines + "frontier.json");
  ASSERT_EQ(sweep.rc, 0) << sweep.out;
  const nlohmann::json j = nlohmann::json::parse(sweep.out);
  ASSERT_EQ(j.at("points").size(), 7u);
  EXPECT_EQ(j["batch"], 2048);
  EXPECT_DOUBLE_EQ(j["points"][0]["efficiency"].get<double>(), 1.0);
  int last = 0;
  for (const auto& p : j["points"]) {
    EXPECT_GT(p["gpus"].get<int>(), last);
    last = p["gpus"];
    std::smatch m;
    const std::string grid = p["grid"];
    ASSERT_TRUE(std::regex_match(grid, m, std::regex("x=(\\d+),y=(\\d+),z=(\\d+),d=(\\d+)")));
    EXPECT_EQ(std::stoi(m[1]) * std::stoi(m[2]) * std::stoi(m[3]) * std::stoi(m[4]), last);
  }
}

// `plan --json` on a machine file with a shared-memory level: z=2 is predicted
// faster over shared memory than with --no-shared-memory (or
// DENDRITE_SHARED_MEMORY=0, as the trainer reads it), with the same bytes.
TEST_F(PlanCli, SharedMemoryLevelAndItsSwitch) {
  const std::string machine = (dir_ / "shm_machine.json").string();
  std::ofstream(machine) << R"({"name": "shm", "ranks_per_node": 2, "threads_per_rank": 1,
    "cores_per_node": 2, "memory_per_rank_bytes": 8e9, "peak_gflops": 50,
    "memory_bandwidth": 10e9, "gemm": [],
    "collectives": {"node": {"bandwidth": 3.5e9, "latency": 20e-6},
                    "network": {"bandwidth": 3.5e9, "latency": 20e-6},
                    "shm": {"bandwidth": 12e9, "latency": 5e-6}}})";
  auto z2 = [&](const std::string& env, const std::string& flag) {
    const nlohmann::json j = plan_world2(env, machine, flag);
    return std::pair{j["shared_memory"].get<bool>(), z2_row(j)};
  };
  const auto [on, shm] = z2("", "");
  const auto [off, msg] = z2("", " --no-shared-memory");
  const auto [env_off, msg_env] = z2("DENDRITE_SHARED_MEMORY=0 ", "");
  EXPECT_TRUE(on);
  EXPECT_FALSE(off);
  EXPECT_FALSE(env_off);
  EXPECT_LT(shm["step_ms"].get<double>(), msg["step_ms"].get<double>());
  EXPECT_EQ(shm["comm_bytes"], msg["comm_bytes"]);
  EXPECT_EQ(msg["step_ms"], msg_env["step_ms"]);
}

// `plan --precision bf16`: the Z gathers move half the bytes, the GEMMs run
// at the machine's bf16 rates (here twice the fp32 ones), a machine without
// them says the fp32 rates stand in, and an unknown precision is refused.
TEST_F(PlanCli, Bf16PrecisionHalvesTheGathersAndUsesItsRates) {
  const std::string machine = (dir_ / "bf16_machine.json").string();
  std::ofstream(machine) << R"({"name": "bf16", "ranks_per_node": 2, "threads_per_rank": 1,
    "memory_per_rank_bytes": 80e9, "peak_gflops": 50, "memory_bandwidth": 10e9,
    "gemm": [{"m": 256, "n": 768, "k": 768, "gflops": 40}],
    "gemm_bf16": [{"m": 256, "n": 768, "k": 768, "gflops": 80}],
    "collectives": {"node": {"bandwidth": 3.5e9, "latency": 20e-6},
                    "network": {"bandwidth": 3.5e9, "latency": 20e-6}}})";
  auto z2 = [&](const std::string& flags) {
    // A batch whose Z group holds more rows than the vocabulary: the embedding
    // gathers its block too (plan/volume.cpp), so every Z gather is a weight's.
    return z2_row(plan_world2("", machine, " --batch 1024" + flags));
  };
  const nlohmann::json f32 = z2(""), b16 = z2(" --precision bf16");
  EXPECT_EQ(b16["comm_bytes"]["z.all_gather"].get<int64_t>() * 2,
            f32["comm_bytes"]["z.all_gather"].get<int64_t>());
  EXPECT_NEAR(b16["gemm_ms"].get<double>() * 2, f32["gemm_ms"].get<double>(),
              1e-9 * f32["gemm_ms"].get<double>());
  // Measured fp32 rates without bf16 ones: the fp32 rates stand in (a file of
  // published figures, without a table, gives one peak for both and no note).
  std::ofstream(machine) << R"({"name": "plain", "ranks_per_node": 2, "threads_per_rank": 1,
    "memory_per_rank_bytes": 8e9, "peak_gflops": 50, "memory_bandwidth": 10e9,
    "gemm": [{"m": 256, "n": 768, "k": 768, "gflops": 40}],
    "collectives": {
      "node": {"bandwidth": 3.5e9, "latency": 20e-6}, "network": {"bandwidth": 3.5e9, "latency": 20e-6}}})";
  Result plain = dendrite("plan --model gpt2-124m --world 2 --precision bf16 --machine " + machine);
  EXPECT_EQ(plain.rc, 0) << plain.out;
  EXPECT_NE(plain.out.find("no bf16 GEMM rates"), std::string::npos) << plain.out;
  Result published = dendrite("plan --model gpt2-124m --world 2 --precision bf16 --machine " +
                              std::string(DENDRITE_SOURCE_DIR) + "/machines/h200-node.json");
  EXPECT_EQ(published.rc, 0) << published.out;
  EXPECT_EQ(published.out.find("no bf16 GEMM rates"), std::string::npos) << published.out;
  Result bad = dendrite("plan --model gpt2-124m --world 2 --precision fp8 --machine " + machine);
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("unknown precision 'fp8'"), std::string::npos) << bad.out;
}

// `plan --model DIR` of a Hugging Face folder plans the folder's model: the
// same figures as the same model written as Dendrite's JSON.
TEST_F(PlanCli, AHuggingFaceFolderPlansAsItsModel) {
  const std::string folder = std::string(DENDRITE_SOURCE_DIR) + "/tests/data/hf/llama-tiny";
  const std::string json = (dir_ / "llama-tiny.json").string();
  std::ofstream(json) << R"({"arch": "llama", "vocab_size": 320, "n_layer": 2, "n_embd": 64,
    "n_head": 4, "n_kv_head": 2, "ffn_hidden": 176, "block_size": 64, "norm_eps": 1e-5,
    "rope_theta": 50000, "tie_embeddings": false})";
  const std::string machine = std::string(DENDRITE_SOURCE_DIR) + "/machines/h200-node.json";
  Result a = dendrite("plan --json --world 2 --batch 4 --seq 16 --machine " + machine +
                      " --model " + folder);
  Result b = dendrite("plan --json --world 2 --batch 4 --seq 16 --machine " + machine +
                      " --model " + json);
  ASSERT_EQ(a.rc, 0) << a.out;
  ASSERT_EQ(b.rc, 0) << b.out;
  const nlohmann::json pa = nlohmann::json::parse(a.out), pb = nlohmann::json::parse(b.out);
  ASSERT_FALSE(pa["ranked"].empty()) << a.out;
  EXPECT_EQ(pa["ranked"], pb["ranked"]);
}

// `calibrate` on 2 ranks times every collective at several sizes over the
// node's path, shared memory and plain MPI messages (the messages level, the
// network's stand-in); `plan --simulate-nodes 1` (or DENDRITE_RANKS_PER_NODE=1)
// then puts each pair across nodes: the same bytes, the network's figures.
TEST_F(PlanCli, CalibratedPointsAndSimulatedNodes) {
  const std::string machine = (dir_ / "calibrated.json").string();
  Result cal = mpirun(2, "calibrate --quick --threads 1 --out " + machine);
  ASSERT_EQ(cal.rc, 0) << cal.out;
  nlohmann::json m = nlohmann::json::parse(std::ifstream(machine));
  for (const char* level : {"node", "shm", "messages", "network"})
    for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter"}) {
      const nlohmann::json& l = m["collectives"][level][kind];
      ASSERT_EQ(l["points"].size(), 2u) << level << " " << kind;
      EXPECT_EQ(l["group"], 2);
      EXPECT_GT(l["points"][1][1].get<double>(), 0.0);
    }
  EXPECT_EQ(m["collectives"]["network"], m["collectives"]["messages"]);
  auto z2 = [&](const std::string& env, const std::string& flag) {
    const nlohmann::json j = plan_world2(env, machine, flag);
    return std::pair{j["node_span"].get<int>(), z2_row(j)};
  };
  const auto [span, one_node] = z2("", "");
  const auto [span1, split] = z2("", " --simulate-nodes 1");
  const auto [span_env, split_env] = z2("DENDRITE_RANKS_PER_NODE=1 ", "");
  EXPECT_EQ(span, 2);
  EXPECT_EQ(span1, 1);
  EXPECT_EQ(span_env, 1);
  EXPECT_EQ(one_node["comm_bytes"], split["comm_bytes"]);
  EXPECT_NE(one_node["comm_ms"]["z"], split["comm_ms"]["z"]);
  EXPECT_EQ(split["step_ms"], split_env["step_ms"]);
  Result bad = dendrite("plan --world 2 --machine " + machine + " --simulate-nodes 0");
  EXPECT_NE(bad.rc, 0);
}

// `calibrate --links-from FILE` on one rank: the GEMM rates and memory are
// measured here, while what one rank cannot measure (the network, the node's
// collectives and its ranks: one GPU of a node of 8) comes from FILE.
TEST_F(PlanCli, CalibrateTakesWhatItCannotMeasureFromLinksFrom) {
  const std::string published = std::string(DENDRITE_SOURCE_DIR) + "/machines/h200-node.json";
  const std::string machine = (dir_ / "links_from.json").string();
  Result cal = dendrite("calibrate --quick --device cpu --threads 1 --links-from " + published +
                        " --out " + machine);
  ASSERT_EQ(cal.rc, 0) << cal.out;
  const nlohmann::json m = nlohmann::json::parse(std::ifstream(machine));
  const nlohmann::json from = nlohmann::json::parse(std::ifstream(published));
  EXPECT_EQ(m["ranks_per_node"], 8);
  EXPECT_DOUBLE_EQ(m["collectives"]["network"]["bandwidth"].get<double>(), 50e9);
  EXPECT_DOUBLE_EQ(m["collectives"]["node"]["bandwidth"].get<double>(), 450e9);
  EXPECT_FALSE(m["gemm"].empty());  // measured here
  EXPECT_NE(m["peak_gflops"], from["peak_gflops"]);
  EXPECT_NE(m["notes"].get<std::string>().find("h200-node.json"), std::string::npos) << m.dump();
  // The file plans 8 ranks as one node of 8.
  Result plan = dendrite("plan --model gpt2-124m --world 8 --json --machine " + machine);
  EXPECT_EQ(plan.rc, 0) << plan.out;
  EXPECT_EQ(nlohmann::json::parse(plan.out.substr(plan.out.find('{')))["node_span"], 8);
}

// `calibrate --compute-from FILE` on 2 ranks: FILE's compute figures stay,
// the collectives and the wait for peers are this run's (groups of 2), and
// the plan charges that wait to the axes' collectives; a thread count other
// than FILE's is refused.
TEST_F(PlanCli, CalibrateComputeFromKeepsTheComputeAndMeasuresTheRest) {
  const std::string from = (dir_ / "compute_from.json").string();
  const std::string machine = (dir_ / "collectives_here.json").string();
  std::ofstream(from) << R"({"name": "compute", "ranks_per_node": 1, "threads_per_rank": 1,
    "memory_per_rank_bytes": 8e9, "peak_gflops": 12.5, "memory_bandwidth": 7e9,
    "gemm": [{"m": 256, "n": 768, "k": 768, "gflops": 11}],
    "collectives": {"node": {"bandwidth": 1e12, "latency": 0}, "network": {"bandwidth": 1e12, "latency": 0}}})";
  Result cal = mpirun(2, "calibrate --quick --device cpu --threads 1 --compute-from " + from +
                             " --out " + machine);
  ASSERT_EQ(cal.rc, 0) << cal.out;
  const nlohmann::json m = nlohmann::json::parse(std::ifstream(machine));
  EXPECT_DOUBLE_EQ(m["peak_gflops"].get<double>(), 12.5);
  ASSERT_EQ(m["gemm"].size(), 1u);
  EXPECT_DOUBLE_EQ(m["gemm"][0]["gflops"].get<double>(), 11);
  EXPECT_EQ(m["ranks_per_node"], 2);
  EXPECT_EQ(m["collectives"]["node"]["all_reduce"]["group"], 2);
  ASSERT_TRUE(m.contains("peer_wait_fraction")) << m.dump();
  const double f = m["peer_wait_fraction"]["2"].get<double>();
  EXPECT_GE(f, 0.0);
  EXPECT_EQ(m["oversubscribed_call_penalty_s"], 0.0);
  EXPECT_NE(m["notes"].get<std::string>().find("compute figures from"), std::string::npos);
  // The plan's wait: the fraction of the compute between the pair's calls, up
  // to the interval it was measured over, on the axis of the pair.
  const double interval_ms = 1e3 * m["peer_wait_interval_s"].get<double>();
  EXPECT_GT(interval_ms, 0.0);
  nlohmann::json row = z2_row(plan_world2("", machine, ""));
  double calls = 0;
  for (auto& [key, n] : row["comm_calls"].items()) calls += n.get<double>();
  const double compute = row["compute_ms"].get<double>();
  EXPECT_NEAR(row["peer_wait_ms"].get<double>(), f * std::min(compute, calls * interval_ms),
              1e-6 * compute);
  EXPECT_DOUBLE_EQ(row["peer_wait_ms"].get<double>(), row["peer_wait_axis_ms"]["z"].get<double>());
  // Every group size calibrate formed keeps its own figures: here only 2, the largest.
  EXPECT_FALSE(m["collectives"]["node"].contains("groups"));
  Result threads = mpirun(2, "calibrate --quick --device cpu --threads 2 --compute-from " + from +
                                 " --out " + machine);
  EXPECT_NE(threads.rc, 0);
  EXPECT_NE(threads.out.find("run with --threads 1"), std::string::npos) << threads.out;
}

}  // namespace
}  // namespace dendrite
