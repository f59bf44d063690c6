// What a device ran over a stretch of host code, as its profiler reports it
// (CUPTI's activity records on a GPU: backend/cuda/device_profile.h), and
// the report `bench step --profile` makes of it: where the device's time
// went, by kernel and by part of the training step, measured where the
// roofline of bench/step_roofline.py only models it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dendrite/core/trace.h"

namespace dendrite {

struct DeviceActivity {
  enum class Kind { kKernel, kCopy, kMemset };
  Kind kind = Kind::kKernel;
  // A kernel's name as the device reports it (mangled or not); a copy's
  // direction ("host to device", "device to host", "device to device").
  std::string name;
  double begin = 0, end = 0;  // on the device, seconds on trace::now()'s clock
  double issued = -1;         // when the host issued it, same clock; -1: not known
  int64_t bytes = 0;          // a copy's or a memset's
};

// A kernel's name without its return type, namespaces, template arguments
// and parameters, demangled first if it is mangled:
// "void dendrite::cuda::(anonymous namespace)::norm_kernel<128>(float*, int)"
// and its mangled form both give "norm_kernel". A name that is no C++
// signature (cuBLASLt's "sm90_xmma_gemm_..._cublas", say) is kept whole: it
// names the library's tile and split choices.
std::string short_kernel_name(const std::string& name);

// The part of the training step an activity belongs to: the innermost span
// of category "step" that was open on the rank's lane when the host issued
// it ("layer N forward" and "layer N backward" merged into "layers forward"
// and "layers backward", "step N" into "step"); "outside the step" where no
// span was open or the issue time is unknown.
std::string step_part(const std::vector<trace::Span>& spans, double issued);

// The report over `steps` steps that took `step_seconds` each (wall clock):
//   "steps", "step_ms";
//   "device_busy_ms": the time any activity ran (their union), per step, and
//     "device_idle_ms" = step_ms - busy: where the device waited for the host;
//   "kernel_ms", "copy_ms", "memset_ms": their durations summed, per step;
//   "kernels": by short name, most time first: "name", "launches" and "ms"
//     per step, "mean_us", "share" (of kernel_ms);
//   "parts": by step_part, in the order they were first issued: "part",
//     "launches" (kernels per step), "copies" and "memsets" (per step), "ms"
//     (kernels, copies and memsets per step), "kernels" ({short name:
//     launches per step}).
nlohmann::json device_profile_report(const std::vector<DeviceActivity>& activities,
                                     const std::vector<trace::Span>& spans, int steps,
                                     double step_seconds);

// The report as text: the device's busy time against the step's, the `top`
// kernels that took most of it, and the parts.
std::string device_profile_table(const nlohmann::json& report, int top = 20);

}  // namespace dendrite
