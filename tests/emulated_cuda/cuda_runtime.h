// The CUDA runtime as the CUDA emulator gives it (emulator.h): the part of
// the runtime API, the device qualifiers, built-in variables, vector types
// and intrinsics that the CUDA backend (src/dendrite/backend/cuda) uses, so
// that its sources compile as C++ and run on the CPU. Tests only: the
// library built from it (tests/CMakeLists.txt, dendrite_cuda_emulated) puts
// this folder first on the include path in place of the toolkit's headers.
//
// Device memory is host memory the emulator tracks, filled with 0x7f bytes
// when allocated (pinned memory too). Streams run their work
// at once or concurrently (emulator.h); events record the host time at which
// their stream reached them. Host memory counts as pageable unless
// cudaMallocHost made it, with the GPU's rules: a copy from pageable memory
// takes the bytes when called, a copy to it returns once done; a copy from
// or to pinned memory runs in its stream's order. cudaFree waits for every stream's work, as on a
// GPU. A launch the GPU refuses fails when made; a failure while a kernel runs on a concurrent
// stream stays, returned by every synchronisation after it.
#pragma once

#define DENDRITE_CUDA_EMULATION 1
// The NCCL transport runs on the emulated NCCL of nccl.h.
#undef DENDRITE_HAVE_NCCL
#define DENDRITE_HAVE_NCCL 1

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "emulator.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// A kernel's shared memory is dynamic (DENDRITE_DYNAMIC_SHARED,
// backend/cuda/common.cuh; emu::dynamic_shared here): the emulator gives
// each block its own, filled with 0x7f bytes, at an address of its own, so
// that blocks run together under the race check are told apart. A static
// __shared__ variable would be one function static for all blocks: it does
// not compile here.
#define __shared__                                                                  \
  static_assert(false,                                                              \
                "a static __shared__ variable: declare the kernel's shared memory " \
                "with DENDRITE_DYNAMIC_SHARED and give its bytes at the launch");

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define gridDim (::emu::grid_dim())
#define blockDim (::emu::block_dim())

// ---- vector types (with the GPU's alignment: a misaligned vector access fails under UBSan)

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  uint32_t x, y;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// ---- intrinsics

inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask); }
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = emu::lane(), base = lane / width * width;
  return emu::shuffle_from(mask, v, base + (src % width));
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = emu::lane(), base = lane / width * width, src = lane - int(delta);
  return emu::shuffle_from(mask, v, src < base ? lane : src);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = emu::lane(), base = lane / width * width, src = lane + int(delta);
  return emu::shuffle_from(mask, v, src >= base + width ? lane : src);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = emu::lane(), base = lane / width * width, src = lane ^ lane_mask;
  return emu::shuffle_from(mask, v, src >= base + width ? lane : src);
}

inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return int(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(uint32_t(i)); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// One rounding each, as on the device, where nvcc never contracts these into
// a fused multiply-add: the value passes through an empty asm, which GCC
// (-ffp-contract=fast) cannot see through, so no product fuses into the add
// and the product is not fused into what reads it.
inline float exact_barrier(float v) {
#if defined(__x86_64__)
  __asm__("" : "+x"(v));
#elif defined(__aarch64__)
  __asm__("" : "+w"(v));
#else
  volatile float held = v;
  v = held;
#endif
  return v;
}
inline float __fmul_rn(float a, float b) { return exact_barrier(a * b); }
inline float __fadd_rn(float a, float b) {
  return exact_barrier(exact_barrier(a) + exact_barrier(b));
}
inline float __fsub_rn(float a, float b) {
  return exact_barrier(exact_barrier(a) - exact_barrier(b));
}
using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;

// ---- the runtime API

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorNotReady = 600,
  // Raised by a kernel while it runs (the emulator raises the first two).
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchTimeout = 702,
  cudaErrorAssert = 710,
  cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorInvalidAddressSpace = 717,
  cudaErrorInvalidPc = 718,
  cudaErrorLaunchFailure = 719,
};
using cudaStream_t = struct EmulatedStream*;
using cudaEvent_t = struct EmulatedEvent*;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlockOptin;
  int major, minor, multiProcessorCount;
};
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;

const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t emulated_set_attribute(const void* kernel, cudaFuncAttribute attr, int value);
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  return emulated_set_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}
struct cudaFuncAttributes {
  int maxThreadsPerBlock, numRegs, binaryVersion, ptxVersion;
};
// No kernel image where emu::set_kernel_image(false) says the build has none.
cudaError_t emulated_get_attributes(cudaFuncAttributes* a, const void* kernel);
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F* kernel) {
  return emulated_get_attributes(a, reinterpret_cast<const void*>(kernel));
}
