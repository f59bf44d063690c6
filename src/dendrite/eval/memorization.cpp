// Memorization metrics and batched greedy decoding on any grid (see
// memorization.h). N samples, p prefix, s suffix, B batch, V vocabulary.
#include "dendrite/eval/memorization.h"

#include <algorithm>
#include <cmath>

#include "dendrite/core/check.h"

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
                                      int B) {
  ProcessGrid& grid = model.grid();
  const int V = model.config().vocab_size, N = int(prompts.size());
  if (N == 0 || s <= 0) return std::vector<Ids>(N);
  const int p = int(prompts[0].size());
  DENDRITE_CHECK(p >= 1, "memorization: the prompts are empty; use --prefix of at least 1");
  const int B_loc = model.local_batch(B), first = model.first_sequence(B);
  std::vector<Ids> out(N);
  std::vector<int32_t> seqs(size_t(B) * (p + s));  // [B, p+s], only the first T of each used
  std::vector<int32_t> inputs;
  std::vector<float> logits(size_t(B_loc) * V);
  std::vector<double> next(B);
  for (int n0 = 0; n0 < N; n0 += B) {
    for (int b = 0; b < B; ++b) {  // a short last batch repeats its last prompt
      const Ids& prompt = prompts[std::min(n0 + b, N - 1)];
      DENDRITE_CHECK(int(prompt.size()) == p, "memorization: prompts differ in length");
      std::copy(prompt.begin(), prompt.end(), seqs.begin() + size_t(b) * (p + s));
    }
    for (int i = 0; i < s; ++i) {
      const int T = p + i;
      inputs.resize(size_t(B) * T);
      for (int b = 0; b < B; ++b)
        std::copy_n(seqs.begin() + size_t(b) * (p + s), T, inputs.begin() + size_t(b) * T);
      model.last_position_logits(inputs.data() + size_t(first) * T, B, T, logits.data());
      // Each rank picks the tokens of its sequences; a sum over the ranks of
      // different data (Z and D) gives every rank all of them.
      std::fill(next.begin(), next.end(), 0.0);
      for (int b = 0; b < B_loc; ++b) {
        const float* row = logits.data() + size_t(b) * V;
        next[first + b] = double(std::max_element(row, row + V) - row);
      }
      grid.Z().all_reduce(next.data(), B);
      grid.D().all_reduce(next.data(), B);
      for (int b = 0; b < B; ++b) seqs[size_t(b) * (p + s) + T] = int32_t(next[b]);
    }
    for (int b = 0; b < B && n0 + b < N; ++b)
      out[n0 + b].assign(seqs.begin() + size_t(b) * (p + s) + p, seqs.begin() + size_t(b + 1) * (p + s));
  }
  return out;
}

}  // namespace dendrite
