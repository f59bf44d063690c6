// The backend of a device (backend.h): the CPU's always; CUDA's in a build
// configured with -DDENDRITE_CUDA=ON.
#include "dendrite/backend/backend.h"

#include "dendrite/core/check.h"

namespace dendrite {

std::unique_ptr<Backend> make_cpu_backend();  // backend/cpu/cpu_backend.cpp
#ifdef DENDRITE_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend();  // backend/cuda/
#endif

std::unique_ptr<Backend> make_backend(Device device) {
  if (device == Device::kCpu) return make_cpu_backend();
#ifdef DENDRITE_HAVE_CUDA
  return make_cuda_backend();
#else
  fail("device: this build of dendrite has no CUDA backend; rebuild with `cmake -DDENDRITE_CUDA=ON` ",
       "(needs the CUDA toolkit), or run with --device cpu");
#endif
}

}  // namespace dendrite
