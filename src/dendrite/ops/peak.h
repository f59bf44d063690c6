// The machine's measured peaks: loops of independent fused multiply-adds (or
// bf16 dot products) on every thread of the pool, the denominators of MFU.
#pragma once

namespace dendrite::ops {

// GFLOP/s reached by `threads` threads (0: the pool's size) over about `seconds`.
double measure_peak_gflops(int threads = 0, double seconds = 0.2);
// The nominal peak of bf16 products: twice the FMA peak where the CPU has
// AVX512_BF16 (VDPBF16PS does twice an FMA's multiply-adds),
// else the FMA peak (bf16 GEMMs then run in fp32). The denominator of MFU
// under --precision bf16.
double measure_bf16_peak_gflops(int threads = 0, double seconds = 0.2);

}  // namespace dendrite::ops
