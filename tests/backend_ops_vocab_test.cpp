// The op harness (backend_ops_support.h) on the vocabulary's ops: the
// cross-entropy's pieces over vocabulary parts against the softmax loss, the
// token embeddings over vocabulary ranges and table chunks with the position
// embeddings, and the LM head's chunk rows.
// Letters: B batch, T positions, C channels, V vocabulary, Vp padded
// vocabulary, m = B T rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend_ops_support.h"
#include "dendrite/ops/reference/attention.h"  // softmax_cross_entropy
#include "dendrite/ops/reference/basic.h"

namespace dendrite::test {
namespace {

TEST_P(BackendOps, CrossEntropyPiecesMatchTheSoftmaxLoss) {
  const int rows = 19, V = 61, Vp = 64;
  const Vf logits = randn(rows * Vp, 21, 3.0);
  std::vector<int32_t> targets = random_tokens(rows, V, 22);
  Vf weight(rows, 1.0f);
  weight[3] = 0.0f, weight[7] = 0.5f;
  Vd lg(rows * V);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < V; ++j) lg[r * V + j] = logits[r * Vp + j];
  Vd dl(rows * V);
  const double denom = 17.5;
  const double loss = ref::softmax_cross_entropy(dl.data(), lg.data(), targets.data(),
                                                 weight.data(), denom, rows, V);
  // The vocabulary in two parts of 32 (as over Y = 2), stats combined.
  Buffer<float> Lg = put(logits), Wt = put(weight);
  Buffer<int32_t> Tg = put(targets);
  Vf gathered(2 * rows * 2);
  std::vector<Buffer<float>> parts;
  for (int p = 0; p < 2; ++p) {
    Vf part(rows * 32);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < 32; ++j) part[r * 32 + j] = logits[r * Vp + p * 32 + j];
    parts.push_back(put(part));
    Buffer<float> st = zeros<float>(2 * rows);
    be().ce_local_stats(st.data(), parts[p].data(), Tg.data(), Wt.data(), {rows, 32, p * 32, V});
    const Vf sv = get(st);
    std::copy(sv.begin(), sv.end(), gathered.begin() + p * rows * 2);
  }
  Buffer<float> Ga = put(gathered), Lse = zeros<float>(rows);
  // The loss is added to an accumulator in the backend's memory: twice here.
  const double before = 7.25;
  Buffer<double> Total = put(std::vector<double>{before});
  be().ce_combine(Lse.data(), Ga.data(), Wt.data(), rows, 2, Total.data());
  const double got = (get(Total)[0] - before) / denom;
  EXPECT_NEAR(got, loss, 1e-5 * std::fabs(loss));
  be().ce_combine(Lse.data(), Ga.data(), Wt.data(), rows, 2, Total.data());
  EXPECT_NEAR((get(Total)[0] - before) / denom, 2 * loss, 2e-5 * std::fabs(loss));
  for (int p = 0; p < 2; ++p) {
    be().ce_dlogits(parts[p].data(), Lse.data(), Tg.data(), Wt.data(), denom,
                    {rows, 32, p * 32, V});
    const Vf d = get(parts[p]);
    Vd want(rows * 32, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < 32; ++j)
        if (p * 32 + j < V) want[r * 32 + j] = dl[r * V + p * 32 + j];
    expect_close(d, want, 1e-5, str("ce dlogits part ", p));
  }
  // The gathered parts in id order, padding dropped.
  Buffer<float> Out = zeros<float>(rows * V);
  Vf part_major(rows * Vp);
  for (int p = 0; p < 2; ++p)
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < 32; ++j)
        part_major[p * rows * 32 + r * 32 + j] = logits[r * Vp + p * 32 + j];
  Buffer<float> PM = put(part_major);
  be().interleave_vocab_parts(Out.data(), PM.data(), {2, rows, 32, V});
  expect_close(get(Out), lg, 0, "interleave_vocab_parts");
}

// ce_combine over more rows than a GPU block has threads (256): its rows in
// several rounds through the block's shared memory, each round's weights
// and differences added in row order after every thread wrote them and
// before any overwrites them.
TEST_P(BackendOps, CombineOverManyRowsAddsEveryRowInOrder) {
  const int rows = 700, parts = 3;
  const Vf lse_parts = randn(parts * rows, 31, 3.0), targets = randn(parts * rows, 32);
  Vf gathered(2 * parts * rows), weight(rows);
  for (int i = 0; i < parts * rows; ++i)
    gathered[2 * i] = lse_parts[i], gathered[2 * i + 1] = targets[i];
  for (int r = 0; r < rows; ++r) weight[r] = r % 5 == 3 ? 0.0f : 0.25f * float(1 + r % 4);
  Vd want_lse(rows);
  double want_total = 0.0;
  for (int r = 0; r < rows; ++r) {
    double mx = -INFINITY, target = 0.0, sum = 0.0;
    for (int p = 0; p < parts; ++p) {
      mx = std::max(mx, double(gathered[2 * (p * rows + r)]));
      target += gathered[2 * (p * rows + r) + 1];
    }
    for (int p = 0; p < parts; ++p) sum += std::exp(double(gathered[2 * (p * rows + r)]) - mx);
    want_lse[r] = mx + std::log(sum);
    if (weight[r] != 0.0f)
      want_total = std::fma(double(weight[r]), want_lse[r] - target, want_total);
  }
  Buffer<float> Ga = put(gathered), Wt = put(weight), Lse = zeros<float>(rows);
  Buffer<double> Total = put(std::vector<double>{0.5});
  be().ce_combine(Lse.data(), Ga.data(), Wt.data(), rows, parts, Total.data());
  expect_close(get(Lse), want_lse, 1e-6, "lse");
  EXPECT_NEAR(get(Total)[0] - 0.5, want_total, 1e-9 * std::fabs(want_total));
}

TEST_P(BackendOps, EmbeddingsInRangesChunksAndPositions) {
  const int B = 3, T = 7, C = 24, V = 40, m = B * T;
  const Vf wte = randn(V * C, 23), wpe = randn(T * C, 24), dout = randn(m * C, 25);
  const std::vector<int32_t> tokens = random_tokens(m, V, 26);
  Vd want(m * C), dwte(V * C, 0.0), dwpe(T * C, 0.0);
  const Vd wted = to_d(wte), wped = to_d(wpe), doutd = to_d(dout);
  ref::embedding_forward(want.data(), tokens.data(), wted.data(), wped.data(), B, T, C);
  ref::embedding_backward(dwte.data(), dwpe.data(), doutd.data(), tokens.data(), B, T, C);
  Buffer<int32_t> Tk = put(tokens);
  Buffer<float> Out = zeros<float>(m * C), Wpe = put(wpe), Do = put(dout);
  // The vocabulary in two ranges of 20 rows, summed (as over Y = 2).
  Vf sum(m * C, 0.0f), dw(V * C);
  for (int p = 0; p < 2; ++p) {
    Buffer<float> W = put(Vf(wte.begin() + p * 20 * C, wte.begin() + (p + 1) * 20 * C));
    be().embedding_range_forward(Out.data(), Tk.data(), W.data(), {p * 20, 20, m, C});
    const Vf o = get(Out);
    for (int i = 0; i < m * C; ++i) sum[i] += o[i];
    Buffer<float> DW = zeros<float>(20 * C);
    be().embedding_range_backward(DW.data(), Do.data(), Tk.data(), {p * 20, 20, m, C});
    const Vf d = get(DW);
    std::copy(d.begin(), d.end(), dw.begin() + p * 20 * C);
  }
  Buffer<float> Sum = put(sum);
  be().position_add(Sum.data(), Wpe.data(), {m, T, C});
  expect_close(get(Sum), want, 1e-6, "embedding + positions");
  expect_close(dw, dwte, 1e-6, "embedding backward");
  Buffer<float> DP = zeros<float>(T * C);
  be().position_backward(DP.data(), Do.data(), {m, T, C});
  expect_close(get(DP), dwpe, 1e-6, "position backward");
  // The whole table in three uneven chunks (as over Z = 3), bf16 storage.
  const Vb low = rounded(wte);
  const Vf lw = widened(low);
  const Vd lwd = to_d(lw);
  Vd want_low(m * C);
  ref::embedding_forward(want_low.data(), tokens.data(), lwd.data(), nullptr, B, T, C);
  const int64_t bounds[] = {0, 301, 650, int64_t(V) * C};
  Vf csum(m * C, 0.0f), cdw(V * C, 0.0f);
  for (int p = 0; p < 3; ++p) {
    const int64_t c0 = bounds[p], n = bounds[p + 1] - bounds[p];
    Buffer<bf16> Ch = put(Vb(low.begin() + c0, low.begin() + c0 + n));
    be().embedding_chunk_forward(Out.data(), Tk.data(), Ch.data(), {c0, n}, {0, V, m, C});
    const Vf o = get(Out);
    for (int i = 0; i < m * C; ++i) csum[i] += o[i];
    Buffer<float> DC = zeros<float>(n);
    be().embedding_chunk_backward(DC.data(), Do.data(), Tk.data(), {c0, n}, {0, V, m, C});
    const Vf d = get(DC);
    std::copy(d.begin(), d.end(), cdw.begin() + c0);
  }
  expect_close(csum, want_low, 0, "embedding in chunks (bf16)");
  expect_close(cdw, dwte, 1e-6, "embedding backward in chunks");
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(kCpuTarget), target_name);
INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps, ::testing::ValuesIn(kEmulatedTargets), target_name);
#ifdef DENDRITE_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(kCudaTarget), target_name);
#endif

}  // namespace
}  // namespace dendrite::test
