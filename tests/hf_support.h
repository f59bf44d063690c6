// Shared by the Hugging Face tests: the reference folders under
// tests/data/hf/ (made by scripts/make_hf_reference.py with transformers),
// their tokens and the logits transformers computed for them.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dendrite::test {

inline std::string hf_dir(const std::string& name) {
  return std::string(DENDRITE_SOURCE_DIR) + "/tests/data/hf/" + name;
}

struct HfReference {
  int B = 0, T = 0, V = 0;
  std::vector<int32_t> tokens;  // [B*T]
  std::vector<float> logits;    // [B*T, V]
  // transformers' greedy continuation of a prompt (the Llama family's
  // newer folders; empty elsewhere).
  std::vector<int32_t> prompt, continuation;
};

// The reference folders of the Llama family's other members (Llama 3's and
// linear rope scaling, Mistral, Qwen2, Qwen3), with a greedy generation each.
inline std::vector<const char*> llama_family_folders() {
  return {"llama3-tiny", "llama-linear-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny"};
}

// The reference folders hf_test exports and reads back; transformers' reading
// of each export is kept in tests/data/hf/exports/ (make_hf_reference.py).
inline std::vector<const char*> exported_folders() {
  std::vector<const char*> names = llama_family_folders();
  names.insert(names.begin(), {"gpt2-tiny", "llama-tiny"});
  return names;
}

inline HfReference load_hf_reference(const std::string& name) {
  std::ifstream in(hf_dir(name) + "/reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  HfReference r;
  r.B = j.at("shape")[0], r.T = j.at("shape")[1], r.V = j.at("shape")[2];
  for (const auto& seq : j.at("tokens"))
    for (const auto& t : seq) r.tokens.push_back(t.get<int32_t>());
  if (j.contains("generation")) {
    r.prompt = j.at("generation").at("prompt").get<std::vector<int32_t>>();
    r.continuation = j.at("generation").at("tokens").get<std::vector<int32_t>>();
  }
  r.logits.resize(size_t(r.B) * r.T * r.V);
  std::ifstream bin(hf_dir(name) + "/" + j.at("logits_file").get<std::string>(), std::ios::binary);
  bin.read(reinterpret_cast<char*>(r.logits.data()), std::streamsize(r.logits.size() * 4));
  return r;
}

// The largest |got - want| over tol (|want| + rms(want)), over the rows
// [row0, row0 + rows) of want; at most 1 passes.
inline double worst_logit_error(const std::vector<float>& got, const HfReference& r, int row0,
                                int rows, double tol) {
  double ms = 0;
  for (float w : r.logits) ms += double(w) * w;
  const double rms = std::sqrt(ms / double(r.logits.size()));
  double worst = 0;
  for (int i = 0; i < rows; ++i)
    for (int v = 0; v < r.V; ++v) {
      const double w = r.logits[size_t(row0 + i) * r.V + v], g = got[size_t(i) * r.V + v];
      const double e = std::fabs(g - w) / (tol * (std::fabs(w) + rms));
      worst = std::isnan(e) ? INFINITY : std::max(worst, e);
    }
  return worst;
}

}  // namespace dendrite::test
