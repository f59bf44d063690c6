// FMA peak: each thread runs 12 independent vector FMA chains (enough to hide
// the 4-cycle latency on two FMA ports) on registers only.
// The bf16 peak is nominal: twice the FMA peak where the CPU has AVX512_BF16
// (VDPBF16PS does twice the multiply-adds of an FMA of the same width: 32 bf16
// products into 16 fp32 lanes). A register loop of VDPBF16PS chains does not
// show it on the 2-core Zen 4 machine of docs/precision.md (it ran at the FMA
// rate, while oneDNN's bf16 GEMMs ran at 1.7 times the FMA peak), so the
// instruction's width is the honest denominator. Elsewhere bf16 GEMMs run in
// fp32, and the peak is fp32's.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/backend/cpu/gemm.h"

namespace dendrite::cpu {

namespace {

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline float lane0(Vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline float lane0(Vec v) { return _mm256_cvtss_f32(v); }
#else
using Vec = float;
constexpr int kLanes = 1;
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline Vec splat(float x) { return x; }
inline float lane0(Vec v) { return v; }
#endif

// Runs `iters` rounds of 12 FMA chains; returns a value so the work is kept.
float fma_chains(long iters) {
  Vec acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = splat(0.001f * i);
  const Vec a = splat(0.999999f), b = splat(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = fma(acc[i], a, b);
  float s = 0;
  for (int i = 0; i < 12; ++i) s += lane0(acc[i]);
  return s;
}

// GFLOP/s of `chains` (12 chains of `flops` each per iteration) on `threads`
// threads: the best of kTrials runs of about seconds / kTrials each. A single
// long run read low when another process held a core for part of it (two
// one-thread trainings side by side printed MFU 108% and 138%): the best
// trial is the rate of a moment the threads had their cores to themselves.
template <typename Chains>
double chain_rate(Chains chains, double flops_per_chain, int threads, double seconds) {
  constexpr int kTrials = 5;
  volatile float sink = chains(1 << 16);  // warm up the clocks
  auto run = [&](long iters) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      float r = chains(iters);
      if (r == 12345.0f) sink = r;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto rate = [&](long iters, double dt) {
    return flops_per_chain * 12.0 * double(iters) * threads / dt / 1e9;
  };
  long iters = 1 << 16;
  double dt = run(iters);
  while (dt < seconds / kTrials && iters <= (1L << 34)) dt = run(iters *= 2);
  double best = rate(iters, dt);
  for (int t = 1; t < kTrials; ++t) best = std::max(best, rate(iters, run(iters)));
  (void)sink;
  return best;
}

}  // namespace

double measure_peak_gflops(int threads, double seconds) {
  if (threads <= 0) threads = omp_get_max_threads();
  return chain_rate(fma_chains, 2.0 * kLanes, threads, seconds);
}

double measure_bf16_peak_gflops(int threads, double seconds) {
  __builtin_cpu_init();
  // (AMX tiles go further still: where oneDNN uses them, this understates the peak.)
  const bool native = __builtin_cpu_supports("avx512bf16");
  return (native ? 2.0 : 1.0) * measure_peak_gflops(threads, seconds);
}

double CpuBackend::measure_peak_gflops(Precision p, int threads, double seconds) {
  return p == Precision::kBF16 ? measure_bf16_peak_gflops(threads, seconds)
                               : cpu::measure_peak_gflops(threads, seconds);
}

}  // namespace dendrite::cpu
