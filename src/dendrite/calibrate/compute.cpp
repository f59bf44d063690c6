// The compute figures of a machine file (compute.h): each a call timed on
// every rank at once (timing.h), as a training step runs it.
#include "dendrite/calibrate/compute.h"

#include <omp.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <vector>

#include "dendrite/calibrate/timing.h"

namespace dendrite {

namespace {

using calibration::mean_over;
using calibration::time_call;

// The GEMM rates of the step's shapes in one precision (C = A B^T, as the
// forward of a linear layer).
std::vector<GemmRate> calibrate_gemm(Communicator& world, Backend& be, bool quick,
                                     Precision precision) {
  std::vector<std::array<int64_t, 3>> shapes;
  const std::vector<int64_t> ms =
      quick ? std::vector<int64_t>{64, 256} : std::vector<int64_t>{64, 128, 256, 512, 2048};
  const std::vector<int64_t> nks =
      quick ? std::vector<int64_t>{192, 768} : std::vector<int64_t>{192, 768, 3072};
  // k as small as the smallest m as well: a weight gradient's inner dimension
  // is the rank's rows (64 on a grid with D or Z = 4 at B=4, T=64), and the
  // rate below the smallest measured k is only extrapolated (Machine::gemm_gflops).
  std::vector<int64_t> ks = nks;
  ks.insert(ks.begin(), ms.front());
  for (int64_t m : ms)
    for (int64_t n : nks)
      for (int64_t k : ks) shapes.push_back({m, n, k});
  if (!quick)  // the LM head of GPT-2 (V = 50304) whole and split in two, and its weight gradient
    for (std::array<int64_t, 3> s : {std::array<int64_t, 3>{256, 50304, 768},
                                     {256, 25152, 768},
                                     {256, 50304, 384},
                                     {256, 768, 50304},
                                     {50304, 768, 256}})
      shapes.push_back(s);
  std::vector<GemmRate> out;
  for (auto [m, n, k] : shapes) {
    Buffer<float> A = be.alloc<float>(m * k), B = be.alloc<float>(n * k),
                  C = be.alloc<float>(m * n);
    be.fill(A.data(), 0.01f, A.size());
    be.fill(B.data(), 0.02f, B.size());
    Buffer<bf16> A16, B16;
    if (precision == Precision::kBF16) {
      A16 = be.alloc<bf16>(m * k), B16 = be.alloc<bf16>(n * k);
      be.to_bf16(A16.data(), A.data(), A.size());
      be.to_bf16(B16.data(), B.data(), B.size());
    }
    const Operand a = A16.size() ? Operand(A16.data()) : Operand(A.data());
    const Operand b = B16.size() ? Operand(B16.data()) : Operand(B.data());
    auto fn = [&] {
      be.gemm(false, true, int(m), int(n), int(k), 1.0f, a, int(k), b, int(k), 0.0f, C.data(),
              int(n));
      be.wait(be.record());
    };
    const double s = time_call(world, fn, 0.03, 2);
    out.push_back({m, n, k, 2.0 * m * n * k / s / 1e9});
  }
  return out;
}

// Bytes/s one rank streams in c[i] = a[i] + b[i] over arrays far larger than cache.
double calibrate_bandwidth(Communicator& world, double seconds) {
  const int64_t n = 8 << 20;  // 32 MB per array
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  auto fn = [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  };
  return 12.0 * n / time_call(world, fn, seconds, 3);
}

// Bytes/s of a device copy far larger than cache (read and write counted).
double calibrate_device_bandwidth(Communicator& world, Backend& be, double seconds) {
  const int64_t n = 64 << 20;  // 256 MB per array
  Buffer<float> a = be.alloc<float>(n), c = be.alloc<float>(n);
  auto fn = [&] {
    be.copy(c.data(), a.data(), size_t(n) * sizeof(float));
    be.ready_for_host();
  };
  return 8.0 * n / time_call(world, fn, seconds, 3);
}

// Seconds per parameter of the optimizer step as the trainer runs it: zero the
// gradients, their squared norm, AdamW (all ranks at once), over 32M parameters:
// their 512 MB of state, as a model's, come from memory, not from a last-level
// cache (4M parameters, 64 MB, stayed in a 260 MB one: 1.6 ns per parameter
// where a GPT-2 124M step spent about 2.8).
double calibrate_optimizer(Communicator& world, Backend& be, double seconds) {
  const long n = 32 << 20;
  Buffer<float> p = be.alloc<float>(n), g = be.alloc<float>(n), m = be.alloc<float>(n),
                v = be.alloc<float>(n);
  be.fill(p.data(), 0.1f, n);
  be.fill(m.data(), 0.0f, n);
  be.fill(v.data(), 0.0f, n);
  int step = 0;
  auto fn = [&] {
    be.fill(g.data(), 0.01f, n);
    volatile double norm = be.sum_squares(g.data(), n);
    (void)norm;
    be.adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, ++step, true,
                    ops::AdamWConfig{}, 1.0f, nullptr);
    be.wait(be.record());
  };
  return time_call(world, fn, seconds, 3) / n;
}

}  // namespace

void calibrate_compute(Communicator& world, Backend& be, bool quick, Machine& mach) {
  const bool gpu = be.device() != Device::kCpu;
  mach.gpu = gpu;
  mach.memory_per_rank_bytes = gpu ? double(be.device_capacity_bytes())
                                   : double(sysconf(_SC_PHYS_PAGES)) *
                                         double(sysconf(_SC_PAGE_SIZE)) / world.ranks_on_node();
  const double scale = quick ? 0.25 : 1.0;  // --quick times each figure a quarter as long
  mach.peak_gflops = mean_over(world, be.measure_peak_gflops(Precision::kF32, 0, 0.3 * scale));
  mach.memory_bandwidth = gpu ? calibrate_device_bandwidth(world, be, 0.3 * scale)
                              : calibrate_bandwidth(world, 0.3 * scale);
  mach.optimizer_seconds_per_param = calibrate_optimizer(world, be, 0.5 * scale);
  mach.gemm = calibrate_gemm(world, be, quick, Precision::kF32);
  // Where bf16 would only be widened to fp32, its rates are the fp32 ones: none written.
  if (be.bf16_gemm_native()) mach.gemm_bf16 = calibrate_gemm(world, be, quick, Precision::kBF16);
  mach.threads_per_rank = omp_get_max_threads();
}

}  // namespace dendrite
