// The CUDA emulator's fibers (emulator.h): each GPU thread of the blocks
// being run has a stack of its own, switched cooperatively on one host
// thread. Internal to the emulator's files.
#pragma once

#include <cstddef>

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

constexpr size_t kStackBytes = size_t(256) << 10;

#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

// A context that starts entry() on the stack [base, base + size).
void new_context(Context& c, char* base, size_t size, void (*entry)());
// Switches from context `from` to `to` (stack [bottom, bottom + size));
// from_fake: where ASan keeps from's fake stack (null when from has ended);
// to_race: to's fiber of ThreadSanitizer's (race_check.h), announced last,
// once nothing more is read on from's behalf.
void transfer(Context& from, void** from_fake, Context& to, const void* bottom, size_t size,
              void* to_race);
// A fiber's stack, kStackBytes with a guard page below.
char* map_stack();
// The calling thread's stack, for ASan's bookkeeping of switches back to it.
void home_stack(const void** bottom, size_t* size);

}  // namespace emu
