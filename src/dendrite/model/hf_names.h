// The map between Dendrite's parameters and Hugging Face's tensors, so that
// checkpoints hold global tensors under the names and layouts that
// GPT2LMHeadModel and LlamaForCausalLM use. A Hugging Face tensor is the row
// concatenation of one or more Dendrite tensors (GPT-2's c_attn is q|k|v),
// cropped to `rows` (the vocabulary padding is dropped), and for GPT-2's
// Conv1D layers stored transposed ([in, out]).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dendrite/model/config.h"
#include "dendrite/parallel/params.h"

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

// Dendrite's whole (global) tensors by name, row-major [rows, cols].
using GlobalTensors = std::map<std::string, std::vector<float>>;

// out [numel] = the Hugging Face tensor built from Dendrite's global tensors.
void export_hf_tensor(const HfTensor& t, const ParamTable& table, const GlobalTensors& in,
                      float* out);
// The inverse, a rank's chunks read from a Hugging Face tensor element by
// element, is read_hf_tensors in train/checkpoint.cpp.

}  // namespace dendrite
