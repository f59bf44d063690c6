// The machine's measured fp32 peak: a loop of independent fused multiply-adds
// on every thread of the pool, the denominator of MFU.
#pragma once

namespace dendrite::ops {

// GFLOP/s reached by `threads` threads (0: the pool's size) over about `seconds`.
double measure_peak_gflops(int threads = 0, double seconds = 0.2);

}  // namespace dendrite::ops
