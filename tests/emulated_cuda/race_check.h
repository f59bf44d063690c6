// The emulator's race check: in a build with ThreadSanitizer
// (-fsanitize=thread; the racecheck tests, tests/CMakeLists.txt), every GPU
// thread is also a fiber of ThreadSanitizer's, so that two threads touching
// the same bytes, one of them writing, with nothing ordering them, is a race
// it reports, whichever order the fibers happened to run in. What orders
// them is what orders a GPU's threads (the PTX memory model):
// - a launch's threads come after the host's (and the stream's) work before
//   it, and the work after it comes after them;
// - __syncthreads orders the threads of the block: each releases as it
//   arrives and acquires as it leaves; __syncwarp does so for its lanes;
// - shuffles, the m16n8k16 product and ldmatrix order nothing: they
//   exchange registers, not memory, so a lane that reads shared memory
//   another lane wrote after only a shuffle between them is a race;
// - nothing orders two blocks of a launch. Blocks run together
//   (set_interleaved_blocks) have fibers of their own, so a race between
//   them is reported; a block that runs after another in the same fibers
//   (blocks one after another, or the next set of blocks run together)
//   comes after it, so a race between those is not seen. Each block has
//   its shared memory at an address of its own (all of it dynamic:
//   cuda_runtime.h), so nothing is suppressed.
// The emulator's own bookkeeping, which every fiber reads and writes, is
// hidden from it (emu::Hidden, emulator.h).
//
// Between the host and the streams' work (streams.cpp), what orders is what
// orders them on a GPU: a piece of work comes after what the host did before
// enqueueing it and after the work of its stream before it; the host after
// a synchronisation that waited for it (the stream's, an event's, a
// cudaEventQuery that found it done, a copy to pageable memory, cudaFree's),
// a stream after a cudaStreamWaitEvent. The
// emulator's own locks, which the host and the streams' threads all take,
// order nothing (Quiet), so that the host writing a buffer a copy on a
// stream still reads, or reading what a stream's work writes before
// waiting for it, is reported, whenever the two happened to run. Kernels
// still run one at a time, under one lock that does order them (the
// blocks' shared memory is one for all): the check does not see a race
// between the kernels of two streams.
//
// Internal to the emulator's files; elsewhere every call is a no-op.
#pragma once

#include <mutex>

#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN 1
#endif
#endif

#ifdef EMU_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);
#endif

namespace emu::race {

#ifdef EMU_TSAN
inline constexpr bool kOn = true;
// A fiber of ThreadSanitizer's, for one GPU thread's slot (kept for good:
// making one costs about half a millisecond).
inline void* new_fiber() { return __tsan_create_fiber(0); }
// The running context's (the host thread's, outside the fibers).
inline void* current_fiber() { return __tsan_get_current_fiber(); }
// Announces the switch about to be made to fiber f; it orders nothing.
inline void switch_to(void* f) { __tsan_switch_to_fiber(f, __tsan_switch_to_fiber_no_sync); }
// What the running context did so far comes before what those that acquire
// `sync` do after.
inline void release(void* sync) { __tsan_release(sync); }
inline void acquire(void* sync) { __tsan_acquire(sync); }
// Reads and writes of the running context are neither checked nor kept.
inline void ignore_begin() { __tsan_ignore_thread_begin(); }
inline void ignore_end() { __tsan_ignore_thread_end(); }
// The running context's synchronisations (locks, condition variables,
// atomics) order nothing.
inline void ignore_sync_begin() { AnnotateIgnoreSyncBegin(__FILE__, __LINE__); }
inline void ignore_sync_end() { AnnotateIgnoreSyncEnd(__FILE__, __LINE__); }
#else
inline constexpr bool kOn = false;
inline void* new_fiber() { return nullptr; }
inline void* current_fiber() { return nullptr; }
inline void switch_to(void*) {}
inline void release(void*) {}
inline void acquire(void*) {}
inline void ignore_begin() {}
inline void ignore_end() {}
inline void ignore_sync_begin() {}
inline void ignore_sync_end() {}
#endif

// While one lives, the running context's synchronisations order nothing and
// its reads and writes are neither checked nor kept: the emulator's
// bookkeeping under its own locks. No release or acquire may be made under
// one (it would be dropped).
struct Quiet {
  Quiet() {
    ignore_sync_begin();
    ignore_begin();
  }
  ~Quiet() {
    ignore_end();
    ignore_sync_end();
  }
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;
};

// A lock of one of the emulator's mutexes, quiet while held (a unique_lock,
// for condition variables, in `held`).
template <class Mutex>
struct QuietLock {
  explicit QuietLock(Mutex& m) : held(m) {}
  Quiet quiet;  // made before the lock is taken, ended after it is let go
  std::unique_lock<Mutex> held;
};

}  // namespace emu::race
