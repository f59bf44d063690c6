// The device profile of `bench step --profile` (core/device_profile.h,
// backend/cuda/device_profile.h): kernel names as CUPTI gives them made
// short, activities placed in the parts of the step, the device's busy time
// as the union of its activities; and, on the emulated GPU (whose CUPTI,
// tests/emulated_cuda/cupti.h, records what it runs), a profile of the tiny
// GPT-2's steps that finds, part by part, every launch the step's anatomy
// counts, with device times inside the timed steps on the host's clock.
#include "dendrite/core/device_profile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "cli_support.h"

namespace dendrite {
namespace {

using nlohmann::json;

TEST(DeviceProfileNames, ShortNamesDropWhatTheSignatureAdds) {
  // CUPTI's name of a kernel is mangled; demangled it reads as the comment.
  // void dendrite::cuda::(anonymous namespace)::norm_kernel<128>(float*, int)
  EXPECT_EQ(short_kernel_name("_ZN8dendrite4cuda12_GLOBAL__N_111norm_kernelILi128EEEvPfi"),
            "norm_kernel");
  EXPECT_EQ(
      short_kernel_name("void dendrite::cuda::(anonymous namespace)::norm_kernel<128>(float*, "
                        "int)"),
      "norm_kernel");
  EXPECT_EQ(
      short_kernel_name("void dendrite::cuda::dq_kernel<64, dendrite::bf16>(Params<(int)64>)"),
      "dq_kernel");
  // As the emulator names its launches (the kernel expression as written).
  EXPECT_EQ(short_kernel_name("layernorm_rows_kernel<4, true>"), "layernorm_rows_kernel");
  EXPECT_EQ(short_kernel_name("add_bias_kernel"), "add_bias_kernel");
  // A library's kernel named without C++ keeps its whole name (its tiles and split).
  const std::string lt = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas";
  EXPECT_EQ(short_kernel_name(lt), lt);
  EXPECT_EQ(short_kernel_name("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"),
            "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT");
}

trace::Span span(const char* name, double begin, double end) {
  return {"step", name, begin, end, trace::Lane::kRank, -1, -1, -1};
}

TEST(DeviceProfileReport, PartsAreTheInnermostOpenSpanAndBusyTimeIsTheUnion) {
  const std::vector<trace::Span> spans = {
      span("layer 0 forward", 1.0, 2.0),
      span("layer 1 forward", 2.0, 3.0),
      span("step 1", 0.5, 6.0),
      span("layer 0 backward", 3.0, 4.0),
      span("optimizer", 5.0, 6.0),
      {"collective", "all_reduce", 2.5, 2.6, trace::Lane::kRank, 8, -1, -1}};
  EXPECT_EQ(step_part(spans, 1.5), "layers forward");
  EXPECT_EQ(step_part(spans, 2.55), "layers forward");  // a collective is no part
  EXPECT_EQ(step_part(spans, 3.5), "layers backward");
  EXPECT_EQ(step_part(spans, 4.5), "step");
  EXPECT_EQ(step_part(spans, 5.5), "optimizer");
  EXPECT_EQ(step_part(spans, 7.0), "outside the step");
  EXPECT_EQ(step_part(spans, -1), "outside the step");

  using K = DeviceActivity::Kind;
  const std::vector<DeviceActivity> acts = {
      {K::kKernel, "k_a<1>", 1.10, 1.20, 1.05, 0},  // overlaps the next: the union counts 0.15
      {K::kKernel, "k_a<2>", 1.15, 1.25, 1.06, 0},
      {K::kKernel, "k_b", 2.10, 2.40, 2.05, 0},
      {K::kCopy, "copy device to host", 4.60, 4.70, 4.55, 1024},
      {K::kMemset, "memset", 5.60, 5.65, 5.55, 64},
      {K::kKernel, "k_b", 3.10, 3.20, 3.05, 0}};
  const json r = device_profile_report(acts, spans, 2, 0.5);
  EXPECT_EQ(r["steps"], 2);
  EXPECT_NEAR(r["step_ms"].get<double>(), 500.0, 1e-9);
  EXPECT_NEAR(r["device_busy_ms"].get<double>(), (0.15 + 0.3 + 0.1 + 0.1 + 0.05) * 1e3 / 2, 1e-9);
  EXPECT_NEAR(r["kernel_ms"].get<double>(), (0.1 + 0.1 + 0.3 + 0.1) * 1e3 / 2, 1e-9);
  EXPECT_NEAR(r["copy_ms"].get<double>(), 0.1 * 1e3 / 2, 1e-9);
  EXPECT_NEAR(r["memset_ms"].get<double>(), 0.05 * 1e3 / 2, 1e-9);
  ASSERT_EQ(r["kernels"].size(), 2u);
  EXPECT_EQ(r["kernels"][0]["name"], "k_b");  // most time first
  EXPECT_EQ(r["kernels"][0]["launches"], 1.0);
  EXPECT_NEAR(r["kernels"][0]["mean_us"].get<double>(), 0.2e6, 1e-6);
  EXPECT_EQ(r["kernels"][1]["name"], "k_a");
  EXPECT_EQ(r["kernels"][1]["launches"], 1.0);
  ASSERT_EQ(r["parts"].size(), 4u);  // in the order first issued
  EXPECT_EQ(r["parts"][0]["part"], "layers forward");
  EXPECT_EQ(r["parts"][0]["launches"], 1.5);
  EXPECT_EQ(r["parts"][0]["kernels"]["k_a"], 1.0);
  EXPECT_EQ(r["parts"][1]["part"], "layers backward");
  EXPECT_EQ(r["parts"][2]["part"], "step");
  EXPECT_EQ(r["parts"][2]["launches"], 0.0);
  EXPECT_EQ(r["parts"][2]["copies"], 0.5);
  EXPECT_EQ(r["parts"][2]["memsets"], 0.0);
  EXPECT_EQ(r["parts"][3]["memsets"], 0.5);
  EXPECT_EQ(r["parts"][3]["part"], "optimizer");
  const std::string table = device_profile_table(r);
  EXPECT_NE(table.find("the step 500.00 ms, the device busy 350.00 ms (70.0%; idle 150.00 ms)"),
            std::string::npos)
      << table;
}

// Runs dendrite_emulated bench step on the tiny GPT-2 (B3 T16 bf16, one
// warm-up step and two timed); its JSON line.
json bench(const std::string& extra) {
  const test::CommandResult r = test::run_command(
      "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 " +
      std::string(DENDRITE_EMULATED_BINARY) +
      " bench step --device cuda --model gpt2-tiny --batch 3 --seq 16 --precision bf16 "
      "--warmup 1 --steps 2 --json " +
      extra + " 2>&1");
  EXPECT_EQ(r.rc, 0) << r.out;
  const size_t at = r.out.rfind("\n{");
  return json::parse(at == std::string::npos ? r.out : r.out.substr(at + 1));
}

std::string part_of(const std::string& anatomy_part) {
  static const std::regex layer(R"(layer \d+ (forward|backward))"), step(R"(step \d+)");
  std::smatch m;
  if (std::regex_match(anatomy_part, m, layer)) return "layers " + m[1].str();
  if (std::regex_match(anatomy_part, step)) return "step";
  return anatomy_part;
}

TEST(DeviceProfileEmulated, EveryLaunchTheAnatomyCountsIsProfiledInItsPart) {
  const std::string dir = testing::TempDir() + "device_profile";
  const json run = bench("--profile " + dir + "/p.json --trace " + dir + "/t.json");
  std::ifstream pf(dir + "/p.json");
  ASSERT_TRUE(pf.is_open());
  const json profile = json::parse(pf);
  EXPECT_EQ(profile["steps"], 2);
  EXPECT_EQ(profile["model"], "gpt2-tiny");
  EXPECT_GT(profile["device_busy_ms"].get<double>(), 0);
  EXPECT_LE(profile["device_busy_ms"].get<double>(), profile["step_ms"].get<double>() * 1.0001);

  // The anatomy of the same run's last step: kernels and products by part.
  const json anatomy_run = bench("--anatomy");
  const json& anatomy = anatomy_run["anatomy"]["later_step"];
  std::map<std::string, std::map<std::string, double>> counted;
  for (const json& e : anatomy["ops"]) {
    const std::string part = part_of(e["part"]);
    for (const auto& [kernel, n] : e["kernels"].items())
      counted[part][short_kernel_name(kernel)] += n.get<double>();
    for (const json& mm : e["matmuls"])
      counted[part]["emulated_cublasLt_matmul"] += mm["count"].get<double>();
  }
  std::map<std::string, std::map<std::string, double>> profiled;
  for (const json& p : profile["parts"])
    for (const auto& [kernel, n] : p["kernels"].items())
      profiled[p["part"].get<std::string>()][kernel] = n.get<double>();
  for (auto& [part, kernels] : counted)  // parts with no launch are not in the profile's kernels
    for (auto it = kernels.begin(); it != kernels.end();)
      it = it->second == 0 ? kernels.erase(it) : std::next(it);
  std::erase_if(counted, [](const auto& p) { return p.second.empty(); });
  EXPECT_EQ(profiled, counted);
  EXPECT_GT(profiled["layers forward"]["emulated_cublasLt_matmul"], 0);

  // bench/step_roofline.py sets the model beside the profile, part by part:
  // every part issued what the anatomy counted (kernels, products, copies,
  // memsets).
  std::ofstream(dir + "/a.json") << anatomy_run.dump();
  const test::CommandResult cmp =
      test::run_command(std::string("python3 ") + DENDRITE_SOURCE_DIR + "/bench/step_roofline.py " +
                        dir + "/a.json --measured " + dir + "/p.json");
  ASSERT_EQ(cmp.rc, 0) << cmp.out;
  const size_t table = cmp.out.find("against " + dir + "/p.json");
  ASSERT_NE(table, std::string::npos) << cmp.out;
  std::istringstream lines(cmp.out.substr(table));
  std::string line;
  int rows = 0;
  const std::regex row(R"(  (\S.*\S) +(\d+) +(\d+) +[\d.]+ +[\d.]+ +\S+)");
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    ++rows;
    EXPECT_EQ(m[2].str(), m[3].str()) << line;
  }
  EXPECT_GE(rows, 6) << cmp.out;

  // The trace's device lane: every kernel of the two steps, inside them.
  std::ifstream tf(dir + "/t.json");
  ASSERT_TRUE(tf.is_open());
  const json trace = json::parse(tf);
  double first = 1e300, last = -1e300, launches = 0;
  int device_kernels = 0;
  bool lane_named = false;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e.value("tid", -1) == 2) lane_named = true;
    if (e["ph"] != "X") continue;
    const double b = e["ts"].get<double>(), d = e["dur"].get<double>();
    if (e["tid"] == 0 && std::regex_match(e["name"].get<std::string>(), std::regex("step \\d+")))
      first = std::min(first, b), last = std::max(last, b + d);
    if (e["tid"] == 2 && e["cat"] == "kernel") {
      ++device_kernels;
      EXPECT_GE(d, 0);
    }
  }
  for (const json& p : profile["parts"]) launches += p["launches"].get<double>();
  EXPECT_TRUE(lane_named);
  EXPECT_EQ(device_kernels, int(launches * 2 + 0.5));
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == 2 && e["cat"] == "kernel") {
      // the emulated streams run a kernel when it is issued (at once), in its step
      EXPECT_GE(e["ts"].get<double>(), first);
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), last);
    }
}

TEST(DeviceProfileRefused, TheCpuSaysWhyAndTheFix) {
  const test::CommandResult r = test::run_command(
      "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 " +
      std::string(DENDRITE_BINARY) +
      " bench step --device cpu --model gpt2-tiny --batch 2 --seq 8 --steps 1 --warmup 0 "
      "--profile " +
      testing::TempDir() + "never.json 2>&1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--profile on --device cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no device work to profile"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dendrite
