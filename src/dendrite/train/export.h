// `dendrite export --checkpoint RUN --hf OUT`: a checkpoint as a Hugging Face
// model folder that transformers loads (AutoModelForCausalLM and, when the
// checkpoint holds a tokenizer, AutoTokenizer): config.json,
// generation_config.json, model.safetensors (the checkpoint's weights, which
// already carry Hugging Face names and layouts) and the tokenizer files.
#pragma once

#include <string>

namespace dendrite {

// Writes the folder `out` (into a temporary folder renamed into place, so a
// failure leaves no partial folder; an existing `out` is refused) and returns
// a one-line summary.
std::string export_hf(const std::string& checkpoint, const std::string& out);

}  // namespace dendrite
