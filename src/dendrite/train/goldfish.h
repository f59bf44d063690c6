// Goldfish loss (Hans et al., 2024; DESIGN.md section 7): a pseudo-random 1/k
// of the target tokens is left out of the cross-entropy, so the model never
// learns to reproduce a training passage verbatim. The mask is a per-row loss
// weight (1 kept, 0 dropped) handed to VocabCrossEntropy; dropped tokens leave
// both the sum and the count of the mean.
//
// Letters: B sequences of a global batch, T targets per sequence, h the hash
// window, k the drop rate 1/k.
//
//   mode=hash    target t of a sequence is dropped when a 64-bit hash of the
//                ordered window targets[t-h+1 .. t] (SplitMix64 folded over the
//                ids in order, started from the seed), mapped to [0, 1), is
//                below 1/k. The same passage drops the same tokens wherever it
//                appears; positions t < h-1 (no full window) are kept.
//   mode=static  every k-th position of a sequence is dropped: t % k == k-1.
//   mode=off     everything is kept (the default).
//
// The mask depends only on a sequence's targets, never on the grid or the
// rank, so every grid drops the same tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dendrite {

struct GoldfishOptions {
  enum class Mode { kOff, kHash, kStatic };
  Mode mode = Mode::kOff;
  int k = 4;           // drop 1/k of the tokens
  int h = 13;          // hash window (mode=hash)
  uint64_t seed = 0;   // hash seed (mode=hash)

  bool enabled() const { return mode != Mode::kOff; }
  // "off", or comma-separated keys: "k=4,h=13,mode=hash,seed=7" (keys left out
  // keep their defaults; mode defaults to hash once any key is given). Throws,
  // naming the bad key or value.
  static GoldfishOptions parse(const std::string& text);
  std::string str() const;  // the canonical form parse() reads back
};

// The hash of the ordered window ids[0 .. n), mapped to [0, 1).
double goldfish_window_hash(const int32_t* ids, int n, uint64_t seed);

// weights [B*T]: 1 for a supervised target, 0 for a dropped one, for B
// sequences of T targets each (row-major). Returns the number kept.
int64_t goldfish_weights(const GoldfishOptions& opt, const int32_t* targets, int B, int T,
                         float* weights);

}  // namespace dendrite
