#include "dendrite/core/device.h"

#include "dendrite/core/check.h"

namespace dendrite {

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::kCpu;
  if (text == "cuda") return Device::kCuda;
  fail("device: unknown device '", text, "'; use cpu, cuda or auto");
}

const char* device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

}  // namespace dendrite
