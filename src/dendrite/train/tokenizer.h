// SentencePiece BPE tokenizer: training from text files, encoding, decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace dendrite {

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& model_path);  // loads a .model file
  ~Tokenizer();
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // Decoded text of one piece, for streaming output.
  std::string piece_text(int32_t id) const;
  int vocab_size() const;
  int eos_id() const;  // -1 if none

  // Trains a BPE model of vocab_size pieces on the given text files and writes
  // <model_prefix>.model and <model_prefix>.vocab. max_sentences bounds the
  // training input (0: all).
  static void train(const std::vector<std::string>& inputs, int vocab_size,
                    const std::string& model_prefix, uint64_t seed);

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

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
