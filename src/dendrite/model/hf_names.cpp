#include "dendrite/model/hf_names.h"

#include "dendrite/core/check.h"

namespace dendrite {

std::vector<int64_t> HfTensor::shape() const {
  if (vector) return {rows};
  return transpose ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
}

namespace {

HfTensor make(const ParamTable& table, std::string name, std::vector<std::string> parts,
              bool transpose = false, int64_t crop_rows = -1) {
  HfTensor t;
  t.name = std::move(name);
  t.transpose = transpose;
  for (auto& p : parts) {
    const ParamSpec& s = table.find(p);
    t.vector = s.shape.size() == 1;
    t.cols = t.vector ? 1 : s.shape[1];
    t.rows += s.shape[0];
  }
  if (crop_rows >= 0) t.rows = crop_rows;
  t.parts = std::move(parts);
  return t;
}

void gpt2_tensors(const ModelConfig& c, const ParamTable& tb, std::vector<HfTensor>& out) {
  out.push_back(make(tb, "transformer.wte.weight", {"tok_emb"}, false, c.vocab_size));
  out.push_back(make(tb, "transformer.wpe.weight", {"pos_emb"}));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string d = "layer" + std::to_string(l) + ".";
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    out.push_back(make(tb, h + "ln_1.weight", {d + "norm1.weight"}));
    out.push_back(make(tb, h + "ln_1.bias", {d + "norm1.bias"}));
    out.push_back(make(tb, h + "attn.c_attn.weight", {d + "q.weight", d + "k.weight", d + "v.weight"}, true));
    out.push_back(make(tb, h + "attn.c_attn.bias", {d + "q.bias", d + "k.bias", d + "v.bias"}));
    out.push_back(make(tb, h + "attn.c_proj.weight", {d + "o.weight"}, true));
    out.push_back(make(tb, h + "attn.c_proj.bias", {d + "o.bias"}));
    out.push_back(make(tb, h + "ln_2.weight", {d + "norm2.weight"}));
    out.push_back(make(tb, h + "ln_2.bias", {d + "norm2.bias"}));
    out.push_back(make(tb, h + "mlp.c_fc.weight", {d + "up.weight"}, true));
    out.push_back(make(tb, h + "mlp.c_fc.bias", {d + "up.bias"}));
    out.push_back(make(tb, h + "mlp.c_proj.weight", {d + "down.weight"}, true));
    out.push_back(make(tb, h + "mlp.c_proj.bias", {d + "down.bias"}));
  }
  out.push_back(make(tb, "transformer.ln_f.weight", {"norm_f.weight"}));
  out.push_back(make(tb, "transformer.ln_f.bias", {"norm_f.bias"}));
}

void llama_tensors(const ModelConfig& c, const ParamTable& tb, std::vector<HfTensor>& out) {
  out.push_back(make(tb, "model.embed_tokens.weight", {"tok_emb"}, false, c.vocab_size));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string d = "layer" + std::to_string(l) + ".";
    const std::string h = "model.layers." + std::to_string(l) + ".";
    out.push_back(make(tb, h + "input_layernorm.weight", {d + "norm1.weight"}));
    out.push_back(make(tb, h + "self_attn.q_proj.weight", {d + "q.weight"}));
    out.push_back(make(tb, h + "self_attn.k_proj.weight", {d + "k.weight"}));
    out.push_back(make(tb, h + "self_attn.v_proj.weight", {d + "v.weight"}));
    if (c.qkv_bias)
      for (const char* p : {"q", "k", "v"})
        out.push_back(make(tb, h + "self_attn." + p + "_proj.bias", {d + p + ".bias"}));
    if (c.qk_norm) {
      out.push_back(make(tb, h + "self_attn.q_norm.weight", {d + "q_norm.weight"}));
      out.push_back(make(tb, h + "self_attn.k_norm.weight", {d + "k_norm.weight"}));
    }
    out.push_back(make(tb, h + "self_attn.o_proj.weight", {d + "o.weight"}));
    out.push_back(make(tb, h + "post_attention_layernorm.weight", {d + "norm2.weight"}));
    out.push_back(make(tb, h + "mlp.gate_proj.weight", {d + "gate.weight"}));
    out.push_back(make(tb, h + "mlp.up_proj.weight", {d + "up.weight"}));
    out.push_back(make(tb, h + "mlp.down_proj.weight", {d + "down.weight"}));
  }
  out.push_back(make(tb, "model.norm.weight", {"norm_f.weight"}));
  if (!c.tied_embeddings()) out.push_back(make(tb, "lm_head.weight", {"lm_head"}, false, c.vocab_size));
}

// Visits (row of the concatenation, pointer to that row of a global tensor).
template <typename Tensors, typename F>
void for_each_row(const HfTensor& t, const ParamTable& table, Tensors& tensors, F&& f) {
  int64_t row = 0;
  for (auto& p : t.parts) {
    const ParamSpec& s = table.find(p);
    auto it = tensors.find(p);
    DENDRITE_CHECK(it != tensors.end(), "hf_names: global tensor '", p, "' is missing");
    for (int64_t r = 0; r < s.shape[0] && row < t.rows; ++r, ++row)
      f(row, it->second.data() + r * t.cols);
  }
}

}  // namespace

std::vector<HfTensor> hf_tensors(const ModelConfig& config, const ParamTable& table) {
  std::vector<HfTensor> out;
  if (config.gpt2())
    gpt2_tensors(config, table, out);
  else
    llama_tensors(config, table, out);
  return out;
}

void export_hf_tensor(const HfTensor& t, const ParamTable& table, const GlobalTensors& in,
                      float* out) {
  for_each_row(t, table, in, [&](int64_t row, const float* src) {
    for (int64_t j = 0; j < t.cols; ++j) {
      if (t.transpose)
        out[j * t.rows + row] = src[j];
      else
        out[row * t.cols + j] = src[j];
    }
  });
}

}  // namespace dendrite
