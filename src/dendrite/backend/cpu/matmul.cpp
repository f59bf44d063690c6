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
#include "dendrite/ops/matmul.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>

#include "dendrite/core/check.h"

namespace dendrite::ops {

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
                const float* B, int ldb, float beta, float* C, int ldc, int threads) {
  const bool split_cols = N >= M;
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

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads > 1 && trans_a != trans_b && std::max(M, N) >= 64 * threads)
    gemm_split(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads);
  else
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void linear_forward(float* y, const float* x, const float* w, const float* b, int m, int k, int n) {
  gemm(false, true, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
  if (b) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; ++r) {
      float* row = y + static_cast<long>(r) * n;
      for (int j = 0; j < n; ++j) row[j] += b[j];
    }
  }
}

void linear_backward_input(float* dx, const float* dy, const float* w, int m, int k, int n,
                           bool accumulate) {
  gemm(false, false, m, k, n, 1.0f, dy, n, w, k, accumulate ? 1.0f : 0.0f, dx, k);
}

void linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int m, int k,
                            int n, bool accumulate) {
  gemm(true, false, n, k, m, 1.0f, dy, n, x, k, accumulate ? 1.0f : 0.0f, dw, k);
  if (db) {
    // Columns split over threads; each thread sums its columns over all rows.
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
}

}  // namespace dendrite::ops
