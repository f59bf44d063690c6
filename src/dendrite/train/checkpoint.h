// Checkpoints: one folder per save, <run>/ckpt-<step>, holding
//   model.safetensors      global weights under Hugging Face names
//   optimizer.safetensors  AdamW state: "exp_avg.<name>", "exp_avg_sq.<name>"
//   trainer_state.json     step, seed, optimizer step count
//   config.json            the resolved run configuration (model and training)
//   tokenizer.model        the tokenizer the data was made with (when known)
// The folder is written under a temporary name and renamed into place, then
// <run>/latest is updated, so a crash never leaves a half checkpoint in use;
// the next save removes any temporary folder a crash left behind.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dendrite/io/hf_folder.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/hooks.h"
#include "dendrite/train/optimizer.h"

namespace dendrite {

struct CheckpointContents {
  nlohmann::json config;         // resolved configuration, "model" key holds the model's
  nlohmann::json trainer_state;  // at least "step"
  std::string tokenizer_path;    // copied in when not empty
  // The tokenizer files of a Hugging Face tokenizer the data was made with
  // (tokenizer.json, vocab.json, ...), copied in under their names.
  std::vector<std::string> tokenizer_files = {};
  // The data's tokenizer format (meta.json's tokenizer_format), written to
  // tokenizer_meta.json when not empty: a Hugging Face tokenizer.model
  // without config files ("hf-sentencepiece") encodes otherwise than
  // Dendrite's own, and checkpoint_tokenizer reads it back.
  std::string tokenizer_format = {};
  // Rank 0 gathers each tensor in pieces of whole rows, about this many
  // floats each (at least one row), and writes each before the next: what a
  // save adds to rank 0's memory, however large the tensor.
  int64_t piece_floats = int64_t{1} << 22;
};

// Writes <run_dir>/ckpt-<step, 8 digits> and points <run_dir>/latest at it.
// Returns the checkpoint folder.
// Every rank of the model's grid calls it (the tensors are gathered); rank 0 writes.
std::string save_checkpoint(const std::string& run_dir, int64_t step, Transformer& model,
                            const AdamW* optimizer, const CheckpointContents& contents,
                            const TrainHooks* hooks = nullptr);

// With keep > 0, removes the oldest ckpt-<step> folders of run_dir until the
// newest `keep` remain, never the one `latest` names; call it only after a
// save has completed. Returns a line per folder removed (or not removable).
std::vector<std::string> prune_checkpoints(const std::string& run_dir, int keep);

// A checkpoint folder, or a run folder (resolved through its `latest`).
std::string resolve_checkpoint(const std::string& path);
nlohmann::json read_checkpoint_config(const std::string& ckpt_dir);
nlohmann::json read_trainer_state(const std::string& ckpt_dir);
// Loads weights into the model; the error names the tensor and both shapes
// when the checkpoint holds another model.
void load_weights(const std::string& ckpt_dir, Transformer& model);
void load_optimizer(const std::string& ckpt_dir, Transformer& model, AdamW& optimizer);

// Loads a Hugging Face-named safetensors file (weights only).
void load_weights_file(const std::string& path, Transformer& model, const std::string& prefix = "");
// The weights of a Hugging Face folder (io/hf_folder.h) into a model built
// from its config (any grid, any backend); the optimizer is untouched.
void load_hf_folder(const HfFolder& folder, Transformer& model);

}  // namespace dendrite
