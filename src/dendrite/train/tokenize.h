// The `dendrite tokenize` job: train (or load) a SentencePiece tokenizer,
// encode text files, split train / validation, write the token files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dendrite {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // text files
  std::string out_dir;              // writes tokenizer.model, train.bin, val.bin, meta.json
  std::string model;                // existing .model to use instead of training one
  int vocab_size = 8192;
  double val_fraction = 0.005;      // last fraction of the text goes to validation
  uint64_t seed = 1337;
  std::string canaries;  // text file of passages to insert into train.bin (canaries.h)
  int canary_repeat = 1;  // copies of each passage
};

// The `dendrite tokenize` job: train (or load) the tokenizer, encode every
// input, split train / validation, write the token files. Prints progress.
void run_tokenize(const TokenizeOptions& opt);

}  // namespace dendrite
