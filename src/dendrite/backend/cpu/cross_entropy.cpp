// CPU pieces of the vocabulary-parallel softmax cross-entropy. Letters: rows
// of a chunk of logits, V vocabulary; a rank of a vocabulary split holds Vloc
// logit columns starting at id v0 (columns at ids V and above are padding:
// never predicted, probability 0, gradient 0).
//
// ce_local_stats works in parallel over rows (each row's log-sum-exp and
// target logit); ce_combine sums the row losses in row order; ce_dlogits
// turns the same buffer into dlogits, in parallel over rows;
// ce_stats_dlogits_bf16 runs the first and the last. No reduction
// depends on the thread count, so the result is the same on every run.
#include <algorithm>
#include <cmath>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/backend/exact_math.h"
#include "dendrite/core/check.h"

namespace dendrite::cpu {
namespace {

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
    for (int j = j0; j < j1; ++j) part += exact::exp_approx(row[j] - mx);
    sum += part;
  }
  return mx + std::log(sum);
}

// Columns of [v0, v0 + Vloc) that hold real ids (below V): [0, n)
int real_columns(int Vloc, int v0, int V) {
  const long n = static_cast<long>(V) - v0;
  return static_cast<int>(std::clamp(n, 0L, static_cast<long>(Vloc)));
}

// logits -> dlogits (ops/cross_entropy.h: ce_dlogits), row r's lse at lse[r * lse_stride].
void dlogits_in_place(float* logits, const float* lse, int lse_stride, const int32_t* targets,
                      const float* weight, double denominator, const ops::VocabShape& s) {
  const int rows = s.rows, Vloc = s.Vloc, v0 = s.v0;
  const int n = real_columns(Vloc, v0, s.V);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    float* row = logits + static_cast<long>(r) * Vloc;
    const double wt = weight ? weight[r] : 1.0;
    if (wt == 0.0) {
      std::fill(row, row + Vloc, 0.0f);
      continue;
    }
    const float scale = static_cast<float>(wt / denominator), l = lse[long(r) * lse_stride];
#pragma omp simd
    for (int j = 0; j < n; ++j) row[j] = exact::exp_approx(row[j] - l) * scale;
    std::fill(row + n, row + Vloc, 0.0f);  // padding ids
    const int t = targets[r] - v0;
    if (t >= 0 && t < n) row[t] -= scale;
  }
}

}  // namespace

void CpuBackend::do_ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                                   const float* weight, const ops::VocabShape& s) {
  const int rows = s.rows, Vloc = s.Vloc, v0 = s.v0, V = s.V;
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

void CpuBackend::do_ce_combine(float* lse, const float* gathered, const float* weight, int rows,
                               int parts, double* total_out) {
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
  *total_out += total;
}

void CpuBackend::do_ce_dlogits(float* logits, const float* lse, const int32_t* targets,
                               const float* weight, double denominator, const ops::VocabShape& s) {
  dlogits_in_place(logits, lse, 1, targets, weight, denominator, s);
}

void CpuBackend::do_ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse,
                                    const int32_t* targets, const float* weight, double denominator,
                                    const ops::VocabShape& s) {
  do_ce_dlogits(logits, lse, targets, weight, denominator, s);
  do_to_bf16(dlogits, logits, int64_t(s.rows) * s.Vloc);
}

// The separate ops' passes, in the same order (the CPU's gain would be its
// caches', on a small share of a CPU step; the GPU's is a read from HBM).
void CpuBackend::do_ce_stats_dlogits_bf16(float* stats, bf16* dlogits, float* logits,
                                          const int32_t* targets, const float* weight,
                                          double denominator, const ops::VocabShape& s) {
  do_ce_local_stats(stats, logits, targets, weight, s);
  dlogits_in_place(logits, stats, 2, targets, weight, denominator, s);
  do_to_bf16(dlogits, logits, int64_t(s.rows) * s.Vloc);
}

}  // namespace dendrite::cpu
