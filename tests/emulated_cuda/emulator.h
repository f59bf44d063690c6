// The core of the CUDA emulator (tests/emulated_cuda/): runs the CUDA
// backend's kernels on the CPU, for tests on machines without a GPU.
//
// A launch runs its blocks one after another. Each GPU thread of a block is a
// fiber (its own stack, switched cooperatively on one host thread), so that
// __syncthreads and the warp-wide primitives can stop a thread mid-kernel and
// let the others reach the same point, as on a GPU:
//   - __syncthreads: the block's threads that have not exited all arrive;
//   - a warp collective (shuffle, __syncwarp, the m16n8k16 product): every
//     lane of the warp arrives, with the same mask, which must name exactly
//     the lanes that exist and have not exited (else the launch fails: on a
//     GPU such a call is undefined);
//   - threads waiting at different barriers that no one can release are a
//     deadlock, reported as a failed launch.
// Dynamic shared memory starts filled with 0x7f bytes (a large finite float),
// so reading what no thread wrote shows in the results. Launch limits are an
// H100's: 1024 threads a block, 48 KB of dynamic shared memory unless the
// kernel's attribute allows more, up to 227 KB.
//
// What it checks: indexing, bounds, masking, barriers, the warp collectives'
// lanes, fragment layouts, launch configurations, and (with the sanitizers)
// every access to host memory standing for device memory. Races between
// threads that a barrier should have ordered show only as far as running the
// threads in both orders changes a result (set_reverse_order): fibers switch
// only at barriers. What it cannot: the GPU's timing, and the rounding of
// sums inside the hardware's products.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  unsigned x, y, z;
};

namespace emu {

// The running thread's coordinates (valid inside a kernel).
const uint3& thread_idx();
const uint3& block_idx();
const dim3& grid_dim();
const dim3& block_dim();
// The block's dynamic shared memory.
void* dynamic_shared();

// __syncthreads.
void block_barrier();
// Writes `bytes` (at most 32) of this lane's data to the warp's exchange
// area, waits for the lanes of `mask`, and returns the 32 lanes' areas
// (32 bytes each) of this call.
const unsigned char* warp_exchange(unsigned mask, const void* data, size_t bytes);
// The lane of the running thread, and whether lane `l` of its warp takes part.
int lane();
// Fails the launch (after the running thread stops) with `why`.
[[noreturn]] void kernel_error(const std::string& why);

// Runs body() on grid x block threads with `shared` bytes of dynamic shared
// memory; `kernel` keys the shared-memory attribute, `name` names it in errors.
// Returns false (and sets the runtime's last error) if the launch fails.
bool run(dim3 grid, dim3 block, size_t shared, const void* kernel, const char* name,
         const std::function<void()>& body);

// The launch of one kernel, as kernel<<<grid, block, shared, stream>>>(args).
template <class... P>
struct Launch {
  dim3 grid, block;
  size_t shared;
  const char* name;
  void (*kernel)(P...);
  template <class... A>
  void operator()(A&&... a) const {
    // Arguments converted to the parameters' types once, as a launch does.
    std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    run(grid, block, shared, reinterpret_cast<const void*>(kernel), name,
        [&] { std::apply(kernel, args); });
  }
};
template <class S, class... P>
Launch<P...> launch(dim3 grid, dim3 block, size_t shared, S /*stream*/, const char* name,
                    void (*kernel)(P...)) {
  return Launch<P...>{grid, block, shared, name, kernel};
}

// The value of lane src (a shuffle), for the lanes of mask.
template <class T>
T shuffle_from(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 32 && std::is_trivially_copyable_v<T>);
  const unsigned char* all = warp_exchange(mask, &v, sizeof(T));
  if (src < 0 || src > 31 || !(mask >> src & 1u))
    kernel_error("a shuffle reads lane " + std::to_string(src) + ", outside its mask");
  T out;
  std::memcpy(&out, all + 32 * src, sizeof(T));
  return out;
}

// d += a b for the warp's m16n8k16 bf16 fragments (mma.sync m16n8k16 row.col
// f32.bf16.bf16.f32; layouts as in the PTX ISA), products exact, summed in
// fp32 in k order.
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

// The settings tests make of the emulated device: emulated_backend.h.

}  // namespace emu
