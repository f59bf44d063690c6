// A tokenizer.json pipeline (hf_tokenizer.h).
//
// Long texts are encoded in parallel: each stretch between added tokens is
// cut about every kChunkBytes where the first pre-tokenizer restarts (after a
// "\n" that a non-space follows for regex splits; before a " " for
// Metaspace-style words), the pieces normalized in parallel, then encoded in
// parallel. A piece's regex split also reads the first bytes of the next
// piece, so that lookaheads see the real text, and reports whether the whole
// text would have a boundary at the cut; if any cut is not one, the stretch is
// encoded again whole, so the ids never depend on the cuts.
#include "dendrite/io/hf_tokenizer.h"

#include "dendrite/io/byte_level.h"
#include "dendrite/io/hf_post_processor.h"
#include "dendrite/io/utf8.h"

namespace dendrite {

namespace {

using json = nlohmann::json;

constexpr size_t kChunkBytes = 1 << 20;  // text per parallel encode task
constexpr size_t kContextBytes = 256;    // of the next piece, for lookaheads
constexpr size_t kParallelBytes =
    1 << 16;                           // shorter texts: one thread (waking the others costs more)
constexpr int64_t kMaxId = 1 << 26;    // bounds the id tables of a corrupt file
constexpr size_t kMaxIdGap = 1 << 20;  // ids unused between tokens, at most
constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581

// Positions before a " " that a non-space precedes, about target apart.
std::vector<size_t> space_cuts(std::string_view text, size_t target) {
  std::vector<size_t> cuts;
  for (size_t pos = text.find(' ', target); pos != std::string_view::npos && pos < text.size();
       pos = text.find(' ', pos + 1)) {
    if (text[pos - 1] == ' ') continue;
    cuts.push_back(pos);
    if (pos + target >= text.size()) break;
    pos += target - 1;
  }
  return cuts;
}

}  // namespace

struct HfTokenizer::Job {
  size_t begin, end;  // in the text
  int32_t added_id;   // >= 0: an added token
  bool seg_start, seg_end, input_start;
  size_t segment;  // which stretch between added tokens
};

HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::from_tokenizer_json(const json& j,
                                                              const std::string& path,
                                                              const HfTokenizerConfig& config) {
  DENDRITE_CHECK(j.is_object(), "open_tokenizer: ", path, " holds ", j.type_name(),
                 ", not a tokenizer object");
  const JsonWhere root{path, ""};
  auto tok = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  tok->normalizer_ = read_normalizer(j.value("normalizer", json()), root.at("normalizer"));
  tok->pre_tokenizer_ =
      read_pre_tokenizer(j.value("pre_tokenizer", json()), root.at("pre_tokenizer"));
  const json& model = json_need(j, "model", json::value_t::object, root);
  const std::string type = json_get<std::string>(model, "type", "", root.at("model"));
  DENDRITE_CHECK(type == "BPE", "open_tokenizer: ", path, ": key model.type is \"", type,
                 "\"; only \"BPE\" models are supported (GPT-2, Llama 3, Qwen2, Mistral, Llama 2)");
  const bool byte_level = tok->pre_tokenizer_ && tok->pre_tokenizer_->byte_level();
  tok->model_ = std::make_unique<BpeModel>(model, root.at("model"), byte_level);
  tok->decoder_ = read_decoder(j.value("decoder", json()), root.at("decoder"));
  tok->specials_ =
      read_post_processor(j.value("post_processor", json()), root.at("post_processor"));
  const json added = j.value("added_tokens", json::array());
  DENDRITE_CHECK(added.is_array(), "open_tokenizer: ", path, ": key added_tokens is not a list");
  tok->read_added_tokens(added, root.at("added_tokens"));
  tok->files_ = {path};
  tok->finish(config, path);
  return tok;
}

void HfTokenizer::read_added_tokens(const json& added, const JsonWhere& where) {
  for (size_t i = 0; i < added.size(); ++i) {
    const JsonWhere w = where.index(i);
    const json& a = added[i];
    AddedToken t;
    t.content = json_get<std::string>(a, "content", "", w);
    const int64_t id = json_get<int64_t>(a, "id", -1, w);
    DENDRITE_CHECK(!t.content.empty() && id >= 0 && id < kMaxId, "open_tokenizer: ", w.file,
                   ": key ", w.key, " needs a non-empty content and an id in [0, ", kMaxId,
                   "): ", a.dump());
    t.id = int32_t(id);
    t.lstrip = json_get<bool>(a, "lstrip", false, w);
    t.rstrip = json_get<bool>(a, "rstrip", false, w);
    t.single_word = json_get<bool>(a, "single_word", false, w);
    t.special = json_get<bool>(a, "special", false, w);
    t.normalized = json_get<bool>(a, "normalized", !t.special, w);
    (t.normalized && normalizer_ ? normalized_added_ : raw_added_).add(std::move(t));
  }
}

void HfTokenizer::finish(const HfTokenizerConfig& config, const std::string& path) {
  RegexScratch scratch;
  raw_added_.finish(nullptr, scratch);
  normalized_added_.finish(normalizer_.get(), scratch);
  build_id_tables(path);
  files_.insert(files_.end(), config.files.begin(), config.files.end());
  apply_folder_config(config, path);
  anchor_id_ = model_->token_id("a");
  const bool whole_pieces = !pre_tokenizer_ || pre_tokenizer_->keeps_whole();
  words_at_metaspace_ = whole_pieces && model_->cuts_before(kMetaspace);
  cut_rule_ = words_at_metaspace_ ? CutRule::kSpace
              : pre_tokenizer_    ? pre_tokenizer_->cut_rule()
                                  : CutRule::kNone;
  if (normalizer_ && !normalizer_->keeps_cuts()) cut_rule_ = CutRule::kNone;
  for (const AddedToken& a : normalized_added_.tokens())
    if (a.content.find_first_of("\n ") != std::string::npos) cut_rule_ = CutRule::kNone;
}

// Each id's token string: the model's, an added token's over it.
void HfTokenizer::build_id_tables(const std::string& path) {
  int32_t size = 0;
  for (const auto& [token, id] : model_->vocab()) size = std::max(size, id + 1);
  for (const AddedTokenSet* set : {&raw_added_, &normalized_added_})
    for (const AddedToken& a : set->tokens()) size = std::max(size, a.id + 1);
  const size_t count =
      model_->vocab().size() + raw_added_.tokens().size() + normalized_added_.tokens().size();
  DENDRITE_CHECK(size_t(size) <= count + kMaxIdGap, "open_tokenizer: ", path, ": the ids reach ",
                 size - 1, " but there are only ", count, " tokens; is the file corrupt?");
  id_token_.assign(size, "");
  id_known_.assign(size, false);
  for (const auto& [token, id] : model_->vocab()) {
    id_token_[id] = token;
    id_known_[id] = true;
  }
  for (const AddedTokenSet* set : {&raw_added_, &normalized_added_})
    for (const AddedToken& a : set->tokens()) {
      id_token_[a.id] = a.content;
      id_known_[a.id] = true;
    }
  for (const std::vector<int32_t>* ids : {&specials_.before, &specials_.after})
    for (int32_t id : *ids)
      DENDRITE_CHECK(id < size && id_known_[id], "open_tokenizer: ", path,
                     ": the post_processor adds the id ", id, ", which is no token");
}

int HfTokenizer::id_of(const std::string& token) const {
  for (const AddedTokenSet* set : {&raw_added_, &normalized_added_})
    for (const AddedToken& a : set->tokens())
      if (a.content == token) return a.id;
  return model_->token_id(token);
}

// eos: tokenizer_config.json's eos_token, else config.json's eos_token_id;
// add_bos_token / add_eos_token change the ids around a document, as
// transformers rebuilds the template from them.
void HfTokenizer::apply_folder_config(const HfTokenizerConfig& config, const std::string& path) {
  auto known = [&](int id) { return id >= 0 && id < vocab_size() && id_known_[id]; };
  if (!config.eos_token.empty()) {
    eos_id_ = id_of(config.eos_token);
    DENDRITE_CHECK(eos_id_ >= 0, "open_tokenizer: ", config.eos_file, ": eos_token \"",
                   config.eos_token, "\" is not a token of ", path);
  } else if (known(config.eos_token_id)) {
    eos_id_ = config.eos_token_id;
  } else {
    eos_id_ = id_of("<|endoftext|>");  // GPT-2's end of text
  }
  const int bos = config.bos_token.empty() ? config.bos_token_id : id_of(config.bos_token);
  if (config.add_bos_token == 0) specials_.before.clear();
  if (config.add_bos_token == 1 && known(bos)) specials_.before = {bos};
  if (config.add_eos_token == 0) specials_.after.clear();
  if (config.add_eos_token == 1 && eos_id_ >= 0) specials_.after = {eos_id_};
}

const std::string& HfTokenizer::token(int32_t id) const {
  DENDRITE_CHECK(id >= 0 && id < vocab_size() && id_known_[id], "HfTokenizer::decode: id ", id,
                 id >= 0 && id < vocab_size() ? " is a gap in" : " is outside",
                 " the vocabulary [0, ", vocab_size(), ")");
  return id_token_[id];
}

std::vector<size_t> HfTokenizer::cuts(std::string_view text, size_t chunk_bytes) const {
  if (chunk_bytes == 0 || text.size() <= chunk_bytes) return {};
  if (cut_rule_ == CutRule::kNewline) return independent_cuts(text, chunk_bytes);
  if (cut_rule_ == CutRule::kSpace) return space_cuts(text, chunk_bytes);
  return {};
}

std::vector<HfTokenizer::Job> HfTokenizer::plan_jobs(std::string_view text,
                                                     size_t chunk_bytes) const {
  std::vector<TextSpan> spans;
  raw_added_.split(text, spans);
  std::vector<Job> jobs;
  for (size_t s = 0; s < spans.size(); ++s) {
    const TextSpan& span = spans[s];
    if (span.id >= 0) {
      jobs.push_back({span.begin, span.end, span.id, false, false, false, s});
      continue;
    }
    size_t begin = span.begin;
    std::vector<size_t> ends = cuts(text.substr(span.begin, span.end - span.begin), chunk_bytes);
    for (size_t& e : ends) e += span.begin;
    ends.push_back(span.end);
    for (size_t end : ends) {
      jobs.push_back({begin, end, -1, begin == span.begin, end == span.end, begin == 0, s});
      begin = end;
    }
  }
  return jobs;
}

std::string HfTokenizer::normalized(std::string_view text, bool seg_start, bool seg_end,
                                    PreTokenizeState& state) const {
  std::string s(text);
  if (normalizer_) normalizer_->normalize(s, seg_start, seg_end, state.regex);
  return s;
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text) const {
  return encode(text, kChunkBytes);
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text, size_t chunk_bytes,
                                         int* redone) const {
  if (is_valid_utf8(text)) return encode_valid(text, chunk_bytes, redone);
  return encode_valid(repair_utf8(text, Utf8Repair::kMaximalSubpart), chunk_bytes, redone);
}

std::vector<int32_t> HfTokenizer::encode_valid(std::string_view text, size_t chunk_bytes,
                                               int* redone) const {
  const std::vector<Job> jobs = plan_jobs(text, chunk_bytes);
  const size_t n = jobs.size();
  std::vector<std::string> norm(n);
  std::vector<std::vector<int32_t>> ids(n);
  std::vector<char> ok(n, 1);
  std::string error;
  auto guarded = [&](auto&& body) {
    try {
      body();
    } catch (const std::exception& e) {
#pragma omp critical(dendrite_hf_encode)
      if (error.empty()) error = e.what();
    }
  };
  const bool parallel = n > 1 && text.size() >= kParallelBytes;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (size_t i = 0; i < n; ++i)
    guarded([&] {
      PreTokenizeState state;
      const Job& job = jobs[i];
      if (job.added_id < 0)
        norm[i] = normalized(text.substr(job.begin, job.end - job.begin), job.seg_start,
                             job.seg_end, state);
    });
  if (!error.empty()) throw Error(error);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (size_t i = 0; i < n; ++i)
    guarded([&] {
      PreTokenizeState state;
      if (jobs[i].added_id >= 0)
        ids[i] = {jobs[i].added_id};
      else if (jobs[i].seg_end)
        ok[i] = encode_normalized(norm[i], 0, jobs[i], ids[i], state);
      else
        ok[i] = encode_before(norm[i], norm[i + 1], jobs[i], ids[i], state);
    });
  if (!error.empty()) throw Error(error);
  if (redone) *redone = 0;
  for (size_t i = 0; i < n; ++i) {
    if (ok[i]) continue;
    i = encode_stretch_whole(text, jobs, i, ids);
    if (redone) ++*redone;
  }
  std::vector<int32_t> out;
  size_t total = 0;
  for (const auto& v : ids) total += v.size();
  out.reserve(total);
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// A piece that another of its stretch follows: encoded with the first bytes
// of that one (up to its first added token, whole characters) as context;
// false when the cut between them is no boundary.
bool HfTokenizer::encode_before(const std::string& norm, const std::string& next, const Job& job,
                                std::vector<int32_t>& out, PreTokenizeState& state) const {
  std::vector<TextSpan> spans;
  normalized_added_.split(std::string_view(next).substr(0, kContextBytes), spans);
  size_t context = spans.empty() || spans[0].id >= 0 ? 0 : spans[0].end;
  while (context > 0 && context < next.size() &&
         (static_cast<unsigned char>(next[context]) & 0xC0) == 0x80)
    --context;
  // Words cut before each run of "▁" (or of " ", which Metaspace makes "▁"):
  // the cut must start one.
  auto space_at = [](std::string_view t, size_t pos) {
    return t.compare(pos, 1, " ") == 0 || t.compare(pos, 3, kMetaspace) == 0;
  };
  const bool ends_in_space =
      (!norm.empty() && norm.back() == ' ') ||
      (norm.size() >= 3 && norm.compare(norm.size() - 3, 3, kMetaspace) == 0);
  if (words_at_metaspace_ && (!space_at(next, 0) || ends_in_space)) return false;
  return encode_normalized(norm + next.substr(0, context), context, job, out, state);
}

// The stretch of jobs[i] (whose cuts were not all boundaries) encoded again
// as one piece into the ids of its first job; returns its last job's index.
size_t HfTokenizer::encode_stretch_whole(std::string_view text, const std::vector<Job>& jobs,
                                         size_t i, std::vector<std::vector<int32_t>>& ids) const {
  size_t first = i, last = i;
  while (first > 0 && jobs[first - 1].segment == jobs[i].segment) --first;
  while (last + 1 < jobs.size() && jobs[last + 1].segment == jobs[i].segment) ++last;
  Job whole = jobs[first];
  whole.end = jobs[last].end;
  whole.seg_end = true;
  for (size_t k = first; k <= last; ++k) ids[k].clear();
  PreTokenizeState state;
  const std::string all =
      normalized(text.substr(whole.begin, whole.end - whole.begin), true, true, state);
  encode_normalized(all, 0, whole, ids[first], state);
  return last;
}

// Encodes buf (normalized text, then `context` bytes of what follows it);
// false when the pre-tokenizer finds no boundary at the end of the text.
bool HfTokenizer::encode_normalized(const std::string& buf, size_t context, const Job& job,
                                    std::vector<int32_t>& out, PreTokenizeState& state) const {
  const std::string_view norm(buf.data(), buf.size() - context);
  std::vector<TextSpan> spans;
  normalized_added_.split(norm, spans);
  WordCache cache;
  bool boundary = true;
  for (const TextSpan& s : spans) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    const PreToken piece{norm.substr(s.begin, s.end - s.begin), s.begin == 0 ? job.seg_start : true,
                         job.input_start && s.begin == 0, s.end == norm.size() ? context : 0};
    encode_piece(piece, out, state, cache, &boundary);
  }
  return boundary;
}

void HfTokenizer::encode_piece(const PreToken& piece, std::vector<int32_t>& out,
                               PreTokenizeState& state, WordCache& cache, bool* boundary) const {
  std::vector<PreToken> words;
  if (pre_tokenizer_)
    *boundary &= pre_tokenizer_->split(piece, words, state);
  else
    words.push_back(piece);
  for (const PreToken& w : words) {
    if (!words_at_metaspace_) {
      encode_word(w.text, out, cache);
      continue;
    }
    // Before each run of "▁": no token spans one (BpeModel::cuts_before).
    const std::string_view t = w.text, space = kMetaspace;
    size_t start = 0;
    for (size_t p = t.find(space, 1); p != std::string_view::npos;
         p = t.find(space, p + space.size())) {
      if (p >= space.size() && t.compare(p - space.size(), space.size(), space) == 0)
        continue;  // inside a run
      encode_word(t.substr(start, p - start), out, cache);
      start = p;
    }
    encode_word(t.substr(start), out, cache);
  }
}

void HfTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out,
                              WordCache& cache) const {
  if (word.empty()) return;
  auto it = cache.find(word);
  if (it == cache.end()) {
    std::vector<int32_t> ids;
    model_->encode_word(word, ids);
    it = cache.emplace(word, std::move(ids)).first;
  }
  out.insert(out.end(), it->second.begin(), it->second.end());
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) tokens.push_back(token(id));
  return decode_tokens(decoder_.get(), std::move(tokens));
}

namespace {

// Decoders may change earlier text (Strip, a first-token rule), so the stream
// decodes all ids so far and writes what is new, holding text that ends in
// U+FFFD (a character whose bytes are still coming).
class HfStream : public TokenStream {
 public:
  HfStream(const HfTokenizer& tok, int32_t anchor) : tok_(tok) {
    if (anchor >= 0) {
      ids_.push_back(anchor);
      written_ = tok.decode(ids_).size();
    }
  }
  std::string next(int32_t id) override {
    (void)tok_.token(id);  // an unknown id is an error now
    ids_.push_back(id);
    const std::string text = tok_.decode(ids_);
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return "";
    if (text.size() < written_) return "";
    std::string out = text.substr(written_);
    written_ = text.size();
    return out;
  }
  std::string finish() override {
    const std::string text = tok_.decode(ids_);
    std::string out = text.size() > written_ ? text.substr(written_) : "";
    written_ = std::max(written_, text.size());
    return out;
  }

 private:
  const HfTokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t written_ = 0;
};

}  // namespace

std::unique_ptr<TokenStream> HfTokenizer::stream(bool continuing) const {
  // Continuing a text: decode after a token "a", so that a leading space stays.
  return std::make_unique<HfStream>(*this, continuing ? anchor_id_ : -1);
}

}  // namespace dendrite
