// Tokenizers (tokenizer.h): Dendrite's SentencePiece models (training,
// encoding, decoding, streaming) and open_tokenizer.
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
// A Hugging Face folder's tokenizer.model is instead encoded whole, with
// SentencePiece's own Encode, so that its ids are the library's.
//
// Streaming follows SentencePiece's Decode: runs of byte pieces are joined and
// each byte not part of a valid character becomes U+FFFD; with
// add_dummy_prefix (or remove_extra_whitespaces) the first piece's leading
// space is dropped, as the space the encoder added (sentencepiece_model.h
// reads those settings).
#include "dendrite/io/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <unordered_map>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"
#include "dendrite/io/bpe_tokenizer.h"
#include "dendrite/io/hf_tokenizer.h"
#include "dendrite/io/hf_tokenizer_config.h"
#include "dendrite/io/sentencepiece_model.h"
#include "dendrite/io/utf8.h"

// Exported by libsentencepiece (its common.h is not installed): quietens the
// trainer's per-merge INFO lines.
namespace sentencepiece::logging {
int GetMinLogLevel();
void SetMinLogLevel(int level);
}  // namespace sentencepiece::logging

namespace dendrite {

namespace fs = std::filesystem;

namespace {

constexpr const char* kNewlinePiece = "<0x0A>";
constexpr const char* kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's space
// Bound on training sentences (lines); more are sampled down at random.
constexpr int kMaxTrainSentences = 1000000;
// Lines encoded per parallel block, to bound the per-line result buffers.
constexpr size_t kEncodeBlockLines = 1 << 16;
// Text per piece when a whole text is encoded in pieces (encode_whole): small
// pieces encode faster (measured: 10 MB in 2.5 s with 64 KB, 5 s with 1 MB).
constexpr size_t kWholeBlockBytes = 1 << 16;

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The byte of a byte piece "<0xAB>".
char byte_of_piece(const std::string& piece) {
  return static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
}

// A piece's text: SentencePiece's space symbol back to " ".
std::string with_spaces(std::string_view piece) {
  const std::string_view space = kSpaceSymbol;
  std::string text;
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, space.size()) == space) {
      text += ' ';
      i += space.size();
    } else {
      text += piece[i++];
    }
  }
  return text;
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

Tokenizer::Tokenizer(const std::string& model_path, SentencePieceEncoding encoding)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()),
      model_path_(model_path),
      files_{model_path},
      encoding_(encoding) {
  DENDRITE_CHECK(file_exists(model_path), "Tokenizer: model ", model_path,
                 " does not exist; run `dendrite tokenize` to train one");
  // Read once: what SentencePiece would end the process on is refused first.
  std::ifstream in(model_path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string fault = sentencepiece_piece_fault(bytes);
  DENDRITE_CHECK(fault.empty(), "Tokenizer: cannot load ", model_path, ": ", fault,
                 "; is it a SentencePiece .model file (or pass a Hugging Face tokenizer folder)?");
  auto status = sp_->LoadFromSerializedProto(bytes);
  DENDRITE_CHECK(status.ok(), "Tokenizer: cannot load ", model_path, ": ", status.ToString(),
                 "; is it a SentencePiece .model file (or pass a Hugging Face tokenizer folder)?");
  eos_id_ = sp_->eos_id();
  const std::string proto = sp_->serialized_model_proto();
  SentencePieceSettings settings;
  DENDRITE_CHECK(read_sentencepiece_settings(proto, &settings), "Tokenizer: cannot read the ",
                 "settings of ", model_path, " (a malformed model protobuf); is it complete?");
  drops_leading_space_ = settings.add_dummy_prefix || settings.remove_extra_whitespaces;
  drops_all_leading_space_ = settings.remove_extra_whitespaces;
  unk_surface_ = settings.unk_surface;
  if (encoding == SentencePieceEncoding::kWhole && cuts_keep_ids(settings)) {
    sp_inner_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    status = sp_inner_->LoadFromSerializedProto(without_dummy_prefix(proto));
    DENDRITE_CHECK(status.ok(), "Tokenizer: cannot reload ", model_path,
                   " without its dummy prefix: ", status.ToString());
  }
}

// Whether encoding a text in pieces cut after newlines gives the ids of the
// whole (see encode_whole): no piece holds "\n", so none spans a cut and the
// model segments each side alone (BPE merges only pairs that form a piece;
// unigram's best path has no edge across); "\n" becomes the byte piece
// <0x0A>, so no unknown run spans a cut either; the normalizer only turns
// spaces into "▁" and adds the dummy prefix at the start, which the pieces
// after the first are encoded without.
bool Tokenizer::cuts_keep_ids(const SentencePieceSettings& settings) const {
  if (settings.has_normalization_rules || settings.remove_extra_whitespaces ||
      settings.treat_whitespace_as_suffix || !sp_->IsByte(sp_->PieceToId(kNewlinePiece)))
    return false;
  for (int id = 0; id < sp_->GetPieceSize(); ++id)
    if (!sp_->IsByte(id) && sp_->IdToPiece(id).find('\n') != std::string::npos) return false;
  return true;
}

Tokenizer::~Tokenizer() = default;

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }

int Tokenizer::eos_id() const { return eos_id_; }

std::string Tokenizer::format() const {
  return encoding_ == SentencePieceEncoding::kLines ? "sentencepiece" : "hf-sentencepiece";
}

int Tokenizer::piece_id(const std::string& piece) const {
  const int id = sp_->PieceToId(piece);
  return sp_->IsUnknown(id) && sp_->IdToPiece(id) != piece ? -1 : id;
}

void Tokenizer::apply_folder_config(int eos_id, const std::vector<std::string>& config_files) {
  DENDRITE_CHECK(eos_id >= -1 && eos_id < vocab_size(), "Tokenizer: eos id ", eos_id,
                 " is outside the vocabulary [0, ", vocab_size(), ")");
  eos_id_ = eos_id;
  files_.insert(files_.end(), config_files.begin(), config_files.end());
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  return encoding_ == SentencePieceEncoding::kLines ? encode_lines(text) : encode_whole(text);
}

// SentencePiece's Encode of the whole text. Encoding needs about 130 bytes
// of memory per byte of text (1.3 GB for 10 MB), so a long text is cut after newlines into
// pieces of about kWholeBlockBytes, encoded in parallel, when that gives the
// same ids (cuts_keep_ids).
std::vector<int32_t> Tokenizer::encode_whole(const std::string& text) const {
  std::vector<size_t> starts = {0};
  while (sp_inner_ && starts.back() + kWholeBlockBytes < text.size()) {
    const size_t newline = text.find('\n', starts.back() + kWholeBlockBytes);
    if (newline == std::string::npos || newline + 1 == text.size()) break;
    starts.push_back(newline + 1);
  }
  std::vector<std::vector<int>> ids(starts.size());
  std::string error;
#pragma omp parallel for schedule(dynamic, 1) if (starts.size() > 1)
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t end = i + 1 < starts.size() ? starts[i + 1] : text.size();
    const auto& sp = i == 0 ? *sp_ : *sp_inner_;
    auto status = sp.Encode(std::string_view(text).substr(starts[i], end - starts[i]), &ids[i]);
    if (!status.ok()) {
#pragma omp critical(dendrite_tokenizer_encode)
      if (error.empty()) error = status.ToString();
    }
  }
  DENDRITE_CHECK(error.empty(), "Tokenizer::encode: SentencePiece failed on ", model_path_, ": ",
                 error);
  std::vector<int32_t> out;
  for (const std::vector<int>& v : ids) out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<int32_t> Tokenizer::encode_lines(const std::string& text) const {
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

// SentencePiece's Decode, one id at a time (see the comment at the top).
class SentencePieceStream : public TokenStream {
 public:
  SentencePieceStream(const Tokenizer& tok, bool continuing)
      : tok_(tok), sp_(*tok.sp_), at_start_(!continuing) {}

  std::string next(int32_t id) override {
    DENDRITE_CHECK(id >= 0 && id < tok_.vocab_size(), "Tokenizer stream: id ", id,
                   " is outside the vocabulary [0, ", tok_.vocab_size(), ")");
    std::string out;
    if (sp_.IsByte(id)) {
      const char byte = byte_of_piece(sp_.IdToPiece(id));
      utf8_.push(std::string_view(&byte, 1), out);
    } else {
      utf8_.flush(out);  // a run of byte pieces ends here
      text_started_ |= !out.empty();
      if (space_dropped_ || text_started_) at_start_ = false;
      out += piece(id);
    }
    text_started_ |= !out.empty();
    return out;
  }

  std::string finish() override {
    std::string out;
    utf8_.flush(out);
    return out;
  }

 private:
  std::string piece(int32_t id) {
    space_dropped_ = false;
    if (sp_.IsControl(id)) return "";
    if (sp_.IsUnknown(id)) return tok_.unk_surface_;
    std::string_view p = sp_.IdToPiece(id);
    const std::string_view space = kSpaceSymbol;
    if (at_start_ && tok_.drops_leading_space_ && p.substr(0, space.size()) == space) {
      p.remove_prefix(space.size());
      space_dropped_ = !tok_.drops_all_leading_space_;  // remove_extra_whitespaces: keep going
    }
    return with_spaces(p);
  }

  const Tokenizer& tok_;
  const sentencepiece::SentencePieceProcessor& sp_;
  Utf8Stream utf8_{Utf8Repair::kPerByte};
  bool at_start_;               // SentencePiece's is_bos_ws: may still drop a leading space
  bool space_dropped_ = false;  // the last piece's leading space was dropped (bos_ws_seen)
  bool text_started_ = false;   // some text was written
};

std::unique_ptr<TokenStream> Tokenizer::stream(bool continuing) const {
  return std::make_unique<SentencePieceStream>(*this, continuing);
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

std::string checkpoint_tokenizer(const std::string& dir) {
  for (const char* hf :
       {"tokenizer.json", "vocab.json", "tokenizer_config.json", "special_tokens_map.json"})
    if (fs::exists(fs::path(dir) / hf)) return dir;
  // A Hugging Face tokenizer.model alone: the folder opens it as the library encodes.
  const fs::path meta = fs::path(dir) / "tokenizer_meta.json";
  if (fs::exists(meta) &&
      read_tokenizer_json(meta.string()).value("tokenizer_format", "") == "hf-sentencepiece")
    return dir;
  return (fs::path(dir) / "tokenizer.model").string();
}

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {
      "tokenizer.model", "tokenizer.vocab",       "tokenizer.json",         "vocab.json",
      "merges.txt",      "tokenizer_config.json", "special_tokens_map.json"};
  return names;
}

namespace {

// GPT-2's byte-level BPE keeps its own fast path (ByteLevelBpe); every other
// tokenizer.json runs through the general pipeline.
std::unique_ptr<TextTokenizer> open_tokenizer_json(const nlohmann::json& j, const std::string& path,
                                                   const HfTokenizerConfig& config) {
  if (ByteLevelBpe::reads(j)) return ByteLevelBpe::from_tokenizer_json(j, path, config);
  return HfTokenizer::from_tokenizer_json(j, path, config);
}

std::unique_ptr<TextTokenizer> open_hf_sentencepiece(const std::string& model_path,
                                                     const HfTokenizerConfig& config) {
  auto tok = std::make_unique<Tokenizer>(model_path, SentencePieceEncoding::kWhole);
  int eos = tok->eos_id();
  if (!config.eos_token.empty()) {
    eos = tok->piece_id(config.eos_token);
    DENDRITE_CHECK(eos >= 0, "open_tokenizer: ", config.eos_file, ": eos_token \"",
                   config.eos_token, "\" is not a piece of ", model_path);
  }
  tok->apply_folder_config(eos, config.files);
  return tok;
}

// Whether dir is a data folder of `dendrite tokenize` made with Dendrite's
// own model: its meta.json names tokenizer.model, with format "sentencepiece"
// or (older runs) none.
bool holds_dendrite_model(const std::string& dir) {
  const fs::path meta = fs::path(dir) / "meta.json";
  if (!fs::is_regular_file(meta)) return false;
  const nlohmann::json j = read_tokenizer_json(meta.string());
  return j.is_object() && j.value("tokenizer", "") == "tokenizer.model" &&
         j.value("tokenizer_format", "sentencepiece") == "sentencepiece";
}

std::unique_ptr<TextTokenizer> open_folder(const std::string& dir) {
  const auto file = [&](const char* name) { return (fs::path(dir) / name).string(); };
  const std::string sp_model = file("tokenizer.model");
  if (holds_dendrite_model(dir)) return std::make_unique<Tokenizer>(sp_model);
  const HfTokenizerConfig config = read_hf_tokenizer_config(dir);
  if (fs::exists(file("tokenizer.json"))) {
    const nlohmann::json j = read_tokenizer_json(file("tokenizer.json"));
    if (!fs::exists(sp_model)) return open_tokenizer_json(j, file("tokenizer.json"), config);
    // Beside a tokenizer.model, a tokenizer.json that Dendrite cannot run
    // (a Precompiled normalizer, a Unigram model) gives way to the model.
    try {
      return open_tokenizer_json(j, file("tokenizer.json"), config);
    } catch (const Error& e) {
      log_info(str("open_tokenizer: using ", sp_model, " instead of tokenizer.json: ", e.what()));
    }
  }
  if (fs::exists(file("vocab.json")) || fs::exists(file("merges.txt")))
    return ByteLevelBpe::from_vocab_merges(file("vocab.json"), file("merges.txt"), config);
  if (fs::exists(sp_model)) return open_hf_sentencepiece(sp_model, config);
  fail("open_tokenizer: the folder ", dir, " holds no tokenizer; expected tokenizer.json, ",
       "vocab.json + merges.txt, or tokenizer.model (a Hugging Face tokenizer folder)");
}

}  // namespace

std::unique_ptr<TextTokenizer> open_tokenizer(const std::string& path) {
  if (fs::is_directory(path)) return open_folder(path);
  DENDRITE_CHECK(fs::exists(path), "open_tokenizer: ", path, " does not exist; pass a ",
                 "SentencePiece .model file or a Hugging Face tokenizer folder");
  if (fs::path(path).extension() == ".json") {
    const std::string dir = fs::path(path).parent_path().string();
    return open_tokenizer_json(read_tokenizer_json(path), path,
                               read_hf_tokenizer_config(dir.empty() ? "." : dir));
  }
  return std::make_unique<Tokenizer>(path);  // Dendrite's own model, encoded by lines
}

}  // namespace dendrite
