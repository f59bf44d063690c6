// The op harness (backend_ops_support.h) on the fused ops: each against the
// separate ops it stands for on the same backend, to the bit (LayerNorm and
// RMSNorm with their bf16 output, LayerNorm's backward added to a residual's
// gradient, the bias
// gradient with a bf16 copy, the loss's bf16 gradient, attention's bf16 output,
// and its bf16 gradients with their bias gradients; SwiGLU and RoPE writing
// bf16).
// Letters: m rows, c channels, V vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend_ops_support.h"

namespace dendrite::test {
namespace {

// The fused ops against the separate ops they stand for, on the same
// backend: the same bits (the separate ops are checked against the oracles
// in the harness's other programs). c = 20 takes the GPU's 4-wide path, 22
// the scalar one; 1100 rows span three blocks of a column sum.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST_P(BackendOps, FusedOpsGiveTheBitsOfTheSeparateOps) {
  const int m = 1100;
  for (int c : {20, 22}) {
    const std::string p = str(" c=", c);
    const Vf x = randn(m * c, 71, 2.0, 0.5), g = randn(c, 72, 0.2, 1.0), b = randn(c, 73, 0.1);
    const Vf dy = randn(m * c, 74), res = randn(m * c, 75), ones(c, 1.0f);
    Buffer<float> X = put(x), G = put(g), Bt = put(b), DY = put(dy), Mean = zeros<float>(m),
                  Rstd = zeros<float>(m), Y = zeros<float>(m * c), Scratch = zeros<float>(m * c);
    Buffer<double> S = zeros<double>(2 * m);
    Buffer<bf16> Yh = zeros<bf16>(m * c), Want = zeros<bf16>(m * c);
    be().layernorm_row_sums(S.data(), X.data(), {m, c, c});
    be().layernorm_apply(Y.data(), Mean.data(), Rstd.data(), S.data(), X.data(), G.data(),
                         Bt.data(), {m, c, c}, 1e-5f);
    be().to_bf16(Want.data(), Y.data(), int64_t(m) * c);
    be().layernorm_apply_bf16(Yh.data(), Scratch.data(), Mean.data(), Rstd.data(), S.data(),
                              X.data(), G.data(), Bt.data(), {m, c, c}, 1e-5f);
    EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "layernorm_apply_bf16" << p;
    Buffer<double> RowS = zeros<double>(2 * m);
    Buffer<float> RMean = zeros<float>(m), RRstd = zeros<float>(m);
    be().layernorm_rows_bf16(RowS.data(), Yh.data(), Scratch.data(), RMean.data(), RRstd.data(),
                             X.data(), G.data(), Bt.data(), {m, c, c}, 1e-5f);
    EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "layernorm_rows_bf16 y" << p;
    EXPECT_TRUE(same_bits(get(RowS), get(S))) << "layernorm_rows_bf16 sums" << p;
    EXPECT_TRUE(same_bits(get(RMean), get(Mean))) << "layernorm_rows_bf16 mean" << p;
    EXPECT_TRUE(same_bits(get(RRstd), get(Rstd))) << "layernorm_rows_bf16 rstd" << p;

    // RMSNorm's forward in one pass over whole rows, writing bf16
    Buffer<double> RmsS = zeros<double>(m), FRmsS = zeros<double>(m);
    Buffer<float> RmsR = zeros<float>(m), FRmsR = zeros<float>(m);
    be().rmsnorm_row_sums(RmsS.data(), X.data(), {m, c, c});
    be().rmsnorm_apply(Y.data(), RmsR.data(), RmsS.data(), X.data(), G.data(), {m, c, c}, 1e-5f);
    be().to_bf16(Want.data(), Y.data(), int64_t(m) * c);
    be().rmsnorm_rows_bf16(FRmsS.data(), Yh.data(), Scratch.data(), FRmsR.data(), X.data(),
                           G.data(), {m, c, c}, 1e-5f);
    EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "rmsnorm_rows_bf16 y" << p;
    EXPECT_TRUE(same_bits(get(FRmsS), get(RmsS))) << "rmsnorm_rows_bf16 sums" << p;
    EXPECT_TRUE(same_bits(get(FRmsR), get(RmsR))) << "rmsnorm_rows_bf16 rstd" << p;

    // the backward added to a residual's gradient, gain and bias gradients from ones
    be().layernorm_backward_sums(S.data(), DY.data(), X.data(), Mean.data(), Rstd.data(), G.data(),
                                 {m, c, c});
    Buffer<float> DX = zeros<float>(m * c), Res = put(res), Fused = put(res);
    Buffer<float> DG = put(ones), DB = put(ones), FDG = put(ones), FDB = put(ones);
    be().layernorm_backward_apply(DX.data(), DG.data(), DB.data(), S.data(), DY.data(), X.data(),
                                  Mean.data(), Rstd.data(), G.data(), {m, c, c});
    be().add_inplace(Res.data(), DX.data(), long(m) * c);
    be().layernorm_backward_apply_add(Fused.data(), Scratch.data(), FDG.data(), FDB.data(),
                                      S.data(), DY.data(), X.data(), Mean.data(), Rstd.data(),
                                      G.data(), {m, c, c});
    EXPECT_TRUE(same_bits(get(Fused), get(Res))) << "layernorm_backward_apply_add dres" << p;
    EXPECT_TRUE(same_bits(get(FDG), get(DG))) << "layernorm_backward_apply_add dgamma" << p;
    EXPECT_TRUE(same_bits(get(FDB), get(DB))) << "layernorm_backward_apply_add dbeta" << p;

    // the same in one pass over whole rows: the sums and dres to the bit,
    // dgamma and dbeta the same sums in the device's order (twice alike)
    std::vector<Vf> one_pass;
    for (int run = 0; run < 2; ++run) {
      Buffer<double> RowS = zeros<double>(2 * m);
      Buffer<float> Rows = put(res), RDG = put(ones), RDB = put(ones);
      be().layernorm_backward_rows_add(RowS.data(), Rows.data(), Scratch.data(), RDG.data(),
                                       RDB.data(), DY.data(), X.data(), Mean.data(), Rstd.data(),
                                       G.data(), {m, c, c});
      EXPECT_TRUE(same_bits(get(RowS), get(S))) << "layernorm_backward_rows_add sums" << p;
      EXPECT_TRUE(same_bits(get(Rows), get(Res))) << "layernorm_backward_rows_add dres" << p;
      expect_close(get(RDG), to_d(get(DG)), 1e-6, "layernorm_backward_rows_add dgamma" + p);
      expect_close(get(RDB), to_d(get(DB)), 1e-6, "layernorm_backward_rows_add dbeta" + p);
      Vf both = get(RDG);
      const Vf db = get(RDB);
      both.insert(both.end(), db.begin(), db.end());
      one_pass.push_back(both);
    }
    EXPECT_TRUE(same_bits(one_pass[0], one_pass[1])) << "layernorm_backward_rows_add runs" << p;

    // a bias gradient with its output gradient rounded
    Buffer<float> Col = put(ones), FCol = put(ones);
    be().to_bf16(Want.data(), DY.data(), int64_t(m) * c);
    be().add_column_sums(Col.data(), DY.data(), m, c);
    be().to_bf16_column_sums(Yh.data(), FCol.data(), DY.data(), m, c);
    EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "to_bf16_column_sums out" << p;
    EXPECT_TRUE(same_bits(get(FCol), get(Col))) << "to_bf16_column_sums db" << p;
  }
}

// LayerNorm's backward in one pass over whole rows, where a GPU block of it
// cannot keep a row (past 4 groups of 4 columns for each of 512 threads) and
// where one row's gain and bias partials would not fit in scratch: the two
// kernels, the same sums and dres.
// The bias gradient with its output gradient rounded, over columns that span
// several blocks of the kernels that go across columns (the sums of the row
// blocks' partials: 256 columns a block) and rows that span two row blocks:
// so that the race check with blocks together runs blocks side by side, and
// one above the other, of each kernel.
TEST_P(BackendOps, BiasSumsOverSeveralBlocksOfColumnsAndRowsGiveTheBitsOfTheSeparateOps) {
  const int m = 600, c = 264;
  const Vf dy = randn(m * c, 76), ones(c, 1.0f);
  Buffer<float> DY = put(dy), Col = put(ones), FCol = put(ones);
  Buffer<bf16> Yh = zeros<bf16>(m * c), Want = zeros<bf16>(m * c);
  be().to_bf16(Want.data(), DY.data(), int64_t(m) * c);
  be().add_column_sums(Col.data(), DY.data(), m, c);
  be().to_bf16_column_sums(Yh.data(), FCol.data(), DY.data(), m, c);
  EXPECT_TRUE(same_bits(get(Yh), get(Want))) << "to_bf16_column_sums out";
  EXPECT_TRUE(same_bits(get(FCol), get(Col))) << "to_bf16_column_sums db";
}

TEST_P(BackendOps, OnePassNormBackwardPastWhatABlockKeeps) {
  for (const auto& [mw, cw] : {std::pair{3, 8200}, std::pair{1, 64}}) {
    const Vf x = randn(mw * cw, 82, 2.0, 0.5), g = randn(cw, 83, 0.2, 1.0), dy = randn(mw * cw, 84),
             res = randn(mw * cw, 85);
    Buffer<float> X = put(x), G = put(g), Bt = put(g), DY = put(dy), Mean = zeros<float>(mw),
                  Rstd = zeros<float>(mw), Y = zeros<float>(mw * cw),
                  Scratch = zeros<float>(mw * cw), Res = put(res), Fused = put(res);
    Buffer<double> S = zeros<double>(2 * mw), RowS = zeros<double>(2 * mw);
    be().layernorm_row_sums(S.data(), X.data(), {mw, cw, cw});
    be().layernorm_apply(Y.data(), Mean.data(), Rstd.data(), S.data(), X.data(), G.data(),
                         Bt.data(), {mw, cw, cw}, 1e-5f);
    be().layernorm_backward_sums(S.data(), DY.data(), X.data(), Mean.data(), Rstd.data(), G.data(),
                                 {mw, cw, cw});
    Buffer<float> DG = zeros<float>(cw), DB = zeros<float>(cw), FDG = zeros<float>(cw),
                  FDB = zeros<float>(cw);
    be().layernorm_backward_apply_add(Res.data(), Scratch.data(), DG.data(), DB.data(), S.data(),
                                      DY.data(), X.data(), Mean.data(), Rstd.data(), G.data(),
                                      {mw, cw, cw});
    be().layernorm_backward_rows_add(RowS.data(), Fused.data(), Scratch.data(), FDG.data(),
                                     FDB.data(), DY.data(), X.data(), Mean.data(), Rstd.data(),
                                     G.data(), {mw, cw, cw});
    EXPECT_TRUE(same_bits(get(FDG), get(DG))) << "layernorm_backward_rows_add dgamma, " << mw;
    EXPECT_TRUE(same_bits(get(FDB), get(DB))) << "layernorm_backward_rows_add dbeta, " << mw;
    EXPECT_TRUE(same_bits(get(RowS), get(S)))
        << "layernorm_backward_rows_add sums, " << mw << "x" << cw;
    EXPECT_TRUE(same_bits(get(Fused), get(Res)))
        << "layernorm_backward_rows_add dres, " << mw << "x" << cw;
  }
}

// The loss's and attention's fused ops against their separate ops.
TEST_P(BackendOps, FusedLossAndAttentionGiveTheBitsOfTheSeparateOps) {
  // dlogits rounded to bf16, over a vocabulary part with padding ids and a zero weight
  const int rows = 19, V = 61, Vloc = 32, v0 = 32;
  const Vf logits = randn(rows * Vloc, 76, 3.0), lse = randn(rows, 77, 0.5, 4.0);
  Vf weight(rows, 1.0f);
  weight[3] = 0.0f, weight[7] = 0.5f;
  Buffer<float> Lg = put(logits), Lf = put(logits), Lse = put(lse), Wt = put(weight);
  Buffer<int32_t> Tg = put(random_tokens(rows, V, 78));
  Buffer<bf16> Dh = zeros<bf16>(rows * Vloc), Want = zeros<bf16>(rows * Vloc);
  be().ce_dlogits(Lg.data(), Lse.data(), Tg.data(), Wt.data(), 17.5, {rows, Vloc, v0, V});
  be().to_bf16(Want.data(), Lg.data(), int64_t(rows) * Vloc);
  be().ce_dlogits_bf16(Dh.data(), Lf.data(), Lse.data(), Tg.data(), Wt.data(), 17.5,
                       {rows, Vloc, v0, V});
  EXPECT_TRUE(same_bits(get(Dh), get(Want))) << "ce_dlogits_bf16";

  // The statistics and the bf16 dlogits in one pass, over the whole vocabulary
  // of 61 ids in 64 columns (3 padding); 1500 columns take several strides of
  // a row block. Against ce_local_stats, ce_combine over one part and
  // ce_dlogits_bf16: the same stats, lse, loss and dlogits.
  for (const auto& [Vw, Vp] : {std::pair{61, 64}, std::pair{1500, 1500}}) {
    const std::string p = str(" V=", Vw, " Vloc=", Vp);
    const Vf lw = randn(rows * Vp, 82, 3.0);
    Buffer<float> A = put(lw), B = put(lw), St = zeros<float>(2 * rows),
                  FSt = zeros<float>(2 * rows), L1 = zeros<float>(rows), L2 = zeros<float>(rows);
    Buffer<int32_t> T = put(random_tokens(rows, Vw, 83));
    Buffer<bf16> Sep = zeros<bf16>(rows * Vp), One = zeros<bf16>(rows * Vp);
    Buffer<double> Tot1 = put(std::vector<double>{1.5}), Tot2 = put(std::vector<double>{1.5});
    const ops::VocabShape vs{rows, Vp, 0, Vw};
    be().ce_local_stats(St.data(), A.data(), T.data(), Wt.data(), vs);
    be().ce_combine(L1.data(), St.data(), Wt.data(), rows, 1, Tot1.data());
    be().ce_dlogits_bf16(Sep.data(), A.data(), L1.data(), T.data(), Wt.data(), 17.5, vs);
    be().ce_stats_dlogits_bf16(FSt.data(), One.data(), B.data(), T.data(), Wt.data(), 17.5, vs);
    be().ce_combine(L2.data(), FSt.data(), Wt.data(), rows, 1, Tot2.data());
    EXPECT_TRUE(same_bits(get(FSt), get(St))) << "ce_stats_dlogits_bf16 stats" << p;
    EXPECT_TRUE(same_bits(get(One), get(Sep))) << "ce_stats_dlogits_bf16 dlogits" << p;
    EXPECT_TRUE(same_bits(get(L2), get(L1))) << "ce_stats_dlogits_bf16 lse" << p;
    EXPECT_TRUE(same_bits(get(Tot2), get(Tot1))) << "ce_stats_dlogits_bf16 loss" << p;
  }
  // A split vocabulary is refused, naming the op and the way that works.
  Buffer<float> Stats = zeros<float>(2 * rows);
  try {
    be().ce_stats_dlogits_bf16(Stats.data(), Dh.data(), Lf.data(), Tg.data(), Wt.data(), 17.5,
                               {rows, Vloc, v0, V});
    ADD_FAILURE() << "ce_stats_dlogits_bf16 took a vocabulary part";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ce_stats_dlogits_bf16: needs the whole vocabulary"),
              std::string::npos)
        << e.what();
  }

  // attention's output in bf16: 2 sequences of 37 (a partial tile), 4 heads of 16 over 2 kv heads
  const ops::AttentionShape s{2, 37, 4, 2, 16, 64, 32, 64};
  const int qkv_rows = s.B * s.T;
  Buffer<bf16> Q = put(rounded(randn(qkv_rows * s.q_stride, 79))),
               K = put(rounded(randn(qkv_rows * s.kv_stride, 80))),
               Vv = put(rounded(randn(qkv_rows * s.kv_stride, 81)));
  Buffer<float> O = zeros<float>(qkv_rows * s.out_stride),
                Os = zeros<float>(qkv_rows * s.out_stride), L = zeros<float>(s.B * s.NH * s.T),
                Ls = zeros<float>(s.B * s.NH * s.T);
  Buffer<bf16> Oh = zeros<bf16>(qkv_rows * s.out_stride),
               OWant = zeros<bf16>(qkv_rows * s.out_stride);
  be().attention_forward(O.data(), L.data(), Q.data(), K.data(), Vv.data(), s);
  be().to_bf16(OWant.data(), O.data(), int64_t(qkv_rows) * s.out_stride);
  be().attention_forward_bf16(Oh.data(), Os.data(), Ls.data(), Q.data(), K.data(), Vv.data(), s);
  EXPECT_TRUE(same_bits(get(Oh), get(OWant))) << "attention_forward_bf16 out";
  EXPECT_TRUE(same_bits(get(Ls), get(L))) << "attention_forward_bf16 lse";
}

// The columns [c0, c0 + n) of x [B*T rows of w] summed in ops/attention.h's
// order for the bias gradients: runs of kAttentionSumRows rows of each
// sequence, each row by row, then the runs one after another.
Vf run_sums(const Vf& x, int w, int c0, int n, int B, int T) {
  Vf total(n);
  bool first = true;
  for (int b = 0; b < B; ++b)
    for (int t0 = 0; t0 < T; t0 += ops::kAttentionSumRows) {
      for (int j = 0; j < n; ++j) {
        float run = x[size_t(b * T + t0) * w + c0 + j];
        for (int t = t0 + 1; t < std::min(T, t0 + ops::kAttentionSumRows); ++t)
          run += x[size_t(b * T + t) * w + c0 + j];
        total[j] = first ? run : total[j] + run;
      }
      first = false;
    }
  return total;
}

// attention's backward into the bf16 operand of q, k and v's one product
// (rows of q | k | v), with that product's bias gradient: against
// attention_backward, to_bf16 and the sums in the op's order. 2 sequences of
// 150 rows (runs of 64, 64 and 22) with 4 heads of 16 over 2 KV heads; one
// sequence of 70 with 2 heads of 80 (a block's head padded to 128).
// A norm's backward over whole rows added into the residual's gradient, and
// its form that also writes the new gradient as the bf16 operand of the
// product below, with that product's bias sums: LayerNorm's and RMSNorm's,
// against their backward sums and apply, add_inplace, to_bf16 and
// add_column_sums. The sums, dres and the bf16 copy to the bit; the gain,
// norm bias and bias gradients the same sums in the device's order (twice
// alike). 600 rows of 20 and 22 columns take a GPU's one pass in 4-wide and
// scalar forms; 4 rows fit the gain's and bias's partials in scratch but not
// the third set, so where a bias is given the separate kernels run (as they
// do for widths past what a block keeps).
// SwiGLU and RoPE writing the products' bf16 operands alone, against the
// fp32 op then to_bf16. SwiGLU: n = 1101, at the buffers' start (the GPU's
// 4-wide path and its scalar tail) and one value in (every access scalar);
// then gate and up side by side in one product's rows.
// RoPE: rows of q's and k's heads, then v's values (a whole head, or a head
// and one more value), forward from position 4 and backward.
TEST_P(BackendOps, SwigluAndRopeWriteTheProductsOperandsInBf16) {
  const long n = 1101;
  const Vf gate = randn(n + 1, 91, 2.0), up = randn(n + 1, 92), dy = randn(n + 1, 93);
  for (int at : {0, 1}) {
    const std::string p = str(" at ", at);
    Buffer<float> G = put(gate), U = put(up), DY = put(dy), Y = zeros<float>(n + 1),
                  DG = zeros<float>(n + 1), DU = zeros<float>(n + 1), Scratch = zeros<float>(n + 1),
                  Scratch2 = zeros<float>(n + 1);
    Buffer<bf16> Want = zeros<bf16>(n + 1), Want2 = zeros<bf16>(n + 1), Low = zeros<bf16>(n + 1),
                 Low2 = zeros<bf16>(n + 1);
    be().swiglu_forward(Y.data() + at, G.data() + at, U.data() + at, n);
    be().to_bf16(Want.data() + at, Y.data() + at, n);
    const ops::GluRows flat{1, n, n};
    be().swiglu_forward_bf16(Low.data() + at, Scratch.data() + at, G.data() + at, U.data() + at,
                             flat);
    EXPECT_TRUE(same_bits(get(Low), get(Want))) << "swiglu_forward_bf16" << p;
    be().swiglu_backward(DG.data() + at, DU.data() + at, DY.data() + at, G.data() + at,
                         U.data() + at, n);
    be().to_bf16(Want.data() + at, DG.data() + at, n);
    be().to_bf16(Want2.data() + at, DU.data() + at, n);
    be().swiglu_backward_bf16(Low.data() + at, Low2.data() + at, Scratch.data() + at,
                              Scratch2.data() + at, DY.data() + at, G.data() + at, U.data() + at,
                              flat);
    EXPECT_TRUE(same_bits(get(Low), get(Want))) << "swiglu_backward_bf16 dgate" << p;
    EXPECT_TRUE(same_bits(get(Low2), get(Want2))) << "swiglu_backward_bf16 dup" << p;
  }
  // gate and up side by side in one product's rows [rows, 2w] (up at gate +
  // w), their gradients so too: against the flat ops a row at a time. w = 12
  // takes a GPU's 4-wide path, w = 6 its scalar one.
  for (const int w : {12, 6}) {
    const long rows = 37, cols = 2L * w;
    const std::string p = str(" rows of ", w, " in rows of ", cols);
    const Vf gu = randn(rows * cols, 95, 2.0), dyr = randn(rows * w, 96);
    Buffer<float> GU = put(gu), DY = put(dyr), Y = zeros<float>(rows * w),
                  DGU = zeros<float>(rows * cols), Scratch = zeros<float>(rows * cols);
    Buffer<bf16> Want = zeros<bf16>(rows * cols), Low = zeros<bf16>(rows * cols);
    const ops::GluRows s{rows, w, cols};
    for (long r = 0; r < rows; ++r) {
      float* g = GU.data() + r * cols;
      be().swiglu_forward(Y.data() + r * w, g, g + w, w);
      be().to_bf16(Want.data() + r * w, Y.data() + r * w, w);
    }
    be().swiglu_forward_bf16(Low.data(), Scratch.data(), GU.data(), GU.data() + w, s);
    EXPECT_TRUE(same_bits(get(Low), get(Want))) << "swiglu_forward_bf16" << p;
    for (long r = 0; r < rows; ++r) {
      float *g = GU.data() + r * cols, *d = DGU.data() + r * cols;
      be().swiglu_backward(d, d + w, DY.data() + r * w, g, g + w, w);
    }
    be().to_bf16(Want.data(), DGU.data(), rows * cols);
    be().swiglu_backward_bf16(Low.data(), Low.data() + w, Scratch.data(), Scratch.data() + w,
                              DY.data(), GU.data(), GU.data() + w, s);
    EXPECT_TRUE(same_bits(get(Low), get(Want))) << "swiglu_backward_bf16" << p;
  }
  for (const auto& [hs, tail] : {std::pair{8, 8}, std::pair{6, 7}}) {
    const int B = 3, T = 5, heads = 3, w = heads * hs + tail;
    ops::RopeSpec spec;
    spec.theta = 100.0f;
    const Vf x = randn(long(B) * T * w, 94, 1.5);
    for (const bool inverse : {false, true}) {
      const std::string p = str(inverse ? " backward" : " forward", " hs=", hs, " w=", w);
      const ops::RopeShape s{B, T, heads, hs, w, inverse ? 0 : 4};
      Buffer<float> Sep = put(x), Fused = put(x);
      Buffer<bf16> Want = zeros<bf16>(x.size()), Low = zeros<bf16>(x.size()),
                   Plain = zeros<bf16>(x.size());
      if (inverse)
        be().rope_backward(Sep.data(), s, spec);
      else
        be().rope_forward(Sep.data(), s, spec);
      be().to_bf16(Want.data(), Sep.data(), int64_t(x.size()));
      if (inverse)
        be().rope_backward_bf16(Low.data(), Fused.data(), s, spec);
      else
        be().rope_forward_bf16(Low.data(), Fused.data(), s, spec);
      EXPECT_TRUE(same_bits(get(Low), get(Want))) << "rope_bf16" << p;
      be().to_bf16(Plain.data(), put(x).data(), int64_t(x.size()));
      EXPECT_FALSE(same_bits(get(Low), get(Plain))) << "the heads turned" << p;
    }
  }
}

TEST_P(BackendOps, NormBackwardWritesTheNextProductsBf16Operand) {
  for (const bool ln : {true, false})
    for (const auto& [m, c] : {std::pair{600, 20}, std::pair{600, 22}, std::pair{4, 24}}) {
      const std::string norm = ln ? "layernorm" : "rmsnorm";
      const Vf x = randn(m * c, 91, 2.0, 0.5), g = randn(c, 92, 0.2, 1.0), b = randn(c, 93, 0.1);
      const Vf dy = randn(m * c, 94), res = randn(m * c, 95), ones(c, 1.0f);
      Buffer<float> X = put(x), G = put(g), Bt = put(b), DY = put(dy), Mean = zeros<float>(m),
                    Rstd = zeros<float>(m), Y = zeros<float>(m * c), Scratch = zeros<float>(m * c);
      const int ns = ln ? 2 : 1;  // row sums a row
      Buffer<double> S = zeros<double>(ns * m);
      const ops::NormShape s{m, c, c};
      if (ln) {
        be().layernorm_row_sums(S.data(), X.data(), s);
        be().layernorm_apply(Y.data(), Mean.data(), Rstd.data(), S.data(), X.data(), G.data(),
                             Bt.data(), s, 1e-5f);
      } else {
        be().rmsnorm_row_sums(S.data(), X.data(), s);
        be().rmsnorm_apply(Y.data(), Rstd.data(), S.data(), X.data(), G.data(), s, 1e-5f);
      }
      // the separate ops
      Buffer<double> WantS = zeros<double>(ns * m);
      Buffer<float> Res = put(res), DX = zeros<float>(m * c), DG = put(ones), DB = put(ones),
                    Col = put(ones);
      Buffer<bf16> Want = zeros<bf16>(m * c);
      if (ln) {
        be().layernorm_backward_sums(WantS.data(), DY.data(), X.data(), Mean.data(), Rstd.data(),
                                     G.data(), s);
        be().layernorm_backward_apply(DX.data(), DG.data(), DB.data(), WantS.data(), DY.data(),
                                      X.data(), Mean.data(), Rstd.data(), G.data(), s);
      } else {
        be().rmsnorm_backward_sums(WantS.data(), DY.data(), X.data(), G.data(), s);
        be().rmsnorm_backward_apply(DX.data(), DG.data(), WantS.data(), DY.data(), X.data(),
                                    Rstd.data(), G.data(), s);
      }
      be().add_inplace(Res.data(), DX.data(), long(m) * c);
      be().to_bf16(Want.data(), Res.data(), int64_t(m) * c);
      be().add_column_sums(Col.data(), Res.data(), m, c);
      std::vector<Vf> runs;  // with a bias twice, then without, then no bf16 output
      for (const int form : {0, 0, 1, 2}) {
        const bool bias = form == 0, low = form < 2;
        const std::string p = str(" ", norm, " ", m, "x", c,
                                  low ? (bias ? " with a bias" : " without a bias") : " no bf16",
                                  ", run ", runs.size());
        Buffer<double> FS = zeros<double>(ns * m);
        Buffer<float> FRes = put(res), FDG = put(ones), FDB = put(ones), FCol = put(ones);
        Buffer<bf16> Low = zeros<bf16>(m * c);
        const ops::ResidualGradBf16 next{Low.data(), bias ? FCol.data() : nullptr};
        if (ln && low)
          be().layernorm_backward_rows_add_bf16(next, FS.data(), FRes.data(), Scratch.data(),
                                                FDG.data(), FDB.data(), DY.data(), X.data(),
                                                Mean.data(), Rstd.data(), G.data(), s);
        else if (ln)
          be().layernorm_backward_rows_add(FS.data(), FRes.data(), Scratch.data(), FDG.data(),
                                           FDB.data(), DY.data(), X.data(), Mean.data(),
                                           Rstd.data(), G.data(), s);
        else if (low)
          be().rmsnorm_backward_rows_add_bf16(next, FS.data(), FRes.data(), Scratch.data(),
                                              FDG.data(), DY.data(), X.data(), Rstd.data(),
                                              G.data(), s);
        else
          be().rmsnorm_backward_rows_add(FS.data(), FRes.data(), Scratch.data(), FDG.data(),
                                         DY.data(), X.data(), Rstd.data(), G.data(), s);
        EXPECT_TRUE(same_bits(get(FS), get(WantS))) << "sums" << p;
        EXPECT_TRUE(same_bits(get(FRes), get(Res))) << "dres" << p;
        if (low) {
          EXPECT_TRUE(same_bits(get(Low), get(Want))) << "bf16 operand" << p;
        }
        expect_close(get(FDG), to_d(get(DG)), 1e-6, "dgamma" + p);
        expect_close(get(FDB), to_d(get(DB)), 1e-6, "dbeta" + p);  // ones for RMSNorm
        if (bias)
          expect_close(get(FCol), to_d(get(Col)), 1e-6, "the bias gradient" + p);
        else
          EXPECT_TRUE(same_bits(get(FCol), ones)) << "no bias given, none written" << p;
        Vf sums = get(FDG);
        for (const Vf& more : {get(FDB), get(FCol)})
          sums.insert(sums.end(), more.begin(), more.end());
        runs.push_back(sums);
      }
      EXPECT_TRUE(same_bits(runs[0], runs[1]))
          << "the gain, norm bias and bias gradients, run to run, " << norm << " " << m << "x" << c;
    }
}

TEST_P(BackendOps, AttentionBackwardInBf16GivesTheBitsOfTheSeparateOps) {
  for (const auto& [B, T, NH, NKV, hs] :
       {std::tuple{2, 150, 4, 2, 16}, std::tuple{1, 70, 2, 2, 80}}) {
    const std::string p = str(" B=", B, " T=", T, " NH=", NH, " NKV=", NKV, " hs=", hs);
    const int qd = NH * hs, kvd = NKV * hs, w = qd + 2 * kvd, rows = B * T;
    const ops::AttentionShape s{B, T, NH, NKV, hs, w, w, qd};
    Buffer<bf16> QKV = put(rounded(randn(rows * w, 91)));
    const bf16* q = QKV.data();
    Buffer<float> O = zeros<float>(rows * qd), L = zeros<float>(B * NH * T),
                  DO = put(randn(rows * qd, 92));
    Buffer<bf16> Oh = zeros<bf16>(rows * qd);
    be().attention_forward_bf16(Oh.data(), O.data(), L.data(), q, q + qd, q + qd + kvd, s);

    Buffer<float> F = zeros<float>(rows * w);
    be().attention_backward(F.data(), F.data() + qd, F.data() + qd + kvd, DO.data(), Oh.data(),
                            L.data(), q, q + qd, q + qd + kvd, s);
    Buffer<bf16> Want = zeros<bf16>(rows * w);
    be().to_bf16(Want.data(), F.data(), int64_t(rows) * w);
    const Vf f = get(F), db0 = randn(w, 93);
    Vf want_db = db0;
    for (const auto& [c0, n] : {std::pair{0, qd}, std::pair{qd, kvd}, std::pair{qd + kvd, kvd}}) {
      const Vf sums = run_sums(f, w, c0, n, B, T);
      for (int j = 0; j < n; ++j) want_db[c0 + j] += sums[j];
    }

    for (const bool bias : {true, false}) {
      Buffer<bf16> D = zeros<bf16>(rows * w);
      Buffer<float> Scratch = zeros<float>(rows * w), Db = put(db0);
      ops::AttentionGradsBf16 g{D.data(),       D.data() + qd,       D.data() + qd + kvd,
                                Scratch.data(), Scratch.data() + qd, Scratch.data() + qd + kvd};
      if (bias) g.db_q = Db.data(), g.db_k = Db.data() + qd, g.db_v = Db.data() + qd + kvd;
      be().attention_backward_bf16(g, DO.data(), Oh.data(), L.data(), q, q + qd, q + qd + kvd, s);
      const std::string how = p + (bias ? " with the bias" : " without a bias");
      EXPECT_TRUE(same_bits(get(D), get(Want))) << "attention_backward_bf16 gradients" << how;
      EXPECT_TRUE(same_bits(get(Db), bias ? want_db : db0)) << "attention_backward_bf16 db" << how;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(kCpuTarget), target_name);
INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps, ::testing::ValuesIn(kEmulatedTargets), target_name);
#ifdef DENDRITE_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(kCudaTarget), target_name);
#endif

}  // namespace
}  // namespace dendrite::test
