// Hugging Face tokenizers against the reference files the real libraries made
// (scripts/make_hf_reference.py: tokenizers 0.23.3, sentencepiece 0.2.3):
// byte-level BPE from tokenizer.json and from vocab.json + merges.txt, and a
// Llama-style SentencePiece model, each giving the library's ids on every
// reference text, decoding back to it, and streaming the same text. Also the
// pieces they are built from (UTF-8 repair, character classes, GPT-2's
// pre-tokenization), the folder rules and errors of open_tokenizer, and
// `dendrite tokenize --tokenizer DIR`.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/io/bpe_tokenizer.h"
#include "dendrite/io/byte_level.h"
#include "dendrite/io/token_file.h"
#include "dendrite/io/tokenizer.h"
#include "dendrite/io/unicode_classes.h"
#include "dendrite/io/utf8.h"
#include "dendrite/train/tokenize.h"
#include "file_support.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;

const std::string kBpeDir = DENDRITE_SOURCE_DIR "/tests/data/hf/bpe";
const std::string kSpDir = DENDRITE_SOURCE_DIR "/tests/data/hf/sp";

using test::expect_error;
using test::read_bytes;
using test::write_bytes;

// A temporary folder for one test.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("dendrite_hf_tokenizer_test") {}
};

struct Reference {
  std::string text, decoded;
  std::vector<int32_t> ids;
};

std::vector<Reference> read_reference(const std::string& dir) {
  std::vector<Reference> out;
  for (const auto& r : nlohmann::json::parse(read_bytes(dir + "/reference.json")))
    out.push_back({r.at("text"), r.at("decoded"), r.at("ids")});
  return out;
}

// The streamed text of ids, piece by piece.
std::vector<std::string> stream_pieces(const TextTokenizer& tok, const std::vector<int32_t>& ids,
                                       bool continuing = false) {
  std::unique_ptr<TokenStream> s = tok.stream(continuing);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(s->next(id));
  pieces.push_back(s->finish());
  return pieces;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string all;
  for (const std::string& p : pieces) all += p;
  return all;
}

bool valid_utf8(const std::string& s) { return repair_utf8(s, Utf8Repair::kPerByte) == s; }

// Every reference text: the library's ids, decoded back to the text and to
// the library's decoding, streamed to the same text in valid UTF-8 pieces.
void expect_reference(const TextTokenizer& tok, const std::string& dir) {
  const std::vector<Reference> ref = read_reference(dir);
  ASSERT_GE(ref.size(), 16u);
  for (const Reference& r : ref) {
    SCOPED_TRACE(nlohmann::json(r.text).dump());
    const std::vector<int32_t> ids = tok.encode(r.text);
    EXPECT_EQ(ids, r.ids);
    EXPECT_EQ(tok.decode(r.ids), r.decoded);
    EXPECT_EQ(r.decoded, r.text);
    const std::vector<std::string> pieces = stream_pieces(tok, r.ids);
    EXPECT_EQ(joined(pieces), r.decoded);
    for (const std::string& p : pieces) EXPECT_TRUE(valid_utf8(p)) << p;
  }
}

// A folder holding copies of some of the bpe folder's files.
void copy_files(const std::string& to, const std::vector<std::string>& names) {
  for (const std::string& n : names) fs::copy_file(kBpeDir + "/" + n, to + "/" + n);
}

// ---------------------------------------------------------------- building blocks

TEST(Utf8, RepairsAsEachLibraryDoes) {
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string ok = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x99\x82";  // a é € 🙂
  for (Utf8Repair r : {Utf8Repair::kMaximalSubpart, Utf8Repair::kPerByte})
    EXPECT_EQ(repair_utf8(ok, r), ok);
  // A truncated character: one U+FFFD for Rust, one per byte for SentencePiece.
  EXPECT_EQ(repair_utf8("\xE2\x82"
                        "a",
                        Utf8Repair::kMaximalSubpart),
            fffd + "a");
  EXPECT_EQ(repair_utf8("\xE2\x82"
                        "a",
                        Utf8Repair::kPerByte),
            fffd + fffd + "a");
  EXPECT_EQ(repair_utf8("\xF0\x9F\x99", Utf8Repair::kMaximalSubpart), fffd);  // at the end
  // Overlong, surrogate, beyond U+10FFFF, stray continuation: never a valid prefix.
  EXPECT_EQ(repair_utf8("\xC0\xAF", Utf8Repair::kMaximalSubpart), fffd + fffd);
  EXPECT_EQ(repair_utf8("\xED\xA0\x80", Utf8Repair::kMaximalSubpart), fffd + fffd + fffd);
  EXPECT_EQ(repair_utf8("\xF4\x90\x80\x80", Utf8Repair::kMaximalSubpart),
            fffd + fffd + fffd + fffd);
  EXPECT_EQ(repair_utf8("\x80", Utf8Repair::kPerByte), fffd);
  // Pushed one byte at a time, the output is the same as in one go.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes;
    for (int i = 0; i < 40; ++i)
      bytes += static_cast<char>(rng() % 4 == 0 ? rng() : 0x80 + rng() % 0x75);
    for (Utf8Repair r : {Utf8Repair::kMaximalSubpart, Utf8Repair::kPerByte}) {
      Utf8Stream s(r);
      std::string out;
      for (char c : bytes) s.push(std::string_view(&c, 1), out);
      s.flush(out);
      ASSERT_EQ(out, repair_utf8(bytes, r));
    }
  }
}

TEST(UnicodeClasses, LettersNumbersSpacesByGeneralCategory) {
  EXPECT_EQ(char_class(U'a'), CharClass::kLetter);
  EXPECT_EQ(char_class(U'\u00E9'), CharClass::kLetter);  // é
  EXPECT_EQ(char_class(U'\u65E5'), CharClass::kLetter);  // 日
  EXPECT_EQ(char_class(U'\u03A9'), CharClass::kLetter);  // Ω
  EXPECT_EQ(char_class(U'7'), CharClass::kNumber);
  EXPECT_EQ(char_class(U'\u0663'), CharClass::kNumber);  // Arabic-Indic 3 (glibc: alpha)
  EXPECT_EQ(char_class(U'\u00B2'), CharClass::kNumber);  // superscript 2 (glibc: neither)
  EXPECT_EQ(char_class(U'\u2162'), CharClass::kNumber);  // Roman numeral three (glibc: alpha)
  EXPECT_EQ(char_class(U'\u093F'), CharClass::kOther);   // Devanagari vowel sign i (glibc: alpha)
  EXPECT_EQ(char_class(U'\u0301'), CharClass::kOther);   // combining acute
  EXPECT_EQ(char_class(U'\u00B7'), CharClass::kOther);   // middle dot
  EXPECT_EQ(char_class(U'\U0001F642'), CharClass::kOther);  // 🙂
  for (char32_t s :
       {U' ', U'\t', U'\n', U'\r', U'\u000B', U'\u0085', U'\u00A0', U'\u2009', U'\u3000'})
    EXPECT_EQ(char_class(s), CharClass::kSpace) << int(s);
  EXPECT_EQ(char_class(U'\u001C'),
            CharClass::kOther);  // not White_Space (Python's isspace says so)
}

TEST(ByteLevel, ByteMapIsGpt2s) {
  const auto& map = byte_to_unicode();
  EXPECT_EQ(map['!'], "!");
  EXPECT_EQ(map[' '], "\xC4\xA0");   // Ġ, U+0120
  EXPECT_EQ(map['\n'], "\xC4\x8A");  // Ċ, U+010A
  EXPECT_EQ(map[0], "\xC4\x80");     // U+0100
  EXPECT_EQ(map[0xAD], "\xC5\x83");  // soft hyphen: U+0143
  for (int b = 0; b < 256; ++b) {
    const CodePoint cp = read_code_point(map[b], 0);
    ASSERT_EQ(unicode_to_byte(cp.value), b);
  }
}

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view w : split_gpt2_words(text)) out.emplace_back(w);
  return out;
}

TEST(ByteLevel, PreTokenizerFollowsGpt2Regex) {
  using W = std::vector<std::string>;
  EXPECT_EQ(words("Hello world's  end\n"), (W{"Hello", " world", "'s", " ", " end", "\n"}));
  EXPECT_EQ(words("I'M 'Tis don't we'll"),
            (W{"I", "'", "M", " '", "Tis", " don", "'t", " we", "'ll"}));
  EXPECT_EQ(words("a\t\tb  "), (W{"a", "\t", "\t", "b", "  "}));
  EXPECT_EQ(words("   x"), (W{"  ", " x"}));
  EXPECT_EQ(words("1,000.5 \xC2\xBD\xC2\xB2 v2"),
            (W{"1", ",", "000", ".", "5", " \xC2\xBD\xC2\xB2", " v", "2"}));
  EXPECT_EQ(words("$3.50 (ca."), (W{"$", "3", ".", "50", " (", "ca", "."}));
  EXPECT_EQ(words("line1\n\n  line2"), (W{"line", "1", "\n\n ", " line", "2"}));
  // Devanagari vowel signs and viramas are marks, not letters: GPT-2 splits there.
  EXPECT_EQ(words("\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8"),  // हिन
            (W{"\xE0\xA4\xB9", "\xE0\xA4\xBF", "\xE0\xA4\xA8"}));
  // No-break spaces are \s: a run of two gives two words.
  EXPECT_EQ(words("a\xC2\xA0\xC2\xA0"
                  "b"),
            (W{"a", "\xC2\xA0", "\xC2\xA0", "b"}));
  EXPECT_EQ(words("a\xFF"
                  "b"),
            (W{"a", "\xFF", "b"}));  // a byte that is not UTF-8
  EXPECT_TRUE(words("").empty());
}

TEST(ByteLevel, IndependentCutsFollowANewlineBeforeANonSpace) {
  const std::string text = "one two\n three\nfour\n\nfive\n";
  const std::vector<size_t> cuts = independent_cuts(text, 1);
  EXPECT_EQ(cuts, (std::vector<size_t>{text.find("four"), text.find("five")}));
}

// ---------------------------------------------------------------- byte-level BPE

TEST(HfBpe, TokenizerJsonGivesTheLibrarysIds) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kBpeDir);
  EXPECT_EQ(tok->format(), "hf-bpe");
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->eos_id(), 0);  // <|endoftext|>
  EXPECT_EQ(tok->files(), std::vector<std::string>{kBpeDir + "/tokenizer.json"});
  expect_reference(*tok, kBpeDir);
  // The file itself opens the same way.
  expect_reference(*open_tokenizer(kBpeDir + "/tokenizer.json"), kBpeDir);
}

TEST(HfBpe, VocabAndMergesGiveTheLibrarysIds) {
  TempDir dir;
  copy_files(dir.path(), {"vocab.json", "merges.txt"});
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(dir.path());
  EXPECT_EQ(tok->format(), "hf-bpe");
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->eos_id(), 0);
  EXPECT_EQ(tok->files(),
            (std::vector<std::string>{dir.file("vocab.json"), dir.file("merges.txt")}));
  expect_reference(*tok, kBpeDir);  // "<|endoftext|>" in the text included
}

TEST(HfBpe, SpecialTokensAreSplitOutFirst) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kBpeDir);
  auto enc = [&](const std::string& s) { return tok->encode(s); };
  std::vector<int32_t> expect = enc("a ");
  expect.push_back(0);
  for (int32_t id : enc(" b")) expect.push_back(id);
  EXPECT_EQ(enc("a <|endoftext|> b"), expect);
  EXPECT_EQ(enc("<|endoftext|><|endoftext|>"), (std::vector<int32_t>{0, 0}));
  EXPECT_NE(enc("<|endoftext|"), (std::vector<int32_t>{0}));  // incomplete: plain text

  // lstrip / rstrip take the whitespace around the token, as tokenizers does.
  TempDir dir;
  nlohmann::json j = nlohmann::json::parse(read_bytes(kBpeDir + "/tokenizer.json"));
  j["added_tokens"][0]["lstrip"] = true;
  j["added_tokens"][0]["rstrip"] = true;
  write_bytes(dir.file("tokenizer.json"), j.dump());
  std::unique_ptr<TextTokenizer> strip = open_tokenizer(dir.path());
  expect = enc("a");
  expect.push_back(0);
  for (int32_t id : enc("b")) expect.push_back(id);
  EXPECT_EQ(strip->encode("a \t<|endoftext|>\n b"), expect);
}

// Bytes that are not UTF-8 read as Python's decode(errors="replace") reads
// them: the library's Python binding only takes str.
TEST(HfBpe, InvalidUtf8IsReadAsPythonsReplace) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kBpeDir);
  EXPECT_EQ(tok->encode("a\xFF b\xE2\x82"), tok->encode("a\xEF\xBF\xBD b\xEF\xBF\xBD"));
}

TEST(HfBpe, EosFromTheFolderConfig) {
  TempDir dir;
  copy_files(dir.path(), {"tokenizer.json"});
  write_bytes(dir.file("special_tokens_map.json"), R"({"eos_token": "!", "bos_token": null})");
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(dir.path());
  EXPECT_EQ(tok->eos_id(), 1);  // "!" is id 1
  EXPECT_EQ(tok->files().size(), 2u);
  // tokenizer_config.json wins over the map; tokens may be AddedToken objects.
  write_bytes(dir.file("tokenizer_config.json"),
              R"({"eos_token": {"__type": "AddedToken", "content": "<|endoftext|>"}})");
  EXPECT_EQ(open_tokenizer(dir.path())->eos_id(), 0);
  write_bytes(dir.file("tokenizer_config.json"), R"({"eos_token": "</s>"})");
  expect_error([&] { open_tokenizer(dir.path()); }, {"tokenizer_config.json", "eos_token", "</s>"});
  write_bytes(dir.file("tokenizer_config.json"), R"({"eos_token": 7})");
  expect_error([&] { open_tokenizer(dir.path()); }, {"tokenizer_config.json", "eos_token"});
}

TEST(HfBpe, StreamHoldsBytesOfSplitCharacters) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kBpeDir);
  const std::string text = "\xF0\x9F\x99\x82\xF0\x9F\x9A\x80 ok";  // 🙂🚀 ok
  const std::vector<int32_t> ids = tok->encode(text);
  ASSERT_GT(ids.size(), 4u);  // the emoji are byte tokens
  const std::vector<std::string> pieces = stream_pieces(*tok, ids);
  EXPECT_EQ(pieces[0], "");  // the first byte of 🙂 alone is no text yet
  EXPECT_EQ(joined(pieces), text);
  // Any ids, broken UTF-8 included: the stream gives decode()'s text.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> random(1 + rng() % 12);
    for (int32_t& id : random) id = static_cast<int32_t>(rng() % tok->vocab_size());
    ASSERT_EQ(joined(stream_pieces(*tok, random)), tok->decode(random));
  }
  expect_error([&] { (void)tok->decode({1, 512}); }, {"id 512", "vocabulary"});
  expect_error([&] { (void)tok->stream()->next(-1); }, {"id -1"});
}

TEST(HfBpe, LongTextEncodesInParallelPiecesAsWordByWord) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kBpeDir);
  std::string text;
  const std::vector<Reference> ref = read_reference(kBpeDir);
  for (int i = 0; text.size() < (3u << 20); ++i) {
    const std::string& t = ref[i % ref.size()].text;
    if (t.find("<|") == std::string::npos) text += t + (i % 3 ? "\n" : "\n\n  ");
  }
  const std::vector<int32_t> ids = tok->encode(text);  // cut into ~1 MB pieces
  std::vector<int32_t> by_word;
  for (std::string_view w : split_gpt2_words(text))
    for (int32_t id : tok->encode(std::string(w))) by_word.push_back(id);
  EXPECT_EQ(ids, by_word);
  EXPECT_EQ(tok->decode(ids), text);
}

// ---------------------------------------------------------------- SentencePiece

TEST(HfSentencePiece, FolderGivesTheLibrarysIds) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kSpDir);
  EXPECT_EQ(tok->format(), "hf-sentencepiece");
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->eos_id(), 2);  // </s>
  expect_reference(*tok, kSpDir);
}

TEST(HfSentencePiece, StreamFollowsSentencePieceDecode) {
  std::unique_ptr<TextTokenizer> tok = open_tokenizer(kSpDir);
  // The dummy prefix's space goes at the start of a text, not after a prompt.
  const std::vector<int32_t> ids = tok->encode("Hello");
  EXPECT_EQ(joined(stream_pieces(*tok, ids)), "Hello");
  EXPECT_EQ(joined(stream_pieces(*tok, ids, /*continuing=*/true)), " Hello");
  // Any ids (bytes that break UTF-8, control and unknown pieces): decode()'s text.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> random(1 + rng() % 10);
    for (int32_t& id : random)  // low ids (control, unknown, bytes) often
      id = static_cast<int32_t>(rng() % 2 ? rng() % 270 : rng() % tok->vocab_size());
    ASSERT_EQ(joined(stream_pieces(*tok, random)), tok->decode(random))
        << nlohmann::json(random).dump();
  }
}

TEST(HfSentencePiece, LongTextEncodesInPiecesAsTheLibraryWhole) {
  std::string text = " leading space\n";
  const std::vector<Reference> ref = read_reference(kSpDir);
  for (int i = 0; text.size() < (1u << 19); ++i)  // 512 KB: eight pieces
    text += ref[i % ref.size()].text + (i % 3 ? "\n" : "\n\n  ");
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(kSpDir + "/tokenizer.model").ok());
  std::vector<int> whole;
  ASSERT_TRUE(sp.Encode(text, &whole).ok());
  EXPECT_EQ(open_tokenizer(kSpDir)->encode(text), std::vector<int32_t>(whole.begin(), whole.end()));
}

TEST(HfSentencePiece, ModelFileKeepsDendritesLineEncoding) {
  std::unique_ptr<TextTokenizer> lines = open_tokenizer(kSpDir + "/tokenizer.model");
  std::unique_ptr<TextTokenizer> whole = open_tokenizer(kSpDir);
  EXPECT_EQ(lines->format(), "sentencepiece");
  std::vector<int32_t> expect = whole->encode("one");
  expect.push_back(static_cast<const Tokenizer&>(*lines).piece_id("<0x0A>"));
  for (int32_t id : whole->encode("two")) expect.push_back(id);
  EXPECT_EQ(lines->encode("one\ntwo"), expect);
  EXPECT_NE(whole->encode("one\ntwo"), expect);  // no dummy prefix inside the text
}

// ---------------------------------------------------------------- open_tokenizer errors

TEST(OpenTokenizer, BadFilesAreErrorsNamingTheFile) {
  TempDir dir;
  expect_error([&] { open_tokenizer(dir.file("missing")); }, {"missing", "does not exist"});
  expect_error([&] { open_tokenizer(dir.path()); }, {dir.path(), "holds no tokenizer"});

  TempDir bad_json;
  write_bytes(bad_json.file("tokenizer.json"), R"({"model": {"type": "BPE", "vocab": )");
  expect_error([&] { open_tokenizer(bad_json.path()); },
               {bad_json.file("tokenizer.json"), "not valid JSON"});

  TempDir wordpiece;
  write_bytes(wordpiece.file("tokenizer.json"),
              R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}, "pre_tokenizer": null})");
  expect_error([&] { open_tokenizer(wordpiece.path()); },
               {wordpiece.file("tokenizer.json"), "model.type", "WordPiece"});

  TempDir no_vocab;
  nlohmann::json j = nlohmann::json::parse(read_bytes(kBpeDir + "/tokenizer.json"));
  j["model"].erase("vocab");
  write_bytes(no_vocab.file("tokenizer.json"), j.dump());
  expect_error([&] { open_tokenizer(no_vocab.path()); },
               {no_vocab.file("tokenizer.json"), "model.vocab", "missing"});

  TempDir one_token;
  copy_files(one_token.path(), {"vocab.json"});
  write_bytes(one_token.file("merges.txt"), "#version: 0.2\n\xC4\xA0 t\nhe\n");
  expect_error([&] { open_tokenizer(one_token.path()); },
               {one_token.file("merges.txt"), "line 3", "\"he\""});

  TempDir unknown_token;
  copy_files(unknown_token.path(), {"vocab.json"});
  write_bytes(unknown_token.file("merges.txt"), "#version: 0.2\nzz q\n");
  expect_error([&] { open_tokenizer(unknown_token.path()); },
               {unknown_token.file("merges.txt"), "line 2", "not in the vocabulary"});

  TempDir no_vocab_json;
  copy_files(no_vocab_json.path(), {"merges.txt"});
  expect_error([&] { open_tokenizer(no_vocab_json.path()); },
               {no_vocab_json.file("vocab.json"), "does not exist"});

  TempDir bad_vocab_json;
  copy_files(bad_vocab_json.path(), {"merges.txt"});
  write_bytes(bad_vocab_json.file("vocab.json"), "[1, 2");
  expect_error([&] { open_tokenizer(bad_vocab_json.path()); },
               {bad_vocab_json.file("vocab.json"), "not valid JSON"});

  TempDir not_a_model;
  write_bytes(not_a_model.file("tokenizer.model"), "not a protobuf");
  expect_error([&] { open_tokenizer(not_a_model.path()); },
               {not_a_model.file("tokenizer.model"), "cannot load"});
}

TEST(OpenTokenizer, CheckpointFolders) {
  TempDir dir;
  EXPECT_EQ(checkpoint_tokenizer(dir.path()), dir.file("tokenizer.model"));  // Dendrite's
  write_bytes(dir.file("tokenizer_meta.json"), R"({"tokenizer_format": "sentencepiece"})");
  EXPECT_EQ(checkpoint_tokenizer(dir.path()), dir.file("tokenizer.model"));
  write_bytes(dir.file("tokenizer_meta.json"), R"({"tokenizer_format": "hf-sentencepiece"})");
  EXPECT_EQ(checkpoint_tokenizer(dir.path()), dir.path());  // a Hugging Face tokenizer.model alone
  fs::remove(dir.file("tokenizer_meta.json"));
  write_bytes(dir.file("tokenizer_config.json"), "{}");
  EXPECT_EQ(checkpoint_tokenizer(dir.path()), dir.path());  // a Hugging Face tokenizer's files
}

// ---------------------------------------------------------------- dendrite tokenize

TEST(RunTokenize, WithAHuggingFaceFolder) {
  TempDir dir;
  const std::string a = "In the beginning was the Word.\n\xF0\x9F\x99\x82 caf\xC3\xA9\n",
                    b = "And the Word was with God.\n";
  write_bytes(dir.file("a.txt"), a);
  write_bytes(dir.file("b.txt"), b);
  for (const std::string& source : {kBpeDir, kSpDir}) {
    SCOPED_TRACE(source);
    std::unique_ptr<TextTokenizer> tok = open_tokenizer(source);
    TokenizeOptions opt;
    opt.inputs = {dir.file("a.txt"), dir.file("b.txt")};
    opt.out_dir = dir.file("out");  // the same folder each time: stale files must go
    opt.model = source;
    opt.val_fraction = 0;
    run_tokenize(opt);
    const nlohmann::json meta = nlohmann::json::parse(read_bytes(opt.out_dir + "/meta.json"));
    EXPECT_EQ(meta["vocab_size"], 512);
    EXPECT_EQ(meta["tokenizer_format"], tok->format());
    EXPECT_EQ(meta["tokenizer_source"], source);
    EXPECT_EQ(meta["eos_id"], tok->eos_id());
    const std::string main = source == kBpeDir ? "tokenizer.json" : "tokenizer.model";
    EXPECT_EQ(meta["tokenizer"], main);
    EXPECT_EQ(meta["tokenizer_files"], nlohmann::json::array({main}));
    EXPECT_EQ(read_bytes(opt.out_dir + "/" + main), read_bytes(source + "/" + main));
    for (const char* other : {"tokenizer.json", "tokenizer.model", "tokenizer.vocab"}) {
      if (other == main) continue;
      EXPECT_FALSE(fs::exists(opt.out_dir + "/" + other)) << other;
    }

    std::vector<int32_t> expect = tok->encode(a);
    expect.push_back(tok->eos_id());  // between files
    for (int32_t id : tok->encode(b)) expect.push_back(id);
    TokenFile train(opt.out_dir + "/train.bin");
    std::vector<int32_t> got(train.size());
    train.copy(0, train.size(), got.data());
    EXPECT_EQ(got, expect);
    // The output folder is itself a tokenizer folder, of the same kind.
    std::unique_ptr<TextTokenizer> again = open_tokenizer(opt.out_dir);
    EXPECT_EQ(again->format(), tok->format());
    EXPECT_EQ(again->encode(a), tok->encode(a));
  }
}

TEST(RunTokenize, DendritesOwnDataFolderStillOpensByLines) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "one\ntwo\n");
  TokenizeOptions opt;
  opt.inputs = {dir.file("a.txt")};
  opt.out_dir = dir.file("out");
  opt.model = kSpDir + "/tokenizer.model";  // a .model file: Dendrite's line encoding
  run_tokenize(opt);
  const nlohmann::json meta = nlohmann::json::parse(read_bytes(opt.out_dir + "/meta.json"));
  EXPECT_EQ(meta["tokenizer"], "tokenizer.model");
  EXPECT_EQ(meta["tokenizer_format"], "sentencepiece");
  EXPECT_EQ(open_tokenizer(opt.out_dir)->format(), "sentencepiece");
}

}  // namespace
}  // namespace dendrite
