// CPU LM head fused with softmax cross-entropy, one chunk of rows at a time.
// m rows (B*T), C channels, V vocabulary, Vp padded vocabulary (columns
// V..Vp-1 are never predicted: probability 0, gradient 0).
//
// Per chunk: logits [rows, Vp] = x_chunk * w^T (gemm); each row's softmax
// statistics and loss term in parallel; then, for the backward, the same
// buffer becomes dlogits and feeds dx_chunk = dlogits * w and
// dw += dlogits^T * x_chunk. Row losses are summed in row order, so the
// result does not depend on the thread count.
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

// One row of logits [Vp]: returns wt * (logsumexp - logit[target]). With grad,
// rewrites the row as dlogits = (softmax - onehot(target)) * wt / denominator.
double row_loss(float* logits, int V, int Vp, int target, float wt, double denominator, bool grad) {
  if (wt == 0.0f) {
    if (grad) std::fill(logits, logits + Vp, 0.0f);
    return 0.0;
  }
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < V; ++j) mx = std::max(mx, logits[j]);
  const float target_logit = logits[target];
  // Sum in float over blocks of 1024 (vectorised), blocks in double.
  double sum = 0.0;
  for (int j0 = 0; j0 < V; j0 += 1024) {
    const int j1 = std::min(V, j0 + 1024);
    float part = 0.0f;
    if (grad) {
#pragma omp simd reduction(+ : part)
      for (int j = j0; j < j1; ++j) {
        logits[j] = cpu::exp_approx(logits[j] - mx);
        part += logits[j];
      }
    } else {
#pragma omp simd reduction(+ : part)
      for (int j = j0; j < j1; ++j) part += cpu::exp_approx(logits[j] - mx);
    }
    sum += part;
  }
  const double loss = static_cast<double>(wt) * (mx + std::log(sum) - target_logit);
  if (grad) {
    const float g = static_cast<float>(wt / denominator);
    const float pscale = static_cast<float>(wt / denominator / sum);
#pragma omp simd
    for (int j = 0; j < V; ++j) logits[j] *= pscale;
    logits[target] -= g;
    std::fill(logits + V, logits + Vp, 0.0f);
  }
  return loss;
}

}  // namespace

double lm_head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                             const int32_t* targets, const float* weight, double denominator,
                             const CrossEntropyShape& s, float* scratch) {
  check_inputs(dx, dw, targets, denominator, s, scratch);
  const bool grad = dx != nullptr;
  std::vector<double> losses(std::min(s.chunk_rows, s.m));  // [rows] of the current chunk
  double total = 0.0;
  for (int r0 = 0; r0 < s.m; r0 += s.chunk_rows) {
    const int rows = std::min(s.chunk_rows, s.m - r0);
    const float* xc = x + static_cast<long>(r0) * s.C;  // [rows, C]
    gemm(false, true, rows, s.Vp, s.C, 1.0f, xc, s.C, w, s.C, 0.0f, scratch, s.Vp);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; ++i) {
      const float wt = weight ? weight[r0 + i] : 1.0f;
      losses[i] = row_loss(scratch + static_cast<long>(i) * s.Vp, s.V, s.Vp, targets[r0 + i], wt,
                           denominator, grad);
    }
    for (int i = 0; i < rows; ++i) total += losses[i];
    if (grad) {
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
