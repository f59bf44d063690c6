// cuBLASLt GEMMs of the CUDA backend: row-major products with fp32 or bf16
// operands, fp32 accumulation and output. Each shape's algorithm is chosen at
// its first product (the heuristic's first pick among algorithms that reduce
// without atomics) and kept for the run, so that results are deterministic.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace dendrite::cuda {

class Gemm {
 public:
  // tf32: fp32 products on the tensor cores in TF32 (--precision fp32 on a
  // GPU); else in full fp32 (the tests).
  explicit Gemm(bool tf32);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C[M,N] = alpha op(A) op(B) + beta C, row-major, as ops::gemm; A and B are
  // both fp32 or both bf16 (bf16: true).
  void run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int lda,
           const void* B, int ldb, float beta, float* C, int ldc, bool bf16, cudaStream_t stream);
  // The shapes met so far, one line each (for the start line and bench).
  std::vector<std::string> shapes() const;
  // Device memory held for cuBLASLt's workspace.
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Key {
    bool ta, tb, bf16, beta;
    int M, N, K, lda, ldb, ldc, align;
    auto tie() const { return std::tie(ta, tb, bf16, beta, M, N, K, lda, ldb, ldc, align); }
    bool operator<(const Key& o) const { return tie() < o.tie(); }
  };
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
  };
  const Plan& plan(const Key& k);

  bool tf32_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = size_t(32) << 20;
  std::map<Key, Plan> plans_;
};

}  // namespace dendrite::cuda
