// GEMM rates, fp32 against bf16 operands (fp32 accumulation), on the shapes
// of a training step: for each linear layer of the model the forward
// y = x W^T (NT), the input gradient dx = dy W (NN) and the weight gradient
// dW = dy^T x (TN), with m = B*T rows. Checks the bf16 product against the
// fp32 one first, then times each (best of several runs) and prints GFLOP/s.
//   gemm_bench [m] [threads]      (defaults: 2048 rows, the pool's size)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/core/rng.h"

using namespace dendrite;

namespace {

double best_seconds(const std::function<void()>& f) {
  f();  // warm up (and make the primitive)
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Case {
  const char* name;
  bool ta, tb;
  int M, N, K;
};

}  // namespace

int main(int argc, char** argv) {
  const int m = argc > 1 ? std::atoi(argv[1]) : 2048;
  if (argc > 2) omp_set_num_threads(std::atoi(argv[2]));
  const std::unique_ptr<Backend> cpu = make_backend(Device::kCpu);
  std::printf("bf16 GEMM native: %s%s; %d threads, m = %d\n",
              cpu->bf16_gemm_native() ? "yes" : "no, missing ", cpu->bf16_gemm_missing().c_str(),
              omp_get_max_threads(), m);
  std::printf("%-33s %6s %6s %6s %10s %10s %6s\n", "product", "M", "N", "K", "fp32 GF/s", "bf16 GF/s",
              "ratio");
  // GPT-2 124M's layers (C = 768): q/k/v/o 768x768, up 3072x768, down 768x3072, head 50304x768.
  const int widths[][2] = {{768, 768}, {3072, 768}, {768, 3072}, {50304, 768}};
  const char* names[] = {"attn 768->768", "up 768->3072", "down 3072->768", "head 768->50304"};
  double t32 = 0, t16 = 0;
  for (int l = 0; l < 4; ++l) {
    const int n = widths[l][0], k = widths[l][1];
    const Case cases[] = {{"forward  x W^T", false, true, m, n, k},
                          {"backward dy W", false, false, m, k, n},
                          {"backward dy^T x", true, false, n, k, m}};
    for (const Case& c : cases) {
      const long a_size = long(c.M) * c.K, b_size = long(c.K) * c.N;
      std::vector<float> A(a_size), B(b_size), C32(long(c.M) * c.N), C16(long(c.M) * c.N);
      for (long i = 0; i < a_size; ++i) A[i] = float(random_normal(1, 1, i));
      for (long i = 0; i < b_size; ++i) B[i] = float(random_normal(1, 2, i));
      std::vector<bf16> A16(a_size), B16(b_size);
      cpu->to_bf16(A16.data(), A.data(), a_size);
      cpu->to_bf16(B16.data(), B.data(), b_size);
      const int lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
      const double s32 = best_seconds([&] {
        cpu->gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C32.data(),
                  c.N);
      });
      const double s16 = best_seconds([&] {
        cpu->gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A16.data(), lda, B16.data(), ldb, 0.0f,
                  C16.data(), c.N);
      });
      double err = 0, scale = 0;
      for (size_t i = 0; i < C32.size(); ++i) {
        err = std::max(err, double(std::fabs(C32[i] - C16[i])));
        scale = std::max(scale, double(std::fabs(C32[i])));
      }
      if (err > 0.05 * scale) {
        std::fprintf(stderr, "gemm_bench: bf16 product of %s is off by %g (scale %g)\n", c.name, err, scale);
        return 1;
      }
      const double flops = 2.0 * c.M * c.N * c.K;
      t32 += s32, t16 += s16;
      std::printf("%-16s %-16s %6d %6d %6d %10.1f %10.1f %6.2f\n", names[l], c.name, c.M, c.N, c.K,
                  flops / s32 / 1e9, flops / s16 / 1e9, s32 / s16);
    }
  }
  std::printf("all products: fp32 %.1f ms, bf16 %.1f ms, ratio %.2f\n", t32 * 1e3, t16 * 1e3, t32 / t16);
}
