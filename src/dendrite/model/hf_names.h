// The map between Dendrite's parameters and Hugging Face's tensors, so that
// checkpoints hold global tensors under the names and layouts that
// GPT2LMHeadModel and LlamaForCausalLM use. A Hugging Face tensor is the row
// concatenation of one or more Dendrite tensors (GPT-2's c_attn is q|k|v),
// cropped to `rows` (the vocabulary padding is dropped), and for GPT-2's
// Conv1D layers stored transposed ([in, out]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/model/config.h"
#include "dendrite/model/params.h"

namespace dendrite {

struct HfTensor {
  std::string name;
  std::vector<std::string> parts;  // Dendrite tensors, concatenated along rows
  int64_t rows = 0, cols = 1;      // of the concatenation after cropping
  bool transpose = false;
  bool vector = false;             // 1-D tensor
  std::vector<int64_t> shape() const;
  int64_t numel() const { return rows * cols; }
};

std::vector<HfTensor> hf_tensors(const ModelConfig& config, const ParamTable& table);

// out [numel] = the Hugging Face tensor built from a flat buffer laid out by table.
void export_hf_tensor(const HfTensor& t, const ParamTable& table, const float* flat, float* out);
// The inverse: scatters a Hugging Face tensor into the flat buffer.
void import_hf_tensor(const HfTensor& t, const ParamTable& table, const float* in, float* flat);

}  // namespace dendrite
