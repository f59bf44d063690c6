// Memorization metrics on hand-made cases (identical, one token off, shifted
// by one, empty), their intervals, the canary passage format and seeded
// insertion, and greedy decoding on one process against `generate`.
#include "dendrite/eval/memorization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "backend_support.h"
#include "dendrite/core/rng.h"
#include "dendrite/eval/generate.h"
#include "dendrite/train/canaries.h"
#include "generate_support.h"

namespace dendrite {
namespace {

TEST(MemorizationMetrics, IdenticalOffByOneAndEmpty) {
  const Ids ref = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(exact_match(ref, ref));
  EXPECT_EQ(token_match(ref, ref), 1.0);
  EXPECT_EQ(rouge_l(ref, ref), 1.0);

  Ids one_off = ref;
  one_off[3] = 99;  // one wrong token
  EXPECT_FALSE(exact_match(one_off, ref));
  EXPECT_DOUBLE_EQ(token_match(one_off, ref), 7.0 / 8);
  EXPECT_DOUBLE_EQ(rouge_l(one_off, ref), 7.0 / 8);  // LCS 7 of 8 both ways

  const Ids shifted = {0, 1, 2, 3, 4, 5, 6, 7};  // one token late
  EXPECT_FALSE(exact_match(shifted, ref));
  EXPECT_EQ(token_match(shifted, ref), 0.0);
  EXPECT_DOUBLE_EQ(rouge_l(shifted, ref), 7.0 / 8);

  const Ids empty;
  EXPECT_TRUE(exact_match(empty, empty));
  EXPECT_EQ(token_match(empty, empty), 1.0);
  EXPECT_EQ(rouge_l(empty, empty), 1.0);
  EXPECT_FALSE(exact_match(empty, ref));
  EXPECT_EQ(token_match(empty, ref), 0.0);
  EXPECT_EQ(rouge_l(empty, ref), 0.0);

  // Precision and recall differ: prediction {1, 2, 9} against {1, 2}: LCS 2,
  // cut to the reference's length first, so {1, 2} - a full match.
  EXPECT_EQ(rouge_l({1, 2, 9}, {1, 2}), 1.0);
  // {3, 1} against {1, 2, 3, 4}: pred cut to 2 tokens, LCS 1: P 1/2, R 1/4, F1 1/3.
  EXPECT_NEAR(rouge_l({3, 1}, {1, 2, 3, 4}), 1.0 / 3, 1e-12);
}

TEST(MemorizationMetrics, Intervals) {
  // Wilson interval of 0/20 and 20/20 stays inside [0, 1] and is not degenerate.
  Interval none = wilson_interval(0, 20), all = wilson_interval(20, 20);
  EXPECT_EQ(none.value, 0.0);
  EXPECT_EQ(none.lo, 0.0);
  EXPECT_NEAR(none.hi, 0.161, 0.001);  // 1.96^2 / (20 + 1.96^2)
  EXPECT_EQ(all.value, 1.0);
  EXPECT_NEAR(all.lo, 0.839, 0.001);
  EXPECT_EQ(all.hi, 1.0);
  Interval half = wilson_interval(50, 100);
  EXPECT_NEAR(half.lo, 0.404, 0.001);
  EXPECT_NEAR(half.hi, 0.596, 0.001);
  Interval m = mean_interval({0.2, 0.4, 0.6});
  EXPECT_NEAR(m.value, 0.4, 1e-12);
  EXPECT_NEAR(m.hi - m.value, 1.96 * 0.2 / std::sqrt(3.0), 1e-12);
  EXPECT_EQ(wilson_interval(0, 0).hi, 0.0);

  const std::vector<Sample> samples = {{{1}, {2, 3}}, {{1}, {4, 5}}};
  SetScores s = score_set("t", "sample", samples, {{2, 3}, {4, 9}});
  EXPECT_EQ(s.n, 2);
  EXPECT_EQ(s.exact.value, 0.5);
  EXPECT_EQ(s.token.value, 0.75);
}

TEST(Canaries, PassagesSplitOnBlankAndPercentLines) {
  const std::string text = "first line\nsecond line\n%\nthird\n\n\nfourth\n  \nfifth\n%\n";
  const std::vector<std::string> p = split_passages(text);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0], "first line\nsecond line");
  EXPECT_EQ(p[1], "third");
  EXPECT_EQ(p[2], "fourth");
  EXPECT_EQ(p[3], "fifth");
}

TEST(Canaries, InsertedCopiesSitWhereTheLocationsSay) {
  std::vector<int32_t> stream;
  for (int i = 0; i < 5000; ++i) stream.push_back(i % 50 == 49 ? 0 : 1 + int32_t(random_bits(1, 1, i) % 90));
  const std::vector<int32_t> original = stream;
  const std::vector<std::vector<int32_t>> passages = {{100, 101, 102}, {200, 201, 202, 203}};
  auto where = insert_canaries(stream, passages, 5, 7, /*newline_id=*/0);
  ASSERT_EQ(where.size(), 10u);
  EXPECT_EQ(stream.size(), original.size() + 5 * (3 + 1) + 5 * (4 + 1));
  int per_passage[2] = {0, 0};
  for (const CanaryOccurrence& c : where) {
    ++per_passage[c.index];
    const auto& ids = passages[c.index];
    ASSERT_EQ(c.length, int64_t(ids.size()));
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), stream.begin() + c.offset)) << c.offset;
    EXPECT_TRUE(c.offset == 0 || stream[c.offset - 1] == 0) << "starts a line";
  }
  EXPECT_EQ(per_passage[0], 5);
  EXPECT_EQ(per_passage[1], 5);
  // Removing the copies gives back the original stream.
  std::vector<int32_t> rest;
  size_t c = 0;
  for (size_t i = 0; i < stream.size();) {
    if (c < where.size() && i == where[c].offset) {
      i += where[c++].length + 1;
      continue;
    }
    rest.push_back(stream[i++]);
  }
  EXPECT_EQ(rest, original);
  // Another seed, other places.
  std::vector<int32_t> again = original;
  auto other = insert_canaries(again, passages, 5, 8, 0);
  EXPECT_NE(other[0].offset, where[0].offset);
}

// Per-passage counts (tokenize --canary-repeat 1,2,4): passage i gets its own
// number of copies, CanaryFile::copies() counts them back from canaries.json,
// and one count for all gives the same places as the single-count call.
TEST(Canaries, DifferentCountsPerPassage) {
  std::vector<int32_t> stream;
  for (int i = 0; i < 3000; ++i) stream.push_back(i % 40 == 39 ? 0 : 1 + int32_t(random_bits(2, 1, i) % 90));
  const std::vector<int32_t> original = stream;
  const std::vector<std::vector<int32_t>> passages = {{100, 101}, {200, 201, 202}, {300}};
  auto where = insert_canaries(stream, passages, std::vector<int>{1, 2, 4}, 7, 0);
  ASSERT_EQ(where.size(), 7u);
  EXPECT_EQ(stream.size(), original.size() + 1 * 3 + 2 * 4 + 4 * 2);
  for (const CanaryOccurrence& c : where)
    EXPECT_TRUE(std::equal(passages[c.index].begin(), passages[c.index].end(),
                           stream.begin() + c.offset));
  const std::string path = ::testing::TempDir() + "dose_canaries.json";
  write_canaries_json(path, {"a", "b", "c"}, where, {1, 2, 4}, 7);
  const CanaryFile f = read_canaries_json(path);
  EXPECT_EQ(f.copies(), (std::vector<int>{1, 2, 4}));
  std::vector<int32_t> a = original, b = original;
  auto one = insert_canaries(a, passages, 3, 9, 0);
  auto same = insert_canaries(b, passages, std::vector<int>{3, 3, 3}, 9, 0);
  EXPECT_EQ(a, b);
  ASSERT_EQ(one.size(), same.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i].offset, same[i].offset);
}

// Training samples avoid the canary copies: every window misses every span,
// every free start can be drawn, and with nothing to avoid the starts are
// the plain seeded ones.
TEST(SampleStarts, WindowsMissTheSpansAndCoverTheRest) {
  const uint64_t size = 60, w = 5;
  const std::vector<Span> avoid = {{30, 32}, {10, 20}, {31, 35}, {58, 60}};
  std::set<uint64_t> free;  // by brute force
  for (uint64_t at = 0; at + w <= size; ++at) {
    bool clear = true;
    for (const Span& a : avoid) clear = clear && (at + w <= a.begin || at >= a.end);
    if (clear) free.insert(at);
  }
  const std::vector<uint64_t> got = sample_starts(size, w, 3000, 7, 9, avoid);
  ASSERT_EQ(got.size(), 3000u);
  EXPECT_EQ(std::set<uint64_t>(got.begin(), got.end()), free);
  EXPECT_EQ(got, sample_starts(size, w, 3000, 7, 9, avoid));  // seeded
  const std::vector<uint64_t> plain = sample_starts(size, w, 20, 7, 9);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(plain[i], random_bits(7, 9, uint64_t(i)) % (size - w + 1));
  EXPECT_TRUE(sample_starts(size, w, 5, 7, 9, {{0, 60}}).empty());
  EXPECT_TRUE(sample_starts(4, w, 5, 7, 9).empty());
}

TEST(GreedyDecoding, MatchesGenerateOnOneProcess) {
  ModelConfig cfg = model_config_from_json(nlohmann::json{
      {"arch", "llama"}, {"vocab_size", 96}, {"n_layer", 2}, {"n_embd", 32}, {"n_head", 4},
      {"n_kv_head", 2}, {"ffn_hidden", 64}, {"block_size", 32}});
  auto grid = ProcessGrid::single();
  const int p = 6, s = 10, B = 4;
  Transformer batched(cfg, *grid, test::cpu_backend(), B, p + s - 1);
  batched.init(11);
  Transformer one(cfg, *grid, test::cpu_backend(), 1, p + s);
  one.init(11);
  std::vector<Ids> prompts;
  for (int n = 0; n < 7; ++n) {  // 7: the last batch is short
    Ids x(p);
    for (int i = 0; i < p; ++i) x[i] = int32_t(random_bits(4, n, i) % 96);
    prompts.push_back(x);
  }
  std::vector<Ids> got = greedy_continuations(batched, prompts, s, B);
  ASSERT_EQ(got.size(), prompts.size());
  SampleOptions greedy;
  greedy.temperature = 0;
  for (size_t n = 0; n < prompts.size(); ++n) {
    Ids all = test::generate(one, prompts[n], s, greedy);
    EXPECT_EQ(got[n], Ids(all.begin() + p, all.end())) << "prompt " << n;
  }
}

}  // namespace
}  // namespace dendrite
