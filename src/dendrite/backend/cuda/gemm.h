// cuBLASLt GEMMs of the CUDA backend: row-major products with fp32 or bf16
// operands and fp32 accumulation; fp32 output, or with an epilogue (bias,
// GELU keeping its input, a bf16 output) fused into the product. Each
// shape's algorithm is chosen at its first product (the heuristic's first
// pick, split over K where it picks that, with one of cuBLASLt's reduction
// schemes, none of which uses atomics) and kept for the run, so that
// results are deterministic; with tuning on, the fastest of the heuristic's
// picks that gives the first pick's bits (gemm_tuning.cpp). Letters: the
// row-major product C[M,N] = op(A) op(B) over K.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "dendrite/core/bf16.h"
#include "dendrite/ops/matmul.h"

namespace dendrite::cuda {

// What cuBLASLt does to a product before storing it (its epilogues), in
// Gemm::run()'s row-major terms: D [M,N] = op(A) op(B), + bias [N] on every row,
// then gelu_input [M,N] (ld N) = D and D = GELU(D); or, for GELU's
// backward, D *= GELU'(dgelu_input [M,N], ld N). D fp32, or bf16 with none
// of them but a bias in bf16 (bias_bf16: cuBLASLt's bias and GELU input take
// D's type; Dendrite keeps the GELU input in fp32). residual [M,N] (ld N, fp32 D, no GELU):
// cuBLASLt's C with beta 1, a matrix apart from D, so D = op(A) op(B) + residual (+ bias).
struct GemmEpilogue {
  const float* bias = nullptr;
  const bf16* bias_bf16 = nullptr;  // with out_bf16, in bias's stead
  const float* residual = nullptr;
  bool gelu = false;
  float* gelu_input = nullptr;
  const float* dgelu_input = nullptr;
  bool out_bf16 = false;
};

class Gemm {
 public:
  using Epilogue = GemmEpilogue;

  // tf32: fp32 products on the tensor cores in TF32 (--precision fp32 on a
  // GPU); else in full fp32 (the tests). epilogues false: run_fused declines
  // every epilogue (BackendOptions::gemm_epilogues).
  Gemm(bool tf32, bool epilogues);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C[M,N] = alpha op(A) op(B) + beta C, row-major, as Backend::gemm; A and B are
  // both fp32 or both bf16 (bf16: true).
  void run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int lda,
           const void* B, int ldb, float beta, float* C, int ldc, bool bf16, cudaStream_t stream);
  // D [M,N] (ld N) = op(A) op(B) with the epilogue (alpha 1, beta 0). Returns
  // false, having done nothing, where cuBLASLt offers no algorithm for it
  // (the caller then runs the epilogue's steps as kernels); that answer is
  // kept for the shape too.
  bool run_fused(bool trans_a, bool trans_b, int M, int N, int K, const void* A, int lda,
                 const void* B, int ldb, void* D, bool bf16, const Epilogue& e,
                 cudaStream_t stream);
  // The shapes met so far, one line each (Backend::gemm_plans; bench step's JSON).
  std::vector<std::string> shapes() const;
  // Device memory held for cuBLASLt's workspace.
  size_t workspace_bytes() const { return workspace_bytes_; }

  // GEMM tuning (DESIGN.md section 10; ops/matmul.h's GemmChoice), off until
  // set. When on, a shape met for the first time asks cuBLASLt's heuristic
  // for its first pick (an untuned run's) and a list of kTuneCandidates
  // algorithms; its first product runs each of them, the first pick first,
  // rejects those whose result has other bits than the first pick's,
  // times the rest, and keeps the fastest for the run, so tuning never
  // changes results. A product that adds into its output (beta 1, as the
  // weight gradients do) runs each pick on a copy of C put back before it,
  // in device memory taken for the trial and given back after; one whose
  // output overlaps an operand, or for which that memory is not free, keeps
  // the first pick, untimed.
  static constexpr int kTuneCandidates = 8;
  void set_tuning(bool on) { tuning_ = on; }
  bool tuning() const { return tuning_; }
  // The shapes timed so far, with the ways tried and the one kept.
  std::vector<ops::GemmChoice> choices() const;
  double tuning_seconds() const { return tuning_seconds_; }

 private:
  // epilogue: a cublasLtEpilogue_t; epi_align: the bias's and GELU input's
  // alignment (cuBLASLt's heuristic reads it from their pointers).
  struct Key {
    bool ta, tb, bf16, beta;
    int M, N, K, lda, ldb, ldc, align;
    int epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    bool out_bf16 = false;
    int epi_align = 16;
    bool residual = false;  // C, apart from D, added with beta 1
    auto tie() const {
      return std::tie(ta, tb, bf16, beta, M, N, K, lda, ldb, ldc, align, epilogue, out_bf16,
                      epi_align, residual);
    }
    bool operator<(const Key& o) const { return tie() < o.tie(); }
  };
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
    bool found = false;  // false: no algorithm (only an epilogue's plan may lack one)
    int splits = 1;      // the slices of the sum over K, and how they are added
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    // Tuning: the heuristic's picks, the first first, until the trial;
    // then what the trial found and the products since.
    std::vector<cublasLtMatmulHeuristicResult_t> offered;
    ops::GemmChoice choice{};
  };
  // One product of a plan with a given algorithm, and where its results lie
  // (gemm_tuning.cpp); reruns false where it cannot run twice unchanged.
  struct Trial {
    std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&, size_t)> run;
    void* d;
    int64_t rows, row_bytes, ld_bytes;  // D
    const void* aux;                    // GELU's input it writes [rows, N] fp32, or null
    int64_t kept_bytes;                 // > 0: D is also C, this many bytes from d
    bool reruns;
  };
  void read_split(Plan& p) const;
  // The plan of k, made at its first use; e's pointers are those the
  // heuristic reads alignments from.
  Plan& plan(const Key& k, const Epilogue& e = {});
  void set_epilogue_pointers(const Plan& p, const Key& k, const Epilogue& e) const;
  // Before a plan's first product, with tuning on and several picks: the trial.
  void tune(Plan& p, const Key& k, const Trial& t, cudaStream_t stream);
  uint64_t result_hash(const Key& k, const Trial& t, cudaStream_t stream) const;

  bool tf32_;
  bool epilogues_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = size_t(32) << 20;
  std::map<Key, Plan> plans_;
  bool tuning_ = false;
  double tuning_seconds_ = 0;
};

}  // namespace dendrite::cuda
