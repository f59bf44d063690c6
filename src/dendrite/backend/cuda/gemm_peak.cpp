// The GEMM peak of one GPU (gemm_peak.h).
#include "dendrite/backend/cuda/gemm_peak.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/bf16.h"
#include "dendrite/core/rng.h"

namespace dendrite::cuda {

namespace {

constexpr int kProbeSize = 256;

struct SquareTiming {
  double gflops = 0, ms_per_product = 0;
};

// n x n products on random operands (products of zeros run faster than
// real data): one to warm up (the plan, the clocks), then batches of five
// until `seconds` have passed.
SquareTiming time_square_products(Backend& be, Gemm& gemm, cudaStream_t stream, int n, bool low,
                                  double seconds) {
  const size_t elem = low ? 2 : 4, count = size_t(n) * size_t(n);
  void* a = be.allocate(count * elem);
  void* b = be.allocate(count * elem);
  float* c = static_cast<float*>(be.allocate(count * 4));
  {
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = float(random_normal(1, 99, uint64_t(i)));
    std::vector<bf16> low16(low ? count : 0);
    for (size_t i = 0; i < low16.size(); ++i) low16[i] = dendrite::to_bf16(host[i]);
    const void* src = low ? static_cast<const void*>(low16.data()) : host.data();
    be.upload(a, src, count * elem);
    be.upload(b, src, count * elem);
  }
  auto product = [&] { gemm.run(false, true, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, low, stream); };
  product();
  cudaEvent_t t0, t1;
  check_cuda(cudaEventCreate(&t0), "cudaEventCreate");
  check_cuda(cudaEventCreate(&t1), "cudaEventCreate");
  int reps = 0;
  float ms = 0;
  check_cuda(cudaEventRecord(t0, stream), "cudaEventRecord");
  do {
    for (int i = 0; i < 5; ++i, ++reps) product();
    check_cuda(cudaEventRecord(t1, stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(t1), "cudaEventSynchronize (GEMM peak)");
    check_cuda(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
  } while (ms < seconds * 1e3 && reps < 1000);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  be.release(a);
  be.release(b);
  be.release(c);
  const double s = std::max(double(ms), 1e-6) * 1e-3;
  return {2.0 * double(n) * n * n * reps / s / 1e9, double(ms) / reps};
}

}  // namespace

double gemm_peak_gflops(Backend& be, Gemm& gemm, cudaStream_t stream, Precision p, double seconds) {
  // The probe's squares are no product of the model: not tuned (gemm.h), so
  // that --gemm-tune reports the model's shapes and their calls alone.
  struct Untuned {
    Gemm& g;
    bool was;
    ~Untuned() { g.set_tuning(was); }
  } untuned{gemm, gemm.tuning()};
  gemm.set_tuning(false);
  const bool low = p == Precision::kBF16;
  const size_t elem = low ? 2 : 4;
  size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  int n = kProbeSize;
  double last_ms = time_square_products(be, gemm, stream, n, low, 0).ms_per_product;
  while (n < 8192) {
    const double next = 2.0 * n;
    if (8 * last_ms > seconds * 1e3 / 5 || next * next * double(2 * elem + 4) > double(free) / 4)
      break;
    n *= 2;
    last_ms = time_square_products(be, gemm, stream, n, low, 0).ms_per_product;
  }
  return time_square_products(be, gemm, stream, n, low, seconds).gflops;
}

}  // namespace dendrite::cuda
