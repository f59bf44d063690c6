// Shared arrays and the collectives over them (MpiCommunicator's, declared in
// mpi_communicator.h).
//
// On a group whose ranks share a node, allocate_shared puts every rank's n
// elements in one MPI-3 shared-memory window, so a rank reads a peer's values
// with plain loads: an all-gather is one copy out of the peers' memory, a
// reduce-scatter one pass summing the peers' ranges, with no copy through
// MPI's buffers (OpenMPI's shared-memory transport moved 3.5 GB/s per
// direction here, memory itself ~25 GB/s). CommOptions::shared_memory = false
// (DENDRITE_SHARED_MEMORY=0) turns it off: private memory, messages.
#include <immintrin.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>

#include "dendrite/comm/mpi/mpi_communicator.h"
#include "dendrite/comm/self_communicator.h"
#include "dendrite/core/buffer.h"
#include "dendrite/core/check.h"
#include "dendrite/core/trace.h"

namespace dendrite {

WindowArray::WindowArray(MPI_Win win, std::byte* local, int64_t n, DType t,
                         std::vector<std::byte*> peers)
    : win_(win), peers_(std::move(peers)) {
  bytes_ = local;
  n_ = n;
  dtype_ = t;
}

// Not while an error unwinds the stack: the peers may never come (the job is
// about to abort), so the window is left to the process's end.
WindowArray::~WindowArray() {
  int finalized = 0;
  if (std::uncaught_exceptions() > 0) return;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Win_free(&win_);
}

namespace {

std::byte* align64(std::byte* p) {
  return reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + 63) / 64 * 64);
}

// A shared array's peers; shared() holds only for windows.
const WindowArray& window(const SharedArray& a) { return static_cast<const WindowArray&>(a); }

}  // namespace

void MpiCommunicator::charge(Collective c, double start, double wait_before, double arrived) {
  const double peer_wait_before = stats_.peer_wait_seconds[static_cast<int>(c)];
  settle(c, arrived);
  const double t = MPI_Wtime() - start;
  stats_.wait_seconds = wait_before + t;
  stats_.total_seconds[static_cast<int>(c)] += t;
  stats_.exposed_seconds[static_cast<int>(c)] += t;
  trace_blocking(c, t,
                 arrived >= 0 ? stats_.peer_wait_seconds[static_cast<int>(c)] - peer_wait_before : -1);
}

void MpiCommunicator::trace_blocking(Collective c, double seconds, double peer_wait) {
  if (!trace::on() || arrival_depth_ > 0) return;
  const bool barrier = c == Collective::kCount;
  const double end = trace::now();
  trace::add({"collective", str(barrier ? "barrier" : collective_name(c), " ", name_),
              end - seconds, end, trace::Lane::kRank, barrier ? -1 : trace_bytes_,
              peer_wait >= 0 ? peer_wait * 1e3 : -1, -1});
}

// A window needs every rank of the group on this node; otherwise (or when the
// window cannot be made, say /dev/shm is too small) the array is private.
std::unique_ptr<SharedArray> MpiCommunicator::allocate_shared(int64_t n, DType t) {
  DENDRITE_CHECK(n >= 0, "allocate_shared on ", name_, ": negative size ", n);
  return make_window(n, t);
}

namespace {
// A channel's window: the barrier slot (64 bytes), then two data slots.
constexpr int64_t kSyncBytes = 64;
constexpr int64_t kChannelFloats = (kSyncBytes + 2 * (int64_t(1) << 20)) / 4;
}  // namespace

// Made with the communicator (collective, like it), so that no collective
// later has to allocate: a lone rank in a collective must reach the watchdog.
void MpiCommunicator::make_channels() {
  if (size_ == 1) return;
  // Only the barrier slot is zeroed: each data slot is written by its owner
  // before a peer reads it, so its pages are first touched there, and only
  // as many of them as the group's sums reach (a communicator that sums a few
  // statistics no longer touches 4 MB a rank when it is made).
  for (ShmChannel* ch : {&own_, &engine_}) {
    std::unique_ptr<SharedArray> w = make_window(kChannelFloats, DType::kF32, false, kSyncBytes);
    if (w->shared()) ch->window.reset(static_cast<WindowArray*>(w.release()));
  }
  if (!own_.window || !engine_.window) {
    own_.window.reset();
    engine_.window.reset();
  }
  std::unique_ptr<SharedArray> board =
      make_window(int64_t(kArrivalSlots) * 2, DType::kF64, /*machine=*/true);
  if (board->shared()) arrivals_.reset(static_cast<WindowArray*>(board.release()));
}

namespace {
// One arrival stamp: the call's sequence number, then the time its rank entered it.
struct Stamp {
  int64_t seq;
  double t;
};
static_assert(sizeof(Stamp) == 16);
Stamp* stamp_slot(std::byte* board, int64_t seq, int slots) {
  return reinterpret_cast<Stamp*>(board) + seq % slots;
}
}  // namespace

// The time is stored before the sequence number (release), and a peer reads
// the number first (acquire): a matching number means the time is that call's.
double MpiCommunicator::stamp() {
  if (arrival_depth_++ > 0 || !arrivals_) return -1;
  const int64_t seq = ++arrival_seq_;
  const double now = steady_seconds();
  Stamp* s = stamp_slot(arrivals_->bytes(), seq, kArrivalSlots);
  std::atomic_ref<double>(s->t).store(now, std::memory_order_relaxed);
  std::atomic_ref<int64_t>(s->seq).store(seq, std::memory_order_release);
  return now;
}

// A peer whose stamp for this call is not there yet had not arrived when the
// call ended (a gather of a shared array does not wait for it): the call did
// not wait for it either.
void MpiCommunicator::settle(Collective c, double arrived) {
  --arrival_depth_;
  if (arrived < 0) return;
  double last = arrived;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Stamp* s = stamp_slot(arrivals_->peer(r), arrival_seq_, kArrivalSlots);
    if (std::atomic_ref<int64_t>(s->seq).load(std::memory_order_acquire) != arrival_seq_) continue;
    last = std::max(last, std::atomic_ref<double>(s->t).load(std::memory_order_relaxed));
  }
  stats_.peer_wait_measured = true;
  if (c == Collective::kCount) return;  // a barrier: charged to no kind
  const double wait = std::min(last, steady_seconds()) - arrived;
  if (wait > 0) stats_.peer_wait_seconds[static_cast<int>(c)] += wait;
}

std::unique_ptr<SharedArray> MpiCommunicator::make_window(int64_t n, DType t, bool machine,
                                                          int64_t zeroed) {
  int local = n > 0 && (machine ? machine_ranks_ == size_
                                : world_->options.shared_memory && node_ranks_ == size_)
                  ? 1
                  : 0;
  int all_local = 0;  // every rank must take the same branch
  check_mpi(MPI_Allreduce(&local, &all_local, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
  if (!all_local) return std::make_unique<PrivateArray>(n, t);

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each segment on its own pages
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  std::byte* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  // OpenMPI starts a segment 8 bytes past a page boundary: ask for 64 more and
  // align up (the offset within a page is the same in every process's mapping).
  const size_t bytes = (size_t(n) * dtype_size(t) + 63) / 64 * 64;
  int ok = MPI_Win_allocate_shared(MPI_Aint(bytes + 64), 1, info, comm_, &base, &win) == MPI_SUCCESS
               ? 1
               : 0;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_ARE_FATAL);
  MPI_Info_free(&info);
  std::vector<std::byte*> peers(size_);
  for (int r = 0; ok && r < size_; ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    ok = MPI_Win_shared_query(win, r, &size, &unit, &peers[r]) == MPI_SUCCESS &&
         size_t(size) >= bytes + 64;
    if (ok) peers[r] = align64(peers[r]);
  }
  int all_ok = 0;
  check_mpi(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
  if (!all_ok) {
    if (win != MPI_WIN_NULL) MPI_Win_free(&win);
    return std::make_unique<PrivateArray>(n, t);
  }
  base = align64(base);
  std::memset(base, 0,
              zeroed < 0 ? bytes : std::min(bytes, size_t(zeroed)));  // first touch by the owner
  barrier();
  return std::make_unique<WindowArray>(win, base, n, t, std::move(peers));
}

namespace {

// Copies n bytes with streaming (non-temporal) stores: a gathered block is
// larger than a core's L2 and is read by GEMMs that stream it once, so
// ordinary stores only add the read-for-ownership of every destination line
// and evict what the computing threads hold in cache. Measured on GPT-2 124M
// y=2,z=2 (4 ranks, 2 cores; docs/overlap.md): the step fell by 1.4% without
// overlap and 2.6% with it, the Z all-gathers by about a third.
void copy_streaming(std::byte* __restrict out, const std::byte* __restrict in, int64_t n) {
#if defined(__AVX512F__) || defined(__AVX__)
#if defined(__AVX512F__)
  constexpr int64_t kVector = 64;
  auto store = [](std::byte* o, const std::byte* i) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(o), _mm512_loadu_si512(i));
  };
#else
  constexpr int64_t kVector = 32;
  auto store = [](std::byte* o, const std::byte* i) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(o),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(i)));
  };
#endif
  const int64_t head =
      std::min(n, int64_t((kVector - reinterpret_cast<uintptr_t>(out) % kVector) % kVector));
  std::memcpy(out, in, size_t(head));
  int64_t i = head;
  for (; i + kVector <= n; i += kVector) store(out + i, in + i);
  std::memcpy(out + i, in + i, size_t(n - i));
  _mm_sfence();  // the stores are visible before the task is marked done
#else
  std::memcpy(out, in, size_t(n));
#endif
}

// The work of the three collectives on a shared array, for one rank. Offsets
// and counts in bytes here.
void gather_shared(const WindowArray& a, int g, int64_t offset, std::byte* out, int64_t n) {
  for (int r = 0; r < g; ++r) copy_streaming(out + int64_t(r) * n, a.peer(r) + offset, n);
}

// Vectorised sums over the peers' arrays (restrict: the ranges never overlap),
// in rank order, in blocks that stay in cache. `at` counts bytes from the
// start of each peer's array; T is the element type found there.
template <class T>
void sum_in_rank_order(std::byte* const* peers, int g, int64_t at, T* __restrict out, int64_t n,
                       bool accumulate) {
  constexpr int64_t kBlock = 8192 / sizeof(T);
  alignas(64) T acc[kBlock];
  auto from = [&](int r) { return reinterpret_cast<const T*>(peers[r] + at); };
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const T* __restrict p0 = from(0) + b;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) acc[i] = p0[i];
    for (int r = 1; r < g; ++r) {
      const T* __restrict p = from(r) + b;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) acc[i] += p[i];
    }
    T* __restrict o = out + b;
    if (accumulate) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] += acc[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = acc[i];
    }
  }
}

// Floats [at, at + n) of every rank's array, summed into out.
void sum_shared(const WindowArray& a, int g, int64_t at, float* __restrict out, int64_t n,
                bool accumulate) {
  sum_in_rank_order(a.peers(), g, at * 4, out, n, accumulate);
}

// Block `me` of [offset, offset + n): summed over the ranks and written back to every rank.
void sum_block_everywhere(const WindowArray& a, int g, int me, int64_t offset, int64_t n) {
  const int64_t b = offset + n * me / g, e = offset + n * (me + 1) / g;
  constexpr int64_t kBlock = 2048;
  alignas(64) float acc[kBlock];
  for (int64_t s = b; s < e; s += kBlock) {
    const int64_t len = std::min(kBlock, e - s);
    sum_shared(a, g, s, acc, len, false);
    for (int r = 0; r < g; ++r) std::memcpy(a.peer(r) + s * 4, acc, sizeof(float) * len);
  }
}

}  // namespace

void MpiCommunicator::all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) {
  const int64_t es = int64_t(dtype_size(a.dtype()));
  if (!a.shared()) return all_gather(a.bytes() + offset * es, out, n, a.dtype());
  const double start = MPI_Wtime(), wait_before = stats_.wait_seconds, arrived = stamp();
  count(Collective::kAllGather, trace_bytes_ = int64_t(size_) * n * es);
  gather_shared(window(a), size_, offset * es, static_cast<std::byte*>(out), n * es);
  charge(Collective::kAllGather, start, wait_before, arrived);
}

void MpiCommunicator::reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                                     bool accumulate) {
  check_summable("reduce_scatter", *this, a.dtype());
  const float* mine = a.data() + offset;
  if (!a.shared()) {
    if (!accumulate) return reduce_scatter(mine, out, n, DType::kF32);
    Buffer<float> sum{size_t(n)};
    reduce_scatter(mine, sum.data(), n, DType::kF32);
    mine = sum.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] += mine[i];
    return;
  }
  const double start = MPI_Wtime(), wait_before = stats_.wait_seconds, arrived = stamp();
  count(Collective::kReduceScatter, trace_bytes_ = int64_t(size_) * n * int64_t(sizeof(float)));
  barrier();  // every rank's values are written
  sum_shared(window(a), size_, offset + int64_t(rank_) * n, out, n, accumulate);
  charge(Collective::kReduceScatter, start, wait_before, arrived);
}

// Rank r sums block r of every rank and writes it into every rank's array.
void MpiCommunicator::all_reduce(SharedArray& a, int64_t offset, int64_t n) {
  check_summable("all_reduce", *this, a.dtype());
  if (!a.shared()) return all_reduce(a.data() + offset, n, DType::kF32);
  const double start = MPI_Wtime(), wait_before = stats_.wait_seconds, arrived = stamp();
  count(Collective::kAllReduce, trace_bytes_ = n * int64_t(sizeof(float)));
  barrier();
  sum_block_everywhere(window(a), size_, rank_, offset, n);
  barrier();
  charge(Collective::kAllReduce, start, wait_before, arrived);
}

bool MpiCommunicator::shm_all_reduce(ShmChannel& ch, void* buf, int64_t n, DType t,
                                     double seconds) {
  static_assert(ShmChannel::kSlotBytes * 2 + kSyncBytes == kChannelFloats * 4);
  const int64_t es = int64_t(dtype_size(t)), piece = ShmChannel::kSlotBytes / es;
  std::byte* const* peers = ch.window->peers();
  char* out = static_cast<char*>(buf);
  for (int64_t at = 0; at < n; at += piece) {
    const int64_t len = std::min(piece, n - at),
                  slot = kSyncBytes + ch.slot * ShmChannel::kSlotBytes;
    // The other slot was read by every peer before it arrived at this barrier,
    // so one barrier per piece suffices. The slot turns even on a timeout, as
    // on the peers that complete this piece later.
    ch.slot ^= 1;
    std::memcpy(ch.window->bytes() + slot, out + at * es, size_t(len * es));
    if (!shm_barrier(peers, size_, rank_, ch.generation, seconds, world_->spin)) return false;
    if (t == DType::kF64)
      sum_in_rank_order(peers, size_, slot, reinterpret_cast<double*>(out) + at, len, false);
    else
      sum_in_rank_order(peers, size_, slot, reinterpret_cast<float*>(out) + at, len, false);
  }
  return true;
}

Request MpiCommunicator::iall_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) {
  if (!a.shared()) return iall_gather_private(a, offset, out, n);
  const int64_t es = int64_t(dtype_size(a.dtype()));
  const WindowArray& w = window(a);
  const int g = size_;
  return post(Collective::kAllGather, int64_t(g) * n * es, [&w, g, offset, out, n, es] {
    gather_shared(w, g, offset * es, static_cast<std::byte*>(out), n * es);
  });
}

Request MpiCommunicator::ireduce_scatter(const SharedArray& a, int64_t offset, float* out,
                                         int64_t n, bool accumulate) {
  check_summable("ireduce_scatter", *this, a.dtype());
  if (!a.shared()) return ireduce_scatter_private(a, offset, out, n, accumulate);
  if (!engine_.window) {
    reduce_scatter(a, offset, out, n, accumulate);
    return Request();
  }
  const WindowArray& w = window(a);
  const int g = size_, me = rank_;
  const unsigned spin = world_->spin;
  std::byte* const* slots = engine_.window->peers();
  int64_t* gen = &engine_.generation;
  return post(Collective::kReduceScatter, int64_t(g) * n * 4,
              [&w, g, me, offset, out, n, accumulate, slots, gen, spin] {
                shm_barrier(slots, g, me, *gen, 0, spin);
                sum_shared(w, g, offset + int64_t(me) * n, out, n, accumulate);
              });
}

Request MpiCommunicator::iall_reduce(SharedArray& a, int64_t offset, int64_t n) {
  check_summable("iall_reduce", *this, a.dtype());
  if (!a.shared() || !engine_.window) {
    all_reduce(a, offset, n);
    return Request();
  }
  const WindowArray& w = window(a);
  const int g = size_, me = rank_;
  const unsigned spin = world_->spin;
  std::byte* const* slots = engine_.window->peers();
  int64_t* gen = &engine_.generation;
  return post(Collective::kAllReduce, n * 4, [&w, g, me, offset, n, slots, gen, spin] {
    shm_barrier(slots, g, me, *gen, 0, spin);
    sum_block_everywhere(w, g, me, offset, n);
    shm_barrier(slots, g, me, *gen, 0, spin);
  });
}

}  // namespace dendrite
