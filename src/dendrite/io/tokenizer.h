// Tokenizers: the interface `dendrite tokenize` and `generate` use, Dendrite's
// own SentencePiece models (training, encoding, decoding), and open_tokenizer,
// which opens a .model file or a Hugging Face tokenizer folder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace dendrite {

struct SentencePieceSettings;

// Streaming decode: the text of each new id as it comes. Bytes of a piece
// that ends inside a UTF-8 character are held until the character is
// complete, so the pieces concatenate to decode() of all the ids and each
// piece is valid UTF-8. Refers to its tokenizer, which must outlive it.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual std::string next(int32_t id) = 0;  // may be empty (a held byte, a control id)
  virtual std::string finish() = 0;          // what is still held, as U+FFFD
};

// The ids a tokenizer's own encode(text, add_special_tokens=True) puts around
// a text: a BOS before, an EOS after (Hugging Face's post-processor).
struct SpecialIds {
  std::vector<int32_t> before, after;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // continuing: the ids follow text already written (a prompt), so the first
  // piece keeps a leading space that decode() drops at the start of a text.
  virtual std::unique_ptr<TokenStream> stream(bool continuing = false) const = 0;
  virtual int vocab_size() const = 0;  // one past the largest id
  virtual int eos_id() const = 0;      // -1 if none
  // What `dendrite tokenize` puts around each document; none by default.
  virtual SpecialIds document_specials() const { return {}; }
  // "sentencepiece" (Dendrite's .model), "hf-bpe" or "hf-sentencepiece".
  virtual std::string format() const = 0;
  // The files it was read from (full paths), to keep beside data it encoded.
  virtual std::vector<std::string> files() const = 0;
};

// Opens path as
//  - a folder: a Hugging Face tokenizer. tokenizer.json (a BPE model: GPT-2's
//    byte-level kind by ByteLevelBpe, the others, Llama 3, Qwen2, Mistral,
//    Llama 2, by HfTokenizer; beside a tokenizer.model, one it cannot run
//    gives way to the model), else vocab.json + merges.txt (GPT-2's byte-level
//    BPE), else tokenizer.model (a SentencePiece model encoded as the
//    sentencepiece library does: the whole text at once). Special tokens, bos
//    and eos from tokenizer_config.json / special_tokens_map.json / config.json.
//    A data folder of `dendrite tokenize` whose meta.json says its
//    tokenizer.model is Dendrite's own opens as that (by lines).
//  - a .json file: a tokenizer.json, with its folder's config;
//  - any other file: Dendrite's SentencePiece .model (Tokenizer, by lines).
std::unique_ptr<TextTokenizer> open_tokenizer(const std::string& path);

// The tokenizer of a checkpoint folder, for open_tokenizer: the folder when
// it holds a Hugging Face tokenizer's files (tokenizer.json, vocab.json,
// tokenizer_config.json, special_tokens_map.json) or its tokenizer_meta.json
// says "hf-sentencepiece" (a Hugging Face tokenizer.model alone), else its
// tokenizer.model (Dendrite's own). The path need not exist.
std::string checkpoint_tokenizer(const std::string& dir);

// Every file name a tokenizer of open_tokenizer's kinds may be made of, as
// found in a folder (for removing stale ones from an output folder).
const std::vector<std::string>& tokenizer_file_names();

// How a SentencePiece model encodes text.
enum class SentencePieceEncoding {
  kLines,  // Dendrite's models: line by line, joined with the <0x0A> byte piece
  kWhole,  // Hugging Face folders: SentencePiece's own Encode of the whole text
};

// A SentencePiece model (the name predates the interface).
class Tokenizer : public TextTokenizer {
 public:
  explicit Tokenizer(const std::string& model_path,
                     SentencePieceEncoding encoding = SentencePieceEncoding::kLines);
  ~Tokenizer() override;
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::unique_ptr<TokenStream> stream(bool continuing = false) const override;
  int vocab_size() const override;
  int eos_id() const override;  // -1 if none
  std::string format() const override;
  std::vector<std::string> files() const override { return files_; }

  // The id of a piece, -1 if the model has no such piece.
  int piece_id(const std::string& piece) const;
  // For open_tokenizer: the eos id a Hugging Face folder's config names, and
  // the config files to list in files().
  void apply_folder_config(int eos_id, const std::vector<std::string>& config_files);

  // Trains a BPE model of vocab_size pieces on the given text files and writes
  // <model_prefix>.model and <model_prefix>.vocab.
  static void train(const std::vector<std::string>& inputs, int vocab_size,
                    const std::string& model_prefix, uint64_t seed);

 private:
  friend class SentencePieceStream;
  std::vector<int32_t> encode_lines(const std::string& text) const;
  std::vector<int32_t> encode_whole(const std::string& text) const;
  bool cuts_keep_ids(const SentencePieceSettings& settings) const;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  // kWhole: the model without its dummy prefix, for the pieces of a long text
  // after the first; null when cutting could change the ids.
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_inner_;
  std::string model_path_;
  std::vector<std::string> files_;
  SentencePieceEncoding encoding_;
  int eos_id_ = -1;
  // From the model's settings: decoding drops the leading space of the first
  // piece (add_dummy_prefix), or of all leading pieces (remove_extra_whitespaces).
  bool drops_leading_space_ = false;
  bool drops_all_leading_space_ = false;
  std::string unk_surface_;  // what an unknown piece decodes to
};

}  // namespace dendrite
