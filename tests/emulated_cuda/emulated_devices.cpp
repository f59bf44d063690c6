// The backends of the devices for dendrite_emulated (tests/CMakeLists.txt),
// in place of src/dendrite/backend/backend.cpp, which that program does not
// link: the CPU backend for cpu, and for cuda the CUDA backend compiled for
// the CPU emulator (dendrite_cuda_emulated), its ops named for the counters
// (counting_backend.h), so that whole runs of `dendrite` take the CUDA
// backend's code paths on machines without a GPU. Both functions of
// backend.h that backend.cpp defines are defined here.
#include "counting_backend.h"
#include "dendrite/backend/backend.h"
#include "emulated_backend.h"

namespace dendrite {

std::unique_ptr<Backend> make_cpu_backend();  // backend/cpu/cpu_backend.cpp

std::unique_ptr<Backend> make_backend(Device device, const BackendOptions& options) {
  if (device == Device::kCpu) return make_cpu_backend();
  return make_counting_backend(make_emulated_cuda_backend(options));
}

// cuda where the emulated machine shows a GPU (emu::set_device_count).
Device default_device() { return emulated_cuda_device_count() > 0 ? Device::kCuda : Device::kCpu; }

}  // namespace dendrite
