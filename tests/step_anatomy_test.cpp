// The anatomy of a training step on the emulated GPU (`dendrite_emulated
// bench step --anatomy`, tests/emulated_cuda/counters.h): the tiny GPT-2 and
// Llama, B3 T16 (48 rows, unlike C = 32), three steps. Checks that the counts
// are what the code does: every layer issues the same work; each op's
// products reach cuBLASLt with the op's shape; uploads, downloads and
// allocations are counted once each with their bytes; the host synchronises
// only where an op hands data from the device to the host; counting without
// running finds the same work as running; the loss is one pass over each
// chunk of logits where one rank holds the vocabulary; Llama's RoPE and
// SwiGLU write the products' bf16 operands, as the final norm writes the
// head's; a generated token allocates nothing; --gemm-tune's trials stay in
// the first step and keep the loss; and bench/step_roofline.py models
// the step, refusing a kernel it has no formula for. Prints the counts per
// step and per layer.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli_support.h"

namespace dendrite {
namespace {

using nlohmann::json;

// bench step's JSON for a tiny model (three steps: the first, then two alike).
json bench_anatomy(const std::string& model, bool count_only, const std::string& extra = "") {
  const std::string env = count_only ? "DENDRITE_EMULATED_COUNT_ONLY=1 " : "";
  const test::CommandResult r = test::run_command(
      "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + env +
      "timeout 120 " + DENDRITE_EMULATED_BINARY + " bench step --device cuda --model " + model +
      " --batch 3 --seq 16 --precision bf16 --warmup 1 --steps 2 --anatomy --json " + extra +
      " 2>/dev/null");
  EXPECT_EQ(r.rc, 0) << r.out;
  const size_t at = r.out.rfind("\n{");
  return json::parse(at == std::string::npos ? r.out : r.out.substr(at + 1));
}

const json& gpt2_run() {
  static const json j = bench_anatomy("gpt2-tiny", false);
  return j;
}

const json& llama_run() {
  static const json j = bench_anatomy("llama-tiny", false);
  return j;
}

// An op entry without its part: what a layer's parts are compared by.
json without_part(json e) {
  e.erase("part");
  return e;
}

std::vector<json> entries_of(const json& step, const std::string& part) {
  std::vector<json> out;
  for (const json& e : step["ops"])
    if (e["part"] == part) out.push_back(without_part(e));
  return out;
}

int64_t sum_syncs(const json& e, const std::string& call) { return e["syncs"].value(call, 0); }

// A fused run and the same model with the products apart: layer 0's products
// {forward, backward} in each, and the same loss (not zero).
void expect_fused_products(const json& fused, const json& apart, std::array<int64_t, 2> want,
                           std::array<int64_t, 2> want_apart) {
  for (int i = 0; i < 2; ++i) {
    const std::string part = std::string("layer 0 ") + (i == 0 ? "forward" : "backward");
    auto products = [&](const json& run) {
      return run["anatomy"]["later_step"]["by_part"][part]["matmuls"].get<int64_t>();
    };
    EXPECT_EQ(products(fused), want[i]) << part;
    EXPECT_EQ(products(apart), want_apart[i]) << part << ", apart";
  }
  EXPECT_NEAR(apart["loss"].get<double>(), fused["loss"].get<double>(), 1e-4);
  EXPECT_NE(apart["loss"].get<double>(), 0.0);
}
// q, k and v as one product (GPT-2 under bf16 on one rank): per layer 4
// products forward and 8 backward, where three products make them 6 and 12;
// the same model (--no-fused-qkv runs the three).
TEST(StepAnatomy, QkvIsOneProductWhereTheLayoutAllows) {
  const json three = bench_anatomy("gpt2-tiny", false, "--no-fused-qkv");
  expect_fused_products(gpt2_run(), three, {4, 8}, {6, 12});
}

// SwiGLU's gate and up as one product (Llama under bf16 on one rank): per
// layer 4 products forward and 8 backward (q, k and v one, o, gate and up
// one, down), where two make them 5 and 10; the forward's writes rows of
// 2F = 128 values. The same model (--no-fused-gate-up runs the two).
TEST(StepAnatomy, GateAndUpAreOneProductWhereTheLayoutAllows) {
  const json two = bench_anatomy("llama-tiny", false, "--no-fused-gate-up");
  const json& one = llama_run();
  expect_fused_products(one, two, {4, 8}, {5, 10});
  std::set<double> widths;  // the forward products' n
  for (const json& e : one["anatomy"]["later_step"]["ops"])
    if (e["part"] == "layer 0 forward" &&
        e["op"].get<std::string>().rfind("linear_forward", 0) == 0)
      widths.insert(e["args"]["n"].get<double>());
  EXPECT_EQ(widths.count(128.0), 1u) << "gate's 64 and up's 64 in one product's rows";
}

// The ops that write a residual stream's gradient as the bf16 operand of o's
// or down's backward, and the norm backward that writes none.
bool rounds_a_residual_gradient(const std::string& op) {
  return op == "to_bf16_column_sums" || op == "layernorm_backward_rows_add" ||
         op == "layernorm_backward_rows_add_bf16";
}

TEST(StepAnatomy, EveryLayerIssuesTheSameWork) {
  const json& a = gpt2_run()["anatomy"];
  ASSERT_EQ(a["config"]["L"], 2);
  EXPECT_EQ(a["later_steps_identical"], true);
  for (const char* step : {"first_step", "later_step"})
    for (const char* dir : {"forward", "backward"}) {
      const json& s = a[step];
      const std::string l0 = std::string("layer 0 ") + dir, l1 = std::string("layer 1 ") + dir;
      std::vector<json> first = entries_of(s, l0), second = entries_of(s, l1);
      ASSERT_FALSE(first.empty()) << step << " has no part '" << l0 << "'";
      // Where the output gradients of o and down are rounded differs from the
      // top layer to the bottom one by design (NormsBackwardRoundsTheOperandBelow).
      const bool backward = dir == std::string("backward");
      if (backward)
        for (std::vector<json>* part : {&first, &second})
          std::erase_if(*part, [](const json& e) { return rounds_a_residual_gradient(e["op"]); });
      if (step == std::string("first_step"))  // scratch made at first use, in whichever layer
        for (std::vector<json>* part : {&first, &second})
          for (json& e : *part)
            for (const char* key : {"allocations", "allocation_bytes", "memsets"}) e.erase(key);
      EXPECT_EQ(first, second) << step << ": " << l0 << " and " << l1 << " differ";
      EXPECT_GT(s["by_part"][l0]["launches"].get<int64_t>(), 0);
      EXPECT_GT(s["by_part"][l0]["matmuls"].get<int64_t>(), 0);
      if (step == std::string("later_step") && !backward) {
        EXPECT_EQ(s["by_part"][l0], s["by_part"][l1]);
      }
    }
}

// What reaches cuBLASLt from a linear op: one product per call, the op's
// row-major [m, k] x [k, n] computed as its column-major transpose.
void expect_products(const json& e) {
  const std::string op = e["op"];
  const json& a = e["args"];
  const int64_t m = a["m"], k = a["k"], n = a["n"];
  int64_t products = 0;
  for (const json& p : e["matmuls"]) {
    products += p["count"].get<int64_t>();
    std::array<int64_t, 3> want{};  // cuBLASLt's m, n, k
    bool accumulate = false;
    if (op == "linear_forward" || op == "linear_forward_fused") want = {n, m, k};
    // A residual added in the product is cuBLASLt's C, read with beta 1.
    if (op == "linear_forward_fused") accumulate = a["residual"] == 1;
    if (op == "linear_backward_input") want = {k, m, n}, accumulate = a["accumulate"] == 1;
    if (op == "linear_backward_input_dgelu") want = {k, m, n};
    if (op == "linear_backward_weight") want = {k, n, m}, accumulate = a["accumulate"] == 1;
    // A fused forward writes bf16 itself where it has neither GELU nor a
    // residual, and no bias or one in bf16 (gemm.h).
    const bool bf16_out = op == "linear_forward_fused" && a["y_bf16"] == 1 && a["gelu"] == 0 &&
                          a["residual"] == 0 && (a["bias"] == 0 || a["bias_bf16"] == 1);
    EXPECT_EQ((std::array<int64_t, 3>{p["m"], p["n"], p["k"]}), want) << e.dump();
    EXPECT_EQ(p["accumulate"], accumulate) << e.dump();
    EXPECT_EQ(p["a"], 2) << "bf16 operands: " << e.dump();
    EXPECT_EQ(p["b"], 2) << e.dump();
    EXPECT_EQ(p["d"], bf16_out ? 2 : 4) << "fp32 results, or bf16 where fused: " << e.dump();
    // GELU's input is the product's aux (written; DGELU's read) only where
    // the product applies GELU into fp32; with a bf16 output it stops at
    // GELU's input, and a kernel writes GELU's bf16 output.
    const bool aux = op == "linear_backward_input_dgelu" ||
                     (op == "linear_forward_fused" && a["gelu"] == 1 && a["y_bf16"] == 0);
    EXPECT_EQ(p["aux"], aux ? 4 : 0) << "GELU's input in fp32, D's type: " << e.dump();
  }
  EXPECT_EQ(products, e["calls"].get<int64_t>()) << e.dump();
}

// The whole vocabulary on one rank under bf16: the loss is one kernel a chunk
// (statistics and dlogits in one pass) and the loss's sum; the separate
// statistics, their gathered copy and the dlogits kernel do not run.
TEST(StepAnatomy, TheLossIsOnePassOverEachChunkOfLogits) {
  int64_t one_pass = 0, combines = 0, heads = 0;
  for (const json& e : gpt2_run()["anatomy"]["later_step"]["ops"]) {
    if (e["part"] != "head and loss") continue;
    const std::string op = e["op"];
    const int64_t calls = e["calls"];
    EXPECT_TRUE(op != "ce_local_stats" && op != "ce_dlogits_bf16" && op != "ce_dlogits") << op;
    EXPECT_FALSE(e["copies"].contains("d2d")) << "a device copy in the loss: " << e.dump();
    if (op == "linear_forward") heads += calls;
    if (op == "ce_combine") combines += calls;
    if (op == "ce_stats_dlogits_bf16") {
      one_pass += calls;
      EXPECT_EQ(e["kernels"].value("ce_stats_dlogits_kernel", 0), calls) << e.dump();
      EXPECT_EQ(e["kernels"].size(), 1u) << e.dump();
    }
  }
  EXPECT_GT(heads, 0);
  EXPECT_EQ(one_pass, heads) << "one pass for each chunk of logits";
  EXPECT_EQ(combines, heads);
}

// GPT-2 under bf16 (no RoPE between attention and qkv): each layer's
// attention backward writes qkv's output gradient as its bf16 operand and
// adds the bias gradient's sums itself; no later pass rounds that gradient.
TEST(StepAnatomy, AttentionsBackwardWritesQkvsOperandWithItsBiasSums) {
  std::map<std::string, int64_t> fused, split, rounded;
  for (const json& e : gpt2_run()["anatomy"]["later_step"]["ops"]) {
    const std::string part = e["part"], op = e["op"];
    if (part.rfind("layer ", 0) != 0 || part.find(" backward") == std::string::npos) continue;
    const int64_t calls = e["calls"];
    if (op == "attention_backward") split[part] += calls;
    if (op == "to_bf16_column_sums") rounded[part] += calls;
    if (op != "attention_backward_bf16") continue;
    fused[part] += calls;
    for (const char* bias : {"bias_q", "bias_k", "bias_v"}) EXPECT_EQ(e["args"][bias], 1) << bias;
    EXPECT_EQ(e["kernels"].value("add_run_sums_kernel", 0), calls) << e.dump();
  }
  EXPECT_EQ(fused.size(), 2u) << "gpt2-tiny's two layers";
  EXPECT_TRUE(split.empty());
  for (const auto& [part, calls] : fused) {
    EXPECT_EQ(calls, 1) << part;
    EXPECT_EQ(rounded[part], part == "layer 1 backward" ? 2 : 1) << "up's, and the top's down";
  }
}

// GPT-2 under bf16 on one X rank: each LayerNorm's backward writes the
// residual stream's new gradient as the bf16 operand of the product below it
// with that product's bias sums, in its one pass: norm2 for o, norm1 for the
// next layer down's down. Only the top layer's down rounds its own (from the
// final norm's backward), and the bottom layer's norm1 has no product below:
// gpt2-tiny's layer 1 runs 1 more rounding pass (2 launches) than layer 0.
TEST(StepAnatomy, NormsBackwardRoundsTheOperandBelow) {
  const json& s = gpt2_run()["anatomy"]["later_step"];
  std::map<std::string, std::map<std::string, int64_t>> calls;  // part -> op -> calls
  for (const json& e : s["ops"]) {
    const std::string part = e["part"], op = e["op"];
    if (part.rfind("layer ", 0) != 0 || part.find(" backward") == std::string::npos) continue;
    if (!rounds_a_residual_gradient(op)) continue;
    calls[part][op] += e["calls"].get<int64_t>();
    if (op == "layernorm_backward_rows_add_bf16") {
      EXPECT_EQ(e["args"]["bias"], 1) << e.dump();
      EXPECT_EQ(e["kernels"].value("add_row_block_partials_kernel", 0), e["calls"]) << e.dump();
    }
  }
  using Calls = std::map<std::string, int64_t>;
  // up's output gradient (from GELU's backward) is rounded by to_bf16_column_sums in both
  EXPECT_EQ(calls["layer 1 backward"],
            (Calls{{"to_bf16_column_sums", 2}, {"layernorm_backward_rows_add_bf16", 2}}));
  EXPECT_EQ(calls["layer 0 backward"], (Calls{{"to_bf16_column_sums", 1},
                                              {"layernorm_backward_rows_add_bf16", 1},
                                              {"layernorm_backward_rows_add", 1}}));
  EXPECT_EQ(s["by_part"]["layer 1 backward"]["launches"].get<int64_t>(),
            s["by_part"]["layer 0 backward"]["launches"].get<int64_t>() + 2);
}

// Llama under bf16: RoPE and SwiGLU write the bf16 operands of the products
// after them, in their own pass (forward: qkv's rows for attention, act for
// down; backward: qkv's output gradient, and gate's and up's as the rows of
// their one product's). No layer runs a rounding of its own but the top one,
// for its down's output gradient (from the final norm's backward): 9
// launches a layer forward, 17 backward (the top layer 18).
TEST(StepAnatomy, LlamasRopeAndSwigluWriteTheProductsOperands) {
  const json& j = llama_run();
  const json& s = j["anatomy"]["later_step"];
  ASSERT_EQ(j["anatomy"]["config"]["L"], 2);
  const std::set<std::string> watched{"to_bf16",
                                      "rope_forward",
                                      "rope_backward",
                                      "swiglu_forward",
                                      "swiglu_backward",
                                      "rope_forward_bf16",
                                      "rope_backward_bf16",
                                      "swiglu_forward_bf16",
                                      "swiglu_backward_bf16"};
  std::map<std::string, std::map<std::string, int64_t>> calls;  // part -> op -> calls
  for (const json& e : s["ops"]) {
    const std::string part = e["part"], op = e["op"];
    if (part.rfind("layer ", 0) == 0 && watched.count(op))
      calls[part][op] += e["calls"].get<int64_t>();
  }
  using Calls = std::map<std::string, int64_t>;
  const Calls forward{{"rope_forward_bf16", 1}, {"swiglu_forward_bf16", 1}};
  const Calls backward{{"rope_backward_bf16", 1}, {"swiglu_backward_bf16", 1}};
  Calls top = backward;
  top["to_bf16"] = 1;
  EXPECT_EQ(calls["layer 0 forward"], forward);
  EXPECT_EQ(calls["layer 1 forward"], forward);
  EXPECT_EQ(calls["layer 0 backward"], backward);
  EXPECT_EQ(calls["layer 1 backward"], top);
  const json& parts = s["by_part"];
  EXPECT_EQ(parts["layer 0 forward"]["launches"], 9);
  EXPECT_EQ(parts["layer 1 forward"]["launches"], 9);
  EXPECT_EQ(parts["layer 0 backward"]["launches"], 17);
  EXPECT_EQ(parts["layer 1 backward"]["launches"], 18);
  EXPECT_GT(j["loss"].get<double>(), 0.0);
}

// Under bf16 the final norm writes the head's operand in its one pass over
// whole rows (one rank on X), where the two-pass norm, then a rounding of its
// fp32 output, took three launches. The step's one other rounding is the
// replicated parameters'. (Outside the layers and the head, the step's ops are
// counted under "forward and backward".)
TEST(StepAnatomy, TheFinalNormWritesTheHeadsOperand) {
  for (const auto& [run, norm] : {std::pair<const json*, std::string>{&gpt2_run(), "layernorm"},
                                  std::pair<const json*, std::string>{&llama_run(), "rmsnorm"}}) {
    std::map<std::string, int64_t> calls;
    for (const json& e : (*run)["anatomy"]["later_step"]["ops"])
      if (e["part"] == "forward and backward") calls[e["op"]] += e["calls"].get<int64_t>();
    EXPECT_EQ(calls[norm + "_rows_bf16"], 1) << norm;
    EXPECT_EQ(calls["to_bf16"], 1) << norm << ": the replicated parameters' alone";
    for (const char* pass : {"_row_sums", "_apply", "_apply_bf16"})
      EXPECT_EQ(calls.count(norm + pass), 0u) << norm + pass;
  }
}

// A token generated with the key/value cache (`bench generate --anatomy`,
// the third: the first fills the cache) allocates, zeroes and frees nothing
// on the device: the last rows, their logits and the head's scratch are kept
// from the first token. Its one read of the device is the logits' download
// (the copy into pageable memory and the stream's synchronisation).
TEST(StepAnatomy, AGeneratedTokenAllocatesNothing) {
  for (const char* run : {"--model gpt2-tiny", "--model llama-tiny --precision bf16"}) {
    const test::CommandResult r = test::run_command(
        std::string("OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                    "timeout 120 ") +
        DENDRITE_EMULATED_BINARY + " bench generate --device cuda " + run +
        " --prompt 4 --tokens 4 --mode cache --anatomy --json 2>&1");
    ASSERT_EQ(r.rc, 0) << r.out;
    const size_t at = r.out.rfind("\n{");
    const json j = json::parse(at == std::string::npos ? r.out : r.out.substr(at + 1));
    const json& total = j["anatomy"]["total"];
    EXPECT_EQ(total["allocations"], 0) << run << ": " << total.dump();
    EXPECT_EQ(total["frees"], 0) << run;
    EXPECT_EQ(total["memsets"], 0) << run;
    EXPECT_EQ(total["syncs"], 2) << run;
    EXPECT_EQ(total["copies"]["d2h"]["count"], 1) << run;
    EXPECT_GT(total["launches"].get<int64_t>(), 0) << run;
  }
}

TEST(StepAnatomy, EachOpCountsWhatItIssues) {
  // The step's loss and norm reach the host in one download; uploads go
  // through a pinned ring and do not wait.
  const std::set<std::string> to_host = {"count_nonfinite", "download"};
  const std::set<std::string> waits = {"wait", "release"};
  int linear = 0, uploads = 0, returns = 0;
  for (const char* step : {"first_step", "later_step"})
    for (const json& e : gpt2_run()["anatomy"][step]["ops"]) {
      const std::string op = e["op"];
      const int64_t calls = e["calls"];
      if (op.rfind("linear_", 0) == 0) expect_products(e), ++linear;
      if (op == "upload") {
        ++uploads;
        EXPECT_EQ(e["copies"]["h2d"]["count"], calls);
        EXPECT_EQ(e["copies"]["h2d"]["bytes"].get<double>(),
                  calls * e["args"]["bytes"].get<double>());
      }
      if (to_host.count(op)) {
        ++returns;
        EXPECT_EQ(e["copies"]["d2h"]["count"], calls) << e.dump();
        EXPECT_EQ(sum_syncs(e, "cudaMemcpyAsync to pageable host memory"), calls) << e.dump();
        EXPECT_EQ(sum_syncs(e, "cudaStreamSynchronize"), calls) << e.dump();
      }
      if (op == "allocate") {
        EXPECT_EQ(e["allocations"], calls);
        EXPECT_EQ(e["allocation_bytes"].get<double>(), calls * e["args"]["bytes"].get<double>());
        EXPECT_EQ(e["memsets"]["count"], calls) << "allocations are zeroed";
      } else if (step == std::string("later_step")) {  // (the first makes scratch at first use)
        EXPECT_EQ(e["allocations"], 0) << "only allocate allocates: " << e.dump();
      }
      if (!to_host.count(op) && !waits.count(op)) {
        EXPECT_TRUE(e["syncs"].empty()) << "a synchronisation outside a transfer: " << e.dump();
      }
    }
  EXPECT_GT(linear, 0);
  EXPECT_GT(uploads, 0);
  EXPECT_GT(returns, 0);
}

TEST(StepAnatomy, NoDeviceAllocationAfterTheFirstStep) {
  const json& a = gpt2_run()["anatomy"];
  EXPECT_EQ(a["later_step"]["total"]["allocations"], 0) << a["later_step"]["total"].dump();
  EXPECT_EQ(a["later_step"]["total"]["frees"], 0);
  // Printed for docs/cuda.md and the reports: today's counts.
  for (const char* step : {"first_step", "later_step"}) {
    const json& t = a[step]["total"];
    std::printf(
        "%s: %lld launches (%lld kernels, %lld products), %lld host synchronisations, "
        "%lld allocations (%lld bytes), %lld frees, copies %s\n",
        step, (long long)t["launches"], (long long)t["kernels"], (long long)t["matmuls"],
        (long long)t["syncs"], (long long)t["allocations"], (long long)t["allocation_bytes"],
        (long long)t["frees"], t["copies"].dump().c_str());
    for (const auto& part : a[step]["parts"]) {
      const json& p = a[step]["by_part"][part.get<std::string>()];
      std::printf("  %-40s launches %4lld  products %3lld  syncs %3lld  allocations %lld\n",
                  part.get<std::string>().c_str(), (long long)p["launches"],
                  (long long)p["matmuls"], (long long)p["syncs"], (long long)p["allocations"]);
    }
  }
}

TEST(StepAnatomy, CountingWithoutRunningFindsTheSameWork) {
  const json counted = bench_anatomy("gpt2-tiny", true)["anatomy"];
  const json& ran = gpt2_run()["anatomy"];
  EXPECT_EQ(counted["later_step"]["count_only"], true);
  for (const char* step : {"first_step", "later_step"}) {
    json a = counted[step], b = ran[step];
    a.erase("count_only"), b.erase("count_only");
    EXPECT_EQ(a, b) << step;
  }
}

// --gemm-tune (backend/cuda/gemm_tuning.cpp): the trials run in the first
// step alone, where each shape is met first, with a copy of C taken and
// given back for each weight gradient added into; the later steps issue the
// same work as without tuning, and the loss keeps its bits.
TEST(StepAnatomy, GemmTuningWorksInTheFirstStepAloneAndKeepsTheLoss) {
  const json tuned = bench_anatomy("gpt2-tiny", false, "--gemm-tune");
  const json& plain = gpt2_run();
  EXPECT_EQ(tuned["loss"].get<double>(), plain["loss"].get<double>());
  EXPECT_EQ(tuned["anatomy"]["later_step"], plain["anatomy"]["later_step"]);
  const json &t = tuned["anatomy"]["first_step"]["total"],
             &p = plain["anatomy"]["first_step"]["total"];
  EXPECT_GT(t["matmuls"].get<int64_t>(), p["matmuls"].get<int64_t>());
  EXPECT_GT(t["allocations"].get<int64_t>(), p["allocations"].get<int64_t>());
  EXPECT_EQ(t["frees"].get<int64_t>() - p["frees"].get<int64_t>(),
            t["allocations"].get<int64_t>() - p["allocations"].get<int64_t>());
  const json& shapes = tuned["gemm"]["shapes"];
  ASSERT_GE(shapes.size(), 8u) << tuned["gemm"].dump();
  int weight_gradients = 0;
  for (const json& s : shapes) {
    EXPECT_GE(s["trial_ms"][s["default"].get<std::string>()].get<double>(), 0.0) << s.dump();
    EXPECT_GE(s["trial_ms"][s["way"].get<std::string>()].get<double>(), 0.0) << s.dump();
    weight_gradients += s["op"] == "TN" && s["accumulate"].get<bool>();
  }
  EXPECT_GT(weight_gradients, 0) << "the weight gradients, added into, are timed";
  // bench's plan lines (Backend::gemm_plans) name the pick kept where it is
  // not the first, and only in the tuned run.
  int changed = 0, named = 0;
  for (const json& s : shapes) changed += s["way"] != s["default"];
  for (const json& line : tuned["gemm_plans"])
    named += line.get<std::string>().find(" (tuned: pick ") != std::string::npos;
  EXPECT_EQ(named, changed) << tuned["gemm_plans"].dump();
  ASSERT_EQ(plain["gemm_plans"].size(), tuned["gemm_plans"].size());
  for (const json& line : plain["gemm_plans"])
    EXPECT_EQ(line.get<std::string>().find("tuned"), std::string::npos) << line;
}

// --no-gemm-epilogues: the same products, bare, and the epilogues' steps as
// kernels after them (more launches); the loss as with the epilogues, to
// the last bits the fused steps round in their own way (docs/cuda.md).
TEST(StepAnatomy, WithoutGemmEpiloguesTheProductsRunBareAndKernelsTakeTheirSteps) {
  const json bare = bench_anatomy("gpt2-tiny", false, "--no-gemm-epilogues");
  const json& fused = gpt2_run();
  const json &b = bare["anatomy"]["later_step"]["total"],
             &f = fused["anatomy"]["later_step"]["total"];
  EXPECT_EQ(b["matmuls"], f["matmuls"]);
  EXPECT_GT(b["kernels"].get<int64_t>(), f["kernels"].get<int64_t>());
  EXPECT_NE(bare["device"].get<std::string>().find("no cuBLASLt epilogues"), std::string::npos);
  EXPECT_NEAR(bare["loss"].get<double>(), fused["loss"].get<double>(), 1e-4);
  EXPECT_NE(bare["loss"].get<double>(), 0.0);
}

// Runs bench/step_roofline.py on an anatomy; its output and exit code.
test::CommandResult roofline(const json& bench, const std::string& name,
                             const std::string& extra = "") {
  const std::string path = testing::TempDir() + name + ".json";
  std::ofstream(path) << bench.dump();
  return test::run_command(std::string("python3 ") + DENDRITE_SOURCE_DIR +
                           "/bench/step_roofline.py " + path + " --json " + path + ".out" + extra);
}

TEST(StepAnatomy, TheRooflineModelsTheCountedStepAndRefusesUnknownKernels) {
  for (const char* model : {"gpt2-tiny", "llama-tiny"}) {
    const json& bench = model == std::string("gpt2-tiny") ? gpt2_run() : llama_run();
    const test::CommandResult r = roofline(bench, model);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("A model, not a measurement"), std::string::npos) << r.out;
    const json out = json::parse(std::ifstream(testing::TempDir() + model + ".json.out"));
    for (const auto& [machine, m] : out.begin()->items()) {
      EXPECT_GT(m["step_ms"].get<double>(), 0) << machine;
      EXPECT_GT(m["mfu"].get<double>(), 0) << machine;
      EXPECT_LT(m["mfu"].get<double>(), 1) << machine;
    }
  }
  // Too few rows for the LayerNorm backward's one pass (8): its separate
  // kernels, under the one op's name, are modelled too.
  const json few = bench_anatomy("gpt2-tiny", false, "--batch 1 --seq 8");
  bool fell_back = false;
  for (const json& e : few["anatomy"]["later_step"]["ops"])
    fell_back |= e["op"] == "layernorm_backward_rows_add_bf16" &&
                 e["kernels"].contains("row_sums_kernel<NS, Terms>");
  EXPECT_TRUE(fell_back) << "8 rows no longer take the separate kernels: pick fewer";
  const test::CommandResult separate = roofline(few, "few-rows");
  EXPECT_EQ(separate.rc, 0) << separate.out;
  // An H100: the products at the same peak, the rest at its lower bandwidth.
  ASSERT_EQ(roofline(gpt2_run(), "h100", " --gpu h100").rc, 0);
  const json h200 =
      json::parse(std::ifstream(testing::TempDir() + "gpt2-tiny.json.out")).begin().value();
  const json h100 =
      json::parse(std::ifstream(testing::TempDir() + "h100.json.out")).begin().value();
  for (const char* rates : {"datasheet", "measured"}) {
    const double on_h200 = h200[std::string("H200 ") + rates]["step_ms"].get<double>();
    const double on_h100 = h100[std::string("H100 ") + rates]["step_ms"].get<double>();
    EXPECT_GT(on_h100, on_h200) << rates;
  }
  json bench = gpt2_run();
  for (json& e : bench["anatomy"]["later_step"]["ops"])
    if (e["op"] == "adamw_update_tensors") e["kernels"] = {{"made_up_kernel", 1}};
  const test::CommandResult r = roofline(bench, "unknown");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("no formula for kernel 'made_up_kernel'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dendrite
