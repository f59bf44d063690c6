// Hugging Face model folders (io/hf_folder.h) against the real library: the
// tiny GPT-2 and Llama folders of tests/data/hf/ (fp32, bf16, fp16, one file
// and shards, tied and untied heads), saved by transformers, load into
// Dendrite with the logits transformers computed on the same tokens, within
// 1e-5 relative (both compute in fp32; the folders in bf16 or fp16 hold
// rounded weights that both sides widen exactly). The Llama family's other
// members (Llama 3's and linear rope scaling, Mistral, Qwen2, Qwen3) also
// continue a prompt greedily with transformers' tokens, and export back to
// their own architecture; transformers reads those exports as Dendrite does
// (its logits of them kept in tests/data/hf/exports/). Bad folders are
// refused naming the file and the tensor or key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "backend_support.h"
#include "dendrite/core/check.h"
#include "dendrite/eval/generate.h"
#include "dendrite/io/hf_folder.h"
#include "dendrite/io/safetensors.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/train/export.h"
#include "file_support.h"
#include "generate_support.h"
#include "hf_export_support.h"
#include "hf_support.h"
#include "sha256.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;

class HfFolders : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFolders, LogitsMatchTransformers) {
  const HfFolder folder(test::hf_dir(GetParam()));
  const test::HfReference ref = test::load_hf_reference(GetParam());
  ASSERT_EQ(folder.config().vocab_size, ref.V);
  auto grid = ProcessGrid::single();
  Transformer model(folder.config(), *grid, test::cpu_backend(), ref.B, ref.T);
  load_hf_folder(folder, model);
  std::vector<float> logits(size_t(ref.B) * ref.T * ref.V);
  model.logits(ref.tokens.data(), ref.B, ref.T, logits.data());
  EXPECT_LE(test::worst_logit_error(logits, ref, 0, ref.B * ref.T, 1e-5), 1.0) << GetParam();
}

std::string param_name(const ::testing::TestParamInfo<const char*>& p) {
  std::string n = p.param;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Reference, HfFolders,
                         ::testing::Values("gpt2-tiny", "gpt2-tiny-bf16", "llama-tiny",
                                           "llama-tiny-fp16"),
                         param_name);
INSTANTIATE_TEST_SUITE_P(LlamaFamily, HfFolders, ::testing::ValuesIn(test::llama_family_folders()),
                         param_name);

// transformers' greedy generate (do_sample false) continues the prompt with
// 32 tokens whose best logit leads the next by at least 1e-3: Dendrite picks
// the same ones, with its key/value cache and without.
class HfGeneration : public ::testing::TestWithParam<const char*> {};

TEST_P(HfGeneration, GreedyTokensMatchTransformers) {
  const HfFolder folder(test::hf_dir(GetParam()));
  const test::HfReference ref = test::load_hf_reference(GetParam());
  ASSERT_FALSE(ref.prompt.empty());
  const int n = int(ref.continuation.size()), T = int(ref.prompt.size()) + n;
  folder.check_sequence(T);
  auto grid = ProcessGrid::single();
  Transformer model(folder.config(), *grid, test::cpu_backend(), 1, T);
  load_hf_folder(folder, model);
  SampleOptions greedy;
  greedy.temperature = 0;
  for (bool cache : {true, false}) {
    const Ids got = test::generate(model, ref.prompt, n, greedy, {}, cache);
    EXPECT_EQ(Ids(got.begin() + ref.prompt.size(), got.end()), ref.continuation)
        << GetParam() << (cache ? " with the cache" : " without the cache");
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaFamily, HfGeneration,
                         ::testing::ValuesIn(test::llama_family_folders()), param_name);

// The backward of what the family adds (Qwen3's per-head norms before RoPE,
// Qwen2's q/k/v biases, Llama 3's scaled rotation, a head size apart from
// C/NH): the gradient of the loss on the reference tokens against central
// differences of the loss, for elements of the tensors involved.
class HfGradients : public ::testing::TestWithParam<const char*> {};

TEST_P(HfGradients, MatchFiniteDifferences) {
  const HfFolder folder(test::hf_dir(GetParam()));
  const test::HfReference ref = test::load_hf_reference(GetParam());
  auto grid = ProcessGrid::single();
  Backend& be = test::cpu_backend();
  Transformer model(folder.config(), *grid, be, ref.B, ref.T);
  load_hf_folder(folder, model);
  std::vector<int32_t> targets(ref.tokens.size());
  for (int b = 0; b < ref.B; ++b)
    for (int t = 0; t < ref.T; ++t)
      targets[b * ref.T + t] = ref.tokens[b * ref.T + (t + 1) % ref.T];
  const double n = double(ref.B) * ref.T;
  model.zero_grads();
  model.forward_backward(ref.tokens.data(), targets.data(), nullptr, n, ref.B, ref.T);
  std::vector<float> grads(size_t(model.num_floats()));
  be.download(grads.data(), model.grads(), grads.size() * sizeof(float));
  std::vector<std::pair<std::string, int>> probes = {{"layer0.q.weight", 37},
                                                     {"layer1.k.weight", 5}};
  const ModelConfig& c = folder.config();
  if (c.qk_norm)
    probes.insert(
        probes.end(),
        {{"layer0.q_norm.weight", 3}, {"layer1.k_norm.weight", 6}, {"layer1.q_norm.weight", 11}});
  if (c.qkv_bias)
    probes.insert(probes.end(), {{"layer0.q.bias", 7}, {"layer1.k.bias", 2}, {"layer0.v.bias", 9}});
  for (const auto& [name, i] : probes) {
    const int64_t at = model.table().find(name).offset + i;
    float w = 0;
    be.download(&w, model.params() + at, sizeof w);
    const float h = 1e-2f * std::max(1.0f, std::fabs(w));
    double loss[2];
    for (int s = 0; s < 2; ++s) {
      const float moved = s == 0 ? w + h : w - h;
      be.upload(model.params() + at, &moved, sizeof moved);
      loss[s] = model.forward_loss(ref.tokens.data(), targets.data(), nullptr, n, ref.B, ref.T);
    }
    be.upload(model.params() + at, &w, sizeof w);
    const double numeric = (loss[0] - loss[1]) / (2.0 * h);
    EXPECT_NEAR(grads[at], numeric, 1e-2 * std::fabs(numeric) + 1e-5)
        << GetParam() << ": " << name << "[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaFamily, HfGradients,
                         ::testing::Values("llama3-tiny", "qwen2-tiny", "qwen3-tiny"),
                         [](const auto& p) {
                           std::string n = p.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(HfFolder, ConfigsTranslateAsTransformersDefinesThem) {
  const ModelConfig g = HfFolder(test::hf_dir("gpt2-tiny")).config();
  EXPECT_TRUE(g.gpt2());
  EXPECT_EQ(g.n_embd, 64);
  EXPECT_EQ(g.ffn_hidden, 256);  // n_inner null: 4 n_embd
  EXPECT_EQ(g.block_size, 64);
  const ModelConfig l = HfFolder(test::hf_dir("llama-tiny")).config();
  EXPECT_FALSE(l.gpt2());
  EXPECT_EQ(l.n_kv_head, 2);
  EXPECT_EQ(l.ffn_hidden, 176);
  EXPECT_FLOAT_EQ(l.rope_theta, 50000.0f);  // from rope_parameters (transformers 5)
  EXPECT_FALSE(l.tied_embeddings());
  EXPECT_TRUE(HfFolder(test::hf_dir("llama-tiny-fp16")).config().tied_embeddings());
  EXPECT_EQ(l.rope_scaling, ops::RopeScaling::kNone);
  EXPECT_EQ(l.head_dim, 0);  // C / NH
  EXPECT_FALSE(l.qkv_bias || l.qk_norm || l.sliding_window);
}

TEST(HfFolder, TheLlamaFamilysConfigsTranslate) {
  const ModelConfig l3 = HfFolder(test::hf_dir("llama3-tiny")).config();
  EXPECT_EQ(l3.arch, Arch::kLlama);
  EXPECT_EQ(l3.rope_scaling, ops::RopeScaling::kLlama3);  // from rope_parameters (transformers 5)
  EXPECT_FLOAT_EQ(l3.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(l3.rope_factor, 8.0f);
  EXPECT_FLOAT_EQ(l3.rope_low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(l3.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(l3.rope_original_max_positions, 16);
  EXPECT_TRUE(l3.tied_embeddings());
  const ModelConfig lin = HfFolder(test::hf_dir("llama-linear-tiny")).config();
  EXPECT_EQ(lin.rope_scaling, ops::RopeScaling::kLinear);  // rope_scaling {"type"} (transformers 4)
  EXPECT_FLOAT_EQ(lin.rope_factor, 4.0f);
  const ModelConfig mi = HfFolder(test::hf_dir("mistral-tiny")).config();
  EXPECT_EQ(mi.arch, Arch::kMistral);
  EXPECT_EQ(mi.sliding_window, 48);
  EXPECT_FALSE(mi.tied_embeddings());
  EXPECT_FLOAT_EQ(mi.rope_theta, 1e6f);
  const ModelConfig q2 = HfFolder(test::hf_dir("qwen2-tiny")).config();
  EXPECT_EQ(q2.arch, Arch::kQwen2);
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_FALSE(q2.qk_norm);
  EXPECT_EQ(q2.sliding_window, 0);  // use_sliding_window false
  const ModelConfig q3 = HfFolder(test::hf_dir("qwen3-tiny")).config();
  EXPECT_EQ(q3.arch, Arch::kQwen3);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.head_dim, 16);
  EXPECT_EQ(q3.head_size(), 16);  // not 32 / 4
  nlohmann::json no_head_dim = HfFolder(test::hf_dir("qwen3-tiny")).raw_config();
  no_head_dim.erase("head_dim");  // transformers' Qwen3Config then uses 128
  EXPECT_EQ(model_config_from_hf(no_head_dim, "qwen3").head_size(), 128);
  // Dendrite's own JSON carries every field (checkpoints), and reads back.
  for (const ModelConfig& m : {l3, lin, mi, q2, q3})
    EXPECT_EQ(to_json(model_config_from_json(to_json(m))), to_json(m)) << to_json(m).dump();
  // A config without the new keys (an older checkpoint's) reads as before.
  EXPECT_EQ(model_config_from_json({{"arch", "llama"}}).rope_scaling, ops::RopeScaling::kNone);
}

// A copy of a reference folder in a temporary folder, to break.
class BrokenFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dendrite_hf_" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path copy(const std::string& name) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(test::hf_dir(name))) fs::copy(e.path(), d);
    return d;
  }
  static nlohmann::json config(const fs::path& d) {
    std::ifstream in(d / "config.json");
    return nlohmann::json::parse(in);
  }
  static void write_config(const fs::path& d, const nlohmann::json& c) {
    std::ofstream(d / "config.json") << c.dump(2);
  }
  static void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming " << parts[0];
    } catch (const Error& e) {
      for (const std::string& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  // Loads d into a model built from its config.
  static void load(const fs::path& d) {
    const HfFolder f(d.string());
    auto grid = ProcessGrid::single();
    Transformer model(f.config(), *grid, test::cpu_backend(), 1, 8);
    load_hf_folder(f, model);
  }
  fs::path dir_;
};

TEST_F(BrokenFolder, MissingPiecesAreNamed) {
  const fs::path l = copy("llama-tiny");
  fs::remove(l / "model-00002-of-00003.safetensors");
  expect_error([&] { HfFolder f(l.string()); }, {"model-00002-of-00003.safetensors", "missing"});
  const fs::path g = copy("gpt2-tiny");
  fs::remove(g / "config.json");
  expect_error([&] { HfFolder f(g.string()); }, {"config.json"});
  expect_error([&] { HfFolder f((dir_ / "nowhere").string()); }, {"nowhere", "not a folder"});
}

TEST_F(BrokenFolder, ConfigsTheModelCannotRepresentAreRefusedByKey) {
  const fs::path d = copy("llama-tiny");
  const nlohmann::json good = config(d);
  auto refused = [&](const char* key, const nlohmann::json& value, const std::string& named) {
    nlohmann::json c = good;
    c[key] = value;
    write_config(d, c);
    expect_error([&] { HfFolder f(d.string()); }, {"config.json", named});
  };
  refused("architectures", {"BertForMaskedLM"}, "BertForMaskedLM");
  refused("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "rope_scaling");
  refused("rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 5e5}}, "rope_type");
  refused("rope_parameters", {{"rope_type", "dynamic"}, {"factor", 2.0}}, "rope_parameters");
  refused("rope_scaling", {{"type", "longrope"}, {"factor", 2.0}}, "longrope");
  refused("rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 5e5}},
          "factor");  // incomplete
  refused("rope_parameters",
          {{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}},
          "partial_rotary_factor");
  refused("attention_bias", true, "attention_bias");
  refused("hidden_act", "gelu", "hidden_act");
  refused("head_dim", 32, "head_dim");
  refused("num_key_value_heads", 3, "n_kv_head");
  refused("hidden_size", "wide", "hidden_size");
  nlohmann::json c = good;
  c.erase("vocab_size");
  write_config(d, c);
  expect_error([&] { HfFolder f(d.string()); }, {"vocab_size", "missing"});
}

TEST_F(BrokenFolder, WhatTheFamilyCannotDoIsRefusedByKey) {
  auto refused = [&](const char* name, const char* key, const nlohmann::json& value,
                     const std::vector<std::string>& named) {
    const fs::path d = dir_ / (std::string(name) + "-" + key);
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(test::hf_dir(name))) fs::copy(e.path(), d);
    nlohmann::json c = config(d);
    c[key] = value;
    write_config(d, c);
    expect_error([&] { HfFolder f(d.string()); }, named);
  };
  refused("qwen3-tiny", "attention_bias", true, {"config.json", "attention_bias"});
  refused("qwen2-tiny", "mlp_bias", true, {"config.json", "mlp_bias"});
  refused("mistral-tiny", "architectures", {"MixtralForCausalLM"},
          {"config.json", "MixtralForCausalLM", "Qwen3ForCausalLM"});
  refused("mistral-tiny", "head_dim", 16, {"config.json", "head_dim"});  // 16 x 4 heads != 32
  refused("llama3-tiny", "rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}},
          {"config.json", "rope_parameters", "yarn", "llama3"});
}

// A sliding window shorter than the sequence is refused by the folder (naming
// it) and by the model (naming the key); one as long as the sequence is the
// full attention Dendrite computes.
TEST_F(BrokenFolder, ASlidingWindowShorterThanTheSequenceIsRefused) {
  const fs::path m = copy("mistral-tiny");
  nlohmann::json c = config(m);
  c["sliding_window"] = 16;
  write_config(m, c);
  const HfFolder mistral(m.string());
  EXPECT_EQ(mistral.config().sliding_window, 16);
  mistral.check_sequence(16);
  expect_error([&] { mistral.check_sequence(24); }, {m.string(), "sliding_window", "24"});
  auto grid = ProcessGrid::single();
  expect_error([&] { Transformer t(mistral.config(), *grid, test::cpu_backend(), 1, 24); },
               {"sliding_window", "16", "24"});
  const fs::path q = copy("qwen2-tiny");
  c = config(q);
  c["use_sliding_window"] = true;
  c["sliding_window"] = 8;
  write_config(q, c);
  expect_error([&] { HfFolder(q.string()).check_sequence(24); }, {q.string(), "sliding_window"});
}

TEST_F(BrokenFolder, TensorsOfTheWrongShapeOrDtypeAreNamed) {
  // A config wider than the weights: the first tensor read names both shapes.
  const fs::path d = copy("gpt2-tiny");
  nlohmann::json c = config(d);
  c["n_embd"] = 128;
  write_config(d, c);
  expect_error([&] { load(d); }, {"transformer.wte.weight", "[320, 64]", "[320, 128]"});
  // A weight stored as integers.
  const fs::path g = copy("gpt2-tiny-bf16");
  const SafetensorsReader orig((g / "model.safetensors").string());
  SafetensorsWriter w;
  std::vector<std::vector<uint8_t>> keep;
  for (const std::string& name : orig.names()) {
    const TensorInfo& t = orig.info(name);
    keep.emplace_back(t.data, t.data + t.bytes);
    if (name == "transformer.h.0.ln_1.weight") {
      keep.back().resize(t.bytes * 4);
      w.add(name, "I64", t.shape, keep.back().data(), keep.back().size());
    } else {
      w.add(name, t.dtype, t.shape, keep.back().data(), t.bytes);
    }
  }
  fs::remove(g / "model.safetensors");
  w.write((g / "model.safetensors").string());
  expect_error([&] { load(g); }, {"transformer.h.0.ln_1.weight", "I64", "F32, BF16 or F16"});
}

// `dendrite export` (train/export.h): a checkpoint becomes a folder that
// reads back as the same model with the same logits (bit for bit: the same
// fp32 weights), whose config.json is transformers'; an existing folder is
// refused and left alone. (HfExports below checks that transformers reads
// these folders as Dendrite does.)
TEST_F(BrokenFolder, ExportedCheckpointsReadBackAsTheSameModel) {
  for (const char* name : test::exported_folders()) {
    const HfFolder src(test::hf_dir(name));
    const test::HfReference ref = test::load_hf_reference(name);
    auto grid = ProcessGrid::single();
    Transformer model(src.config(), *grid, test::cpu_backend(), ref.B, ref.T);
    load_hf_folder(src, model);
    const fs::path out = dir_ / (std::string(name) + "-hf");
    const std::string ckpt =
        test::export_through_checkpoint(src.dir(), (dir_ / name).string(), out.string()).checkpoint;
    const HfFolder back(out.string());
    EXPECT_EQ(to_json(back.config()), to_json(src.config())) << name;
    EXPECT_EQ(back.raw_config().at("architectures")[0], src.raw_config().at("architectures")[0]);
    EXPECT_EQ(back.raw_config().at("model_type"), src.raw_config().at("model_type"));
    Transformer again(back.config(), *grid, test::cpu_backend(), ref.B, ref.T);
    load_hf_folder(back, again);
    std::vector<float> a(size_t(ref.B) * ref.T * ref.V), b(a.size());
    model.logits(ref.tokens.data(), ref.B, ref.T, a.data());
    again.logits(ref.tokens.data(), ref.B, ref.T, b.data());
    EXPECT_EQ(a, b) << name;
    expect_error([&] { export_hf(ckpt, out.string()); }, {out.string(), "exists"});
    EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  }
}

// transformers reads Dendrite's export as Dendrite does. For each folder,
// scripts/make_hf_reference.py had hf_export (hf_export_main.cpp) make the
// export above, loaded it with transformers' AutoModelForCausalLM and kept,
// in tests/data/hf/exports/NAME/, the logits transformers computed on the
// folder's reference tokens and the sha256 of every file of the export. The
// export made here must be those files, and Dendrite's logits of it must be
// transformers' within 1e-5.
class HfExports : public ::testing::TestWithParam<const char*> {};

TEST_P(HfExports, ReadInTransformersAsInDendrite) {
  ASSERT_EQ(test::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string name = GetParam(), stored = test::hf_dir("exports/" + name);
  const test::HfReference ref = test::load_hf_reference("exports/" + name);
  std::ifstream in(stored + "/reference.json");
  const nlohmann::json want = nlohmann::json::parse(in).at("export").at("sha256");
  const test::TempDir dir("dendrite_hf_export");
  const std::string out = dir.file("hf");
  test::export_through_checkpoint(test::hf_dir(name), dir.file("run"), out);
  nlohmann::json got = nlohmann::json::object();
  for (const auto& e : fs::directory_iterator(out))
    got[e.path().filename().string()] = test::sha256_hex(test::read_bytes(e.path().string()));
  EXPECT_EQ(got, want) << name << ": not the export transformers read; if the export changed "
                       << "on purpose, rerun scripts/make_hf_reference.py --hf-export "
                       << "build/tests/hf_export exports";
  const HfFolder folder(out);
  ASSERT_EQ(folder.config().vocab_size, ref.V);
  auto grid = ProcessGrid::single();
  Transformer model(folder.config(), *grid, test::cpu_backend(), ref.B, ref.T);
  load_hf_folder(folder, model);
  std::vector<float> logits(size_t(ref.B) * ref.T * ref.V);
  model.logits(ref.tokens.data(), ref.B, ref.T, logits.data());
  EXPECT_LE(test::worst_logit_error(logits, ref, 0, ref.B * ref.T, 1e-5), 1.0) << name;
}

INSTANTIATE_TEST_SUITE_P(Reference, HfExports, ::testing::ValuesIn(test::exported_folders()),
                         param_name);

}  // namespace
}  // namespace dendrite
