// The CPU backend's memory, stream and description (cpu_backend.h); its ops
// are defined in the kernel files of their families.
#include "dendrite/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "dendrite/backend/cpu/gemm.h"
#include "dendrite/core/check.h"

namespace dendrite {

namespace cpu {

namespace {

void move(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

}  // namespace

std::string CpuBackend::describe() const {
  return str("cpu (", omp_get_max_threads(), " threads; bf16 GEMMs ",
             cpu::bf16_gemm_native() ? "native" : "widened to fp32", ")");
}

void* CpuBackend::allocate(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}

void CpuBackend::release(void* p) { std::free(p); }

void CpuBackend::zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }

std::unique_ptr<SharedArray> CpuBackend::allocate_shared(Communicator& group, int64_t n, DType t) {
  return group.allocate_shared(n, t);
}

void CpuBackend::upload(void* dst, const void* host, size_t bytes) { move(dst, host, bytes); }

void CpuBackend::download(void* host, const void* src, size_t bytes) { move(host, src, bytes); }

void CpuBackend::copy(void* dst, const void* src, size_t bytes) { move(dst, src, bytes); }

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace dendrite
