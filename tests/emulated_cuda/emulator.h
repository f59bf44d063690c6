// The core of the CUDA emulator (tests/emulated_cuda/): runs the CUDA
// backend's kernels on the CPU, for tests on machines without a GPU.
//
// A launch runs its blocks one after another, or several together
// (set_interleaved_blocks: a tile of the grid), their threads interleaved at
// barriers. Each GPU
// thread of a block is a fiber (its own stack, switched cooperatively on one
// host thread), so that __syncthreads and the warp-wide primitives can stop
// a thread mid-kernel and let the others reach the same point, as on a GPU:
//   - __syncthreads: the block's threads that have not exited all arrive;
//   - a warp collective (shuffle, __syncwarp, the m16n8k16 product): every
//     lane of the warp arrives, with the same mask, which must name exactly
//     the lanes that exist and have not exited (else the launch fails: on a
//     GPU such a call is undefined);
//   - threads waiting at different barriers that no one can release are a
//     deadlock, reported as a failed launch.
// Each block's shared memory, dynamic and static, starts filled with 0x7f
// bytes (a large finite float), so reading what no thread of the block wrote
// shows in the results. Launch limits are an H100's: 1024 threads a block,
// 48 KB of dynamic shared memory unless the kernel's attribute allows more,
// up to 227 KB.
//
// Streams run their work in one of two ways (emulated_backend.h,
// set_streams): at once, on the calling thread before the call returns (the
// default); or concurrently, each stream a host thread that runs its work in
// order, so that only events, stream waits and synchronisations order one
// stream's work against another's and the host's, as on a GPU. Kernels still
// run one at a time; what runs concurrently is the rest of a stream's queue
// (the emulated NCCL's collectives, waits for events) and the host.
//
// What it checks: indexing, bounds, masking, barriers, the warp collectives'
// lanes, fragment layouts, launch configurations, and (with the sanitizers)
// every access to host memory standing for device memory. Races between
// threads that a barrier should have ordered show only as far as running the
// threads in both orders changes a result (set_reverse_order): fibers switch
// only at barriers; races between blocks, as far as running the blocks in
// both orders or interleaved changes one. Built with ThreadSanitizer, it
// reports a race between the threads of a block, or between blocks run
// together, or between the host and a stream's work (or two streams' copies
// and collectives), whatever the order, as far as ThreadSanitizer's history
// reaches (race_check.h). What it cannot: the GPU's timing, and the rounding of sums
// inside the hardware's products.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

struct uint3 {
  unsigned x, y, z;
};
struct EmulatedStream;  // a cudaStream_t

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
// __syncwarp(mask): warp_exchange's wait, and the lanes' memory ordered
// (the race check, race_check.h).
void warp_barrier(unsigned mask);
// The lane of the running thread, and whether lane `l` of its warp takes part.
int lane();
// For the race check (race_check.h): while a Hidden lives, the running
// thread's reads and writes are the emulator's bookkeeping (the warp's
// exchange area, the scheduler's state), which ThreadSanitizer neither checks
// nor keeps. warp_exchange's callers read its result under one. Nothing
// outside a build with ThreadSanitizer.
void hide_begin();
void hide_end();
struct Hidden {
#if defined(__SANITIZE_THREAD__)
  Hidden() { hide_begin(); }
  ~Hidden() { hide_end(); }
  Hidden(const Hidden&) = delete;
  Hidden& operator=(const Hidden&) = delete;
#endif
};
// Fails the launch (after the running thread stops) with `why`. By value,
// and moved into the launch's error: the thread never returns, so a string
// left to the caller to free would leak.
[[noreturn]] void kernel_error(std::string why);

// Enqueues work on stream s (null: the default stream, which runs its work at
// once); it runs after the work enqueued on s before it.
void submit(EmulatedStream* s, std::function<void()> work);
// Fails the work running on a stream with `detail`: as a fault on a GPU, the
// error stays, and every synchronisation and cudaGetLastError after returns
// it. On the calling thread (a stream that runs its work at once), it is the
// thread's last error instead.
void stream_error(int cuda_error, const std::string& detail);
// Marks s as a stream that carries collectives (set_streams' delays).
void carries_collectives(EmulatedStream* s);

// Runs body() on grid x block threads with `shared` bytes of dynamic shared
// memory, on `stream`; `kernel` keys the shared-memory attribute, `name`
// names it in errors. A launch the GPU would refuse fails at once (false, and
// the runtime's last error set); a failure while the blocks run is the
// stream's (stream_error).
bool run(EmulatedStream* stream, dim3 grid, dim3 block, size_t shared, const void* kernel,
         const char* name, std::function<void()> body);

// The launch of one kernel, as kernel<<<grid, block, shared, stream>>>(args).
template <class... P>
struct Launch {
  dim3 grid, block;
  size_t shared;
  EmulatedStream* stream;
  const char* name;
  void (*kernel)(P...);
  template <class... A>
  void operator()(A&&... a) const {
    // Arguments converted to the parameters' types once, as a launch does,
    // and kept with the work until it runs: by the work alone, so that the
    // stream frees them (the host freeing them after the work ran would be,
    // to the race check, a write the work's reads are not ordered before).
    auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(a)...);
    run(stream, grid, block, shared, reinterpret_cast<const void*>(kernel), name,
        [k = kernel, args = std::move(args)] { std::apply(k, *args); });
  }
};
template <class... P>
Launch<P...> launch(dim3 grid, dim3 block, size_t shared, EmulatedStream* stream,
                    const char* name, void (*kernel)(P...)) {
  return Launch<P...>{grid, block, shared, stream, name, kernel};
}

// The value of lane src (a shuffle), for the lanes of mask.
template <class T>
T shuffle_from(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 32 && std::is_trivially_copyable_v<T>);
  [[maybe_unused]] const Hidden hidden{};
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

// For tile_copies.cpp: the block's dynamic shared memory's size, and a
// number no other block of the process has had (so that state a thread
// keeps for its block is not taken for the next block's).
size_t dynamic_shared_bytes();
uint64_t block_serial();
// The running thread's place among the threads of the blocks running
// together (blocks may interleave: set_interleaved_blocks).
size_t thread_slot();

// ---- the tensor-core kernels' tile copies (tile_copies.cpp)

// ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16, a warp collective
// (all 32 lanes): lane l gives `row`, the address of row l % 8 of matrix l / 8
// (8 b16, 16-byte aligned, in the block's dynamic shared memory; lanes past
// the matrices' rows give none that is read), and reads it as it arrives,
// before the other lanes run on. Register m of lane l gets,
// packed with the lower column in the lower half, row l / 4 at columns
// 2 (l % 4) and 2 (l % 4) + 1 of matrix m; with `trans`, rows 2 (l % 4) and
// 2 (l % 4) + 1 of column l / 4 (the matrix transposed). Those are the
// layouts the PTX ISA gives (and mma m16n8k16 reads).
void ldmatrix(uint32_t* regs, int matrices, bool trans, const void* row);
// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes (bytes 4, 8
// or 16, both addresses aligned to it): the first src_bytes of src, then
// zeros. The bytes are read when called and land in dst only at the
// cp_async_wait that covers their group; until then dst holds poison (0x7f
// bytes), so a read before the wait shows in the results, and a store into
// dst meanwhile fails the launch.
void cp_async(void* dst, const void* src, int bytes, int src_bytes);
// cp.async.commit_group: the thread's copies since the last commit become a group.
void cp_async_commit();
// cp.async.wait_group n: the thread's groups but the newest n land.
void cp_async_wait(int n);

// The settings tests make of the emulated device: emulated_backend.h.

}  // namespace emu
