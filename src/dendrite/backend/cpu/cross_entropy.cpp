// CPU LM head fused with softmax cross-entropy, one chunk of rows at a time,
// and the vocabulary-parallel pieces it is built from. m rows (B*T), C
// channels, V vocabulary, Vp padded vocabulary (columns V..Vp-1 are never
// predicted: probability 0, gradient 0); a rank of a vocabulary split holds
// Vloc logit columns starting at id v0.
//
// Per chunk: logits [rows, Vp] = x_chunk * w^T (gemm); ce_local_stats (each
// row's log-sum-exp and target logit, in parallel over rows); ce_combine
// (over one part: the row losses, summed in row order); ce_dlogits turns the
// same buffer into dlogits, which feeds dx_chunk = dlogits * w and
// dw += dlogits^T * x_chunk. No reduction depends on the thread count, so the
// result is the same on every run.
#include "dendrite/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dendrite/backend/cpu/fast_math.h"
#include "dendrite/core/check.h"
#include "dendrite/ops/matmul.h"

namespace dendrite::ops {
namespace {

void check_inputs(const float* dx, const float* dw, const int32_t* targets, double denominator,
                  const CrossEntropyShape& s, const float* scratch) {
  const char* op = "lm_head_cross_entropy";
  DENDRITE_CHECK(s.m >= 0 && s.C > 0 && s.V > 0 && s.Vp >= s.V, op,
                 ": need m >= 0, C > 0 and 0 < V <= Vp, got m=", s.m, " C=", s.C, " V=", s.V,
                 " Vp=", s.Vp);
  DENDRITE_CHECK(s.chunk_rows > 0, op, ": chunk_rows=", s.chunk_rows, " must be positive");
  DENDRITE_CHECK(std::isfinite(denominator) && denominator > 0.0, op, ": denominator=", denominator,
                 " must be a positive count of supervised tokens");
  DENDRITE_CHECK(scratch != nullptr, op,
                 ": scratch of chunk_rows*Vp=", static_cast<long>(s.chunk_rows) * s.Vp,
                 " floats is required");
  DENDRITE_CHECK(dx == nullptr || dw != nullptr, op,
                 ": dx is given but dw is null; pass both gradients or neither");
  for (int r = 0; r < s.m; ++r) {
    DENDRITE_CHECK(targets[r] >= 0 && targets[r] < s.V, op, ": target of row ", r, " is ",
                   targets[r], ", outside [0, V=", s.V,
                   "); check the tokenizer's vocabulary against the model's");
  }
}

// log sum_j exp(row[j]) over j in [0, n), n > 0: max first, then the sum of
// exp(row - max) in float over blocks of 1024 (vectorised), blocks in double.
double row_logsumexp(const float* row, int n) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  double sum = 0.0;
  for (int j0 = 0; j0 < n; j0 += 1024) {
    const int j1 = std::min(n, j0 + 1024);
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (int j = j0; j < j1; ++j) part += cpu::exp_approx(row[j] - mx);
    sum += part;
  }
  return mx + std::log(sum);
}

// Columns of [v0, v0 + Vloc) that hold real ids (below V): [0, n)
int real_columns(int Vloc, int v0, int V) {
  const long n = static_cast<long>(V) - v0;
  return static_cast<int>(std::clamp(n, 0L, static_cast<long>(Vloc)));
}

void check_part(const char* op, int rows, int Vloc, int v0, int V) {
  DENDRITE_CHECK(rows >= 0 && Vloc > 0 && v0 >= 0 && V > 0, op,
                 ": need rows >= 0, Vloc > 0, v0 >= 0 and V > 0, got rows=", rows, " Vloc=", Vloc,
                 " v0=", v0, " V=", V);
}

}  // namespace

void ce_local_stats(float* stats, const float* logits, const int32_t* targets, const float* weight,
                    int rows, int Vloc, int v0, int V) {
  check_part("ce_local_stats", rows, Vloc, v0, V);
  for (int r = 0; r < rows; ++r) {
    DENDRITE_CHECK(targets[r] >= 0 && targets[r] < V, "ce_local_stats: target of row ", r, " is ",
                   targets[r], ", outside [0, V=", V,
                   "); check the tokenizer's vocabulary against the model's");
  }
  const int n = real_columns(Vloc, v0, V);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<long>(r) * Vloc;
    float* st = stats + 2L * r;
    if (weight && weight[r] == 0.0f) {
      st[0] = st[1] = 0.0f;
      continue;
    }
    const int t = targets[r] - v0;  // column of the target, if this rank holds it
    st[0] = n > 0 ? static_cast<float>(row_logsumexp(row, n)) : -INFINITY;
    st[1] = t >= 0 && t < Vloc ? row[t] : 0.0f;
  }
}

double ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts) {
  DENDRITE_CHECK(rows >= 0 && parts >= 1,
                 "ce_combine: need rows >= 0 and parts >= 1, got rows=", rows, " parts=", parts,
                 "; parts is the size of the vocabulary split");
  const long part_stride = 2L * rows;  // gathered [parts, rows, 2]
  double total = 0.0;                  // summed in row order
  for (int r = 0; r < rows; ++r) {
    double mx = -INFINITY, target = 0.0;
    for (int p = 0; p < parts; ++p) {
      mx = std::max(mx, static_cast<double>(gathered[p * part_stride + 2L * r]));
      target += gathered[p * part_stride + 2L * r + 1];
    }
    double l = mx;  // exact for one part; -inf when no part holds a real id
    if (parts > 1 && std::isfinite(mx)) {
      double sum = 0.0;
      for (int p = 0; p < parts; ++p) sum += std::exp(gathered[p * part_stride + 2L * r] - mx);
      l = mx + std::log(sum);
    }
    lse[r] = static_cast<float>(l);
    const double wt = weight ? weight[r] : 1.0;
    if (wt != 0.0) total += wt * (l - target);
  }
  return total;
}

void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                double denominator, int rows, int Vloc, int v0, int V) {
  check_part("ce_dlogits", rows, Vloc, v0, V);
  DENDRITE_CHECK(std::isfinite(denominator) && denominator > 0.0,
                 "ce_dlogits: denominator=", denominator,
                 " must be a positive count of supervised tokens");
  const int n = real_columns(Vloc, v0, V);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    float* row = logits + static_cast<long>(r) * Vloc;
    const double wt = weight ? weight[r] : 1.0;
    if (wt == 0.0) {
      std::fill(row, row + Vloc, 0.0f);
      continue;
    }
    const float scale = static_cast<float>(wt / denominator), l = lse[r];
#pragma omp simd
    for (int j = 0; j < n; ++j) row[j] = cpu::exp_approx(row[j] - l) * scale;
    std::fill(row + n, row + Vloc, 0.0f);  // padding ids
    const int t = targets[r] - v0;
    if (t >= 0 && t < n) row[t] -= scale;
  }
}

double lm_head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                             const int32_t* targets, const float* weight, double denominator,
                             const CrossEntropyShape& s, float* scratch) {
  check_inputs(dx, dw, targets, denominator, s, scratch);
  const bool grad = dx != nullptr;
  const int max_rows = std::min(s.chunk_rows, s.m);
  std::vector<float> stats(2L * max_rows), lse(max_rows);  // [rows, 2], [rows] of a chunk
  double total = 0.0;
  for (int r0 = 0; r0 < s.m; r0 += s.chunk_rows) {
    const int rows = std::min(s.chunk_rows, s.m - r0);
    const float* xc = x + static_cast<long>(r0) * s.C;  // [rows, C]
    const int32_t* tc = targets + r0;
    const float* wc = weight ? weight + r0 : nullptr;
    gemm(false, true, rows, s.Vp, s.C, 1.0f, xc, s.C, w, s.C, 0.0f, scratch, s.Vp);
    ce_local_stats(stats.data(), scratch, tc, wc, rows, s.Vp, 0, s.V);
    total += ce_combine(lse.data(), stats.data(), wc, rows, 1);
    if (grad) {
      ce_dlogits(scratch, lse.data(), tc, wc, denominator, rows, s.Vp, 0, s.V);
      // dx_chunk [rows, C] = dlogits [rows, Vp] * w [Vp, C];  dw [Vp, C] += dlogits^T * x_chunk
      gemm(false, false, rows, s.C, s.Vp, 1.0f, scratch, s.Vp, w, s.C, 0.0f,
           dx + static_cast<long>(r0) * s.C, s.C);
      gemm(true, false, s.Vp, s.C, rows, 1.0f, scratch, s.Vp, xc, s.C, 1.0f, dw, s.C);
    }
  }
  return total / denominator;
}

void lm_head_logits(float* logits, const float* x, const float* w, int m, int C, int V) {
  DENDRITE_CHECK(m >= 0 && C > 0 && V > 0, "lm_head_logits: need m >= 0, C > 0, V > 0, got m=", m,
                 " C=", C, " V=", V);
  gemm(false, true, m, V, C, 1.0f, x, C, w, C, 0.0f, logits, V);
}

}  // namespace dendrite::ops
