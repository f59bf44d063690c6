// The backend of a device (backend.h): the CPU's always; CUDA's in a build
// configured with the CUDA backend (DENDRITE_CUDA).
#include "dendrite/backend/backend.h"

#include "dendrite/core/check.h"

namespace dendrite {

std::unique_ptr<Backend> make_cpu_backend();  // backend/cpu/cpu_backend.cpp
#ifdef DENDRITE_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);  // backend/cuda/
int cuda_device_count();
#endif

namespace {
CudaBackendSource& cuda_source() {
  static CudaBackendSource source;
  return source;
}
}  // namespace

void set_cuda_backend_source(const CudaBackendSource& source) { cuda_source() = source; }

std::unique_ptr<Backend> make_backend(Device device, const BackendOptions& options) {
  if (device == Device::kCpu) return make_cpu_backend();
  if (cuda_source().make) return cuda_source().make(options);
#ifdef DENDRITE_HAVE_CUDA
  return make_cuda_backend(options);
#else
  (void)options;
  fail("device: this build of dendrite has no CUDA backend; rebuild with `cmake -DDENDRITE_CUDA=ON` ",
       "(needs the CUDA toolkit), or run with --device cpu");
#endif
}

Device default_device() {
  if (cuda_source().device_count)
    return cuda_source().device_count() > 0 ? Device::kCuda : Device::kCpu;
#ifdef DENDRITE_HAVE_CUDA
  if (cuda_device_count() > 0) return Device::kCuda;
#endif
  return Device::kCpu;
}

Device resolve_device(const std::string& text) {
  return text == "auto" ? default_device() : parse_device(text);
}

}  // namespace dendrite
