// The part of CUPTI's activity API (cupti_activity.h) that
// backend/cuda/device_profile.cpp uses, for the CPU emulator: kernels
// (emulated cuBLASLt products among them), copies and memsets recorded with
// the times they ran on the emulated GPU, and runtime-API records with the
// host time that issued them, joined by correlation ids; delivered in
// buffers from the registered callbacks at cuptiActivityFlushAll, walked with
// cuptiActivityGetNextRecord, as CUPTI does. The records carry the fields
// the backend reads, under CUPTI's names. Tests only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#define CUPTIAPI

typedef struct CUctx_st* CUcontext;

enum CUptiResult {
  CUPTI_SUCCESS = 0,
  CUPTI_ERROR_INVALID_PARAMETER = 1,
  CUPTI_ERROR_INVALID_KIND = 5,
  CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
  CUPTI_ERROR_NOT_INITIALIZED = 15,
};

enum CUpti_ActivityKind {
  CUPTI_ACTIVITY_KIND_INVALID = 0,
  CUPTI_ACTIVITY_KIND_MEMCPY = 1,
  CUPTI_ACTIVITY_KIND_MEMSET = 2,
  CUPTI_ACTIVITY_KIND_DRIVER = 4,
  CUPTI_ACTIVITY_KIND_RUNTIME = 5,
  CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
};

enum CUpti_ActivityMemcpyKind {
  CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN = 0,
  CUPTI_ACTIVITY_MEMCPY_KIND_HTOD = 1,
  CUPTI_ACTIVITY_MEMCPY_KIND_DTOH = 2,
  CUPTI_ACTIVITY_MEMCPY_KIND_DTOD = 8,
};

enum CUpti_ActivityFlag { CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1 << 0 };

struct CUpti_Activity {
  CUpti_ActivityKind kind;
};
struct CUpti_ActivityKernel10 {
  CUpti_ActivityKind kind;
  uint64_t start, end;
  uint32_t correlationId;
  const char* name;
};
struct CUpti_ActivityMemcpy6 {
  CUpti_ActivityKind kind;
  uint8_t copyKind;
  uint64_t bytes;
  uint64_t start, end;
  uint32_t correlationId;
};
struct CUpti_ActivityMemset4 {
  CUpti_ActivityKind kind;
  uint32_t value;
  uint64_t bytes;
  uint64_t start, end;
  uint32_t correlationId;
};
struct CUpti_ActivityAPI {
  CUpti_ActivityKind kind;
  uint32_t cbid;
  uint64_t start, end;
  uint32_t processId, threadId;
  uint32_t correlationId;
};

typedef void(CUPTIAPI* CUpti_BuffersCallbackRequestFunc)(uint8_t** buffer, size_t* size,
                                                         size_t* maxNumRecords);
typedef void(CUPTIAPI* CUpti_BuffersCallbackCompleteFunc)(CUcontext context, uint32_t streamId,
                                                          uint8_t* buffer, size_t size,
                                                          size_t validSize);

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed);
CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind);
CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind);
CUptiResult cuptiActivityFlushAll(uint32_t flag);
CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record);
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                              size_t* dropped);
CUptiResult cuptiGetTimestamp(uint64_t* timestamp);
CUptiResult cuptiGetResultString(CUptiResult result, const char** str);

namespace emu::activity {

// The emulator's hook where it issues device work (a launch, a product, a
// copy, a memset): while a kind is enabled, an API record at the host's time
// now and a correlation id; the work returned records its own start and end
// when it runs. Otherwise `work` comes back as it was (a null one as work
// that does nothing: count-only mode issues without running).
enum class Work { kKernel, kCopy, kMemset };
std::function<void()> issue(Work kind, const char* name, uint64_t bytes, uint8_t copy_kind,
                            std::function<void()> work);

}  // namespace emu::activity
