// The emulated CUPTI activity API (cupti.h). Records wait in one list until
// cuptiActivityFlushAll packs them, 8-byte aligned, into buffers asked of
// the registered callback and hands each back to the other, as CUPTI does.
#include "cupti.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <variant>
#include <vector>

#include "race_check.h"

namespace {

using Record = std::variant<CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
                            CUpti_ActivityAPI>;

struct State {
  std::mutex mu;
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  bool enabled[16] = {};
  std::vector<Record> records;
  std::atomic<uint32_t> correlation{0};
};
State& state() {
  static State& s = *new State;  // never destroyed: work may run at exit
  return s;
}

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

bool enabled(CUpti_ActivityKind k) {
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  return s.enabled[k];
}

void add(Record r) {
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  s.records.push_back(r);
}

size_t padded(size_t n) { return (n + 7) / 8 * 8; }

size_t record_size(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return padded(sizeof(CUpti_ActivityKernel10));
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return padded(sizeof(CUpti_ActivityMemcpy6));
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return padded(sizeof(CUpti_ActivityMemset4));
    default:
      return padded(sizeof(CUpti_ActivityAPI));
  }
}

}  // namespace

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed) {
  if (!requested || !completed) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  s.requested = requested, s.completed = completed;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (unsigned(kind) >= 16) return CUPTI_ERROR_INVALID_KIND;
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  if (!s.requested) return CUPTI_ERROR_NOT_INITIALIZED;
  s.enabled[kind] = true;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (unsigned(kind) >= 16) return CUPTI_ERROR_INVALID_KIND;
  State& s = state();
  emu::race::QuietLock<std::mutex> lock(s.mu);
  s.enabled[kind] = false;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  State& s = state();
  std::vector<Record> records;
  CUpti_BuffersCallbackRequestFunc requested;
  CUpti_BuffersCallbackCompleteFunc completed;
  {
    emu::race::QuietLock<std::mutex> lock(s.mu);
    records.swap(s.records);
    requested = s.requested, completed = s.completed;
  }
  if (records.empty() || !requested) return CUPTI_SUCCESS;
  size_t next = 0;
  while (next < records.size()) {
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    requested(&buffer, &size, &max_records);
    if (!buffer) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t used = 0;
    for (; next < records.size(); ++next) {
      const Record& r = records[next];
      const CUpti_ActivityKind kind = std::visit([](const auto& x) { return x.kind; }, r);
      const size_t bytes = record_size(kind);
      if (used + bytes > size) break;
      std::visit([&](const auto& x) { std::memcpy(buffer + used, &x, sizeof x); }, r);
      used += bytes;
    }
    completed(nullptr, 0, buffer, size, used);
    if (used == 0) return CUPTI_ERROR_INVALID_PARAMETER;  // a buffer too small for one record
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  uint8_t* at = buffer;
  if (*record) at = reinterpret_cast<uint8_t*>(*record) + record_size((*record)->kind);
  if (at + sizeof(CUpti_Activity) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(at);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = 0;  // the list grows as needed
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = now_ns();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS:
      *str = "CUPTI_SUCCESS";
      break;
    case CUPTI_ERROR_INVALID_PARAMETER:
      *str = "CUPTI_ERROR_INVALID_PARAMETER";
      break;
    case CUPTI_ERROR_INVALID_KIND:
      *str = "CUPTI_ERROR_INVALID_KIND";
      break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED:
      *str = "CUPTI_ERROR_MAX_LIMIT_REACHED";
      break;
    case CUPTI_ERROR_NOT_INITIALIZED:
      *str = "CUPTI_ERROR_NOT_INITIALIZED";
      break;
    default:
      *str = "CUPTI_ERROR_UNKNOWN";
      break;
  }
  return CUPTI_SUCCESS;
}

namespace emu::activity {

std::function<void()> issue(Work kind, const char* name, uint64_t bytes, uint8_t copy_kind,
                            std::function<void()> work) {
  const CUpti_ActivityKind k = kind == Work::kKernel ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                               : kind == Work::kCopy ? CUPTI_ACTIVITY_KIND_MEMCPY
                                                     : CUPTI_ACTIVITY_KIND_MEMSET;
  if (!enabled(k)) return work ? std::move(work) : [] {};
  const uint32_t id = ++state().correlation;
  const uint64_t t = now_ns();
  if (enabled(CUPTI_ACTIVITY_KIND_RUNTIME)) {
    CUpti_ActivityAPI api{};
    api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    api.start = t, api.end = now_ns(), api.correlationId = id;
    add(api);
  }
  return [=, work = std::move(work)] {
    const uint64_t begin = now_ns();
    if (work) work();
    const uint64_t end = now_ns();
    if (!enabled(k)) return;  // ran after the profile stopped
    if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      CUpti_ActivityKernel10 r{};
      r.kind = k, r.start = begin, r.end = end, r.correlationId = id, r.name = name;
      add(r);
    } else if (k == CUPTI_ACTIVITY_KIND_MEMCPY) {
      CUpti_ActivityMemcpy6 r{};
      r.kind = k, r.copyKind = copy_kind, r.bytes = bytes;
      r.start = begin, r.end = end, r.correlationId = id;
      add(r);
    } else {
      CUpti_ActivityMemset4 r{};
      r.kind = k, r.bytes = bytes, r.start = begin, r.end = end, r.correlationId = id;
      add(r);
    }
  };
}

}  // namespace emu::activity
