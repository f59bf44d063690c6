// CPU matrix products through oneDNN's sgemm (row-major API), on the
// process's single OpenMP pool.
//
// oneDNN threads a GEMM itself, but for the short-and-wide shapes of a
// training step (m = B*T rows of a few hundred) its split of the NT and TN
// cases leaves cores idle: measured on 2 threads, x[256,3072] * W[768,3072]^T
// ran at 131 GFLOP/s threaded by oneDNN and 186 GFLOP/s as two single-threaded
// GEMMs on halves of the output. So NT and TN products are cut here into one
// block of output columns (or rows) per thread; NN is left to oneDNN, where
// its own threading measured as good or better. The choice depends only on
// the shape and the thread count, so results are reproducible run to run.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/backend/cpu/gemm.h"
#include "dendrite/core/check.h"

namespace dendrite::cpu {

using ops::GemmChoice;
using ops::LinearEpilogue;

namespace {

void sgemm(char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  DENDRITE_CHECK(st == dnnl_success, "gemm: dnnl_sgemm failed with status ", static_cast<int>(st),
                 " for ", ta, tb, " M=", M, " N=", N, " K=", K);
}

// One block of C per thread, each a single-threaded sgemm (oneDNN runs
// sequentially inside a parallel region). Blocks are multiples of 16 columns
// (or 8 rows) so that each thread's kernel sees aligned panels.
void gemm_split(char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc, int threads,
                bool split_cols) {
  const int extent = split_cols ? N : M, align = split_cols ? 16 : 8;
  const int per = ((extent + threads - 1) / threads + align - 1) / align * align;
  bool failed = false;
#pragma omp parallel num_threads(threads) reduction(|| : failed)
  {
    const int begin = std::min(extent, omp_get_thread_num() * per);
    const int end = std::min(extent, begin + per);
    if (end > begin) {
      const int len = end - begin;
      dnnl_status_t st;
      if (split_cols) {
        const float* Bp = tb == 'N' ? B + begin : B + long(begin) * ldb;
        st = dnnl_sgemm(ta, tb, M, len, K, alpha, A, lda, Bp, ldb, beta, C + begin, ldc);
      } else {
        const float* Ap = ta == 'N' ? A + long(begin) * lda : A + begin;
        st = dnnl_sgemm(ta, tb, len, N, K, alpha, Ap, lda, B, ldb, beta, C + long(begin) * ldc, ldc);
      }
      failed = st != dnnl_success;
    }
  }
  DENDRITE_CHECK(!failed, "gemm: dnnl_sgemm failed for ", ta, tb, " M=", M, " N=", N, " K=", K);
}

}  // namespace

namespace {

enum Way { kDirect, kSplitCols, kSplitRows, kTransposed, kWays };
const char* kWayNames[kWays] = {"onednn", "split-cols", "split-rows", "transposed"};

using Shape = GemmCache::Shape;

// The default way, as before tuning existed: NT/TN split per thread, NN to oneDNN.
Way default_way(char ta, char tb, int M, int N, int threads) {
  if (threads > 1 && ta != tb && std::max(M, N) >= 64 * threads)
    return N >= M ? kSplitCols : kSplitRows;
  return kDirect;
}

void run_way(Way w, char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
             const float* B, int ldb, float beta, float* C, int ldc, int threads) {
  switch (w) {
    case kDirect:
      return sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case kSplitCols:
    case kSplitRows:
      return gemm_split(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads,
                        w == kSplitCols);
    default:
      break;
  }
  // C^T [N, M] = op(B)^T op(A)^T: the same operands with the other transposes, swapped.
  std::vector<float> t(size_t(N) * M);
  const char na = tb == 'N' ? 'T' : 'N', nb = ta == 'N' ? 'T' : 'N';
  sgemm(na, nb, N, M, K, alpha, B, ldb, A, lda, 0.0f, t.data(), M);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float& c = C[long(i) * ldc + j];
      c = beta == 0.0f ? t[long(j) * M + i] : t[long(j) * M + i] + beta * c;
    }
}

// Runs each way on a copy of C, times it, and keeps the fastest with the
// default's bits; leaves C as the default way computes it.
GemmChoice tune(const Shape& sh, float alpha, const float* A, int lda, const float* B, int ldb,
                float beta, float* C, int ldc) {
  GemmChoice g{sh.ta, sh.tb, sh.M, sh.N, sh.K, sh.threads, sh.accumulate, "", {}, {}, 0};
  const Way def = default_way(sh.ta, sh.tb, sh.M, sh.N, sh.threads);
  std::vector<float> c0(size_t(sh.M) * ldc), want, got;
  for (int i = 0; i < sh.M; ++i)
    std::copy(C + long(i) * ldc, C + long(i) * ldc + sh.N, c0.begin() + long(i) * ldc);
  double best = 1e30;
  std::vector<Way> order = {def};
  for (int w = 0; w < kWays; ++w)
    if (w != def && (sh.threads > 1 || (w != kSplitCols && w != kSplitRows))) order.push_back(Way(w));
  for (Way w : order) {
    double ms = 1e30;  // the faster of two runs (the first also warms the caches)
    for (int run = 0; run < 2; ++run) {
      got = c0;
      const auto t0 = std::chrono::steady_clock::now();
      run_way(w, sh.ta, sh.tb, sh.M, sh.N, sh.K, alpha, A, lda, B, ldb, beta, got.data(), ldc,
              sh.threads);
      ms = std::min(ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (w == def) want = got;
    const bool same = std::memcmp(got.data(), want.data(), sizeof(float) * got.size()) == 0;
    g.ways.push_back(kWayNames[w]);
    g.ms.push_back(same ? ms : -1.0);
    if (same && ms < best) best = ms, g.way = kWayNames[w];
  }
  for (int i = 0; i < sh.M; ++i)
    std::copy(want.begin() + long(i) * ldc, want.begin() + long(i) * ldc + sh.N, C + long(i) * ldc);
  return g;
}

}  // namespace

std::vector<GemmChoice> GemmCache::choices() const {
  std::lock_guard<std::mutex> lock(tuner.mutex);
  std::vector<GemmChoice> out;
  for (auto& [shape, choice] : tuner.choices) out.push_back(choice);
  return out;
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc, GemmCache* cache) {
  if (M == 0 || N == 0) return;
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (!cache || !cache->tuner.on || omp_in_parallel())
    return run_way(default_way(ta, tb, M, N, threads), ta, tb, M, N, K, alpha, A, lda, B, ldb,
                   beta, C, ldc, threads);
  GemmCache::Tuner& t = cache->tuner;
  const Shape sh{ta, tb, M, N, K, threads, beta != 0.0f};
  Way way = kDirect;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.choices.find(sh);
    if (it == t.choices.end()) {
      const auto t0 = std::chrono::steady_clock::now();
      it = t.choices.emplace(sh, tune(sh, alpha, A, lda, B, ldb, beta, C, ldc)).first;
      t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return;  // C holds the product
    }
    ++it->second.calls;
    for (int w = 0; w < kWays; ++w)
      if (it->second.way == kWayNames[w]) way = Way(w);
  }
  run_way(way, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads);
}

// ---- the ops: each product in the operands' precision (cpu::gemm has a
// form for each), then the separate steps of an epilogue, so the bits are
// those of the separate ops.

void CpuBackend::do_gemm(bool ta, bool tb, int M, int N, int K, float alpha, Operand A, int lda,
                         Operand B, int ldb, float beta, float* C, int ldc) {
  if (A.is_bf16())
    cpu::gemm(ta, tb, M, N, K, alpha, A.b16, lda, B.b16, ldb, beta, C, ldc, &gemms_);
  else
    cpu::gemm(ta, tb, M, N, K, alpha, A.f32, lda, B.f32, ldb, beta, C, ldc, &gemms_);
}

void CpuBackend::do_linear_forward(float* y, Operand x, Operand w, const float* b,
                                   const ops::LinearShape& s) {
  do_gemm(false, true, s.m, s.n, s.k, 1.0f, x, s.k, w, s.k, 0.0f, y, s.n);
  if (b) do_add_bias(y, b, s.m, s.n);
}

void CpuBackend::do_linear_forward_fused(float* y, Operand x, Operand w, const ops::LinearShape& s,
                                         const LinearEpilogue& e) {
  float* t = e.gelu ? e.pre_gelu : y;  // [m, n]: x w^T + b
  std::vector<float> low;              // the bias the product adds in bf16, widened
  if (ops::adds_bf16_bias(e)) {
    low.resize(size_t(s.n));
    for (int j = 0; j < s.n; ++j) low[j] = dendrite::to_float(e.bias_bf16[j]);
  }
  do_linear_forward(t, x, w, low.empty() ? e.bias : low.data(), s);
  const long mn = long(s.m) * s.n;
  if (e.gelu) do_gelu_forward(y, t, mn);
  if (e.residual) do_add(y, e.residual, y, mn);
  if (e.y_bf16) do_to_bf16(e.y_bf16, y, mn);
}

void CpuBackend::do_linear_backward_input(float* dx, Operand dy, Operand w,
                                          const ops::LinearShape& s, bool accumulate) {
  do_gemm(false, false, s.m, s.k, s.n, 1.0f, dy, s.n, w, s.k, accumulate ? 1.0f : 0.0f, dx, s.k);
}

void CpuBackend::do_linear_backward_input_dgelu(float* dx, Operand dy, Operand w,
                                                const float* gelu_input,
                                                const ops::LinearShape& s) {
  do_linear_backward_input(dx, dy, w, s, false);
  do_gelu_backward(dx, dx, gelu_input, long(s.m) * s.k);
}

void CpuBackend::do_linear_backward_weight(float* dw, Operand dy, Operand x,
                                           const ops::LinearShape& s, bool accumulate) {
  do_gemm(true, false, s.n, s.k, s.m, 1.0f, dy, s.n, x, s.k, accumulate ? 1.0f : 0.0f, dw, s.k);
}

void CpuBackend::do_add_bias(float* y, const float* b, int m, int n) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < m; ++r) {
    float* row = y + static_cast<long>(r) * n;
    for (int j = 0; j < n; ++j) row[j] += b[j];
  }
}

// Columns split over threads; each thread sums its columns over all rows.
void CpuBackend::do_add_column_sums(float* db, const float* dy, int m, int n) {
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int j0 = 0; j0 < n; j0 += 64) {
      int j1 = j0 + 64 < n ? j0 + 64 : n;
      for (int r = 0; r < m; ++r) {
        const float* row = dy + static_cast<long>(r) * n;
        for (int j = j0; j < j1; ++j) db[j] += row[j];
      }
    }
  }
}

}  // namespace dendrite::cpu
