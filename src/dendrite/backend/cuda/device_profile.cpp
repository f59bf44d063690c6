#include "dendrite/backend/cuda/device_profile.h"

#include <cuda_runtime.h>  // the emulator's defines DENDRITE_CUDA_EMULATION

#include "dendrite/core/check.h"

#if defined(DENDRITE_HAVE_CUPTI) || defined(DENDRITE_CUDA_EMULATION)

#include <cupti.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "dendrite/core/log.h"
#include "dendrite/core/trace.h"

namespace dendrite::cuda {

namespace {

// A record as CUPTI gives it: CUPTI's timestamps (ns), its correlation id.
struct Raw {
  DeviceActivity::Kind kind;
  std::string name;
  uint64_t begin, end;
  uint32_t correlation;
  int64_t bytes;
};

// What the running profile has received (CUPTI's callbacks reach it here).
struct Received {
  std::vector<Raw> records;
  std::unordered_map<uint32_t, uint64_t> issued;  // correlation id -> the API call's start
};
std::mutex g_mutex;
Received* g_received = nullptr;  // the running profile's; null when none runs

constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

void check_cupti(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* what = nullptr;
  cuptiGetResultString(r, &what);
  fail("cuda: ", call, " failed: ", what ? what : "an unknown CUPTI error",
       "; the GPU's profiler (CUPTI) cannot record here: run without --profile");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

const char* copy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "copy host to device";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "copy device to host";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "copy device to device";
    default:
      return "copy (other)";
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    CUpti_Activity* r = nullptr;
    while (g_received && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
      std::vector<Raw>& out = g_received->records;
      switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
          out.push_back({DeviceActivity::Kind::kKernel, k->name ? k->name : "(unnamed kernel)",
                         k->start, k->end, k->correlationId, 0});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
          out.push_back({DeviceActivity::Kind::kCopy, copy_name(c->copyKind), c->start, c->end,
                         c->correlationId, int64_t(c->bytes)});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
          out.push_back({DeviceActivity::Kind::kMemset, "memset", m->start, m->end,
                         m->correlationId, int64_t(m->bytes)});
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
          const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
          g_received->issued.emplace(a->correlationId, a->start);
          break;
        }
        default:
          break;
      }
    }
  }
  std::free(buffer);
}

// Disables the kinds and delivers what CUPTI holds.
void stop_recording() {
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

}  // namespace

std::string device_profile_missing() { return ""; }

struct DeviceProfile::State {
  Received received;
  double offset = 0;  // trace::now() - CUPTI's time, in seconds
  bool finished = false;
};

DeviceProfile::DeviceProfile() : state_(std::make_unique<State>()) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    DENDRITE_CHECK(!g_received, "profile: a device profile is already running in this process; ",
                   "CUPTI records for one at a time");
    g_received = &state_->received;
  }
  static std::once_flag registered;
  std::call_once(registered, [] {
    check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                "cuptiActivityRegisterCallbacks");
  });
  uint64_t t = 0;
  check_cupti(cuptiGetTimestamp(&t), "cuptiGetTimestamp");
  state_->offset = trace::now() - double(t) * 1e-9;
  for (CUpti_ActivityKind k : kKinds) {
    const CUptiResult r = cuptiActivityEnable(k);
    if (r != CUPTI_SUCCESS) {
      stop_recording();
      std::lock_guard<std::mutex> lock(g_mutex);
      g_received = nullptr;
      check_cupti(r, "cuptiActivityEnable");
    }
  }
}

DeviceProfile::~DeviceProfile() {
  if (state_->finished) return;
  stop_recording();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_received = nullptr;
}

std::vector<DeviceActivity> DeviceProfile::finish() {
  DENDRITE_CHECK(!state_->finished, "profile: finish() was called twice");
  stop_recording();
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped > 0)
    log_error(str("profile: CUPTI dropped ", dropped, " activity records (its buffers were ",
                  "full): the profile misses some of the device's work; profile fewer steps"));
  Received got;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    got = std::move(state_->received);
    g_received = nullptr;
  }
  state_->finished = true;
  const double off = state_->offset;
  std::vector<DeviceActivity> out;
  out.reserve(got.records.size());
  for (Raw& r : got.records) {
    DeviceActivity a;
    a.kind = r.kind;
    a.name = std::move(r.name);
    a.begin = double(r.begin) * 1e-9 + off;
    a.end = double(r.end) * 1e-9 + off;
    if (auto it = got.issued.find(r.correlation); it != got.issued.end())
      a.issued = double(it->second) * 1e-9 + off;
    a.bytes = r.bytes;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace dendrite::cuda

#else  // a toolkit without CUPTI

namespace dendrite::cuda {

std::string device_profile_missing() {
  return "this build found no CUPTI (the CUDA toolkit's cupti.h and libcupti) when it was "
         "configured; install the toolkit's CUPTI and reconfigure";
}

struct DeviceProfile::State {};

DeviceProfile::DeviceProfile() { fail("profile: ", device_profile_missing()); }
DeviceProfile::~DeviceProfile() = default;
std::vector<DeviceActivity> DeviceProfile::finish() { return {}; }

}  // namespace dendrite::cuda

#endif
