// SentencePiece BPE tokenizer (training, encoding, decoding) and the
// `dendrite tokenize` job that turns text files into train.bin / val.bin.
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
#include "dendrite/train/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"
#include "dendrite/train/canaries.h"
#include "dendrite/train/token_file.h"

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

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DENDRITE_CHECK(in.good(), "tokenize: cannot open ", path, ": ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  DENDRITE_CHECK(!in.bad(), "tokenize: reading ", path, " failed: ", std::strerror(errno));
  return buf.str();
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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
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

namespace {

// Outputs are first written under these names and renamed into place only
// when everything has succeeded, so a failed run leaves nothing half-written.
std::string staged(const std::string& path) { return path + ".staged"; }

void write_text_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  DENDRITE_CHECK(f != nullptr, "tokenize: cannot create ", path, ": ", std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0;
  int saved_errno = errno;
  if (std::fclose(f) != 0) ok = false;
  DENDRITE_CHECK(ok, "tokenize: writing ", path, " failed: ", std::strerror(saved_errno));
}

void rename_or_fail(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  DENDRITE_CHECK(!ec, "tokenize: cannot rename ", from, " to ", to, ": ", ec.message());
}

// Trains (or copies) the tokenizer into staged(out_dir/tokenizer.model).
void stage_tokenizer(const TokenizeOptions& opt, const std::string& model_path) {
  if (!opt.model.empty()) {
    Tokenizer check(opt.model);  // fails clearly if it is not a loadable model
    std::error_code ec;
    fs::copy_file(opt.model, staged(model_path), fs::copy_options::overwrite_existing, ec);
    DENDRITE_CHECK(!ec, "tokenize: cannot copy ", opt.model, " to ", staged(model_path), ": ",
                   ec.message());
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  const std::string prefix = opt.out_dir + "/tokenizer";
  Tokenizer::train(opt.inputs, opt.vocab_size, staged(prefix), opt.seed);
  rename_or_fail(staged(prefix) + ".model", staged(model_path));
  rename_or_fail(staged(prefix) + ".vocab", staged(prefix + ".vocab"));
  log_info(str("tokenize: trained a ", opt.vocab_size, "-piece BPE tokenizer in ",
               fixed(seconds_since(t0), 2), " s"));
}

// All inputs encoded back to back, files separated by the eos id if there is one.
std::vector<int32_t> encode_inputs(const Tokenizer& tok, const std::vector<std::string>& inputs) {
  std::vector<int32_t> all;
  for (size_t f = 0; f < inputs.size(); ++f) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(read_text(inputs[f]));
    double secs = seconds_since(t0);
    log_info(str("tokenize: ", inputs[f], ": ", ids.size(), " tokens in ", fixed(secs, 2), " s (",
                 fixed(ids.size() / std::max(secs, 1e-9), 0), " tokens/s)"));
    if (f > 0 && tok.eos_id() >= 0) all.push_back(tok.eos_id());
    all.insert(all.end(), ids.begin(), ids.end());
  }
  return all;
}

// Inserts the canary passages into the training tokens; writes their locations.
void stage_canaries(const TokenizeOptions& opt, const Tokenizer& tok, std::vector<int32_t>& train,
                    const std::string& json_path) {
  std::vector<std::string> texts = split_passages(read_text(opt.canaries));
  DENDRITE_CHECK(!texts.empty(), "tokenize: the canary file ", opt.canaries, " holds no passages; ",
                 "separate passages by empty lines or lines holding only '%'");
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& t : texts) ids.push_back(tok.encode(t));
  const std::vector<int32_t> nl = tok.encode("\n");
  const int32_t newline = nl.size() == 1 ? nl[0] : -1;
  std::vector<CanaryOccurrence> where =
      insert_canaries(train, ids, opt.canary_repeat, opt.seed, newline);
  write_canaries_json(json_path, texts, where, opt.canary_repeat, opt.seed);
  log_info(str("tokenize: inserted ", texts.size(), " canary passages x ", opt.canary_repeat,
               " into the training tokens (locations in canaries.json)"));
}

void check_options(const TokenizeOptions& opt) {
  DENDRITE_CHECK(!opt.inputs.empty(), "tokenize: no input text files given");
  DENDRITE_CHECK(opt.canaries.empty() || file_exists(opt.canaries), "tokenize: canary file ",
                 opt.canaries, " does not exist or is not a regular file");
  for (const std::string& path : opt.inputs)
    DENDRITE_CHECK(file_exists(path), "tokenize: input ", path,
                   " does not exist or is not a regular file");
  DENDRITE_CHECK(!opt.out_dir.empty(), "tokenize: no output directory given");
  DENDRITE_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1, "tokenize: val fraction ",
                 opt.val_fraction, " must be in [0, 1)");
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  DENDRITE_CHECK(!ec, "tokenize: cannot create output directory ", opt.out_dir, ": ", ec.message());
}

}  // namespace

void run_tokenize(const TokenizeOptions& opt) {
  check_options(opt);
  const std::string dir = opt.out_dir + "/";
  const std::vector<std::string> outputs = {dir + "tokenizer.model", dir + "tokenizer.vocab",
                                            dir + "train.bin", dir + "val.bin",
                                            dir + "canaries.json",
                                            dir + "meta.json"};  // meta.json last: the run is done
  try {
    stage_tokenizer(opt, outputs[0]);
    Tokenizer tok(staged(outputs[0]));
    std::vector<int32_t> all = encode_inputs(tok, opt.inputs);
    DENDRITE_CHECK(!all.empty(), "tokenize: the inputs hold no text");
    auto n_val = static_cast<size_t>(std::llround(all.size() * opt.val_fraction));
    size_t n_train = all.size() - n_val;
    write_token_file(staged(outputs[3]), std::vector<int32_t>(all.begin() + n_train, all.end()));
    all.resize(n_train);
    if (!opt.canaries.empty()) stage_canaries(opt, tok, all, staged(outputs[4]));
    n_train = all.size();
    write_token_file(staged(outputs[2]), all);
    nlohmann::json meta = {{"vocab_size", tok.vocab_size()},
                           {"train_tokens", n_train},
                           {"val_tokens", n_val},
                           {"inputs", opt.inputs},
                           {"tokenizer", "tokenizer.model"}};
    if (!opt.canaries.empty()) {
      meta["canaries"] = opt.canaries;
      meta["canary_repeat"] = opt.canary_repeat;
    }
    write_text_file(staged(outputs.back()), meta.dump(2) + "\n");
    std::error_code ec;
    for (const std::string& out : outputs) {
      if (fs::exists(staged(out)))
        rename_or_fail(staged(out), out);
      else
        fs::remove(out, ec);  // e.g. a stale tokenizer.vocab when a model was given
    }
    log_info(str("tokenize: wrote ", n_train, " train and ", n_val, " val tokens (vocab ",
                 tok.vocab_size(), ") to ", opt.out_dir));
  } catch (...) {
    std::error_code ec;
    for (const std::string& out : outputs) fs::remove(staged(out), ec);
    throw;
  }
}

}  // namespace dendrite
