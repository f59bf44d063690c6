// The `dendrite tokenize` job (tokenize.h): text files into train.bin and
// val.bin with a SentencePiece tokenizer trained here or any tokenizer
// open_tokenizer reads, canaries inserted on request. The tokenizer's files
// are copied into the output folder, so that the data carries them.
#include "dendrite/train/tokenize.h"

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

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"
#include "dendrite/io/token_file.h"
#include "dendrite/io/tokenizer.h"
#include "dendrite/train/canaries.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

}  // namespace

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

// The name a tokenizer file takes in the output folder: Dendrite's model is
// always tokenizer.model; a Hugging Face folder's files keep their names.
std::string output_name(const TextTokenizer& tok, size_t i) {
  const std::string name = fs::path(tok.files()[i]).filename().string();
  if (i > 0) return name;  // config files
  if (tok.format() == "hf-bpe" && name != "vocab.json") return "tokenizer.json";
  if (tok.format() == "hf-bpe") return name;
  return "tokenizer.model";
}

// Opens opt.model and copies its files into staged(out_dir/NAME), or trains
// a model into staged(out_dir/tokenizer.model). Returns the tokenizer and
// the names of its files in the output folder (the first is the main one).
std::unique_ptr<TextTokenizer> stage_tokenizer(const TokenizeOptions& opt,
                                               std::vector<std::string>& names) {
  const std::string dir = opt.out_dir + "/";
  if (!opt.model.empty()) {
    std::unique_ptr<TextTokenizer> tok = open_tokenizer(opt.model);  // fails clearly if unreadable
    const std::vector<std::string> files = tok->files();
    for (size_t i = 0; i < files.size(); ++i) {
      names.push_back(output_name(*tok, i));
      std::error_code ec;
      fs::copy_file(files[i], staged(dir + names.back()), fs::copy_options::overwrite_existing, ec);
      DENDRITE_CHECK(!ec, "tokenize: cannot copy ", files[i], " to ", staged(dir + names.back()),
                     ": ", ec.message());
    }
    log_info(str("tokenize: using the ", tok->format(), " tokenizer ", opt.model, " (",
                 tok->vocab_size(), " tokens, eos id ", tok->eos_id(), ")"));
    return tok;
  }
  auto t0 = std::chrono::steady_clock::now();
  const std::string prefix = dir + "tokenizer";
  Tokenizer::train(opt.inputs, opt.vocab_size, staged(prefix), opt.seed);
  rename_or_fail(staged(prefix) + ".model", staged(prefix + ".model"));
  rename_or_fail(staged(prefix) + ".vocab", staged(prefix + ".vocab"));
  log_info(str("tokenize: trained a ", opt.vocab_size, "-piece BPE tokenizer in ",
               fixed(seconds_since(t0), 2), " s"));
  names = {"tokenizer.model", "tokenizer.vocab"};
  return std::make_unique<Tokenizer>(staged(prefix + ".model"));
}

// All inputs encoded back to back, each file a document: the ids the
// tokenizer's own encode(text, add_special_tokens=True) puts around a text
// (a Hugging Face post-processor's BOS, tokenizer_config.json's
// add_bos_token / add_eos_token) around each, and the eos id between two
// documents unless the first already ends with it. Text that is not UTF-8 is
// read as Python's decode(errors="replace") reads it (Hugging Face tokenizers).
std::vector<int32_t> encode_inputs(const TextTokenizer& tok,
                                   const std::vector<std::string>& inputs) {
  std::vector<int32_t> all;
  const SpecialIds specials = tok.document_specials();
  const bool ends_with_eos = !specials.after.empty() && specials.after.back() == tok.eos_id();
  for (size_t f = 0; f < inputs.size(); ++f) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = specials.before;
    const std::vector<int32_t> text_ids = tok.encode(read_text(inputs[f]));
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
    ids.insert(ids.end(), specials.after.begin(), specials.after.end());
    double secs = seconds_since(t0);
    log_info(str("tokenize: ", inputs[f], ": ", ids.size(), " tokens in ", fixed(secs, 2), " s (",
                 fixed(ids.size() / std::max(secs, 1e-9), 0), " tokens/s)"));
    if (f > 0 && tok.eos_id() >= 0 && !ends_with_eos) all.push_back(tok.eos_id());
    all.insert(all.end(), ids.begin(), ids.end());
  }
  return all;
}

// Inserts the canary passages into the training tokens; writes their locations.
void stage_canaries(const TokenizeOptions& opt, const TextTokenizer& tok,
                    std::vector<int32_t>& train, const std::string& json_path) {
  std::vector<std::string> texts = split_passages(read_text(opt.canaries));
  DENDRITE_CHECK(!texts.empty(), "tokenize: the canary file ", opt.canaries, " holds no passages; ",
                 "separate passages by empty lines or lines holding only '%'");
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& t : texts) ids.push_back(tok.encode(t));
  const std::vector<int32_t> nl = tok.encode("\n");
  const int32_t newline = nl.size() == 1 ? nl[0] : -1;
  std::vector<int> repeats(texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    repeats[i] = opt.canary_repeat[i % opt.canary_repeat.size()];
  const size_t before = train.size();
  std::vector<CanaryOccurrence> where = insert_canaries(train, ids, repeats, opt.seed, newline);
  write_canaries_json(json_path, texts, where, repeats, opt.seed);
  std::string list;
  for (int r : opt.canary_repeat) {
    if (!list.empty()) list += ',';
    list += std::to_string(r);
  }
  log_info(str("tokenize: inserted ", texts.size(), " canary passages x ", list, " (",
               where.size(), " copies, ", train.size() - before, " tokens, ",
               fixed(100.0 * double(train.size() - before) / double(train.size()), 2),
               "% of the training tokens; locations in canaries.json)"));
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
  // Every tokenizer file name, so that a stale one of an earlier run goes too;
  // meta.json last: the run is done.
  std::vector<std::string> outputs;
  for (const std::string& name : tokenizer_file_names()) outputs.push_back(dir + name);
  const std::string train_bin = dir + "train.bin", val_bin = dir + "val.bin",
                    canaries_json = dir + "canaries.json", meta_json = dir + "meta.json";
  outputs.insert(outputs.end(), {train_bin, val_bin, canaries_json, meta_json});
  try {
    std::vector<std::string> tokenizer_names;
    std::unique_ptr<TextTokenizer> tok = stage_tokenizer(opt, tokenizer_names);
    std::vector<int32_t> all = encode_inputs(*tok, opt.inputs);
    DENDRITE_CHECK(!all.empty(), "tokenize: the inputs hold no text");
    auto n_val = static_cast<size_t>(std::llround(all.size() * opt.val_fraction));
    size_t n_train = all.size() - n_val;
    write_token_file(staged(val_bin), std::vector<int32_t>(all.begin() + n_train, all.end()));
    all.resize(n_train);
    if (!opt.canaries.empty()) stage_canaries(opt, *tok, all, staged(canaries_json));
    n_train = all.size();
    write_token_file(staged(train_bin), all);
    nlohmann::json meta = {{"vocab_size", tok->vocab_size()},
                           {"train_tokens", n_train},
                           {"val_tokens", n_val},
                           {"inputs", opt.inputs},
                           {"tokenizer", tokenizer_names.front()},
                           {"tokenizer_format", tok->format()},
                           {"tokenizer_files", tokenizer_names},
                           {"eos_id", tok->eos_id()},
                           {"bos_ids", tok->document_specials().before}};
    if (!opt.model.empty()) meta["tokenizer_source"] = opt.model;
    if (!opt.canaries.empty()) {
      meta["canaries"] = opt.canaries;
      meta["canary_repeat"] = opt.canary_repeat.size() == 1 ? nlohmann::json(opt.canary_repeat[0])
                                                             : nlohmann::json(opt.canary_repeat);
    }
    write_text_file(staged(meta_json), meta.dump(2) + "\n");
    std::error_code ec;
    for (const std::string& out : outputs) {
      if (fs::exists(staged(out)))
        rename_or_fail(staged(out), out);
      else
        fs::remove(out, ec);  // e.g. a stale tokenizer.vocab when a model was given
    }
    log_info(str("tokenize: wrote ", n_train, " train and ", n_val, " val tokens (vocab ",
                 tok->vocab_size(), ") to ", opt.out_dir));
  } catch (...) {
    std::error_code ec;
    for (const std::string& out : outputs) fs::remove(staged(out), ec);
    throw;
  }
}

}  // namespace dendrite
