// The sums of products as a model of a GPU's hardware rounds them
// (set_gpu_rounding, emulated_backend.h): the tensor core's fused sums
// (tensor_core_sum) and the SIMT kernels' chained FMAs (emulator_internal.h).
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <climits>
#include <cmath>

#include "emulated_backend.h"
#include "emulator_internal.h"

namespace emu {
namespace {
std::atomic<bool> gpu_rounding{false};
}  // namespace

void set_gpu_rounding(bool on) { gpu_rounding.store(on); }
bool gpu_rounds() { return gpu_rounding.load(std::memory_order_relaxed); }

float tensor_core_sum(float acc, const float* products, int n) {
  // Infinities and NaN: as the plain sum has them.
  int top = INT_MIN;
  double plain = acc;
  for (int i = -1; i < n; ++i) {
    const float x = i < 0 ? acc : products[i];
    plain += x;
    if (!std::isfinite(x)) return float(plain);
    if (x != 0.0f) top = std::max(top, std::ilogb(x));
  }
  if (top == INT_MIN) return float(plain);  // all zeros (their sign as the plain sum's)
  // Every term cut to the fp32 grid of the largest, toward zero; their sum
  // is exact in double (under 2^29 units of that grid), then cut to fp32.
  const double unit = std::ldexp(1.0, top - 23);
  double sum = 0;
  for (int i = -1; i < n; ++i) sum += std::trunc(double(i < 0 ? acc : products[i]) / unit) * unit;
  float out = float(sum);
  if (std::fabs(double(out)) > std::fabs(sum)) out = std::nextafter(out, 0.0f);
  if (std::isinf(out)) out = std::copysign(FLT_MAX, out);  // toward zero: the largest finite
  return out;
}

}  // namespace emu
