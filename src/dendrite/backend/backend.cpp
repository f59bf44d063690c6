// The backends of the devices (backend.h: make_backend, default_device): the
// CPU's always; CUDA's in a build configured with the CUDA backend
// (DENDRITE_CUDA). This file defines those two alone: a program that links
// its own definitions of both instead (the tests' dendrite_emulated, whose
// CUDA backend runs on the CPU emulator) never links this one.
#include "dendrite/backend/backend.h"

#ifdef DENDRITE_HAVE_CUDA
#include "dendrite/backend/cuda/device_setup.h"
#endif
#include "dendrite/core/check.h"

namespace dendrite {

std::unique_ptr<Backend> make_cpu_backend();  // backend/cpu/cpu_backend.cpp

std::unique_ptr<Backend> make_backend(Device device, const BackendOptions& options) {
  if (device == Device::kCpu) return make_cpu_backend();
#ifdef DENDRITE_HAVE_CUDA
  return cuda::make_backend(options);
#else
  (void)options;
  fail("device: this build of dendrite has no CUDA backend; rebuild with `cmake -DDENDRITE_CUDA=ON` ",
       "(needs the CUDA toolkit), or run with --device cpu");
#endif
}

Device default_device() {
#ifdef DENDRITE_HAVE_CUDA
  if (cuda::device_count() > 0) return Device::kCuda;
#endif
  return Device::kCpu;
}

}  // namespace dendrite
