// The CUDA emulator's fibers (fiber.h): the switch between two stacks, and
// the stacks.
#include "fiber.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "race_check.h"

namespace emu {

#if defined(__x86_64__)
namespace {
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
void swap_context(Context& from, Context& to, void* to_race) {
  void* const sp = to.sp;
  race::switch_to(to_race);
  emu_swap_context(&from.sp, sp);
}
}  // namespace
void new_context(Context& c, char* base, size_t size, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(base + size) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<void**>(top);
  *--slot = nullptr;                              // entry's return address: it never returns
  *--slot = reinterpret_cast<void*>(entry);       // where the first switch's `ret` goes
  for (int i = 0; i < 6; ++i) *--slot = nullptr;  // rbp, rbx, r12-r15
  c.sp = slot;
}
#else
namespace {
void swap_context(Context& from, Context& to, void* to_race) {
  race::switch_to(to_race);
  swapcontext(&from.uc, &to.uc);
}
}  // namespace
void new_context(Context& c, char* base, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = base;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

void transfer(Context& from, void** from_fake, Context& to, const void* bottom, size_t size,
              void* to_race) {
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(from_fake, bottom, size);
#else
  (void)from_fake, (void)bottom, (void)size;
#endif
  swap_context(from, to, to_race);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(from_fake ? *from_fake : nullptr, nullptr, nullptr);
#endif
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

}  // namespace emu
