// Memorization (DESIGN.md section 7): prompt with the first p tokens of a
// sample, decode s tokens greedily, and compare them with the s true tokens:
//   exact match    the whole continuation equals the reference (a rate)
//   token match    the fraction of positions whose token equals the reference's
//   ROUGE-L        F1 of the longest common subsequence of the two
// each with a 95% interval (Wilson for the rate, normal for the means).
// Letters: N samples, p prefix tokens, s suffix tokens, B sequences per batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dendrite/eval/generate.h"
#include "dendrite/model/transformer.h"

namespace dendrite {

// Scores of one continuation against its reference (pred is cut to the
// reference's length). An empty reference scores 1 against an empty
// prediction, else 0.
bool exact_match(const Ids& pred, const Ids& ref);
double token_match(const Ids& pred, const Ids& ref);
double rouge_l(const Ids& pred, const Ids& ref);

struct Interval {
  double value = 0, lo = 0, hi = 0;
};
// Wilson score interval of successes / n (z = 1.96: 95%); n = 0 gives all zeros.
Interval wilson_interval(int64_t successes, int64_t n, double z = 1.96);
// Mean and its normal interval mean +- z * sd / sqrt(n) (clamped to [0, 1]).
Interval mean_interval(const std::vector<double>& xs, double z = 1.96);

struct Sample {
  Ids prefix, suffix;  // [p], [<= s]
};

// Token positions [begin, end) of a stream.
struct Span {
  uint64_t begin = 0, end = 0;
};

// n seeded starts of windows of w tokens in a stream of `size`, uniform over
// the starts whose window overlaps none of `avoid` (the canary copies of a
// training stream); none when no start is free. Start i is the
// random_bits(seed, stream, i)-th free one, so with nothing to avoid it is
// random_bits(seed, stream, i) % (size - w + 1).
std::vector<uint64_t> sample_starts(uint64_t size, uint64_t w, int n, uint64_t seed,
                                    uint64_t stream, std::vector<Span> avoid = {});

struct SetScores {
  std::string name, unit;  // "canaries", "distinct canary"
  int64_t n = 0;
  Interval exact, token, rouge;
};
SetScores score_set(const std::string& name, const std::string& unit,
                    const std::vector<Sample>& samples, const std::vector<Ids>& continuations);

// Greedy continuations of s tokens of every prompt (all of the same length p),
// B sequences at a time on the model's grid (B divisible by Gd * Gz;
// generate_batch, with or without the key/value cache); every rank returns
// all of them. The model must be sized for B x (p + s - 1).
std::vector<Ids> greedy_continuations(Transformer& model, const std::vector<Ids>& prompts, int s,
                                      int B, bool use_cache = true);

}  // namespace dendrite
