// The rows of the LM head's chunks (VocabCrossEntropy, layers.h): one rule,
// which the trainer (Transformer) follows and the planner (plan/model.cpp)
// predicts, so that the planner's memory figure is the device's.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dendrite {

// Bytes one row of a chunk holds: its logits in fp32 (under bf16 also its
// dlogits in bf16), its two statistics, the two of each of the gy ranks of Y
// gathered, and its lse (VocabCrossEntropy's buffers).
inline int64_t head_chunk_row_bytes(int64_t vocab_rows, int gy, bool bf16) {
  return vocab_rows * (bf16 ? 6 : 4) + 8 * (1 + int64_t(gy)) + 4;
}

// Rows a chunk takes, at most rank_rows (the rows of this rank's step).
// device_bytes 0 (a CPU): 256 rows, whose logits stay in its caches. A GPU of
// device_bytes: as many as fit in 1/64 of its memory, a multiple of 256 from
// 256 to 8192 (GPT-2's 50304 ids in bf16: 7680 rows on an H200's 140 GiB,
// 4352 on an H100's 80 GiB), so that the head's products have thousands of
// rows and the step few chunks.
inline int head_chunk_rows(int64_t device_bytes, int64_t row_bytes, int64_t rank_rows) {
  int64_t rows = 256;
  if (device_bytes > 0) {
    const int64_t fit = device_bytes / 64 / std::max<int64_t>(1, row_bytes) / 256 * 256;
    rows = std::clamp<int64_t>(fit, 256, 8192);
  }
  return int(std::max<int64_t>(1, std::min(rows, rank_rows)));
}

}  // namespace dendrite
