// Machine files of the performance model (src/dendrite/plan/machine.h): the
// JSON round trip and its errors, the GEMM rate of the nearest shape, the
// shared-memory level, and the collectives' points per group size. No MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "dendrite/plan/machine.h"
#include "dendrite/plan/model.h"
#include "plan_support.h"

namespace dendrite {
namespace {

using test::error_of;
using test::shm_machine;
using test::test_machine;

TEST(Machine, JsonAndFileRoundTrip) {
  const Machine m = test_machine();
  const Machine back = machine_from_json(to_json(m));
  EXPECT_EQ(to_json(back), to_json(m));
  EXPECT_EQ(back.gemm.size(), 2u);
  EXPECT_DOUBLE_EQ(back.node.get("all_gather").bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(back.node.get("reduce_scatter").bandwidth, 1e9);  // the level's default
  const std::string path = testing::TempDir() + "/plan_test_machine.json";
  save_machine(m, path);
  EXPECT_EQ(to_json(load_machine(path)), to_json(m));
  std::remove(path.c_str());
}

TEST(Machine, ErrorsNameTheField) {
  const nlohmann::json good = to_json(test_machine());
  nlohmann::json j = good;
  j["ranks_per_nod"] = 4;
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("unknown key \"ranks_per_nod\""),
            std::string::npos);
  j = good;
  j.erase("peak_gflops");
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("missing field \"peak_gflops\""),
            std::string::npos);
  j = good;
  j["collectives"]["network"]["bandwidth"] = -1;
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("collectives.network"), std::string::npos);
  j = good;
  j["memory_bandwidth"] = "fast";
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("must be a number"), std::string::npos);
  j = good;
  j["gemm"][0]["flops"] = 3;
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("gemm[0]"), std::string::npos);
  EXPECT_NE(error_of([] { load_machine("/nonexistent/m.json"); }).find("dendrite calibrate"),
            std::string::npos);
  j = good;
  j["device"] = "tpu";
  EXPECT_NE(error_of([&] { machine_from_json(j); }).find("\"device\" must be \"cpu\" or \"gpu\""),
            std::string::npos);
}

// "device": a GPU node's file says "gpu" and keeps it through a round trip;
// a file without the key (written before it) is a CPU node.
TEST(Machine, DeviceRoundTripAndOlderFilesAreCpuNodes) {
  Machine m = test_machine();
  m.gpu = true;
  EXPECT_EQ(to_json(m).at("device"), "gpu");
  EXPECT_TRUE(machine_from_json(to_json(m)).gpu);
  nlohmann::json older = to_json(m);
  older.erase("device");
  EXPECT_FALSE(machine_from_json(older).gpu);
  for (const char* name : {"alps", "frontier", "h100-node", "h200-node", "perlmutter"})
    EXPECT_TRUE(load_machine(std::string(DENDRITE_SOURCE_DIR) + "/machines/" + name + ".json").gpu)
        << name;
}

TEST(Machine, GemmRateNearestShape) {
  const Machine m = test_machine();
  EXPECT_DOUBLE_EQ(m.gemm_gflops(256, 768, 768), 50);
  EXPECT_DOUBLE_EQ(m.gemm_gflops(300, 800, 800), 50);  // nearest in log distance
  EXPECT_DOUBLE_EQ(m.gemm_gflops(2048, 3072, 768), 80);
  EXPECT_DOUBLE_EQ(m.gemm_gflops(128, 768, 768), 25);  // below the smallest m: linear
  Machine flat = m;
  flat.gemm.clear();
  flat.gemm_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(flat.gemm_gflops(7, 7, 7), 50);
}

TEST(SharedMemory, LevelRoundTripAndOlderFilesLoad) {
  const Machine m = shm_machine();
  const nlohmann::json j = to_json(m);
  ASSERT_TRUE(j.at("collectives").contains("shm"));
  const Machine back = machine_from_json(j);
  EXPECT_TRUE(back.has_shm);
  EXPECT_EQ(to_json(back), j);
  EXPECT_DOUBLE_EQ(back.shm.get("reduce_scatter").bandwidth, 20e9);
  EXPECT_DOUBLE_EQ(back.shm.get("all_gather").latency, 5e-6);  // the level's default
  // A file without the level (written before it) loads, without shm figures.
  nlohmann::json old = j;
  old["collectives"].erase("shm");
  const Machine legacy = machine_from_json(old);
  EXPECT_FALSE(legacy.has_shm);
  EXPECT_FALSE(to_json(legacy).at("collectives").contains("shm"));
  // ... and the shm link then falls back to the node's message figures.
  EXPECT_DOUBLE_EQ(legacy.link("all_gather", 1, 2, true).bandwidth, 2e9);
  // The level is as strict as the others.
  nlohmann::json bad = j;
  bad["collectives"]["shm"]["bandwith"] = 1;
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("collectives.shm"), std::string::npos);
  bad = j;
  bad["collectives"]["shm"]["all_gather"] = {{"bandwidth", -1}, {"latency", 0}};
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("positive"), std::string::npos);
}

// Measured points: a call's seconds interpolated between them, extended at the
// link's bandwidth beyond the largest, and looked up for other group sizes at
// the bytes that put as much on each link.
TEST(LinkPoints, InterpolateExtendAndScaleByGroup) {
  LinkCost l(1e9, 0);
  l.group = 2;
  l.points = {{1e3, 10e-6}, {1e5, 50e-6}, {1e7, 5e-3}};
  EXPECT_DOUBLE_EQ(l.seconds(500, 2, 2), 10e-6);  // below: the smallest call's time
  EXPECT_DOUBLE_EQ(l.seconds(1e3, 2, 2), 10e-6);
  EXPECT_NEAR(l.seconds(50500, 2, 2), 30e-6, 1e-15);  // halfway between 1e3 and 1e5
  EXPECT_NEAR(l.seconds(1e7, 2, 2), 5e-3, 1e-15);
  // Beyond the largest: + f (group-1)/group extra bytes / bandwidth = 2 * 1/2 * 1e7 / 1e9.
  EXPECT_NEAR(l.seconds(2e7, 2, 2), 5e-3 + 1e-2, 1e-12);
  // Four ranks move (3/4) / (1/2) = 1.5 times the bytes per link: 1e5 bytes look up 1.5e5.
  EXPECT_NEAR(l.seconds(1e5, 4, 2), 50e-6 + (5e-3 - 50e-6) * 0.5e5 / (1e7 - 1e5), 1e-15);
  EXPECT_EQ(l.seconds(1e5, 1, 2), 0.0);
  // Without points: the ring formula.
  EXPECT_NEAR(LinkCost(1e9, 1e-6).seconds(1e6, 4, 1), 1e-6 + 0.75e-3, 1e-15);
  // collective_seconds takes the mean call: 3 calls of 1e5 bytes.
  Machine m = test_machine();
  m.node.by_kind["all_reduce"] = l;
  EXPECT_NEAR(collective_seconds(m, "all_reduce", 1, 2, 3e5, 3), 3 * 50e-6, 1e-15);
}

TEST(LinkPoints, RoundTripAndBadPointsAreErrors) {
  Machine m = test_machine();
  LinkCost l(1e9, 1e-6);
  l.group = 2;
  l.points = {{1e3, 1e-5}, {1e6, 1e-3}};
  m.node.by_kind["all_reduce"] = l;
  m.node.all = l;
  const nlohmann::json j = to_json(m);
  const Machine back = machine_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.node.get("all_reduce").points.size(), 2u);
  nlohmann::json bad = j;
  bad["collectives"]["node"]["all_reduce"]["points"] = {{1e6, 1e-3}, {1e3, 1e-5}};
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("bytes ascending"), std::string::npos);
  bad = j;
  bad["collectives"]["node"]["all_reduce"]["points"] = {{1e3}};
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("[bytes, seconds]"), std::string::npos);
  bad = j;
  bad["collectives"]["node"]["all_reduce"].erase("group");
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("\"group\""), std::string::npos);
}

// Figures per group size: a group of g uses its own size's where the level
// has them, else the largest group's scaled by bytes per link; they survive
// the file, and a group key that is not a size, or disagrees with its
// points' group, is an error.
TEST(LinkPoints, EachGroupSizeUsesItsOwnFigures) {
  Machine m = test_machine();
  m.ranks_per_node = 8;
  LinkCost big(1e9, 0), two(1e9, 0);
  big.group = 8;
  big.points = {{1e3, 100e-6}, {1e6, 1e-3}};
  two.group = 2;
  two.points = {{1e3, 10e-6}, {1e6, 0.2e-3}};
  m.node.by_kind["all_reduce"] = big;
  m.node.by_group[2]["all_reduce"] = two;
  EXPECT_DOUBLE_EQ(m.link("all_reduce", 1, 2).seconds(1e3, 2, 2), 10e-6);
  EXPECT_EQ(&m.link("all_reduce", 1, 8), &m.node.by_kind.at("all_reduce"));
  EXPECT_EQ(&m.link("all_reduce", 1, 4), &m.node.by_kind.at("all_reduce"));  // none of its own
  EXPECT_EQ(&m.link("all_gather", 1, 2), &m.node.by_kind.at("all_gather"));  // kind not measured
  const nlohmann::json j = to_json(m);
  ASSERT_TRUE(j["collectives"]["node"].contains("groups"));
  const Machine back = machine_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_DOUBLE_EQ(back.link("all_reduce", 1, 2).seconds(1e3, 2, 2), 10e-6);
  nlohmann::json bad = j;
  bad["collectives"]["node"]["groups"]["two"] = bad["collectives"]["node"]["groups"]["2"];
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("group size of 2 or more"),
            std::string::npos);
  bad = j;
  bad["collectives"]["node"]["groups"]["4"] = bad["collectives"]["node"]["groups"]["2"];
  EXPECT_NE(error_of([&] { machine_from_json(bad); }).find("\"group\" is 2, not 4"),
            std::string::npos);
}

}  // namespace
}  // namespace dendrite
