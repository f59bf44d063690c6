// The CUDA emulator's runtime (cuda_runtime.h): its state, the errors it
// keeps (each host thread's last, and the one a failed stream leaves), the
// device, and device and pinned memory with the copies between them.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "counters.h"
#include "cuda_runtime.h"
#include "cupti.h"
#include "emulated_backend.h"
#include "emulator.h"
#include "emulator_internal.h"
#include "race_check.h"

namespace emu {

Runtime& rt() {
  static Runtime& r = *new Runtime;  // never destroyed, as sched()
  return r;
}

namespace {
// The calling thread's last error, as the runtime keeps one per host thread.
thread_local cudaError_t t_last = cudaSuccess;
thread_local std::string t_last_detail;
}  // namespace
thread_local bool t_stream_worker = false;  // the thread runs a concurrent stream's work

cudaError_t fail(cudaError_t e, const std::string& detail) {
  std::fprintf(stderr, "cuda emulator: %s\n", detail.c_str());
  if (t_stream_worker) {
    emu::race::QuietLock<std::mutex> lock(rt().memory);
    if (rt().sticky == cudaSuccess) rt().sticky = e, rt().sticky_detail = detail;
  } else {
    t_last = e;
    t_last_detail = detail;
  }
  return e;
}
cudaError_t sticky_error() {
  emu::race::QuietLock<std::mutex> lock(rt().memory);
  return rt().sticky;
}

void set_device_memory(size_t bytes) { rt().capacity = bytes; }
void set_device_count(int n) { rt().devices = n; }
void set_compute_capability(int major, int minor) { rt().major = major, rt().minor = minor; }
void set_kernel_image(bool present) { rt().kernel_image = present; }

void fault_next_launch(const std::string& name) {
  emu::race::QuietLock<std::mutex> lock(rt().memory);
  rt().fault = name;
}

void clear_errors() {
  {
    emu::race::QuietLock<std::mutex> lock(rt().memory);
    rt().sticky = cudaSuccess;
    rt().sticky_detail.clear();
  }
  t_last = cudaSuccess;
  t_last_detail.clear();
}

void stream_error(int cuda_error, const std::string& detail) {
  fail(cudaError_t(cuda_error), detail);
}

}  // namespace emu

// ---- the runtime API (cuda_runtime.h)

namespace {

// Whether [p, p + bytes) lies inside one device allocation.
bool within(const std::map<uintptr_t, size_t>& a, const void* p, size_t bytes) {
  emu::race::QuietLock<std::mutex> lock(emu::rt().memory);
  const auto u = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(u);
  if (it == a.begin()) return false;
  --it;
  return u >= it->first && u + bytes <= it->first + it->second;
}
bool on_device(const void* p, size_t bytes) { return within(emu::rt().allocations, p, bytes); }
bool pinned(const void* p, size_t bytes) { return within(emu::rt().pinned, p, bytes); }
// After a kernel's fault, CUDA's calls return it (a sticky error), the
// allocations too, with no memory.
cudaError_t refused_after_fault(void** p) {
  const cudaError_t sticky = emu::sticky_error();
  if (sticky != cudaSuccess) *p = nullptr;
  return sticky;
}

}  // namespace

const char* cudaGetErrorString(cudaError_t e) {
  static thread_local std::string text;
  const char* base = e == cudaSuccess                     ? "no error"
                     : e == cudaErrorInvalidValue         ? "invalid argument"
                     : e == cudaErrorMemoryAllocation     ? "out of memory"
                     : e == cudaErrorInvalidConfiguration ? "invalid configuration argument"
                     : e == cudaErrorInvalidDevice        ? "invalid device ordinal"
                     : e == cudaErrorNotReady             ? "device not ready"
                     : e == cudaErrorIllegalAddress ? "an illegal memory access was encountered"
                     : e == cudaErrorLaunchFailure  ? "unspecified launch failure"
                     : e == cudaErrorNoKernelImageForDevice
                         ? "no kernel image is available for execution on the device"
                         : "unknown error";
  text = base;
  std::string detail;
  {
    emu::race::QuietLock<std::mutex> lock(emu::rt().memory);
    detail = emu::rt().sticky != cudaSuccess ? emu::rt().sticky_detail : emu::t_last_detail;
  }
  if (e != cudaSuccess && !detail.empty()) text += " (emulator: " + detail + ")";
  return text.c_str();
}

cudaError_t cudaGetLastError() {
  const cudaError_t sticky = emu::sticky_error();
  if (sticky != cudaSuccess) return sticky;  // a failed stream's error stays
  const cudaError_t e = emu::t_last;
  emu::t_last = cudaSuccess;
  return e;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = emu::rt().devices;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  return d >= 0 && d < emu::rt().devices
             ? cudaSuccess
             : emu::fail(cudaErrorInvalidDevice, "cudaSetDevice: no such device");
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d < 0 || d >= emu::rt().devices)
    return emu::fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no such device");
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "CUDA emulator on the CPU");
  p->totalGlobalMem = emu::rt().capacity;
  p->sharedMemPerBlockOptin = emu::kOptInSharedLimit;
  p->major = emu::rt().major, p->minor = emu::rt().minor, p->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (const cudaError_t sticky = refused_after_fault(p); sticky != cudaSuccess) return sticky;
  auto& r = emu::rt();
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  emu::race::QuietLock<std::mutex> lock(r.memory);
  if (r.used + rounded > r.capacity) {
    lock.held.unlock();
    *p = nullptr;
    return emu::fail(cudaErrorMemoryAllocation, "cudaMalloc: out of device memory");
  }
  // Exactly the bytes asked (256-byte aligned, as cudaMalloc's): the
  // sanitizers see an access past them.
  if (posix_memalign(p, 256, std::max<size_t>(bytes, 1)) != 0) {
    lock.held.unlock();
    return emu::fail(cudaErrorMemoryAllocation, "cudaMalloc: host allocation failed");
  }
  // Filled with 0x7f bytes, as a block's shared memory is: a GPU's new
  // allocation holds whatever was there, so what a kernel or a copy reads
  // before anything wrote it shows in the results (a fresh host allocation
  // would most often be zeros). Counting without running reads no device
  // memory, so there the pages stay untouched: a model past the host's
  // memory can still be counted.
  if (!emu::counters::count_only()) std::memset(*p, 0x7f, bytes);
  r.allocations[reinterpret_cast<uintptr_t>(*p)] = bytes;
  r.used += rounded;
  emu::counters::allocation(bytes);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  emu::drain_all();  // as on a GPU, the work every stream has enqueued runs first
  auto& r = emu::rt();
  emu::race::QuietLock<std::mutex> lock(r.memory);
  auto it = r.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.allocations.end()) {
    lock.held.unlock();
    return emu::fail(cudaErrorInvalidValue, "cudaFree of a pointer not from cudaMalloc");
  }
  r.used -= (std::max<size_t>(it->second, 1) + 255) / 256 * 256;
  emu::counters::free(it->second);
  emu::counters::sync("cudaFree");
  r.allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}
// Pinned host memory: a copy from it reads it when the copy runs, as a GPU's
// does, so a buffer written again before its copy has run is caught.
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (const cudaError_t sticky = refused_after_fault(p); sticky != cudaSuccess) return sticky;
  if (posix_memalign(p, 256, std::max<size_t>(bytes, 1)) != 0)
    return emu::fail(cudaErrorMemoryAllocation, "cudaMallocHost: host allocation failed");
  std::memset(*p, 0x7f, bytes);  // as cudaMalloc's
  emu::race::QuietLock<std::mutex> lock(emu::rt().memory);
  emu::rt().pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  emu::drain_all();
  auto& r = emu::rt();
  emu::race::QuietLock<std::mutex> lock(r.memory);
  if (r.pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0) {
    lock.held.unlock();
    return emu::fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer not from cudaMallocHost");
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (const cudaError_t sticky = emu::sticky_error(); sticky != cudaSuccess) return sticky;
  emu::race::QuietLock<std::mutex> lock(emu::rt().memory);
  *total = emu::rt().capacity;
  *free = emu::rt().capacity - emu::rt().used;
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = cudaPointerAttributes{};
  a->type = p && on_device(p, 1) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  if (!bytes) return cudaSuccess;
  if (!on_device(p, bytes))
    return emu::fail(cudaErrorInvalidValue, "cudaMemsetAsync: the range is not device memory");
  emu::counters::memset(bytes);
  auto work = emu::activity::issue(emu::activity::Work::kMemset, "memset", bytes, 0,
                                   [=] { std::memset(p, value, bytes); });
  if (!emu::counters::count_only()) emu::submit(s, std::move(work));
  return cudaSuccess;
}
// Host memory is pageable unless cudaMallocHost made it, with the GPU's rules
// for it: a copy from pageable memory takes the bytes when called and writes
// them in the stream's order, one from pinned memory reads them when it runs;
// a copy to pageable memory returns once it has run, one to pinned memory
// at once (the host reads it after waiting for its stream, or an event).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (!bytes) return cudaSuccess;
  const bool dst_dev = on_device(dst, bytes), src_dev = on_device(src, bytes);
  const bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault && (dst_dev != want_dst || src_dev != want_src))
    return emu::fail(cudaErrorInvalidValue,
                     std::string("cudaMemcpyAsync: the ") +
                         (dst_dev != want_dst ? "destination" : "source") + " is " +
                         ((dst_dev != want_dst ? dst_dev : src_dev) ? "" : "not ") +
                         "device memory, against the copy's kind");
  emu::counters::copy(
      dst_dev
          ? (src_dev ? emu::counters::Copy::kDeviceToDevice : emu::counters::Copy::kHostToDevice)
          : (src_dev ? emu::counters::Copy::kDeviceToHost : emu::counters::Copy::kHostToHost),
      bytes);
  // A copy the GPU runs (CUPTI's record of it, when profiling).
  auto traced = [&](uint8_t kind, std::function<void()> work) {
    return emu::activity::issue(emu::activity::Work::kCopy, "copy", bytes, kind, std::move(work));
  };
  if (!dst_dev && !src_dev) {
    std::memmove(dst, src, bytes);
  } else if (dst_dev && src_dev) {
    auto work = traced(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, [=] { std::memmove(dst, src, bytes); });
    if (!emu::counters::count_only()) emu::submit(s, std::move(work));
  } else if (dst_dev && pinned(src, bytes)) {
    emu::submit(s, traced(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, [=] { std::memcpy(dst, src, bytes); }));
  } else if (dst_dev) {
    const auto* from = static_cast<const unsigned char*>(src);
    // Held by the work alone, as a launch's arguments are (emulator.h).
    auto staged = std::make_shared<std::vector<unsigned char>>(from, from + bytes);
    emu::submit(s, traced(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, [=, staged = std::move(staged)] {
                  std::memcpy(dst, staged->data(), bytes);
                }));
  } else if (pinned(dst, bytes)) {
    emu::submit(s, traced(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, [=] { std::memcpy(dst, src, bytes); }));
  } else {
    emu::counters::sync("cudaMemcpyAsync to pageable host memory");
    const auto& q = emu::queue_of(s);
    emu::wait_for(*q, emu::enqueue(q, traced(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH,
                                             [=] { std::memmove(dst, src, bytes); })));
  }
  return emu::sticky_error();
}
cudaError_t emulated_get_attributes(cudaFuncAttributes* a, const void*) {
  *a = cudaFuncAttributes{};
  if (!emu::rt().kernel_image)
    return emu::fail(cudaErrorNoKernelImageForDevice,
                     "cudaFuncGetAttributes: no kernel image is available for execution on the "
                     "device (emu::set_kernel_image)");
  a->maxThreadsPerBlock = 1024;
  a->binaryVersion = a->ptxVersion = emu::rt().major * 10 + emu::rt().minor;
  return cudaSuccess;
}
cudaError_t emulated_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      size_t(value) > emu::kOptInSharedLimit)
    return emu::fail(cudaErrorInvalidValue,
                     "cudaFuncSetAttribute: " + std::to_string(value) +
                         " bytes of dynamic shared memory, past the device's 227 KB");
  emu::race::QuietLock<std::mutex> lock(emu::rt().memory);
  emu::rt().shared_limit[kernel] = size_t(value);
  return cudaSuccess;
}
