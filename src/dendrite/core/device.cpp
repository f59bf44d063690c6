#include "dendrite/core/device.h"

#include "dendrite/core/check.h"

namespace dendrite {

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::kCpu;
  if (text == "cuda") return Device::kCuda;
  fail("device: unknown device '", text, "'; use cpu or cuda");
}

const char* device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

void check_device_built(Device d) {
#ifndef DENDRITE_HAVE_CUDA
  DENDRITE_CHECK(d != Device::kCuda, "device: this build of dendrite has no CUDA backend; ",
                 "rebuild with `cmake -DDENDRITE_CUDA=ON` (needs the CUDA toolkit), or run with ",
                 "--device cpu");
#else
  (void)d;
#endif
}

}  // namespace dendrite
