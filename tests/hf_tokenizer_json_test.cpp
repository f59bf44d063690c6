// tokenizer.json pipelines beyond GPT-2's against the reference files the
// tokenizers library made (scripts/make_tokenizer_reference.py, tokenizers
// 0.23.3): Llama 3 (Split regex + ByteLevel, ignore_merges, a BOS template),
// Qwen2 (NFC + Split regex), Mistral (Metaspace, byte fallback, the
// Replace/ByteFallback/Fuse/Strip decoder) and the older Llama 2 form
// (Prepend + Replace normalizer), each giving the library's ids with and
// without special tokens and its decoding, on held-out texts and on 2,000
// random texts per kind; long texts encoded in parallel pieces as whole; the
// errors for what is not supported; `dendrite tokenize` with BOS and EOS.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/io/hf_decoder.h"
#include "dendrite/io/hf_normalizer.h"
#include "dendrite/io/hf_pre_tokenizer.h"
#include "dendrite/io/hf_regex.h"
#include "dendrite/io/hf_tokenizer.h"
#include "dendrite/io/token_file.h"
#include "dendrite/io/tokenizer.h"
#include "dendrite/io/utf8.h"
#include "dendrite/train/tokenize.h"
#include "file_support.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::expect_error;
using test::read_bytes;
using test::write_bytes;

const std::string kDir = DENDRITE_SOURCE_DIR "/tests/data/hf/tokenizers/";

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("dendrite_hf_tokenizer_json_test") {}
};

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string joined_stream(const TextTokenizer& tok, const std::vector<int32_t>& ids) {
  std::unique_ptr<TokenStream> s = tok.stream();
  std::string all;
  for (int32_t id : ids) all += s->next(id);
  return all + s->finish();
}

// The generator make_tokenizer_reference.py describes.
uint64_t splitmix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<std::string> random_texts(const json& r) {
  uint64_t state = r.at("seed").get<uint64_t>();
  const auto classes = r.at("classes").get<std::vector<std::vector<std::string>>>();
  const uint64_t max_items = r.at("max_items").get<uint64_t>();
  std::vector<std::string> texts;
  for (int i = 0; i < r.at("count").get<int>(); ++i) {
    std::string text;
    for (uint64_t n = 1 + splitmix64(state) % max_items; n > 0; --n) {
      const auto& cls = classes[splitmix64(state) % classes.size()];
      text += cls[splitmix64(state) % cls.size()];
    }
    texts.push_back(text);
  }
  return texts;
}

std::string base64_decode(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = c >= 'A' && c <= 'Z'   ? c - 'A'
            : c >= 'a' && c <= 'z' ? c - 'a' + 26
            : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+'             ? 62
            : c == '/'             ? 63
                                   : -1;
    if (v < 0) continue;
    acc = acc << 6 | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

uint32_t fnv1a32(const std::string& s) {
  uint32_t h = 0x811C9DC5u;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x01000193u;
  return h;
}

class Kind : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return kDir + GetParam(); }
};

TEST_P(Kind, HeldOutTextsGiveTheLibrarysIdsAndDecoding) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(dir());
  EXPECT_EQ(tok->format(), "hf-bpe");
  const SpecialIds specials = tok->document_specials();
  const json ref = json::parse(read_bytes(dir() + "/reference.json"));
  ASSERT_GE(ref.size(), 20u);
  for (const json& r : ref) {
    const std::string text =
        r.contains("raw_hex") ? from_hex(r["raw_hex"]) : r["text"].get<std::string>();
    SCOPED_TRACE(json(r["text"]).dump());
    const std::vector<int32_t> ids = tok->encode(text);
    EXPECT_EQ(ids, r["ids"].get<std::vector<int32_t>>());
    std::vector<int32_t> with = specials.before;
    with.insert(with.end(), ids.begin(), ids.end());
    with.insert(with.end(), specials.after.begin(), specials.after.end());
    EXPECT_EQ(with, r["ids_special"].get<std::vector<int32_t>>());
    const std::vector<int32_t> lib = r["ids"];
    EXPECT_EQ(tok->decode(lib), r["decoded"].get<std::string>());
    EXPECT_EQ(joined_stream(*tok, lib), r["decoded"].get<std::string>());
  }
}

TEST_P(Kind, RandomTextsGiveTheLibrarysIdsAndDecoding) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(dir());
  const json r = json::parse(read_bytes(dir() + "/random.json"));
  const std::vector<std::string> texts = random_texts(r);
  const std::string data = base64_decode(r.at("data"));
  size_t pos = 0, id_mismatches = 0, decode_mismatches = 0;
  auto u16 = [&] {
    const uint32_t v = uint8_t(data.at(pos)) | uint32_t(uint8_t(data.at(pos + 1))) << 8;
    pos += 2;
    return v;
  };
  for (const std::string& text : texts) {
    std::vector<int32_t> expect(u16());
    for (int32_t& id : expect) id = int32_t(u16());
    const uint32_t hash = u16() | u16() << 16;
    const std::vector<int32_t> ids = tok->encode(text);
    if (ids != expect && ++id_mismatches <= 5)
      ADD_FAILURE() << json(text).dump() << ": ids " << json(ids).dump() << ", library "
                    << json(expect).dump();
    if (fnv1a32(tok->decode(expect)) != hash && ++decode_mismatches <= 5)
      ADD_FAILURE() << json(text).dump() << ": decoded " << json(tok->decode(expect)).dump();
  }
  EXPECT_EQ(pos, data.size());
  EXPECT_EQ(id_mismatches, 0u) << "of " << texts.size();
  EXPECT_EQ(decode_mismatches, 0u) << "of " << texts.size();
}

TEST_P(Kind, LongTextEncodesInParallelPiecesAsWhole) {
  auto tok = open_tokenizer(dir());
  const auto& hf = dynamic_cast<const HfTokenizer&>(*tok);
  std::string text;
  const json ref = json::parse(read_bytes(dir() + "/reference.json"));
  const std::vector<std::string> texts =
      random_texts(json::parse(read_bytes(dir() + "/random.json")));
  for (size_t i = 0; text.size() < (300u << 10); ++i)
    text += (i % 2 ? ref[i % ref.size()]["text"].get<std::string>() : texts[i % texts.size()]) +
            (i % 3 ? "\n" : " ");
  const std::vector<int32_t> whole = hf.encode(text, 0);
  int redone = -1;
  EXPECT_EQ(hf.encode(text, 4096, &redone), whole);  // about 75 pieces
  EXPECT_EQ(redone, 0);  // every cut a boundary: no stretch encoded twice
  EXPECT_EQ(hf.encode(text, 100), whole);
  EXPECT_EQ(tok->encode(text), whole);
}

INSTANTIATE_TEST_SUITE_P(Families, Kind, ::testing::Values("llama3", "qwen2", "mistral", "llama2"));

// A split whose pieces start with the "\n" (MergedWithNext) has no boundary
// after it: the pieces cut there are found out and encoded again whole.
TEST(HfTokenizerJson, CutsThatAreNoBoundariesFallBackToTheWhole) {
  json j = json::parse(read_bytes(kDir + "llama3/tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Split"},
                                            {"pattern", {{"String", "\n"}}},
                                            {"behavior", "MergedWithNext"},
                                            {"invert", false}};
  TempDir dir;
  write_bytes(dir.file("tokenizer.json"), j.dump());
  auto tok = open_tokenizer(dir.path());
  const auto& hf = dynamic_cast<const HfTokenizer&>(*tok);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i) + (i % 7 ? "\n" : "\n\n");
  int redone = 0;
  EXPECT_EQ(hf.encode(text, 64, &redone), hf.encode(text, 0));
  EXPECT_EQ(redone, 1);
}

TEST(HfTokenizerJson, UnsupportedPiecesAreErrorsNamingFileAndKey) {
  const json base = json::parse(read_bytes(kDir + "llama3/tokenizer.json"));
  TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  auto expect_refused = [&](json j, const std::vector<std::string>& words) {
    write_bytes(file, j.dump());
    std::vector<std::string> all = {file};
    all.insert(all.end(), words.begin(), words.end());
    expect_error([&] { open_tokenizer(dir.path()); }, all);
  };
  json j = base;
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}};
  expect_refused(j, {"pre_tokenizer.pretokenizers[0]", "Whitespace", "supported: Split"});
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?<=a+)b[";
  expect_refused(j, {"pre_tokenizer.pretokenizers[0].pattern.Regex", "(?<=a+)b[", "PCRE2"});
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[\\S&&a]";
  expect_refused(j, {"pre_tokenizer.pretokenizers[0].pattern.Regex", "[\\S&&a]"});
  j = base;
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  expect_refused(j, {"normalizer", "Precompiled", "NFC"});
  j = base;
  j["decoder"] = {{"type", "CTC"}};
  expect_refused(j, {"decoder", "CTC", "ByteFallback"});
  j = base;
  j["model"]["type"] = "Unigram";
  expect_refused(j, {"model.type", "Unigram"});
  j = base;
  j["model"]["dropout"] = 0.1;
  expect_refused(j, {"model.dropout"});
  j = base;
  j["post_processor"] = {{"type", "Bogus"}};
  expect_refused(j, {"post_processor", "Bogus", "TemplateProcessing"});
  // A number no id can be (a plain cast of it was undefined; found by
  // fuzz/tokenizer_json_fuzz.cpp).
  j = base;
  j["added_tokens"][0]["id"] = 1.3e93;
  expect_refused(j, {"added_tokens[0].id", "1.3e+93", "an integer from"});
}

// Oniguruma's escapes in PCRE2's terms; the behaviours Llama 3's and Qwen2's
// patterns rely on.
TEST(HfTokenizerJson, RegexRunsOnigurumaPatternsAsTheLibrary) {
  const JsonWhere where{"f.json", "pattern"};
  EXPECT_EQ(pcre2_pattern("\\s+(?!\\S)", where), "\\p{White_Space}+(?!\\P{White_Space})");
  EXPECT_EQ(pcre2_pattern("[^\\s\\p{L}]", where), "[^\\p{White_Space}\\p{L}]");
  auto split = [&](const std::string& pattern, const std::string& text) {
    Regex re(pattern, where);
    RegexScratch scratch;
    std::vector<MatchSpan> m;
    re.find_all(text, std::string::npos, scratch, m);
    std::vector<std::string> out;
    for (const MatchSpan& s : m) out.push_back(text.substr(s.begin, s.end - s.begin));
    return out;
  };
  using W = std::vector<std::string>;
  EXPECT_EQ(split("\\p{N}{1,3}", "1234567 \xD9\xA3\xD9\xA4"),
            (W{"123", "456", "7", "\xD9\xA3\xD9\xA4"}));
  EXPECT_EQ(split("(?i:'s|'t|'ll)", "HE'S it'T WE'LL 'x"), (W{"'S", "'T", "'LL"}));
  EXPECT_EQ(split("\\s+(?!\\S)|\\s+", "a   b \xC2\x85\n"), (W{"  ", " ", " \xC2\x85\n"}));
  EXPECT_EQ(split("\\s", "\xE1\xA0\x8E"), W{});   // U+180E: no White_Space (PCRE2's \s has it)
  EXPECT_EQ(split("x*", "ab"), (W{"", "", ""}));  // empty matches move on a character
}

// The pieces' behaviours against what tokenizers 0.23.3 prints for them
// (pre_tokenize_str, normalize_str, decode).
TEST(HfTokenizerJson, PiecesBehaveAsTheLibrarys) {
  const JsonWhere where{"f.json", "pre_tokenizer"};
  auto pre = [&](const json& j, const std::string& text) {
    auto p = read_pre_tokenizer(j, where);
    PreTokenizeState state;
    std::vector<PreToken> out;
    p->split({text, true, true}, out, state);
    std::vector<std::string> words;
    for (const PreToken& t : out) words.emplace_back(t.text);
    return words;
  };
  using W = std::vector<std::string>;
  const std::string m = "\xE2\x96\x81";
  EXPECT_EQ(pre({{"type", "Metaspace"}, {"prepend_scheme", "always"}}, "hello  world"),
            (W{m + "hello", m, m + "world"}));
  EXPECT_EQ(pre({{"type", "Digits"}, {"individual_digits", false}}, "ab12 3x"),
            (W{"ab", "12", " ", "3", "x"}));
  const json split = {{"type", "Split"}, {"pattern", {{"String", "a"}}}, {"invert", false}};
  json j = split;
  j["behavior"] = "MergedWithPrevious";
  EXPECT_EQ(pre(j, "baab"), (W{"ba", "a", "b"}));
  j["behavior"] = "Contiguous";
  j["invert"] = true;
  EXPECT_EQ(pre(j, "bcaab"), (W{"bc", "aa", "b"}));
  j = split;
  j["behavior"] = "Removed";
  EXPECT_EQ(pre(j, "bcaab"), (W{"bc", "b"}));
  EXPECT_EQ(
      pre({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}, "hi you"),
      W{" hi you"});  // the byte map is the model's

  auto norm = [&](const json& j, std::string text) {
    RegexScratch scratch;
    read_normalizer(j, where)->normalize(text, true, true, scratch);
    return text;
  };
  EXPECT_EQ(norm({{"type", "Lowercase"}}, "\xCE\xA3\xCE\x91\xCE\xA3 \xC4\xB0"),
            "\xCF\x83\xCE\xB1\xCF\x83 i\xCC\x87");  // ΣΑΣ İ: no final sigma
  EXPECT_EQ(norm({{"type", "Strip"}},
                 " \xE3\x80\x80"
                 "a \xC2\x85"),
            "a");
  EXPECT_EQ(norm({{"type", "NFKC"}},
                 "\xEF\xAC\x81"
                 "e\xCC\x81"),
            "fi\xC3\xA9");

  auto dec = [&](const json& j, std::vector<std::string> tokens) {
    return decode_tokens(read_decoder(j, where).get(), std::move(tokens));
  };
  EXPECT_EQ(
      dec({{"type", "Metaspace"}, {"prepend_scheme", "first"}}, {m + "He" + m + "y", m + "x"}),
      "Hey x");
  EXPECT_EQ(dec({{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 1}}, {"  a  ", " b "}),
            "a b");
  EXPECT_EQ(dec({{"type", "ByteFallback"}}, {"<0x+F>", "<0xE2>", "<0x82>", "a", "<0x61>"}),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "aa");
  EXPECT_EQ(dec(nullptr, {"a", "b"}), "a b");  // no decoder: joined with spaces
}

// A stream that continues a prompt keeps the first token's space, which
// decode() drops at the start of a text (Strip, Metaspace).
TEST(HfTokenizerJson, StreamAfterAPromptKeepsTheLeadingSpace) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kDir + "mistral");
  const std::vector<int32_t> ids = tok->encode("Hello world");
  auto joined = [&](bool continuing) {
    std::unique_ptr<TokenStream> s = tok->stream(continuing);
    std::string all;
    for (int32_t id : ids) all += s->next(id);
    return all + s->finish();
  };
  EXPECT_EQ(joined(false), "Hello world");
  EXPECT_EQ(joined(true), " Hello world");
}

// ---------------------------------------------------------------- dendrite tokenize

TEST(HfTokenizerJson, TokenizePutsBosAndEosAroundDocuments) {
  TempDir dir;
  const std::string a = "In the beginning was the Word.\n", b = "And the Word was with God.";
  write_bytes(dir.file("a.txt"), a);
  write_bytes(dir.file("b.txt"), b);
  for (const char* kind : {"llama3", "mistral", "qwen2"}) {
    SCOPED_TRACE(kind);
    std::unique_ptr<TextTokenizer> tok = open_tokenizer(kDir + kind);
    TokenizeOptions opt;
    opt.inputs = {dir.file("a.txt"), dir.file("b.txt")};
    opt.out_dir = dir.file("out");
    opt.model = kDir + kind;
    opt.val_fraction = 0;
    run_tokenize(opt);
    const SpecialIds s = tok->document_specials();
    const std::vector<int32_t> bos =
        std::string(kind) == "qwen2" ? std::vector<int32_t>{} : std::vector<int32_t>{s.before};
    ASSERT_EQ(s.before, bos);
    EXPECT_TRUE(s.after.empty());
    std::vector<int32_t> expect = bos;
    for (int32_t id : tok->encode(a)) expect.push_back(id);
    expect.push_back(tok->eos_id());  // between documents, as before
    expect.insert(expect.end(), bos.begin(), bos.end());
    for (int32_t id : tok->encode(b)) expect.push_back(id);
    TokenFile train(opt.out_dir + "/train.bin");
    std::vector<int32_t> got(train.size());
    train.copy(0, train.size(), got.data());
    EXPECT_EQ(got, expect);
    const json meta = json::parse(read_bytes(opt.out_dir + "/meta.json"));
    EXPECT_EQ(meta["tokenizer"], "tokenizer.json");
    EXPECT_EQ(meta["eos_id"], tok->eos_id());
    EXPECT_EQ(meta["bos_ids"], json(bos));
    EXPECT_EQ(open_tokenizer(opt.out_dir)->encode(a), tok->encode(a));
  }
  // The ids: Llama 3's <|begin_of_text|> and <|end_of_text|>, Mistral's <s> and </s>.
  EXPECT_EQ(open_tokenizer(kDir + "llama3")->document_specials().before,
            std::vector<int32_t>{1000});
  EXPECT_EQ(open_tokenizer(kDir + "llama3")->eos_id(), 1001);
  EXPECT_EQ(open_tokenizer(kDir + "mistral")->document_specials().before, std::vector<int32_t>{1});
  EXPECT_EQ(open_tokenizer(kDir + "mistral")->eos_id(), 2);
}

// Without an eos_token, config.json's eos_token_id (the first of a list);
// tokenizer_config.json's add_bos_token / add_eos_token change what a
// document gets, and an EOS it ends with is not repeated between documents.
TEST(HfTokenizerJson, BosAndEosFromTheFolderConfig) {
  TempDir dir;
  fs::copy_file(kDir + "llama3/tokenizer.json", dir.file("tokenizer.json"));
  write_bytes(dir.file("config.json"), R"({"bos_token_id": 1000, "eos_token_id": [1005, 1001]})");
  EXPECT_EQ(open_tokenizer(dir.path())->eos_id(), 1005);
  write_bytes(dir.file("tokenizer_config.json"),
              R"({"eos_token": "<|end_of_text|>", "add_bos_token": false, "add_eos_token": true})");
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(dir.path());
  EXPECT_EQ(tok->eos_id(), 1001);
  EXPECT_TRUE(tok->document_specials().before.empty());
  EXPECT_EQ(tok->document_specials().after, std::vector<int32_t>{1001});
  write_bytes(dir.file("a.txt"), "one");
  write_bytes(dir.file("b.txt"), "two");
  TokenizeOptions opt;
  opt.inputs = {dir.file("a.txt"), dir.file("b.txt")};
  opt.out_dir = dir.file("out");
  opt.model = dir.path();
  opt.val_fraction = 0;
  run_tokenize(opt);
  std::vector<int32_t> expect = tok->encode("one");
  expect.push_back(1001);
  for (int32_t id : tok->encode("two")) expect.push_back(id);
  expect.push_back(1001);
  TokenFile train(opt.out_dir + "/train.bin");
  std::vector<int32_t> got(train.size());
  train.copy(0, train.size(), got.data());
  EXPECT_EQ(got, expect);
}

}  // namespace
}  // namespace dendrite
