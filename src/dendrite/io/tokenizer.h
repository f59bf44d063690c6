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

}  // namespace dendrite
