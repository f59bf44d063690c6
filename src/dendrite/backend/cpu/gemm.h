// The CPU backend's product kernels, which its GEMM and linear ops
// (matmul.cpp) run, and the peak rates MFU divides by (peak.cpp).
#pragma once

#include "dendrite/backend/cpu/gemm_cache.h"
#include "dendrite/core/bf16.h"

namespace dendrite::cpu {

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, through oneDNN's
// sgemm, in the way the cache's tuner chose for the shape (ops/matmul.h:
// GEMM layout tuning); cache null: the default way.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc, GemmCache* cache);
// The same with bf16 operands, fp32 accumulation and output: oneDNN's bf16
// matmul where the CPU has AVX512_BF16 (AMX CPUs have it too), its primitive
// kept in the cache; elsewhere the operands widened and the fp32 product.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda,
          const bf16* B, int ldb, float beta, float* C, int ldc, GemmCache* cache);
// Whether the bf16 product runs natively here; when not, the instruction set missing.
bool bf16_gemm_native();
const char* bf16_gemm_missing();

// GFLOP/s of independent FMA chains on `threads` threads (0: the pool's
// size) over about `seconds`; bf16's nominal peak: twice that where the CPU
// has AVX512_BF16 (VDPBF16PS), else the same.
double measure_peak_gflops(int threads, double seconds);
double measure_bf16_peak_gflops(int threads, double seconds);

}  // namespace dendrite::cpu
