// SentencePiece BPE tokenizer: training, encoding, decoding.
//
// Round trips are exact: models are trained with the "identity" normaliser,
// no dummy prefix and no whitespace folding, and with byte fallback, so any
// UTF-8 text encodes and decode(encode(text)) == text.
//
// Newlines: SentencePiece reads its training text one line per sentence, so
// "\n" never becomes a learned piece. encode() therefore splits the text into
// lines, encodes each line, and joins them with the byte-fallback piece
// <0x0A> (present in every model trained with byte_fallback); decoding turns
// that byte piece back into "\n". No extra vocabulary slot is spent on it.
#include "dendrite/io/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <string_view>
#include <unordered_map>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"

// Exported by libsentencepiece (its common.h is not installed): quietens the
// trainer's per-merge INFO lines.
namespace sentencepiece::logging {
int GetMinLogLevel();
void SetMinLogLevel(int level);
}  // namespace sentencepiece::logging

namespace dendrite {


namespace {

constexpr const char* kNewlinePiece = "<0x0A>";
constexpr const char* kSpaceSymbol = "\xE2\x96\x81";       // U+2581, SentencePiece's space
constexpr const char* kUnknownSurface = " \xE2\x81\x87 ";  // " ⁇ ", SentencePiece's default
// Bound on training sentences (lines); more are sampled down at random.
constexpr int kMaxTrainSentences = 1000000;
// Lines encoded per parallel block, to bound the per-line result buffers.
constexpr size_t kEncodeBlockLines = 1 << 16;

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string_view> split_lines(const std::string& text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (true) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) break;
    lines.emplace_back(text.data() + start, nl - start);
    start = nl + 1;
  }
  lines.emplace_back(text.data() + start, text.size() - start);
  return lines;
}

}  // namespace

Tokenizer::Tokenizer(const std::string& model_path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  DENDRITE_CHECK(file_exists(model_path), "Tokenizer: model ", model_path,
                 " does not exist; run `dendrite tokenize` to train one");
  auto status = sp_->Load(model_path);
  DENDRITE_CHECK(status.ok(), "Tokenizer: cannot load ", model_path, ": ", status.ToString(),
                 "; is it a SentencePiece .model file?");
}

Tokenizer::~Tokenizer() = default;

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }

int Tokenizer::eos_id() const { return sp_->eos_id(); }

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<std::string_view> lines = split_lines(text);
  int newline = -1;
  if (lines.size() > 1) {
    newline = sp_->PieceToId(kNewlinePiece);
    DENDRITE_CHECK(sp_->IsByte(newline), "Tokenizer::encode: the model has no ", kNewlinePiece,
                   " byte piece, so newlines cannot be encoded; train it with `dendrite tokenize`"
                   " (byte fallback)");
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  for (size_t first = 0; first < lines.size(); first += kEncodeBlockLines) {
    size_t n = std::min(kEncodeBlockLines, lines.size() - first);
    std::vector<std::vector<int>> ids(n);
    std::string error;
#pragma omp parallel for schedule(dynamic, 64) if (n > 256)
    for (size_t i = 0; i < n; ++i) {
      auto status = sp_->Encode(lines[first + i], &ids[i]);
      if (!status.ok()) {
#pragma omp critical(dendrite_tokenizer_encode)
        if (error.empty()) error = status.ToString();
      }
    }
    DENDRITE_CHECK(error.empty(), "Tokenizer::encode: SentencePiece failed: ", error);
    for (size_t i = 0; i < n; ++i) {
      if (first + i > 0) out.push_back(newline);
      out.insert(out.end(), ids[i].begin(), ids[i].end());
    }
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const int vocab = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    DENDRITE_CHECK(ids[i] >= 0 && ids[i] < vocab, "Tokenizer::decode: id ", ids[i], " at position ",
                   i, " is outside the vocabulary [0, ", vocab, ")");
  std::string text;
  auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  DENDRITE_CHECK(status.ok(), "Tokenizer::decode: SentencePiece failed: ", status.ToString());
  return text;
}

std::string Tokenizer::piece_text(int32_t id) const {
  DENDRITE_CHECK(id >= 0 && id < vocab_size(), "Tokenizer::piece_text: id ", id,
                 " is outside the vocabulary [0, ", vocab_size(), ")");
  if (sp_->IsControl(id)) return "";
  if (sp_->IsUnknown(id)) return kUnknownSurface;
  const std::string& piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id))  // "<0xAB>"
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  std::string text;
  const size_t space_len = std::strlen(kSpaceSymbol);
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, space_len, kSpaceSymbol) == 0) {
      text += ' ';
      i += space_len;
    } else {
      text += piece[i++];
    }
  }
  return text;
}

void Tokenizer::train(const std::vector<std::string>& inputs, int vocab_size,
                      const std::string& model_prefix, uint64_t seed) {
  DENDRITE_CHECK(!inputs.empty(), "Tokenizer::train: no input files given");
  std::string joined;
  for (const std::string& path : inputs) {
    DENDRITE_CHECK(file_exists(path), "Tokenizer::train: input ", path, " does not exist");
    DENDRITE_CHECK(path.find(',') == std::string::npos, "Tokenizer::train: input path ", path,
                   " contains a comma, which SentencePiece reads as a list separator; rename it");
    joined += (joined.empty() ? "" : ",") + path;
  }
  DENDRITE_CHECK(vocab_size > 0, "Tokenizer::train: vocab size ", vocab_size, " must be positive");
  const std::unordered_map<std::string, std::string> args = {
      {"input", joined},
      {"model_prefix", model_prefix},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"input_sentence_size", std::to_string(kMaxTrainSentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>((seed ^ (seed >> 32)) & 0x7fffffff));
  const int old_level = sentencepiece::logging::GetMinLogLevel();
  sentencepiece::logging::SetMinLogLevel(1);  // warnings and errors only
  auto status = sentencepiece::SentencePieceTrainer::Train(args);
  sentencepiece::logging::SetMinLogLevel(old_level);
  DENDRITE_CHECK(status.ok(), "Tokenizer::train: SentencePiece failed for ", model_prefix,
                 ".model: ", status.ToString(),
                 "; choose a vocabulary size that suits the amount of text");
}

}  // namespace dendrite
