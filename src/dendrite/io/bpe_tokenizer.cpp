// GPT-2 style byte-level BPE (bpe_tokenizer.h).
//
// Merging is BpeMerges' (bpe_model.h), as tokenizers' Word::merge_all.
// Decoding maps each character of a token back to its byte (a token with a
// character outside the byte map, e.g. an added token, gives its own UTF-8
// bytes, as the ByteLevel decoder does) and repairs the joined bytes as
// Rust's from_utf8_lossy does.
//
// Long texts are encoded in parallel, cut where pre-tokenization restarts
// the same way (independent_cuts), so the ids do not depend on the cuts.
#include "dendrite/io/bpe_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "dendrite/core/check.h"
#include "dendrite/io/byte_level.h"
#include "dendrite/io/unicode_classes.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

constexpr size_t kChunkBytes = 1 << 20;  // text per parallel encode task
constexpr int32_t kMaxId = 1 << 26;      // bounds the id tables of a corrupt file

using json = nlohmann::json;

// j[key] converted to T, fallback when absent or null; `name` is the key's
// full path in the file, for messages.
template <class T>
T get(const json& j, const char* key, const T& fallback, const std::string& file,
      const std::string& name) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    fail("open_tokenizer: ", file, ": key ", name, " has the wrong type (", e.what(), ")");
  }
}

const json& need(const json& j, const char* key, json::value_t type, const std::string& file,
                 const std::string& name) {
  DENDRITE_CHECK(j.is_object() && j.contains(key), "open_tokenizer: ", file, ": key ", name,
                 " is missing; is it a complete tokenizer file?");
  const json& v = j.at(key);
  DENDRITE_CHECK(v.type() == type, "open_tokenizer: ", file, ": key ", name, " is a ",
                 v.type_name(), ", expected a ", json(type).type_name());
  return v;
}

// The decoded bytes of a token, as the ByteLevel decoder gives them.
std::string token_bytes(const std::string& token) {
  std::string bytes;
  for (size_t pos = 0; pos < token.size();) {
    const CodePoint cp = read_code_point(token, pos);
    const int b = cp.valid ? unicode_to_byte(cp.value) : -1;
    if (b < 0) return token;  // not all in the byte map: the token's own bytes
    bytes += static_cast<char>(b);
    pos += cp.length;
  }
  return bytes;
}

void read_vocab(const json& vocab, const std::string& file, const std::string& name,
                std::unordered_map<std::string, int32_t>& out) {
  DENDRITE_CHECK(vocab.is_object(), "open_tokenizer: ", file, ": ", name,
                 " must be an object of token: id");
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    DENDRITE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxId,
                   "open_tokenizer: ", file, ": ", name, " gives token \"", token, "\" the id ",
                   id.dump(), "; ids must be integers in [0, ", kMaxId, ")");
    out[token] = id.get<int32_t>();
  }
}

// Whether the model's settings are ones this class reproduces.
void check_model(const json& model, const std::string& file) {
  const double dropout = get<double>(model, "dropout", 0.0, file, "model.dropout");
  DENDRITE_CHECK(dropout == 0.0, "open_tokenizer: ", file, ": model.dropout = ", dropout,
                 " makes encoding random; only deterministic BPE (dropout null) is supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    DENDRITE_CHECK(get<std::string>(model, key, "", file, str("model.", key)).empty(),
                   "open_tokenizer: ", file, ": model.", key,
                   " is set, which byte-level BPE (GPT-2 style) does not use; not supported");
  DENDRITE_CHECK(!get<bool>(model, "byte_fallback", false, file, "model.byte_fallback"),
                 "open_tokenizer: ", file, ": model.byte_fallback = true belongs to ",
                 "SentencePiece-style BPE; open the folder's tokenizer.model instead");
}

}  // namespace

bool ByteLevelBpe::reads(const json& j) {
  auto type_of = [&](const char* key) {
    return j.contains(key) && j[key].is_object() ? j[key].value("type", "") : std::string();
  };
  if (!j.is_object() || type_of("model") != "BPE" || type_of("pre_tokenizer") != "ByteLevel" ||
      type_of("decoder") != "ByteLevel" || !j.value("normalizer", json()).is_null())
    return false;
  const json& pre = j["pre_tokenizer"];
  const json& model = j["model"];
  const json post = j.value("post_processor", json());
  return pre.value("use_regex", json(true)) == json(true) &&
         model.value("byte_fallback", json(false)) != json(true) &&
         (post.is_null() || (post.is_object() && post.value("type", "") == "ByteLevel"));
}

std::unique_ptr<ByteLevelBpe> ByteLevelBpe::from_tokenizer_json(const json& j,
                                                                const std::string& path,
                                                                const HfTokenizerConfig& config) {
  DENDRITE_CHECK(j.is_object(), "open_tokenizer: ", path, " holds ", j.type_name(),
                 ", not a tokenizer object");
  const json& model = need(j, "model", json::value_t::object, path, "model");
  const std::string type = get<std::string>(model, "type", "", path, "model.type");
  DENDRITE_CHECK(type == "BPE", "open_tokenizer: ", path, ": model.type is \"", type,
                 "\"; only \"BPE\" with the ByteLevel pre-tokenizer (GPT-2 style) is supported");
  const json pre = j.value("pre_tokenizer", json());
  DENDRITE_CHECK(pre.is_object() && pre.value("type", "") == "ByteLevel", "open_tokenizer: ", path,
                 ": pre_tokenizer is ", pre.dump().substr(0, 200),
                 "; only {\"type\": \"ByteLevel\"} (GPT-2 style) is supported");
  DENDRITE_CHECK(get<bool>(pre, "use_regex", true, path, "pre_tokenizer.use_regex"),
                 "open_tokenizer: ", path, ": pre_tokenizer.use_regex = false is not supported");
  DENDRITE_CHECK(j.value("normalizer", json()).is_null(), "open_tokenizer: ", path,
                 ": normalizer is ", j["normalizer"].dump().substr(0, 200),
                 "; GPT-2 style tokenizers have none, and normalizers are not supported");
  const json decoder = j.value("decoder", json());
  DENDRITE_CHECK(decoder.is_object() && decoder.value("type", "") == "ByteLevel",
                 "open_tokenizer: ", path, ": decoder is ", decoder.dump().substr(0, 200),
                 "; only {\"type\": \"ByteLevel\"} is supported");
  check_model(model, path);

  auto tok = std::unique_ptr<ByteLevelBpe>(new ByteLevelBpe());
  tok->add_prefix_space_ =
      get<bool>(pre, "add_prefix_space", true, path, "pre_tokenizer.add_prefix_space");
  tok->fuse_unk_ = get<bool>(model, "fuse_unk", false, path, "model.fuse_unk");
  tok->ignore_merges_ = get<bool>(model, "ignore_merges", false, path, "model.ignore_merges");
  read_vocab(need(model, "vocab", json::value_t::object, path, "model.vocab"), path, "model.vocab",
             tok->vocab_);
  const std::string unk = get<std::string>(model, "unk_token", "", path, "model.unk_token");
  if (!unk.empty()) {
    auto it = tok->vocab_.find(unk);
    DENDRITE_CHECK(it != tok->vocab_.end(), "open_tokenizer: ", path, ": model.unk_token \"", unk,
                   "\" is not in model.vocab");
    tok->unk_id_ = it->second;
  }
  tok->read_json_merges(need(model, "merges", json::value_t::array, path, "model.merges"), path);
  const json added = j.value("added_tokens", json::array());
  DENDRITE_CHECK(added.is_array(), "open_tokenizer: ", path, ": added_tokens is not a list");
  tok->read_json_added_tokens(added, path);
  tok->files_ = {path};
  tok->finish(config, path);
  return tok;
}

std::unique_ptr<ByteLevelBpe> ByteLevelBpe::from_vocab_merges(const std::string& vocab_path,
                                                              const std::string& merges_path,
                                                              const HfTokenizerConfig& config) {
  for (const std::string& file : {vocab_path, merges_path})
    DENDRITE_CHECK(fs::is_regular_file(file), "open_tokenizer: ", file, " does not exist; ",
                   "GPT-2's byte-level BPE needs both vocab.json and merges.txt (or a ",
                   "tokenizer.json)");
  auto tok = std::unique_ptr<ByteLevelBpe>(new ByteLevelBpe());
  tok->add_prefix_space_ = false;  // GPT2Tokenizer's default
  read_vocab(read_tokenizer_json(vocab_path), vocab_path, "the file", tok->vocab_);
  std::ifstream in(merges_path, std::ios::binary);
  DENDRITE_CHECK(in.good(), "open_tokenizer: cannot open ", merges_path);
  std::string line;
  int32_t rank = 0;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("#version", 0) == 0) continue;
    if (line.empty() && in.peek() == std::char_traits<char>::eof()) break;  // a final newline
    const size_t space = line.find(' ');
    const std::string where = str(merges_path, " line ", line_no);
    DENDRITE_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                       line.find(' ', space + 1) == std::string::npos,
                   "open_tokenizer: ", where, " is \"", line,
                   "\"; each merge is two tokens separated by one space");
    tok->add_merge(line.substr(0, space), line.substr(space + 1), rank++, where);
  }
  // transformers splits these out of the text before BPE.
  std::vector<std::string> specials = {"<|endoftext|>"};
  specials.insert(specials.end(), config.special_tokens.begin(), config.special_tokens.end());
  for (const std::string& s : specials) {
    auto it = tok->vocab_.find(s);
    if (it != tok->vocab_.end()) tok->add_added_token({s, it->second});
  }
  tok->files_ = {vocab_path, merges_path};
  tok->finish(config, vocab_path);
  return tok;
}

// model.merges: ["left", "right"] pairs, or "left right" strings (older files).
void ByteLevelBpe::read_json_merges(const json& merges, const std::string& path) {
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string where = str(path, ": model.merges[", i, "]");
    const json& m = merges[i];
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      add_merge(m[0].get<std::string>(), m[1].get<std::string>(), int32_t(i), where);
      continue;
    }
    const std::string s = m.is_string() ? m.get<std::string>() : "";
    const size_t space = s.find(' ');
    DENDRITE_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                   "open_tokenizer: ", where, " is ", m.dump(),
                   "; expected [\"left\", \"right\"] or \"left right\"");
    add_merge(s.substr(0, space), s.substr(space + 1), int32_t(i), where);
  }
}

void ByteLevelBpe::read_json_added_tokens(const json& added, const std::string& path) {
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string name = str("added_tokens[", i, "]");
    const json& a = added[i];
    const std::string content = get<std::string>(a, "content", "", path, name + ".content");
    const int64_t id = get<int64_t>(a, "id", -1, path, name + ".id");
    DENDRITE_CHECK(!content.empty() && id >= 0 && id < kMaxId, "open_tokenizer: ", path, ": ", name,
                   " needs a non-empty content and an id in [0, ", kMaxId, "): ", a.dump());
    DENDRITE_CHECK(!get<bool>(a, "single_word", false, path, name + ".single_word"),
                   "open_tokenizer: ", path, ": ", name,
                   ".single_word = true is not supported (token \"", content, "\")");
    add_added_token({content, int32_t(id), get<bool>(a, "lstrip", false, path, name + ".lstrip"),
                     get<bool>(a, "rstrip", false, path, name + ".rstrip")});
  }
}

void ByteLevelBpe::add_merge(const std::string& left, const std::string& right, int32_t rank,
                             const std::string& where) {
  auto find = [&](const std::string& token) {
    auto it = vocab_.find(token);
    DENDRITE_CHECK(it != vocab_.end(), "open_tokenizer: ", where, ": the merge \"", left, " ",
                   right, "\" uses \"", token, "\", which is not in the vocabulary");
    return it->second;
  };
  const int32_t l = find(left), r = find(right), merged = find(left + right);
  // A repeated pair takes its last rank, as tokenizers' map does.
  merges_.add(l, r, rank, merged);
}

void ByteLevelBpe::add_added_token(AddedToken token) {
  for (AddedToken& a : added_)
    if (a.content == token.content) {
      a = token;
      return;
    }
  added_.push_back(std::move(token));
}

// Builds the id tables, finds eos, adds the config files, orders added tokens longest first.
void ByteLevelBpe::finish(const HfTokenizerConfig& config, const std::string& where) {
  int32_t size = 0;
  for (const auto& [token, id] : vocab_) size = std::max(size, id + 1);
  for (const AddedToken& a : added_) size = std::max(size, a.id + 1);
  DENDRITE_CHECK(size_t(size) <= vocab_.size() + added_.size() + (1 << 20),
                 "open_tokenizer: ", where, ": the ids reach ", size - 1, " but there are only ",
                 vocab_.size() + added_.size(), " tokens; is the file corrupt?");
  id_bytes_.assign(size, "");
  id_known_.assign(size, false);
  for (const auto& [token, id] : vocab_) {
    id_bytes_[id] = token_bytes(token);
    id_known_[id] = true;
  }
  for (const AddedToken& a : added_) {  // an added token wins over a model token of its id
    id_bytes_[a.id] = token_bytes(a.content);
    id_known_[a.id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(byte_to_unicode()[b]);
    byte_id_[b] = it == vocab_.end() ? -1 : it->second;
  }
  files_.insert(files_.end(), config.files.begin(), config.files.end());
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  auto id_of = [&](const std::string& token) -> int {
    for (const AddedToken& a : added_)
      if (a.content == token) return a.id;
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  };
  if (!config.eos_token.empty()) {
    eos_id_ = id_of(config.eos_token);
    DENDRITE_CHECK(eos_id_ >= 0, "open_tokenizer: ", config.eos_file, ": eos_token \"",
                   config.eos_token, "\" is not a token of ", where);
  } else {
    eos_id_ = id_of("<|endoftext|>");  // GPT-2's end of text
  }
}

std::vector<ByteLevelBpe::Span> ByteLevelBpe::split_added(std::string_view text) const {
  std::vector<Span> spans;
  std::array<bool, 256> first_byte{};
  for (const AddedToken& a : added_) first_byte[static_cast<unsigned char>(a.content[0])] = true;
  size_t seg = 0;  // start of the text not yet in a span
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!first_byte[static_cast<unsigned char>(text[pos])]) continue;
    const AddedToken* match = nullptr;  // the longest at pos: added_ is longest first
    for (const AddedToken& a : added_)
      if (text.compare(pos, a.content.size(), a.content) == 0) {
        match = &a;
        break;
      }
    if (match == nullptr) continue;
    size_t begin = pos, end = pos + match->content.size();
    auto space_before = [&](size_t p, size_t* len) {  // the code point that ends at p
      size_t start = p - 1;
      while (start > seg && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      const CodePoint cp = read_code_point(text, start);
      *len = p - start;
      return cp.valid && size_t(cp.length) == p - start && is_unicode_whitespace(cp.value);
    };
    size_t len = 0;
    while (match->lstrip && begin > seg && space_before(begin, &len)) begin -= len;
    while (match->rstrip && end < text.size()) {
      const CodePoint cp = read_code_point(text, end);
      if (!cp.valid || !is_unicode_whitespace(cp.value)) break;
      end += cp.length;
    }
    if (begin > seg) spans.push_back({seg, begin, -1, true});
    spans.push_back({begin, end, match->id, false});
    seg = end;
    pos = end - 1;
  }
  if (seg < text.size()) spans.push_back({seg, text.size(), -1, true});
  return spans;
}

// Text that is not UTF-8 is first repaired as Python's decode(errors="replace")
// does: the library's Python binding takes only str.
std::vector<int32_t> ByteLevelBpe::encode(const std::string& text) const {
  if (!is_valid_utf8(text)) return encode(repair_utf8(text, Utf8Repair::kMaximalSubpart));
  // Cut long stretches of text into independent pieces for the threads.
  std::vector<Span> pieces;
  for (const Span& s : split_added(text)) {
    if (s.added_id >= 0 || s.end - s.begin <= kChunkBytes) {
      pieces.push_back(s);
      continue;
    }
    size_t begin = s.begin;
    for (size_t cut :
         independent_cuts(std::string_view(text).substr(s.begin, s.end - s.begin), kChunkBytes)) {
      pieces.push_back({begin, s.begin + cut, -1, begin == s.begin});
      begin = s.begin + cut;
    }
    pieces.push_back({begin, s.end, -1, begin == s.begin});
  }
  std::vector<std::vector<int32_t>> ids(pieces.size());
  std::string error;
#pragma omp parallel for schedule(dynamic, 1) if (pieces.size() > 1)
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Span& p = pieces[i];
    try {
      if (p.added_id >= 0)
        ids[i] = {p.added_id};
      else
        ids[i] =
            encode_text(std::string_view(text).substr(p.begin, p.end - p.begin), p.segment_start);
    } catch (const std::exception& e) {
#pragma omp critical(dendrite_bpe_encode)
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) throw Error(error);
  std::vector<int32_t> out;
  size_t total = 0;
  for (const auto& v : ids) total += v.size();
  out.reserve(total);
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<int32_t> ByteLevelBpe::encode_text(std::string_view text, bool segment_start) const {
  std::string prefixed;
  if (add_prefix_space_ && segment_start && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  WordCache cache;
  for (std::string_view word : split_gpt2_words(text)) encode_word(word, out, cache);
  return out;
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<int32_t>& out,
                               WordCache& cache) const {
  auto it = cache.find(word);
  if (it == cache.end()) it = cache.emplace(word, merge_word(word)).first;
  out.insert(out.end(), it->second.begin(), it->second.end());
}

// The ids of one word: its bytes' tokens, merged.
std::vector<int32_t> ByteLevelBpe::merge_word(std::string_view word) const {
  if (ignore_merges_) {  // a word in the vocabulary is taken whole
    std::string mapped;
    for (char c : word) mapped += byte_to_unicode()[static_cast<unsigned char>(c)];
    if (auto it = vocab_.find(mapped); it != vocab_.end()) return {it->second};
  }
  std::vector<int32_t> ids;
  for (char c : word) {
    const int32_t id = byte_id_[static_cast<unsigned char>(c)];
    if (id < 0) {
      DENDRITE_CHECK(unk_id_ >= 0, "ByteLevelBpe::encode: the byte 0x", std::hex,
                     int(static_cast<unsigned char>(c)), std::dec,
                     " has no token in the vocabulary and the model has no unk_token");
      if (fuse_unk_ && !ids.empty() && ids.back() == unk_id_) continue;
    }
    ids.push_back(id < 0 ? unk_id_ : id);
  }
  merges_.apply(ids);
  return ids;
}

const std::string& ByteLevelBpe::id_bytes(int32_t id) const {
  DENDRITE_CHECK(id >= 0 && id < vocab_size() && id_known_[id], "ByteLevelBpe::decode: id ", id,
                 id >= 0 && id < vocab_size() ? " is a gap in" : " is outside",
                 " the vocabulary [0, ", vocab_size(), ")");
  return id_bytes_[id];
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) bytes += id_bytes(id);
  return repair_utf8(bytes, Utf8Repair::kMaximalSubpart);
}

namespace {

class BpeStream : public TokenStream {
 public:
  explicit BpeStream(const ByteLevelBpe& tok) : tok_(tok) {}
  std::string next(int32_t id) override {
    std::string out;
    utf8_.push(tok_.id_bytes(id), out);
    return out;
  }
  std::string finish() override {
    std::string out;
    utf8_.flush(out);
    return out;
  }

 private:
  const ByteLevelBpe& tok_;
  Utf8Stream utf8_{Utf8Repair::kMaximalSubpart};
};

}  // namespace

std::unique_ptr<TokenStream> ByteLevelBpe::stream(bool /*continuing*/) const {
  return std::make_unique<BpeStream>(*this);  // byte-level decoding drops no leading space
}

}  // namespace dendrite
