// The `dendrite tokenize` job: train a SentencePiece tokenizer (or open one:
// a .model file or a Hugging Face tokenizer folder), encode text files, split
// train / validation, write the token files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dendrite {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // text files
  std::string out_dir;              // writes the tokenizer's files, train.bin, val.bin, meta.json
  // A tokenizer to use instead of training one (open_tokenizer: a .model
  // file or a Hugging Face folder); its files are copied into out_dir.
  std::string model;
  int vocab_size = 8192;
  double val_fraction = 0.005;  // last fraction of the text goes to validation
  uint64_t seed = 1337;
  std::string canaries;   // text file of passages to insert into train.bin (canaries.h)
  // Copies of each passage: passage i gets canary_repeat[i % size] copies
  // (one value: the same for all; "1,2,4" cycles, for dose experiments).
  std::vector<int> canary_repeat = {1};
};

// The `dendrite tokenize` job: train (or open) the tokenizer, encode every
// input, split train / validation, write the token files and meta.json
// (vocab_size, token counts, and the tokenizer: its main file, format, files
// and eos id). Prints progress.
void run_tokenize(const TokenizeOptions& opt);

}  // namespace dendrite
