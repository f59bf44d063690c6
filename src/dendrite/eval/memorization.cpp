// Memorization metrics and batched greedy decoding on any grid (see
// memorization.h). N samples, p prefix, s suffix, B batch, V vocabulary.
#include "dendrite/eval/memorization.h"

#include <algorithm>
#include <cmath>

#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"

namespace dendrite {

bool exact_match(const Ids& pred, const Ids& ref) {
  return pred.size() >= ref.size() && std::equal(ref.begin(), ref.end(), pred.begin());
}

double token_match(const Ids& pred, const Ids& ref) {
  if (ref.empty()) return pred.empty() ? 1.0 : 0.0;
  size_t same = 0;
  for (size_t i = 0; i < ref.size() && i < pred.size(); ++i) same += pred[i] == ref[i];
  return double(same) / double(ref.size());
}

double rouge_l(const Ids& pred_full, const Ids& ref) {
  const Ids pred(pred_full.begin(), pred_full.begin() + std::min(pred_full.size(), ref.size()));
  if (ref.empty() || pred.empty()) return ref.empty() && pred.empty() ? 1.0 : 0.0;
  std::vector<int> row(ref.size() + 1, 0), prev(ref.size() + 1, 0);  // LCS lengths
  for (size_t i = 1; i <= pred.size(); ++i) {
    for (size_t j = 1; j <= ref.size(); ++j)
      row[j] = pred[i - 1] == ref[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], row[j - 1]);
    std::swap(row, prev);
  }
  const double lcs = prev[ref.size()];
  if (lcs == 0) return 0.0;
  const double precision = lcs / pred.size(), recall = lcs / ref.size();
  return 2 * precision * recall / (precision + recall);
}

Interval wilson_interval(int64_t successes, int64_t n, double z) {
  if (n <= 0) return {};
  const double p = double(successes) / n, z2 = z * z;
  const double center = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z / (1 + z2 / n) * std::sqrt(p * (1 - p) / n + z2 / (4.0 * n * n));
  return {p, std::max(0.0, center - half), std::min(1.0, center + half)};
}

Interval mean_interval(const std::vector<double>& xs, double z) {
  if (xs.empty()) return {};
  double mean = 0, var = 0;
  for (double x : xs) mean += x;
  mean /= xs.size();
  for (double x : xs) var += (x - mean) * (x - mean);
  const double sd = xs.size() > 1 ? std::sqrt(var / (xs.size() - 1)) : 0.0;
  const double half = z * sd / std::sqrt(double(xs.size()));
  return {mean, std::max(0.0, mean - half), std::min(1.0, mean + half)};
}

std::vector<uint64_t> sample_starts(uint64_t size, uint64_t w, int n, uint64_t seed,
                                    uint64_t stream, std::vector<Span> avoid) {
  if (w == 0 || size < w || n <= 0) return {};
  const uint64_t span = size - w + 1;  // starts 0 .. span-1
  // The free starts as runs [begin, end): a window at `at` overlaps [b, e)
  // when at < e and at + w > b.
  std::sort(avoid.begin(), avoid.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::vector<Span> free;
  uint64_t cursor = 0;
  for (const Span& a : avoid) {
    const uint64_t lo = a.begin + 1 > w ? a.begin + 1 - w : 0, hi = std::min(span, a.end);
    if (lo > cursor) free.push_back({cursor, std::min(lo, span)});
    cursor = std::max(cursor, hi);
    if (cursor >= span) break;
  }
  if (cursor < span) free.push_back({cursor, span});
  std::vector<uint64_t> before;  // free starts in the runs before each
  uint64_t total = 0;
  for (const Span& f : free) {
    before.push_back(total);
    total += f.end - f.begin;
  }
  std::vector<uint64_t> out;
  if (total == 0) return out;
  for (int i = 0; i < n; ++i) {
    const uint64_t r = random_bits(seed, stream, uint64_t(i)) % total;
    const size_t k = size_t(std::upper_bound(before.begin(), before.end(), r) - before.begin()) - 1;
    out.push_back(free[k].begin + (r - before[k]));
  }
  return out;
}

SetScores score_set(const std::string& name, const std::string& unit,
                    const std::vector<Sample>& samples, const std::vector<Ids>& continuations) {
  DENDRITE_CHECK(samples.size() == continuations.size(), "memorization: ", samples.size(),
                 " samples but ", continuations.size(), " continuations");
  SetScores s{name, unit, int64_t(samples.size()), {}, {}, {}};
  int64_t exact = 0;
  std::vector<double> tokens, rouges;
  for (size_t i = 0; i < samples.size(); ++i) {
    exact += exact_match(continuations[i], samples[i].suffix);
    tokens.push_back(token_match(continuations[i], samples[i].suffix));
    rouges.push_back(rouge_l(continuations[i], samples[i].suffix));
  }
  s.exact = wilson_interval(exact, s.n);
  s.token = mean_interval(tokens);
  s.rouge = mean_interval(rouges);
  return s;
}

std::vector<Ids> greedy_continuations(Transformer& model, const std::vector<Ids>& prompts, int s,
                                      int B, bool use_cache) {
  const int N = int(prompts.size());
  if (N == 0 || s <= 0) return std::vector<Ids>(N);
  const size_t p = prompts[0].size();
  DENDRITE_CHECK(p >= 1, "memorization: the prompts are empty; use --prefix of at least 1");
  const TokenPicker greedy = greedy_picker(model.config().vocab_size);
  std::vector<Ids> out(N), batch(B);
  for (int n0 = 0; n0 < N; n0 += B) {
    for (int b = 0; b < B; ++b) {  // a short last batch repeats its last prompt
      batch[b] = prompts[std::min(n0 + b, N - 1)];
      DENDRITE_CHECK(batch[b].size() == p, "memorization: prompts differ in length");
    }
    std::vector<Ids> got = generate_batch(model, batch, s, greedy, use_cache);
    for (int b = 0; b < B && n0 + b < N; ++b) out[n0 + b].assign(got[b].begin() + p, got[b].end());
  }
  return out;
}

}  // namespace dendrite
