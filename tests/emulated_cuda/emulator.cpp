// The CUDA emulator's scheduler and runtime (emulator.h, cuda_runtime.h).
#include "emulator.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "counters.h"
#include "cuda_runtime.h"
#include "emulated_backend.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace emu {
namespace {

// ---- fibers: a stack each, switched by swap_context.

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *from, and resumes the stack `to` (saved the same way, or made
// by new_context). The System V ABI leaves nothing else to keep.
extern "C" void emu_swap_context(void** from, void* to);
asm(R"(
  .pushsection .text
  .globl emu_swap_context
  .type emu_swap_context, @function
emu_swap_context:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_swap_context, .-emu_swap_context
  .popsection
)");
struct Context {
  void* sp = nullptr;
};
// A context that starts entry() on the stack [base, base + size).
void new_context(Context& c, char* base, size_t size, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(base + size) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<void**>(top);
  *--slot = nullptr;                              // entry's return address: it never returns
  *--slot = reinterpret_cast<void*>(entry);       // where the first switch's `ret` goes
  for (int i = 0; i < 6; ++i) *--slot = nullptr;  // rbp, rbx, r12-r15
  c.sp = slot;
}
void swap_context(Context& from, Context& to) { emu_swap_context(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
void new_context(Context& c, char* base, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = base;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
void swap_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

constexpr size_t kStackBytes = size_t(256) << 10;
constexpr int kMaxThreads = 1024;
constexpr size_t kDefaultSharedLimit = 48 << 10, kOptInSharedLimit = 227 << 10;

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
};

// A block being run: its coordinates, its shared memory and its barrier.
struct Block {
  uint3 idx{};
  std::vector<unsigned char> shared;   // dynamic shared memory
  std::vector<unsigned char> statics;  // its static shared memory while another block's is in place
  int live = 0, at_barrier = 0;        // threads not exited, and those at __syncthreads
  uint64_t serial = 0;                 // which block this is, of all run (block_serial)
};

// Static __shared__ variables (cuda_runtime.h) live in the section
// emu_static_shared; the linker marks its ends.
extern "C" unsigned char __start_emu_static_shared[] __attribute__((weak));
extern "C" unsigned char __stop_emu_static_shared[] __attribute__((weak));
size_t static_shared_bytes() {
  return __start_emu_static_shared ? size_t(__stop_emu_static_shared - __start_emu_static_shared)
                                   : 0;
}

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
  int statics_owner = 0;      // the block whose static shared memory is in place
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
};

// Never destroyed: a static backend's destructor may still free memory at exit.
Scheduler& sched() {
  static Scheduler& s = *new Scheduler;
  return s;
}

// Switches from context `from` to `to` (stack [bottom, bottom + size));
// from_fake: where ASan keeps from's fake stack (null when from has ended).
void transfer(Context& from, void** from_fake, Context& to, const void* bottom, size_t size) {
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(from_fake, bottom, size);
#else
  (void)from_fake, (void)bottom, (void)size;
#endif
  swap_context(from, to);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(from_fake ? *from_fake : nullptr, nullptr, nullptr);
#endif
}

// Puts block b's static shared memory in place of the running block's.
void enter_block(int b) {
  Scheduler& s = sched();
  const size_t n = static_shared_bytes();
  if (b == s.statics_owner || n == 0) return;
  std::memcpy(s.blocks[size_t(s.statics_owner)].statics.data(), __start_emu_static_shared, n);
  std::memcpy(__start_emu_static_shared, s.blocks[size_t(b)].statics.data(), n);
  s.statics_owner = b;
}

// The running fiber has stopped (at a barrier, or at its end): run the next.
void switch_away() {
  Scheduler& s = sched();
  Fiber& f = *s.current;
  void** fake = f.state == State::kDone ? nullptr : &f.fake_stack;
  if (s.head < s.ready.size() && s.error.empty()) {
    Fiber& next = s.fibers[size_t(s.ready[s.head++])];
    enter_block(next.block);
    s.current = &next;
    transfer(f.ctx, fake, next.ctx, next.stack, kStackBytes);
  } else {
    transfer(f.ctx, fake, s.home, s.home_bottom, s.home_size);
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
}

void set_error(const std::string& e) {
  Scheduler& s = sched();
  if (s.error.empty()) s.error = e;
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

void fiber_main() {
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  Scheduler& s = sched();
  (*s.body)();
  Fiber& f = *s.current;
  f.state = State::kDone;
  Block& b = s.blocks[size_t(f.block)];
  --b.live;
  Warp& w = s.warps[size_t(f.warp)];
  w.alive &= ~(1u << f.lane);
  if (w.waiting != 0 && w.waiting == w.alive) release_warp(w);
  if (b.at_barrier > 0 && b.at_barrier == b.live) release_block(f.block);
  switch_away();
  std::abort();  // a finished fiber is never resumed
}

char* map_stack() {
  void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cuda emulator: cannot map a fiber stack\n");
    std::abort();
  }
  mprotect(p, size_t(sysconf(_SC_PAGESIZE)), PROT_NONE);  // overflow faults instead of corrupting
  return static_cast<char*>(p);
}

// The calling thread's stack, for ASan's bookkeeping of switches back to it.
void home_stack(const void** bottom, size_t* size) {
  pthread_attr_t a;
  void* addr = nullptr;
  size_t bytes = 0;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {
    pthread_attr_getstack(&a, &addr, &bytes);
    pthread_attr_destroy(&a);
  }
  *bottom = addr, *size = bytes;
}

// ---- the runtime's state

struct Runtime {
  std::mutex launch;                        // one launch at a time
  std::mutex memory;                        // guards the rest
  std::map<uintptr_t, size_t> allocations;  // device memory: start -> bytes
  std::map<uintptr_t, size_t> pinned;       // pinned host memory: start -> bytes
  size_t used = 0, capacity = size_t(4) << 30;
  int devices = 1;  // GPUs the machine shows (one memory serves them all)
  std::map<const void*, size_t> shared_limit;  // cudaFuncAttributeMaxDynamicSharedMemorySize
  // A failure of work on a concurrent stream: it stays (stream_error).
  cudaError_t sticky = cudaSuccess;
  std::string sticky_detail;
  std::string fault;  // fault_next_launch's kernel name
};
Runtime& rt() {
  static Runtime& r = *new Runtime;  // never destroyed, as sched()
  return r;
}

// The calling thread's last error, as the runtime keeps one per host thread.
thread_local cudaError_t t_last = cudaSuccess;
thread_local std::string t_last_detail;
thread_local bool t_stream_worker = false;  // the thread runs a concurrent stream's work

cudaError_t fail(cudaError_t e, const std::string& detail) {
  std::fprintf(stderr, "cuda emulator: %s\n", detail.c_str());
  if (t_stream_worker) {
    std::lock_guard<std::mutex> lock(rt().memory);
    if (rt().sticky == cudaSuccess) rt().sticky = e, rt().sticky_detail = detail;
  } else {
    t_last = e;
    t_last_detail = detail;
  }
  return e;
}
cudaError_t sticky_error() {
  std::lock_guard<std::mutex> lock(rt().memory);
  return rt().sticky;
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
  enter_block(first.block);
  s.current = &first;
  transfer(s.home, &s.home_fake, first.ctx, first.stack, kStackBytes);
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
  return s.blocks[size_t(s.current->block)].shared.size();
}
uint64_t block_serial() {
  Scheduler& s = sched();
  return s.blocks[size_t(s.current->block)].serial;
}
size_t thread_slot() { return size_t(sched().current - sched().fibers.data()); }
int lane() { return sched().current->lane; }

void block_barrier() {
  Scheduler& s = sched();
  s.current->state = State::kAtBlockBarrier;
  Block& b = s.blocks[size_t(s.current->block)];
  if (++b.at_barrier == b.live) release_block(s.current->block);
  switch_away();
}

const unsigned char* warp_exchange(unsigned mask, const void* data, size_t bytes) {
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
  if (w.waiting == w.alive) release_warp(w);
  switch_away();
  return &w.exchange[set][0][0];
}

void kernel_error(const std::string& why) {
  Scheduler& s = sched();
  set_error(why);
  s.current->state = State::kDone;  // the launch stops: switch_away goes home
  switch_away();
  std::abort();  // not resumed
}

void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const unsigned char* all = warp_exchange(0xffffffffu, mine, sizeof mine);
  auto reg = [&](int lane, int r) {
    uint32_t v;
    std::memcpy(&v, all + 32 * lane + 4 * r, 4);
    return v;
  };
  auto bf = [](uint32_t r, int half) { return __uint_as_float(half ? r & 0xffff0000u : r << 16); };
  // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register row / 8 + 2 (k / 8), half k % 2.
  auto A = [&](int row, int k) {
    return bf(reg(4 * (row % 8) + (k % 8) / 2, row / 8 + 2 * (k / 8)), k % 2);
  };
  // B[k][n]: lane 4 n + (k % 8) / 2, register 4 + k / 8, half k % 2.
  auto B = [&](int k, int n) { return bf(reg(4 * n + (k % 8) / 2, 4 + k / 8), k % 2); };
  const int g = lane() / 4, t = lane() % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += A(row, k) * B(k, col);
    d[e] += sum;
  }
}

namespace {

// Runs the blocks of a launch that passed its checks (run).
// Blocks run together at most this many threads in all (set_interleaved_blocks).
constexpr uint64_t kInterleavedThreads = 4096;

// Makes the fibers, warps and blocks for `together` blocks of `block`'s threads.
void prepare(Scheduler& s, dim3 block, size_t shared, int together) {
  const int threads = int(block.x * block.y * block.z);
  while (s.fibers.size() < size_t(together) * size_t(threads)) {
    s.fibers.emplace_back();
    s.fibers.back().stack = map_stack();
  }
  s.threads = threads;
  s.block_dim = block;
  s.warps.resize(size_t(together) * size_t((threads + 31) / 32));
  s.blocks.resize(size_t(together));
  for (Block& b : s.blocks) {
    b.shared.resize(shared);
    b.statics.resize(static_shared_bytes());
  }
}

// Runs the blocks of a launch that passed its checks (run): `together` at a
// time, each with its shared memory, dynamic and static, filled with 0x7f
// bytes (what a block reads before writing it shows in the results).
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
    std::unique_lock<std::mutex> lock(rt().memory);
    if (!rt().fault.empty() && std::string(name).find(rt().fault) != std::string::npos) {
      rt().fault.clear();
      lock.unlock();
      fail(cudaErrorIllegalAddress,
           std::string("kernel ") + name + ": an illegal address (fault_next_launch)");
      return;
    }
  }
  const size_t statics = static_shared_bytes();
  for (uint64_t first = 0; first < total; first += uint64_t(together)) {
    const int n = int(std::min<uint64_t>(uint64_t(together), total - first));
    for (int b = 0; b < n; ++b) {
      const uint64_t i = s.reverse ? total - 1 - (first + uint64_t(b)) : first + uint64_t(b);
      Block& blk = s.blocks[size_t(b)];
      blk.idx = uint3{unsigned(i % grid.x), unsigned(i / grid.x % grid.y),
                      unsigned(i / (uint64_t(grid.x) * grid.y))};
      std::fill(blk.shared.begin(), blk.shared.end(), 0x7f);
      if (b > 0) std::fill(blk.statics.begin(), blk.statics.end(), 0x7f);  // block 0's: in place
    }
    if (statics > 0) std::memset(__start_emu_static_shared, 0x7f, statics);
    s.statics_owner = 0;
    const std::string e = run_blocks(s, n);
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
    std::lock_guard<std::mutex> lock(rt().memory);
    if (auto it = rt().shared_limit.find(kernel); it != rt().shared_limit.end())
      limit = it->second;
  }
  if (shared > limit)
    return config(std::to_string(shared) + " bytes of dynamic shared memory, past the " +
                  std::to_string(limit) + " the kernel is allowed" +
                  (limit == kDefaultSharedLimit ? " (cudaFuncSetAttribute raises it)" : ""));
  counters::launch(name, grid, block);
  if (counters::count_only()) return true;
  submit(stream, [grid, block, shared, name, body = std::move(body)] {
    execute(grid, block, shared, name, body);
  });
  return true;
}

void set_device_memory(size_t bytes) { rt().capacity = bytes; }
void set_device_count(int n) { rt().devices = n; }
void set_reverse_order(bool reverse) { sched().reverse = reverse; }
void set_interleaved_blocks(int blocks) { sched().interleave = std::max(1, blocks); }

// ---- streams

namespace {

using Clock = std::chrono::steady_clock;

// A stream's work, in order. A concurrent stream has a worker thread; the
// work of the others runs on the thread that enqueues it.
struct Queue {
  std::deque<std::function<void()>> work;
  uint64_t submitted = 0, finished = 0;  // pieces of work
  bool collectives = false;              // it has carried a collective
  bool stop = false;
  std::thread worker;
};

struct StreamState {
  std::mutex mu;                    // guards every queue and event
  std::condition_variable changed;  // work enqueued or finished
  bool mode_set = false;
  Streams mode = Streams::kAtOnce;
  std::set<std::shared_ptr<Queue>> live;  // the concurrent queues
  std::shared_ptr<Queue> default_queue = std::make_shared<Queue>();
};
StreamState& streams() {
  static StreamState& s = *new StreamState;  // never destroyed, as sched()
  return s;
}

// Called with the lock held.
Streams mode_locked() {
  StreamState& st = streams();
  if (!st.mode_set) {
    st.mode_set = true;
    const char* v = std::getenv("DENDRITE_EMULATED_STREAMS");
    const std::string m = v ? v : "";
    if (m.empty() || m == "at-once")
      st.mode = Streams::kAtOnce;
    else if (m == "concurrent")
      st.mode = Streams::kConcurrent;
    else if (m == "collectives-late")
      st.mode = Streams::kCollectivesLate;
    else if (m == "compute-late")
      st.mode = Streams::kComputeLate;
    else {
      std::fprintf(stderr,
                   "cuda emulator: DENDRITE_EMULATED_STREAMS=%s is not one of at-once, "
                   "concurrent, collectives-late, compute-late\n",
                   m.c_str());
      std::abort();
    }
  }
  return st.mode;
}

// How long a concurrent stream sleeps before each piece of work.
Clock::duration lateness(const Queue& q, Streams m) {
  if (m == Streams::kCollectivesLate && q.collectives) return std::chrono::microseconds(1000);
  if (m == Streams::kComputeLate && !q.collectives) return std::chrono::microseconds(200);
  return Clock::duration::zero();
}

void work_loop(Queue* q) {
  t_stream_worker = true;
  StreamState& st = streams();
  std::unique_lock<std::mutex> lock(st.mu);
  for (;;) {
    st.changed.wait(lock, [&] { return q->stop || !q->work.empty(); });
    if (q->work.empty()) return;
    std::function<void()> w = std::move(q->work.front());
    q->work.pop_front();
    const Clock::duration late = lateness(*q, st.mode);
    lock.unlock();
    if (late > Clock::duration::zero()) std::this_thread::sleep_for(late);
    w();
    w = nullptr;  // what it holds is released before the work counts as done
    lock.lock();
    ++q->finished;
    st.changed.notify_all();
  }
}

std::shared_ptr<Queue> make_queue() {
  StreamState& st = streams();
  auto q = std::make_shared<Queue>();
  std::lock_guard<std::mutex> lock(st.mu);
  const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
  const bool launches_block = blocking && std::string(blocking) == "1";
  if (mode_locked() != Streams::kAtOnce && !launches_block) {
    st.live.insert(q);
    q->worker = std::thread(work_loop, q.get());
  }
  return q;
}

// Enqueues work on q; returns its ticket (q has run it once finished reaches it).
uint64_t enqueue(const std::shared_ptr<Queue>& q, std::function<void()> work) {
  StreamState& st = streams();
  uint64_t ticket;
  if (!q->worker.joinable()) {  // at once
    {
      std::lock_guard<std::mutex> lock(st.mu);
      ticket = ++q->submitted;
    }
    work();
    std::lock_guard<std::mutex> lock(st.mu);
    ++q->finished;
    st.changed.notify_all();
    return ticket;
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    q->work.push_back(std::move(work));
    ticket = ++q->submitted;
  }
  st.changed.notify_all();
  return ticket;
}

void wait_for(const Queue& q, uint64_t ticket) {
  StreamState& st = streams();
  std::unique_lock<std::mutex> lock(st.mu);
  st.changed.wait(lock, [&] { return q.finished >= ticket; });
}

void drain(const Queue& q) {
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(streams().mu);
    last = q.submitted;
  }
  wait_for(q, last);
}

// Every stream's work enqueued so far has run (what cudaFree waits for).
void drain_all() {
  std::vector<std::pair<std::shared_ptr<Queue>, uint64_t>> all;
  {
    std::lock_guard<std::mutex> lock(streams().mu);
    for (const auto& q : streams().live) all.emplace_back(q, q->submitted);
  }
  for (const auto& [q, last] : all) wait_for(*q, last);
}

}  // namespace

void set_streams(Streams m) {
  std::lock_guard<std::mutex> lock(streams().mu);
  streams().mode = m;
  streams().mode_set = true;
}

void fault_next_launch(const std::string& name) {
  std::lock_guard<std::mutex> lock(rt().memory);
  rt().fault = name;
}

void clear_errors() {
  {
    std::lock_guard<std::mutex> lock(rt().memory);
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

struct EmulatedStream {
  std::shared_ptr<emu::Queue> q;
};
struct EmulatedEvent {
  std::shared_ptr<emu::Queue> q;  // of the latest record (none: never recorded)
  uint64_t ticket = 0;            // the record's work on q
  std::shared_ptr<std::chrono::steady_clock::time_point> at =
      std::make_shared<std::chrono::steady_clock::time_point>();
};

namespace emu {
namespace {
const std::shared_ptr<Queue>& queue_of(EmulatedStream* s) {
  return s ? s->q : streams().default_queue;
}
// Whether e's latest record has run (one never recorded has).
bool done(const EmulatedEvent& e) {
  std::lock_guard<std::mutex> lock(streams().mu);
  return !e.q || e.q->finished >= e.ticket;
}
}  // namespace

void submit(EmulatedStream* s, std::function<void()> work) {
  enqueue(queue_of(s), std::move(work));
}

void carries_collectives(EmulatedStream* s) {
  std::lock_guard<std::mutex> lock(streams().mu);
  queue_of(s)->collectives = true;
}

}  // namespace emu

// ---- the runtime API (cuda_runtime.h)

namespace {

// Whether [p, p + bytes) lies inside one device allocation.
bool within(const std::map<uintptr_t, size_t>& a, const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(emu::rt().memory);
  const auto u = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(u);
  if (it == a.begin()) return false;
  --it;
  return u >= it->first && u + bytes <= it->first + it->second;
}
bool on_device(const void* p, size_t bytes) { return within(emu::rt().allocations, p, bytes); }
bool pinned(const void* p, size_t bytes) { return within(emu::rt().pinned, p, bytes); }

// What a synchronisation returns: a stream's failure, else the thread's last error.
cudaError_t synchronised() {
  const cudaError_t sticky = emu::sticky_error();
  return sticky != cudaSuccess ? sticky : cudaGetLastError();
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
                     : e == cudaErrorLaunchFailure        ? "unspecified launch failure"
                                                          : "unknown error";
  text = base;
  std::string detail;
  {
    std::lock_guard<std::mutex> lock(emu::rt().memory);
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
  p->major = 9, p->minor = 0, p->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  auto& r = emu::rt();
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  std::unique_lock<std::mutex> lock(r.memory);
  if (r.used + rounded > r.capacity) {
    lock.unlock();
    *p = nullptr;
    return emu::fail(cudaErrorMemoryAllocation, "cudaMalloc: out of device memory");
  }
  // Exactly the bytes asked (256-byte aligned, as cudaMalloc's): the
  // sanitizers see an access past them.
  if (posix_memalign(p, 256, std::max<size_t>(bytes, 1)) != 0) {
    lock.unlock();
    return emu::fail(cudaErrorMemoryAllocation, "cudaMalloc: host allocation failed");
  }
  r.allocations[reinterpret_cast<uintptr_t>(*p)] = bytes;
  r.used += rounded;
  emu::counters::allocation(bytes);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  emu::drain_all();  // as on a GPU, the work every stream has enqueued runs first
  auto& r = emu::rt();
  std::unique_lock<std::mutex> lock(r.memory);
  auto it = r.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.allocations.end()) {
    lock.unlock();
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
  if (posix_memalign(p, 256, std::max<size_t>(bytes, 1)) != 0)
    return emu::fail(cudaErrorMemoryAllocation, "cudaMallocHost: host allocation failed");
  std::lock_guard<std::mutex> lock(emu::rt().memory);
  emu::rt().pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  emu::drain_all();
  auto& r = emu::rt();
  std::unique_lock<std::mutex> lock(r.memory);
  if (r.pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0) {
    lock.unlock();
    return emu::fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer not from cudaMallocHost");
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(emu::rt().memory);
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
  if (!emu::counters::count_only()) emu::submit(s, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}
// Host memory is pageable unless cudaMallocHost made it, with the GPU's rules
// for it: a copy from pageable memory takes the bytes when called and writes
// them in the stream's order, one from pinned memory reads them when it runs;
// a copy to host memory returns once it has run.
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
  emu::counters::copy(dst_dev ? (src_dev ? emu::counters::Copy::kDeviceToDevice
                                         : emu::counters::Copy::kHostToDevice)
                      : (src_dev ? emu::counters::Copy::kDeviceToHost
                                 : emu::counters::Copy::kHostToHost),
                      bytes);
  if (!dst_dev && !src_dev) {
    std::memmove(dst, src, bytes);
  } else if (dst_dev && src_dev) {
    if (!emu::counters::count_only()) emu::submit(s, [=] { std::memmove(dst, src, bytes); });
  } else if (dst_dev && pinned(src, bytes)) {
    emu::submit(s, [=] { std::memcpy(dst, src, bytes); });
  } else if (dst_dev) {
    const auto* from = static_cast<const unsigned char*>(src);
    auto staged = std::make_shared<std::vector<unsigned char>>(from, from + bytes);
    emu::submit(s, [=] { std::memcpy(dst, staged->data(), bytes); });
  } else {
    emu::counters::sync("cudaMemcpyAsync to pageable host memory");
    const auto& q = emu::queue_of(s);
    emu::wait_for(*q, emu::enqueue(q, [=] { std::memmove(dst, src, bytes); }));
  }
  return emu::sticky_error();
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new EmulatedStream{emu::make_queue()};
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cudaSuccess;
  emu::drain(*s->q);
  if (s->q->worker.joinable()) {
    emu::StreamState& st = emu::streams();
    {
      std::lock_guard<std::mutex> lock(st.mu);
      s->q->stop = true;
    }
    st.changed.notify_all();
    s->q->worker.join();
    std::lock_guard<std::mutex> lock(st.mu);
    st.live.erase(s->q);
  }
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  emu::counters::sync("cudaStreamSynchronize");
  emu::drain(*emu::queue_of(s));
  return synchronised();
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new EmulatedEvent{};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;  // a record still queued keeps its time stamp alive
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  const auto& q = emu::queue_of(s);
  auto at = e->at;
  const uint64_t ticket = emu::enqueue(q, [at] { *at = std::chrono::steady_clock::now(); });
  std::lock_guard<std::mutex> lock(emu::streams().mu);
  e->q = q;
  e->ticket = ticket;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  emu::counters::sync("cudaEventSynchronize");
  std::shared_ptr<emu::Queue> q;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(emu::streams().mu);
    q = e->q, ticket = e->ticket;
  }
  if (q) emu::wait_for(*q, ticket);
  return synchronised();
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  const cudaError_t sticky = emu::sticky_error();
  if (sticky != cudaSuccess) return sticky;
  return emu::done(*e) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  std::shared_ptr<emu::Queue> q;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(emu::streams().mu);
    q = e->q, ticket = e->ticket;
  }
  if (q) emu::submit(s, [q, ticket] { emu::wait_for(*q, ticket); });
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!emu::done(*start) || !emu::done(*end)) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(*end->at - *start->at).count();
  return cudaSuccess;
}
cudaError_t emulated_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      size_t(value) > emu::kOptInSharedLimit)
    return emu::fail(cudaErrorInvalidValue,
                     "cudaFuncSetAttribute: " + std::to_string(value) +
                         " bytes of dynamic shared memory, past the device's 227 KB");
  std::lock_guard<std::mutex> lock(emu::rt().memory);
  emu::rt().shared_limit[kernel] = size_t(value);
  return cudaSuccess;
}
