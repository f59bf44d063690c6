// The emulator's ldmatrix and cp.async (emulator.h): the shared-memory
// fragment loads and the asynchronous global-to-shared copies of the
// tensor-core attention kernels (backend/cuda/flash_mma.cuh).
//
// ldmatrix is a warp collective: every lane of the warp reads the row it
// addresses, and each lane then takes the elements the PTX ISA assigns it
// from the rows the others read. cp.async reads its source when issued and
// poisons its destination; the bytes land at the cp.async.wait_group that
// covers their group, so a kernel that reads a tile before waiting for it
// (or before the barrier after the wait, for the other threads' rows)
// reads poison, and one that stores into a tile still being copied fails.
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "emulator.h"

namespace emu {
namespace {

// [dst, dst + bytes) must lie in the block's dynamic shared memory.
bool in_shared(const void* dst, size_t bytes) {
  const auto* base = static_cast<const unsigned char*>(dynamic_shared());
  const auto* p = static_cast<const unsigned char*>(dst);
  return p >= base && p + bytes <= base + dynamic_shared_bytes();
}

std::string address_text(const void* p) { return std::to_string(reinterpret_cast<uintptr_t>(p)); }

constexpr unsigned char kPoison = 0x7f;  // as the dynamic shared memory starts

struct Copy {
  unsigned char* dst;
  unsigned char bytes[16];
  int size;
};
// One thread's copies in flight: those not yet committed, then the groups
// from the oldest; `serial` is the block they belong to.
struct ThreadCopies {
  uint64_t serial = 0;
  std::deque<Copy> open;
  std::deque<std::deque<Copy>> groups;
};

// Kernels run one at a time (scheduler.cpp), so one table serves them all,
// a row per thread of the blocks running together. Every thread's
// bookkeeping: called under a Hidden (race_check.h).
ThreadCopies& thread_copies() {
  static std::vector<ThreadCopies>& all = *new std::vector<ThreadCopies>;
  const size_t i = thread_slot();
  if (all.size() <= i) all.resize(i + 1);
  ThreadCopies& c = all[i];
  if (c.serial != block_serial()) {  // a previous block's: its shared memory is gone
    c.serial = block_serial();
    c.open.clear();
    c.groups.clear();
  }
  return c;
}

}  // namespace

void ldmatrix(uint32_t* regs, int matrices, bool trans, const void* row) {
  if (matrices != 1 && matrices != 2 && matrices != 4)
    kernel_error("ldmatrix of " + std::to_string(matrices) + " matrices (1, 2 or 4)");
  // Each lane reads its row when it arrives, before the warp's other lanes
  // run on: a row that another warp's copy has not yet landed in (no
  // barrier after its cp.async wait) is read as poison.
  unsigned char mine[16] = {};
  if (lane() < 8 * matrices) {
    const bool aligned = reinterpret_cast<uintptr_t>(row) % 16 == 0;
    if (!aligned || !in_shared(row, 16))
      kernel_error(
          "ldmatrix: lane " + std::to_string(lane()) + "'s row address " + address_text(row) +
          (aligned ? " is outside the block's dynamic shared memory" : " is not 16-byte aligned"));
    std::memcpy(mine, row, 16);
  }
  [[maybe_unused]] const Hidden hidden{};  // what follows moves registers only
  const unsigned char* all = warp_exchange(0xffffffffu, mine, sizeof mine);
  // Element c of row r of matrix m, as lane 8 m + r read it.
  auto element = [&](int m, int r, int c) {
    uint16_t v;
    std::memcpy(&v, all + 32 * (8 * m + r) + 2 * c, 2);
    return uint32_t(v);
  };
  const int l = lane(), quad = l / 4, pair = 2 * (l % 4);
  for (int m = 0; m < matrices; ++m)
    regs[m] = trans ? element(m, pair, quad) | element(m, pair + 1, quad) << 16
                    : element(m, quad, pair) | element(m, quad, pair + 1) << 16;
}

void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
  if (bytes != 4 && bytes != 8 && bytes != 16)
    kernel_error("cp.async of " + std::to_string(bytes) + " bytes (4, 8 or 16)");
  if (src_bytes < 0 || src_bytes > bytes)
    kernel_error("cp.async: src-size " + std::to_string(src_bytes) + " outside 0.." +
                 std::to_string(bytes));
  if (reinterpret_cast<uintptr_t>(dst) % unsigned(bytes) != 0 || !in_shared(dst, size_t(bytes)))
    kernel_error("cp.async: the destination " + address_text(dst) +
                 " is not aligned to the copy's size or not in the block's dynamic shared memory");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % unsigned(bytes) != 0)
    kernel_error("cp.async: the source " + address_text(src) + " is not aligned to the copy's " +
                 std::to_string(bytes) + " bytes");
  Copy c{static_cast<unsigned char*>(dst), {}, bytes};
  if (src_bytes > 0) std::memcpy(c.bytes, src, size_t(src_bytes));
  std::memset(c.dst, kPoison, size_t(bytes));
  [[maybe_unused]] const Hidden hidden{};
  thread_copies().open.push_back(c);
}

void cp_async_commit() {
  [[maybe_unused]] const Hidden hidden{};
  ThreadCopies& t = thread_copies();
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}

namespace {
// Takes the next copy of the thread's oldest group into c while more than n
// groups are in flight; false when no more.
bool next_landing(int n, Copy& c) {
  [[maybe_unused]] const Hidden hidden{};
  ThreadCopies& t = thread_copies();
  while (int(t.groups.size()) > n) {
    std::deque<Copy>& group = t.groups.front();
    if (!group.empty()) {
      c = group.front();
      group.pop_front();
      return true;
    }
    t.groups.pop_front();
  }
  return false;
}
}  // namespace

void cp_async_wait(int n) {
  Copy c;  // its bytes land as the thread's own writes (the race check sees them)
  while (next_landing(n, c)) {
    for (int i = 0; i < c.size; ++i)
      if (c.dst[i] != kPoison)
        kernel_error("cp.async: shared memory at " + address_text(c.dst) +
                     " was written while a copy into it was in flight");
    std::memcpy(c.dst, c.bytes, size_t(c.size));
  }
}

}  // namespace emu
