// The whole tiny GPT-2 and tiny Llama against PyTorch (scripts/make_reference.py,
// float64 ground truth): logits, loss, every parameter gradient under its
// Hugging Face name, and the losses, gradient norms and final weights of 10
// AdamW steps with warmup, cosine decay and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/model/hf_names.h"
#include "dendrite/model/transformer.h"
#include "dendrite/ops/optim.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/train/optimizer.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/train/schedule.h"
#include "backend_support.h"

namespace dendrite {
namespace {

const std::string kRefDir = std::string(DENDRITE_SOURCE_DIR) + "/tests/data/reference/";

struct Reference {
  nlohmann::json cfg;
  ModelConfig model;
  std::unique_ptr<SafetensorsReader> ref;
  int B, T;
};

Reference load(const std::string& name) {
  Reference r;
  std::ifstream in(kRefDir + name + "/config.json");
  r.cfg = nlohmann::json::parse(in);
  nlohmann::json m;
  for (const char* k : {"arch", "vocab_size", "n_layer", "n_embd", "n_head", "n_kv_head",
                        "ffn_hidden", "block_size", "norm_eps", "rope_theta"})
    m[k] = r.cfg[k];
  r.model = model_config_from_json(m);
  r.ref = std::make_unique<SafetensorsReader>(kRefDir + name + "/reference.safetensors");
  r.B = r.cfg["batch"];
  r.T = r.cfg["seq"];
  return r;
}

std::vector<float> f32(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.info(name);
  std::vector<float> v(t.bytes / 4);
  r.read_f32(name, t.shape, v.data());
  return v;
}

std::vector<int32_t> i32(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.info(name);
  std::vector<int32_t> v(t.bytes / 4);
  std::memcpy(v.data(), t.data, t.bytes);
  return v;
}

// max |a - b| / max |b|
double rel_error(const float* a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / scale;
}

// Compares a flat buffer laid out like the model's parameters with the
// reference's tensors prefix + Hugging Face name.
void expect_tensors(Transformer& model, const float* flat, const SafetensorsReader& ref,
                    const std::string& prefix, double tol) {
  for (const HfTensor& t : hf_tensors(model.config(), model.table())) {
    GlobalTensors parts;
    for (auto& p : t.parts) {
      const ParamSpec& s = model.table().find(p);
      parts[p].resize(size_t(s.global_rows() * s.global_cols()));
      gather_global(model.grid(), s, flat, parts[p].data());
    }
    std::vector<float> got(t.numel());
    export_hf_tensor(t, model.table(), parts, got.data());
    ASSERT_TRUE(ref.has(prefix + t.name)) << prefix + t.name;
    std::vector<float> want = f32(ref, prefix + t.name);
    if (prefix == "final." && t.name.ends_with("attn.c_attn.bias")) {
      // The key bias has an exactly zero gradient (softmax ignores a constant
      // per query), so AdamW turns rounding noise (1e-9 here, 1e-18 in float64)
      // into +-lr steps of arbitrary sign: only its q and v thirds are comparable.
      const int64_t C = t.rows / 3;
      std::copy(want.begin() + C, want.begin() + 2 * C, got.begin() + C);
    }
    EXPECT_LT(rel_error(got.data(), want), tol) << prefix + t.name;
  }
}

class ModelVsPyTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelVsPyTorch, LogitsLossAndGradients) {
  Reference r = load(GetParam());
  auto grid = ProcessGrid::single();
  Transformer model(r.model, *grid, test::cpu_backend(), r.B, r.T);
  load_weights_file(kRefDir + GetParam() + "/model.safetensors", model);
  auto inputs = i32(*r.ref, "inputs"), targets = i32(*r.ref, "targets");
  const int V = r.model.vocab_size;

  std::vector<float> logits(size_t(r.B) * r.T * V);
  model.logits(inputs.data(), r.B, r.T, logits.data());
  EXPECT_LT(rel_error(logits.data(), f32(*r.ref, "logits")), 1e-5);

  model.zero_grads();
  double loss = model.forward_backward(inputs.data(), targets.data(), nullptr, double(r.B) * r.T,
                                       r.B, r.T);
  EXPECT_NEAR(loss, f32(*r.ref, "loss")[0], 1e-5 * std::fabs(loss));
  expect_tensors(model, model.grads(), *r.ref, "grad.", 1e-4);
}

TEST_P(ModelVsPyTorch, TenAdamWSteps) {
  Reference r = load(GetParam());
  auto grid = ProcessGrid::single();
  Transformer model(r.model, *grid, test::cpu_backend(), r.B, r.T);
  load_weights_file(kRefDir + GetParam() + "/model.safetensors", model);
  auto inputs = i32(*r.ref, "inputs"), targets = i32(*r.ref, "targets");
  ops::AdamWConfig ac{r.cfg["beta1"], r.cfg["beta2"], r.cfg["eps"], r.cfg["weight_decay"]};
  AdamW adam(model.backend(), model.table(), ac);
  auto losses = f32(*r.ref, "adamw_losses"), norms = f32(*r.ref, "adamw_grad_norms");
  const int steps = r.cfg["steps"];
  for (int s = 0; s < steps; ++s) {
    model.zero_grads();
    double loss = model.forward_backward(inputs.data(), targets.data(), nullptr,
                                         double(r.B) * r.T, r.B, r.T);
    double norm = model.grad_norm();
    EXPECT_NEAR(loss, losses[s], 1e-4 * losses[s]) << "step " << s;
    EXPECT_NEAR(norm, norms[s], 1e-4 * norms[s]) << "step " << s;
    float lr = lr_at(s, r.cfg["lr"], r.cfg["min_lr"], r.cfg["warmup"], steps);
    adam.step(model.params(), model.grads(), lr,
              AdamW::clip_factor(norm, r.cfg["grad_clip"].get<double>()));
  }
  expect_tensors(model, model.params(), *r.ref, "final.", 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tiny, ModelVsPyTorch, ::testing::Values("gpt2_tiny", "llama_tiny"));

// Sizes whose derived quantities (4 x n_embd, the parameter count) would
// overflow are refused with an error that names the key (a fuzzer finding:
// n_embd 1111111110 overflowed the default ffn_hidden).
TEST(ModelConfigLimits, HugeSizesAreRefusedByName) {
  auto error_of = [](const nlohmann::json& j) -> std::string {
    try {
      model_config_from_json(j);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of({{"n_layer", 2}, {"n_embd", 1111111110}}).find("n_embd"), std::string::npos);
  EXPECT_NE(error_of({{"arch", "llama"}, {"vocab_size", 2147483647}}).find("vocab_size"),
            std::string::npos);
  EXPECT_NE(error_of({{"arch", "llama"}, {"n_layer", 65536}, {"n_embd", 1 << 20}, {"n_head", 8},
                      {"n_kv_head", 8}, {"ffn_hidden", 1 << 24}})
                .find("parameters is beyond"),
            std::string::npos);
  // Large sizes within the limits are accepted and counted exactly: V C + T C
  // + L (12 C^2 + 13 C) + 2 C for GPT-2 (ffn_hidden 4 C, T = 1024).
  ModelConfig c = model_config_from_json({{"arch", "gpt2"}, {"n_layer", 4}, {"n_embd", 1 << 14},
                                          {"n_head", 128}, {"vocab_size", 1 << 20}});
  const int64_t C = 1 << 14;
  EXPECT_EQ(c.num_parameters(), (int64_t(1) << 20) * C + 1024 * C + 4 * (12 * C * C + 13 * C) + 2 * C);
}

// Token ids and targets outside the vocabulary are refused on the host, before
// they reach the backend (a GPU's kernels read them unchecked), naming the id.
TEST(ModelBatch, IdsOutsideTheVocabularyAreRefused) {
  const ModelConfig c = model_config_from_json(
      {{"vocab_size", 50}, {"n_layer", 1}, {"n_embd", 32}, {"n_head", 2}, {"block_size", 8}});
  auto grid = ProcessGrid::single();
  Transformer model(c, *grid, test::cpu_backend(), 1, 8);
  model.init(1);
  std::vector<int32_t> in(8, 3), tg(8, 4);
  auto error_of = [&] {
    try {
      model.forward_backward(in.data(), tg.data(), nullptr, 8.0, 1, 8);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of(), "");
  tg[5] = 50;
  EXPECT_NE(error_of().find("model: target 50 at position 5 is outside the vocabulary [0, 50)"),
            std::string::npos)
      << error_of();
  tg[5] = 4, in[2] = -1;
  EXPECT_NE(error_of().find("model: token id -1 at position 2"), std::string::npos) << error_of();
}

}  // namespace
}  // namespace dendrite
