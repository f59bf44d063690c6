// The CUDA emulator's scheduler (emulator.h): the threads of the blocks being
// run, each a fiber (fiber.h), their barriers and warp collectives, and the
// launch of a kernel: its checks, the order of its blocks, the 0x7f bytes
// each block's shared memory starts with, and the guard past its end.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "counters.h"
#include "cuda_runtime.h"
#include "cupti.h"
#include "emulated_backend.h"
#include "emulator.h"
#include "emulator_internal.h"
#include "fiber.h"
#include "race_check.h"

#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace emu {
namespace {

constexpr int kMaxThreads = 1024;

// Bytes past the end of a block's shared memory, the launch's bytes, that
// hold kGuardByte while the block runs: a kernel that writes them fails its
// launch (check_guards), one that reads or writes them under ASan is
// reported where it does (they are poisoned there). On a GPU such a kernel
// reads another block's memory or fails with an illegal address.
constexpr size_t kSharedGuard = 256;
constexpr unsigned char kGuardByte = 0xa5;

enum class State { kRunnable, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  Context ctx;
  char* stack = nullptr;  // mapped once, reused by every launch
  uint3 idx{};
  int lane = 0, warp = 0;
  int block = 0;  // which of the blocks running together it belongs to
  State state = State::kRunnable;
  int phase = 0;               // which exchange set the lane's next warp collective uses
  void* fake_stack = nullptr;  // ASan's, while the fiber is switched out
  void* race = nullptr;        // ThreadSanitizer's fiber (race_check.h), kept with the stack
  int hidden = 0;              // Hidden guards it is under (left so by a launch that failed)
  bool parked = false;         // ended its kernel and waits for the next (race check only)
};

struct Warp {
  // Two sets: collective n uses set n % 2, so a lane writes set n % 2 again
  // only after every lane has left collective n + 1, having read n's.
  unsigned char exchange[2][32][32];
  unsigned alive = 0;    // lanes that exist and have not exited
  unsigned waiting = 0;  // lanes at the warp's current collective
  unsigned mask = 0;     // the mask the first of them passed
  bool masks_differ = false;
  int first_fiber = 0;  // the fiber of lane 0
  char sync[2] = {};    // what __syncwarp releases and acquires, by phase (race_check.h)
  // The m16n8k16 product of an exchange's set, made once for the warp by
  // its last lane to arrive (mma_m16n8k16_bf16): rows, then columns.
  float product[2][16][8];
};

// A block being run: its coordinates, its shared memory and its barrier.
struct Block {
  uint3 idx{};
  std::vector<unsigned char> shared;  // its shared memory (all of it dynamic: cuda_runtime.h),
                                      // then kSharedGuard bytes
  size_t shared_bytes = 0;            // the launch's
  int live = 0, at_barrier = 0;       // threads not exited, and those at __syncthreads
  uint64_t serial = 0;                // which block this is, of all run (block_serial)
  unsigned barriers = 0;              // __syncthreads passed so far
  char sync[2] = {};  // what __syncthreads releases and acquires, by barrier parity
};

// The blocks being run (one, or several interleaved). Fibers switch to one
// another directly: one that stops at a barrier (or exits) resumes the next
// runnable fiber, and the home context (run_blocks) gets control back only
// when none is left.
struct Scheduler {
  Context home;
  void* home_fake = nullptr;
  const void* home_bottom = nullptr;
  size_t home_size = 0;
  std::vector<Fiber> fibers;  // block b's thread t: fiber b * threads + t
  std::vector<Warp> warps;    // block b's warp w: b * warps of a block + w
  std::vector<Block> blocks;  // those running together
  std::vector<int> ready;     // runnable fibers, in order, from `head` on
  size_t head = 0;
  Fiber* current = nullptr;
  int threads = 0;       // a block's
  bool reverse = false;  // run threads, lanes and blocks from the last (set_reverse_order)
  int interleave = 1;    // blocks run together at most (set_interleaved_blocks)
  uint64_t serial = 0;   // blocks started so far (block_serial)
  dim3 grid, block_dim;
  const std::function<void()>* body = nullptr;
  std::string error;    // the first failure of the blocks
  uint3 error_block{};  // the block it names
  // The race check's (race_check.h): the host's context, and what orders
  // the blocks' threads after the host's work before them and before its
  // work after them.
  void* home_race = nullptr;
  char start = 0, end = 0;
};

// Never destroyed: a static backend's destructor may still free memory at
// exit. Made before any code runs (constinit), so that sched() is a plain
// address: it is called at every switch between fibers.
union NeverDestroyed {
  Scheduler s;
  constexpr NeverDestroyed() : s() {}
  ~NeverDestroyed() {}
};
constinit NeverDestroyed the_scheduler;
inline Scheduler& sched() { return the_scheduler.s; }

// The running fiber has stopped (at a barrier, or at its end): run the next.
void switch_away() {
  Scheduler& s = sched();
  Fiber& f = *s.current;
  void** fake = f.state == State::kDone && !f.parked ? nullptr : &f.fake_stack;
  if (s.head < s.ready.size() && s.error.empty()) {
    Fiber& next = s.fibers[size_t(s.ready[s.head++])];
    s.current = &next;
    transfer(f.ctx, fake, next.ctx, next.stack, kStackBytes, next.race);
  } else {
    transfer(f.ctx, fake, s.home, s.home_bottom, s.home_size, s.home_race);
  }
}

void make_ready(int t) {
  Scheduler& s = sched();
  s.fibers[size_t(t)].state = State::kRunnable;
  s.ready.push_back(t);
}

// Thread (or lane) i of n in the order the fibers run.
int in_order(int i, int n) { return sched().reverse ? n - 1 - i : i; }

void release_block(int b) {
  Scheduler& s = sched();
  for (int i = 0; i < s.threads; ++i) {
    const int t = b * s.threads + in_order(i, s.threads);
    if (s.fibers[size_t(t)].state == State::kAtBlockBarrier) make_ready(t);
  }
  s.blocks[size_t(b)].at_barrier = 0;
  ++s.blocks[size_t(b)].barriers;
}

void set_error(std::string e) {
  Scheduler& s = sched();
  if (s.error.empty()) s.error = std::move(e);
}

void release_warp(Warp& w) {
  Scheduler& s = sched();
  const size_t index = size_t(&w - s.warps.data());
  if (w.masks_differ)
    set_error("warp " + std::to_string(index) +
              ": lanes of one warp passed different masks to a collective");
  else if (w.mask != w.alive)
    set_error("warp " + std::to_string(index) +
              ": a warp collective's mask names lanes that do not exist or have exited, or "
              "leaves out lanes that wait with it");
  for (int i = 0; i < 32; ++i) {
    const int l = in_order(i, 32);
    if (w.waiting >> l & 1u) make_ready(w.first_fiber + l);
  }
  w.waiting = 0;
  w.masks_differ = false;
}

// A GPU thread: runs the kernel, then ends. Under the race check it parks
// instead, and the next launch resumes it (run_blocks): ThreadSanitizer
// keeps each fiber's calls on a stack of its own, which a fiber started
// anew at every launch, never returning, would overflow after some ten
// thousand launches.
void fiber_main() {
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  Scheduler& s = sched();
  for (;;) {
    race::acquire(&s.start);  // before anything is read
    {
      Fiber& f = *s.current;
      f.parked = false;
      for (; f.hidden > 0; --f.hidden) race::ignore_end();  // a failed launch's thread of this slot
    }
    (*s.body)();
    hide_begin();
    Fiber& f = *s.current;
    race::release(&s.end);
    f.state = State::kDone;
    f.parked = race::kOn;
    Block& b = s.blocks[size_t(f.block)];
    --b.live;
    Warp& w = s.warps[size_t(f.warp)];
    w.alive &= ~(1u << f.lane);
    if (w.waiting != 0 && w.waiting == w.alive) release_warp(w);
    if (b.at_barrier > 0 && b.at_barrier == b.live) release_block(f.block);
    switch_away();
    if constexpr (!race::kOn) std::abort();  // a finished fiber is never resumed
  }
}

// Runs blocks[0, n) to their end, their threads interleaved at barriers
// (each block's from the first fiber, or the last); returns "" or what went
// wrong, and in error_block the block that failed.
std::string run_blocks(Scheduler& s, int n) {
  s.ready.clear();
  s.head = 0;
  const int warps = (s.threads + 31) / 32;
  for (int i = 0; i < n * s.threads; ++i) {
    Fiber& f = s.fibers[size_t(i)];
    const int t = i % s.threads;
    const unsigned bx = s.block_dim.x, by = s.block_dim.y;
    f.idx = uint3{unsigned(t) % bx, unsigned(t) / bx % by, unsigned(t) / (bx * by)};
    f.block = i / s.threads;
    f.lane = t % 32, f.warp = f.block * warps + t / 32;
    f.phase = 0;
    f.fake_stack = nullptr;
    if (f.parked) continue;  // resumed where it ended its last kernel
    // Stack tops staggered by 4160 bytes a thread (up to 128 KB): tops a
    // power of two apart would share cache sets and miss on every switch.
    new_context(f.ctx, f.stack, kStackBytes - size_t(i) * 4160 % (size_t(128) << 10), fiber_main);
  }
  for (int b = 0; b < n; ++b) {
    for (int i = 0; i < s.threads; ++i) make_ready(b * s.threads + in_order(i, s.threads));
    for (int w = 0; w < warps; ++w) {
      Warp& wp = s.warps[size_t(b * warps + w)];
      const int lanes = std::min(32, s.threads - 32 * w);
      wp.alive = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
      wp.waiting = 0;
      wp.masks_differ = false;
      wp.first_fiber = b * s.threads + 32 * w;
    }
    s.blocks[size_t(b)].live = s.threads;
    s.blocks[size_t(b)].at_barrier = 0;
    s.blocks[size_t(b)].serial = ++s.serial;
  }
  s.error.clear();
  Fiber& first = s.fibers[size_t(s.ready[s.head++])];
  s.current = &first;
  s.home_race = race::current_fiber();
  race::release(&s.start);
  transfer(s.home, &s.home_fake, first.ctx, first.stack, kStackBytes, first.race);
  if constexpr (race::kOn) {
    // Threads a failure left waiting end here: what they did comes before
    // the host's work after the launch too.
    for (int i = 0; i < n * s.threads; ++i) {
      Fiber& f = s.fibers[size_t(i)];
      if (f.state == State::kDone) continue;
      race::switch_to(f.race);
      race::release(&s.end);
      race::switch_to(s.home_race);
    }
    race::acquire(&s.end);
  }
  s.error_block = s.blocks[size_t(s.current->block)].idx;
  if (!s.error.empty()) return s.error;
  int live = 0;
  for (int b = 0; b < n; ++b) live += s.blocks[size_t(b)].live;
  if (live == 0) return "";
  return "deadlock: the block's threads wait at barriers that none can pass (a __syncthreads "
         "some threads skip, or a warp collective inside a divergent branch)";
}

}  // namespace

const uint3& thread_idx() { return sched().current->idx; }
const uint3& block_idx() {
  Scheduler& s = sched();
  return s.blocks[size_t(s.current->block)].idx;
}
const dim3& grid_dim() { return sched().grid; }
const dim3& block_dim() { return sched().block_dim; }
void* dynamic_shared() {
  Scheduler& s = sched();
  return s.blocks[size_t(s.current->block)].shared.data();
}
size_t dynamic_shared_bytes() {
  Scheduler& s = sched();
  return s.blocks[size_t(s.current->block)].shared_bytes;
}
uint64_t block_serial() {
  Scheduler& s = sched();
  return s.blocks[size_t(s.current->block)].serial;
}
size_t thread_slot() { return size_t(sched().current - sched().fibers.data()); }
int lane() { return sched().current->lane; }

void block_barrier() {
  [[maybe_unused]] const Hidden hidden{};
  Scheduler& s = sched();
  s.current->state = State::kAtBlockBarrier;
  Block& b = s.blocks[size_t(s.current->block)];
  char* sync = &b.sync[b.barriers % 2];
  race::release(sync);
  if (++b.at_barrier == b.live) release_block(s.current->block);
  switch_away();
  race::acquire(sync);
}

void warp_barrier(unsigned mask) {
  [[maybe_unused]] const Hidden hidden{};
  Scheduler& s = sched();
  char* sync = &s.warps[size_t(s.current->warp)].sync[s.current->phase];
  race::release(sync);
  const char none = 0;
  warp_exchange(mask, &none, 1);
  race::acquire(sync);
}

void hide_begin() {
  race::ignore_begin();
  ++sched().current->hidden;
}
void hide_end() {
  --sched().current->hidden;
  race::ignore_end();
}

namespace {

// warp_exchange, where the last lane to arrive runs `on_all` on the warp
// and the exchange's set before any lane leaves.
const unsigned char* exchange(unsigned mask, const void* data, size_t bytes,
                              void (*on_all)(Warp&, int set)) {
  Scheduler& s = sched();
  Fiber& f = *s.current;
  if (!(mask >> f.lane & 1u)) kernel_error("a lane called a warp collective outside its own mask");
  Warp& w = s.warps[size_t(f.warp)];
  const int set = f.phase;
  f.phase ^= 1;
  std::memcpy(w.exchange[set][f.lane], data, bytes);
  if (w.waiting == 0)
    w.mask = mask;
  else if (w.mask != mask)
    w.masks_differ = true;
  w.waiting |= 1u << f.lane;
  f.state = State::kAtWarpBarrier;
  if (w.waiting == w.alive) {
    if (on_all) on_all(w, set);
    release_warp(w);
  }
  switch_away();
  return &w.exchange[set][0][0];
}

// The product of the A and B fragments the warp's lanes put in set `set`
// (mma_m16n8k16_bf16), each element the sum in k order. A register holds
// two bf16 of k and k + 1: k's in its low half. A[row][k] is in lane
// 4 (row % 8) + (k % 8) / 2, register row / 8 + 2 (k / 8); B[k][n] in lane
// 4 n + (k % 8) / 2, register 4 + k / 8.
void warp_product(Warp& w, int set) {
  auto reg = [&](int lane, int r) {
    uint32_t v;
    std::memcpy(&v, &w.exchange[set][lane][4 * r], 4);
    return v;
  };
  float a[16][16];
  for (int row = 0; row < 16; ++row)
    for (int k = 0; k < 16; k += 2) {
      const uint32_t r = reg(4 * (row % 8) + (k % 8) / 2, row / 8 + 2 * (k / 8));
      a[row][k] = __uint_as_float(r << 16), a[row][k + 1] = __uint_as_float(r & 0xffff0000u);
    }
  // The 16 rows' sums, 8 columns a vector, over k in order: k's products
  // (exact: bf16 times bf16 fits fp32) added to every row's.
  using Columns = float __attribute__((vector_size(32)));
  Columns sum[16] = {};
  for (int k = 0; k < 16; k += 2) {
    Columns lo, hi;  // B[k][n] and B[k + 1][n]
    for (int n = 0; n < 8; ++n) {
      const uint32_t r = reg(4 * n + (k % 8) / 2, 4 + k / 8);
      lo[n] = __uint_as_float(r << 16), hi[n] = __uint_as_float(r & 0xffff0000u);
    }
    for (int row = 0; row < 16; ++row) sum[row] += a[row][k] * lo;
    for (int row = 0; row < 16; ++row) sum[row] += a[row][k + 1] * hi;
  }
  static_assert(sizeof sum == sizeof w.product[set]);
  std::memcpy(w.product[set], sum, sizeof sum);
}

}  // namespace

const unsigned char* warp_exchange(unsigned mask, const void* data, size_t bytes) {
  return exchange(mask, data, bytes, nullptr);
}

void kernel_error(std::string why) {
  hide_begin();  // for good: the thread ends here
  Scheduler& s = sched();
  set_error(std::move(why));
  race::release(&s.end);
  s.current->state = State::kDone;  // the launch stops: switch_away goes home
  switch_away();
  std::abort();  // not resumed
}

void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  [[maybe_unused]] const Hidden hidden{};  // registers only
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const int g = lane() / 4, t = lane() % 4;
  // Element e of d is row g + 8 (e / 2), column 2t + e % 2.
  if (!gpu_rounds()) {
    // The warp's product, made once for its lanes: the same sums as each
    // lane making its four, where the emulated bf16 grids spent a third of
    // their time.
    Scheduler& s = sched();
    const Warp& w = s.warps[size_t(s.current->warp)];
    const int set = s.current->phase;
    exchange(0xffffffffu, mine, sizeof mine, warp_product);
    for (int e = 0; e < 4; ++e) d[e] += w.product[set][g + 8 * (e / 2)][2 * t + e % 2];
    return;
  }
  const unsigned char* all = warp_exchange(0xffffffffu, mine, sizeof mine);
  auto reg = [&](int lane, int r) {
    uint32_t v;
    std::memcpy(&v, all + 32 * lane + 4 * r, 4);
    return v;
  };
  // A register holds two bf16 of k and k + 1: k's in its low half.
  auto unpack = [](uint32_t r, float* two) {
    two[0] = __uint_as_float(r << 16);
    two[1] = __uint_as_float(r & 0xffff0000u);
  };
  // This lane's results are rows g and g + 8, columns 2t and 2t + 1. A[row][k]
  // is in lane 4 (row % 8) + (k % 8) / 2, register row / 8 + 2 (k / 8); B[k][n]
  // in lane 4 n + (k % 8) / 2, register 4 + k / 8; half k % 2 of each.
  float rows[2][16], cols[2][16];
  for (int k = 0; k < 16; k += 2) {
    const int from = (k % 8) / 2, half = k / 8;
    for (int r = 0; r < 2; ++r) unpack(reg(4 * g + from, r + 2 * half), &rows[r][k]);
    for (int c = 0; c < 2; ++c) unpack(reg(4 * (2 * t + c) + from, 4 + half), &cols[c][k]);
  }
  // The hardware's fused sums (a model: gpu_rounding.cpp), which start from
  // each lane's accumulator.
  for (int e = 0; e < 4; ++e) {
    float products[16];  // exact: bf16 times bf16 fits fp32
    for (int k = 0; k < 16; ++k) products[k] = rows[e / 2][k] * cols[e % 2][k];
    d[e] = tensor_core_sum(tensor_core_sum(d[e], products, 8), products + 8, 8);
  }
}

namespace {

// Runs the blocks of a launch that passed its checks (run).
// Blocks run together at most this many threads in all (set_interleaved_blocks).
// Under the race check, every barrier joins clocks over all the fibers
// made: half as many there.
constexpr uint64_t kInterleavedThreads = race::kOn ? 2048 : 4096;

// Poisons block b's guard for ASan (on), or lifts that (off); a no-op
// elsewhere.
void guard([[maybe_unused]] Block& b, [[maybe_unused]] bool on) {
#ifdef EMU_ASAN
  if (b.shared.size() < kSharedGuard) return;
  unsigned char* g = b.shared.data() + b.shared.size() - kSharedGuard;
  if (on)
    ASAN_POISON_MEMORY_REGION(g, kSharedGuard);
  else
    ASAN_UNPOISON_MEMORY_REGION(g, kSharedGuard);
#endif
}

// Makes the fibers, warps and blocks for `together` blocks of `block`'s threads.
void prepare(Scheduler& s, dim3 block, size_t shared, int together) {
  const int threads = int(block.x * block.y * block.z);
  while (s.fibers.size() < size_t(together) * size_t(threads)) {
    s.fibers.emplace_back();
    s.fibers.back().stack = map_stack();
    s.fibers.back().race = race::new_fiber();
  }
  s.threads = threads;
  s.block_dim = block;
  s.warps.resize(size_t(together) * size_t((threads + 31) / 32));
  s.blocks.resize(size_t(together));
  for (Block& b : s.blocks) {
    guard(b, false);
    b.shared.resize(shared + kSharedGuard);
    b.shared_bytes = shared;
  }
}

// Block b's shared memory filled with 0x7f bytes, its guard with kGuardByte.
void fill_shared(Block& b) {
  guard(b, false);
  std::fill(b.shared.begin(), b.shared.begin() + ptrdiff_t(b.shared_bytes), 0x7f);
  std::fill(b.shared.begin() + ptrdiff_t(b.shared_bytes), b.shared.end(), kGuardByte);
  guard(b, true);
}

// Empty when the first n blocks left their guards as they were; else what
// the launch's error says.
std::string check_guards(Scheduler& s, int n) {
  for (int i = 0; i < n; ++i) {
    Block& b = s.blocks[size_t(i)];
    guard(b, false);
    const auto end = b.shared.begin() + ptrdiff_t(b.shared_bytes);
    const auto bad =
        std::find_if(end, b.shared.end(), [](unsigned char c) { return c != kGuardByte; });
    if (bad != b.shared.end()) {
      s.error_block = b.idx;
      return "wrote byte " + std::to_string(bad - b.shared.begin()) +
             " of shared memory, past the " + std::to_string(b.shared_bytes) +
             " bytes of dynamic shared memory its launch gave (give the launch the bytes the "
             "kernel uses)";
    }
  }
  return {};
}

// Runs the blocks of a launch that passed its checks (run): `together` at a
// time, each with its shared memory filled with 0x7f bytes (what a block
// reads before writing it shows in the results) and its guard checked after.
void execute(dim3 grid, dim3 block, size_t shared, const char* name,
             const std::function<void()>& body) {
  std::lock_guard<std::mutex> lock(rt().launch);
  Scheduler& s = sched();
  const uint64_t total = uint64_t(grid.x) * grid.y * grid.z;
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  const int together = int(std::min<uint64_t>(
      total, std::max<uint64_t>(
                 1, std::min<uint64_t>(uint64_t(s.interleave), kInterleavedThreads / threads))));
  prepare(s, block, shared, together);
  s.grid = grid;
  s.body = &body;
  // The stack of the thread running the launch: switches back to it are
  // announced to ASan with it.
  thread_local const void* bottom = nullptr;
  thread_local size_t size = 0;
  if (!bottom) home_stack(&bottom, &size);
  s.home_bottom = bottom, s.home_size = size;
  {
    emu::race::QuietLock<std::mutex> lock(rt().memory);
    if (!rt().fault.empty() && std::string(name).find(rt().fault) != std::string::npos) {
      rt().fault.clear();
      lock.held.unlock();
      fail(cudaErrorIllegalAddress,
           std::string("kernel ") + name + ": an illegal address (fault_next_launch)");
      return;
    }
  }
  // The blocks run together: a tile of the grid, tw blocks along x by th
  // along y (two rows where the grid has several and several blocks run at
  // a time), so that neighbours along x and along y run together (a block
  // that writes the first row of the next block's rows, say); tiles in the
  // grid's order (x, then y, then z), or all from the last (set_reverse_order).
  const unsigned th = together >= 2 && grid.y > 1 ? 2 : 1;
  const unsigned tw = unsigned(together) / th;
  const uint64_t across = (grid.x + tw - 1) / tw, down = (grid.y + th - 1) / th;
  const uint64_t tiles = across * down * grid.z;
  for (uint64_t k = 0; k < tiles; ++k) {
    const uint64_t t = s.reverse ? tiles - 1 - k : k;
    const unsigned x0 = unsigned(t % across) * tw, y0 = unsigned(t / across % down) * th;
    const unsigned z = unsigned(t / (across * down));
    const unsigned w = std::min(tw, grid.x - x0), h = std::min(th, grid.y - y0);
    const int n = int(w * h);
    for (int b = 0; b < n; ++b) {
      const unsigned c = unsigned(s.reverse ? n - 1 - b : b);
      Block& blk = s.blocks[size_t(b)];
      blk.idx = uint3{x0 + c % w, y0 + c / w, z};
      fill_shared(blk);
    }
    std::string e = run_blocks(s, n);
    if (e.empty()) e = check_guards(s, n);
    if (!e.empty()) {
      const uint3 at = s.error_block;
      fail(cudaErrorLaunchFailure, std::string("kernel ") + name + ", block (" +
                                       std::to_string(at.x) + ", " + std::to_string(at.y) + ", " +
                                       std::to_string(at.z) + "): " + e);
      return;
    }
  }
}

}  // namespace

bool run(EmulatedStream* stream, dim3 grid, dim3 block, size_t shared, const void* kernel,
         const char* name, std::function<void()> body) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  auto config = [&](const std::string& why) {
    fail(cudaErrorInvalidConfiguration, std::string("launch of ") + name + ": " + why);
    return false;
  };
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0)
    return config("an empty grid or block");
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return config("grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) + ", " +
                  std::to_string(grid.z) + ") past the limits (2^31 - 1, 65535, 65535)");
  if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > kMaxThreads)
    return config(std::to_string(threads) + " threads a block, past 1024");
  size_t limit = kDefaultSharedLimit;
  {
    emu::race::QuietLock<std::mutex> lock(rt().memory);
    if (auto it = rt().shared_limit.find(kernel); it != rt().shared_limit.end()) limit = it->second;
  }
  if (shared > limit)
    return config(std::to_string(shared) + " bytes of dynamic shared memory, past the " +
                  std::to_string(limit) + " the kernel is allowed" +
                  (limit == kDefaultSharedLimit ? " (cudaFuncSetAttribute raises it)" : ""));
  counters::launch(name, grid, block);
  if (counters::count_only()) {
    activity::issue(activity::Work::kKernel, name, 0, 0, nullptr)();
    return true;
  }
  submit(stream, activity::issue(activity::Work::kKernel, name, 0, 0,
                                 [grid, block, shared, name, body = std::move(body)] {
                                   execute(grid, block, shared, name, body);
                                 }));
  return true;
}

void set_reverse_order(bool reverse) { sched().reverse = reverse; }
// Under the race check too: blocks run together are unordered, as on a GPU,
// so a race between two of them is reported; each has its own shared
// memory, as on a GPU.
void set_interleaved_blocks(int blocks) { sched().interleave = std::max(1, blocks); }

}  // namespace emu
