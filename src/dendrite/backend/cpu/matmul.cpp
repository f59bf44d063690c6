// CPU matrix products through oneDNN's sgemm (row-major API), which runs on the
// process's single OpenMP pool.
#include "dendrite/ops/matmul.h"

#include <oneapi/dnnl/dnnl.h>

#include "dendrite/core/check.h"

namespace dendrite::ops {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc);
  DENDRITE_CHECK(st == dnnl_success, "gemm: dnnl_sgemm failed with status ", static_cast<int>(st),
                 " for M=", M, " N=", N, " K=", K);
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
                            int n) {
  gemm(true, false, n, k, m, 1.0f, dy, n, x, k, 1.0f, dw, k);
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
