// The GEMM peak of one GPU, the rate MFU divides by: square products through
// cuBLASLt (gemm.h) timed with events, as large as the device allows.
#pragma once

#include <cuda_runtime.h>

#include "dendrite/backend/backend.h"
#include "dendrite/backend/cuda/gemm.h"

namespace dendrite::cuda {

// GFLOP/s of n x n products in precision p (bf16 operands, or fp32 as gemm
// runs them) on stream, their operands in be's memory, timed for about
// `seconds`. n doubles from 256 up to 8192 while the next size (8 times the
// work of the last, measured) would run several times in `seconds` and its
// three operands fit in a quarter of the free memory (a slow device, as the
// tests' emulator, stays small).
double gemm_peak_gflops(Backend& be, Gemm& gemm, cudaStream_t stream, Precision p, double seconds);

}  // namespace dendrite::cuda
