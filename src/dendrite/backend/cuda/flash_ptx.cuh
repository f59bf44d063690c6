// The inline PTX of the tensor-core attention kernels (flash_mma.cuh):
// mma.sync m16n8k16 with bf16 operands, ldmatrix, and cp.async with its
// groups. Under the tests' CPU emulator (DENDRITE_CUDA_EMULATION) each calls
// its stand-in in tests/emulated_cuda (emulator.h), which checks what the
// PTX ISA requires of it: the whole warp for mma and ldmatrix, 16-byte
// aligned rows in shared memory, copies that land only at their wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dendrite::cuda::flash {

// d = a b + d: one m16n8k16 product with bf16 operands and fp32 accumulation.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
#ifdef DENDRITE_CUDA_EMULATION
  emu::mma_m16n8k16_bf16(d, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
// Four 8 x 8 b16 matrices from shared memory: lane l gives `row`, the
// address of row l % 8 of matrix l / 8 (16-byte aligned); r[m] gets matrix
// m's row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#ifdef DENDRITE_CUDA_EMULATION
  emu::ldmatrix(r, 4, false, row);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(uint32_t(__cvta_generic_to_shared(row)))
               : "memory");
#endif
}
// Two such matrices: lanes 0-15 give the rows (lanes 16-31 must give
// addresses too, unread).
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const uint16_t* row) {
#ifdef DENDRITE_CUDA_EMULATION
  emu::ldmatrix(r, 2, false, row);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(uint32_t(__cvta_generic_to_shared(row)))
               : "memory");
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const uint16_t* row) {
#ifdef DENDRITE_CUDA_EMULATION
  emu::ldmatrix(r, 2, true, row);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(uint32_t(__cvta_generic_to_shared(row)))
               : "memory");
#endif
}
// The same with each matrix transposed: r[m] gets rows 2 (l % 4) and
// 2 (l % 4) + 1 of column l / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
#ifdef DENDRITE_CUDA_EMULATION
  emu::ldmatrix(r, 4, true, row);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(uint32_t(__cvta_generic_to_shared(row)))
               : "memory");
#endif
}
// ---- asynchronous copies from device to shared memory

// 16 bytes from device to shared memory: the first src_bytes (0 or 16) of
// src, zeros after. Lands at the thread's next cp_async_wait_all.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
#ifdef DENDRITE_CUDA_EMULATION
  emu::cp_async(dst, src, 16, src_bytes);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   uint32_t(__cvta_generic_to_shared(dst))),
               "l"(__cvta_generic_to_global(src)), "r"(src_bytes)
               : "memory");
#endif
}
// The same for 4 bytes (.ca: .cg copies 16 only).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
#ifdef DENDRITE_CUDA_EMULATION
  emu::cp_async(dst, src, 4, src_bytes);
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   uint32_t(__cvta_generic_to_shared(dst))),
               "l"(__cvta_generic_to_global(src)), "r"(src_bytes)
               : "memory");
#endif
}
// The thread's copies since the last commit become one group.
__device__ __forceinline__ void cp_async_commit() {
#ifdef DENDRITE_CUDA_EMULATION
  emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits for every group the thread committed.
__device__ __forceinline__ void cp_async_wait_all() {
#ifdef DENDRITE_CUDA_EMULATION
  emu::cp_async_wait(0);
#else
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

}  // namespace dendrite::cuda::flash
