// Shared arrays and the collectives over them (declared in communicator.h).
//
// On a group whose ranks share a node, MpiCommunicator::allocate_shared puts
// every rank's n floats in one MPI-3 shared-memory window, so a rank reads a
// peer's values with plain loads: an all-gather is one copy out of the peers'
// memory, a reduce-scatter one pass summing the peers' ranges, with no copy
// through MPI's buffers (OpenMPI's shared-memory transport moved 3.5 GB/s per
// direction here, memory itself ~25 GB/s). Set DENDRITE_SHARED_MEMORY=0 to
// turn it off (private memory, messages).
#include <immintrin.h>
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "dendrite/comm/mpi_communicator.h"
#include "dendrite/core/buffer.h"
#include "dendrite/core/check.h"
#include "dendrite/comm/progress.h"

namespace dendrite {
namespace {

class PrivateArray final : public SharedArray {
 public:
  explicit PrivateArray(int64_t n) : buf_(size_t(n)) {
    local_ = buf_.data();
    n_ = n;
  }

 private:
  Buffer<float> buf_;
};

class WindowArray final : public SharedArray {
 public:
  WindowArray(MPI_Win win, float* local, int64_t n, std::vector<float*> peers) : win_(win) {
    local_ = local;
    n_ = n;
    peers_ = std::move(peers);
  }
  // Freeing a window is collective: every rank destroys its arrays in the same
  // order. Not while an error unwinds the stack: the peers may never come (the
  // job is about to abort), so the window is left to the process's end.
  ~WindowArray() override {
    int finalized = 0;
    if (std::uncaught_exceptions() > 0) return;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Win_free(&win_);
  }

 private:
  MPI_Win win_;
};

float* align64(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) / 64 * 64);
}

// How many ranks of comm share this rank's node.
int ranks_on_my_node(MPI_Comm comm) {
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int n = 0;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

bool shared_memory_enabled() {
  const char* v = std::getenv("DENDRITE_SHARED_MEMORY");
  return !v || std::string(v) != "0";
}

}  // namespace

void Communicator::charge(Collective c, double start, double wait_before) {
  const double t = MPI_Wtime() - start;
  stats_.wait_seconds = wait_before + t;
  stats_.total_seconds[static_cast<int>(c)] += t;
  stats_.exposed_seconds[static_cast<int>(c)] += t;
}

std::unique_ptr<SharedArray> Communicator::allocate_shared(int64_t n) {
  return std::make_unique<PrivateArray>(n);
}

// A window needs every rank of the group on this node; otherwise (or when the
// window cannot be made, say /dev/shm is too small) the array is private.
std::unique_ptr<SharedArray> MpiCommunicator::allocate_shared(int64_t n) {
  DENDRITE_CHECK(n >= 0, "allocate_shared on ", name_, ": negative size ", n);
  return make_window(n);
}

namespace {
// A channel's window: the barrier slot (16 floats), then two data slots.
constexpr int64_t kSyncFloats = 16;
constexpr int64_t kSlotFloats = (int64_t(1) << 20) / 4;  // ShmChannel::kSlotBytes
}  // namespace

// Made with the communicator (collective, like it), so that no collective
// later has to allocate: a lone rank in a collective must reach the watchdog.
void MpiCommunicator::make_channels() {
  if (size_ == 1) return;
  // Ranks of this job on the node, each with its OpenMP threads (and an engine
  // thread): when they fill the cores, waiting threads spin only briefly.
  static const int job_ranks = [] {
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* e = std::getenv(v); e && std::atoi(e) > 0) return std::atoi(e);
    return ranks_on_my_node(MPI_COMM_WORLD);  // collective: every rank's first group
  }();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  set_oversubscribed(unsigned(job_ranks * omp_get_max_threads()) >= cores);
  for (ShmChannel* ch : {&own_, &engine_}) {
    ch->window = make_window(kSyncFloats + 2 * kSlotFloats);
    if (!ch->window->shared()) ch->window.reset();
  }
  if (!own_.window || !engine_.window) {
    own_.window.reset();
    engine_.window.reset();
  }
}

std::unique_ptr<SharedArray> MpiCommunicator::make_window(int64_t n) {
  int local = 0;
  if (shared_memory_enabled() && n > 0) local = ranks_on_my_node(comm_) == size_ ? 1 : 0;
  int all_local = 0;  // every rank must take the same branch
  check_mpi(MPI_Allreduce(&local, &all_local, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
  if (!all_local) return std::make_unique<PrivateArray>(n);

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each segment on its own pages
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  float* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  // OpenMPI starts a segment 8 bytes past a page boundary: ask for 64 more and
  // align up (the offset within a page is the same in every process's mapping).
  const size_t bytes = (size_t(n) * sizeof(float) + 63) / 64 * 64;
  int ok = MPI_Win_allocate_shared(MPI_Aint(bytes + 64), sizeof(float), info, comm_, &base, &win) ==
                   MPI_SUCCESS
               ? 1
               : 0;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_ARE_FATAL);
  MPI_Info_free(&info);
  std::vector<float*> peers(size_);
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
    return std::make_unique<PrivateArray>(n);
  }
  base = align64(base);
  std::memset(base, 0, bytes);  // first touch by the owner
  barrier();
  return std::make_unique<WindowArray>(win, base, n, std::move(peers));
}

namespace {

// Copies n floats with streaming (non-temporal) stores: a gathered block is
// larger than a core's L2 and is read by GEMMs that stream it once, so
// ordinary stores only add the read-for-ownership of every destination line
// and evict what the computing threads hold in cache. Measured on GPT-2 124M
// y=2,z=2 (4 ranks, 2 cores; docs/overlap.md): the step fell by 1.4% without
// overlap and 2.6% with it, the Z all-gathers by about a third.
void copy_streaming(float* __restrict out, const float* __restrict in, int64_t n) {
#if defined(__AVX512F__) || defined(__AVX__)
#if defined(__AVX512F__)
  constexpr int64_t kLanes = 16;
  auto store = [](float* o, const float* i) { _mm512_stream_ps(o, _mm512_loadu_ps(i)); };
#else
  constexpr int64_t kLanes = 8;
  auto store = [](float* o, const float* i) { _mm256_stream_ps(o, _mm256_loadu_ps(i)); };
#endif
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(out + i) % (4 * kLanes)) != 0; ++i) out[i] = in[i];
  for (; i + kLanes <= n; i += kLanes) store(out + i, in + i);
  for (; i < n; ++i) out[i] = in[i];
  _mm_sfence();  // the stores are visible before the task is marked done
#else
  std::memcpy(out, in, sizeof(float) * n);
#endif
}

// The work of the three collectives on a shared array, for one rank.
void gather_shared(const SharedArray& a, int g, int64_t offset, float* out, int64_t n) {
  for (int r = 0; r < g; ++r) copy_streaming(out + int64_t(r) * n, a.peer(r) + offset, n);
}

// Vectorised sums over the peers' arrays (restrict: the ranges never overlap),
// in rank order, in blocks that stay in cache. `at` counts floats from the
// start of each peer's array; T is the element type found there.
template <class T>
void sum_in_rank_order(float* const* peers, int g, int64_t at, T* __restrict out, int64_t n,
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

void sum_shared(const SharedArray& a, int g, int64_t at, float* __restrict out, int64_t n,
                bool accumulate) {
  sum_in_rank_order(a.peers(), g, at, out, n, accumulate);
}

// Block `me` of [offset, offset + n): summed over the ranks and written back to every rank.
void sum_block_everywhere(SharedArray& a, int g, int me, int64_t offset, int64_t n) {
  const int64_t b = offset + n * me / g, e = offset + n * (me + 1) / g;
  constexpr int64_t kBlock = 2048;
  alignas(64) float acc[kBlock];
  for (int64_t s = b; s < e; s += kBlock) {
    const int64_t len = std::min(kBlock, e - s);
    sum_shared(a, g, s, acc, len, false);
    for (int r = 0; r < g; ++r) std::memcpy(a.peer(r) + s, acc, sizeof(float) * len);
  }
}

}  // namespace

void Communicator::all_gather(const SharedArray& a, int64_t offset, float* out, int64_t n) {
  const int g = size();
  if (g == 1) {
    if (out != a.data() + offset) std::memcpy(out, a.data() + offset, sizeof(float) * n);
    return;
  }
  if (!a.shared()) return all_gather(a.data() + offset, out, n, DType::kF32);
  const double start = MPI_Wtime(), wait_before = stats_.wait_seconds;
  count(Collective::kAllGather, int64_t(g) * n * int64_t(sizeof(float)));
  gather_shared(a, g, offset, out, n);
  charge(Collective::kAllGather, start, wait_before);
}

void Communicator::reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                                  bool accumulate) {
  const int g = size();
  const float* mine = a.data() + offset;
  if (g > 1 && !a.shared()) {
    if (!accumulate) return reduce_scatter(mine, out, n, DType::kF32);
    Buffer<float> sum{size_t(n)};
    reduce_scatter(mine, sum.data(), n, DType::kF32);
    mine = sum.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] += mine[i];
    return;
  }
  if (g == 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = accumulate ? out[i] + mine[i] : mine[i];
    return;
  }
  const double start = MPI_Wtime(), wait_before = stats_.wait_seconds;
  count(Collective::kReduceScatter, int64_t(g) * n * int64_t(sizeof(float)));
  barrier();  // every rank's values are written
  sum_shared(a, g, offset + int64_t(rank()) * n, out, n, accumulate);
  charge(Collective::kReduceScatter, start, wait_before);
}

// Rank r sums block r of every rank and writes it into every rank's array.
void Communicator::all_reduce(SharedArray& a, int64_t offset, int64_t n) {
  const int g = size();
  if (g == 1) return;
  if (!a.shared()) return all_reduce(a.data() + offset, n, DType::kF32);
  const double start = MPI_Wtime(), wait_before = stats_.wait_seconds;
  count(Collective::kAllReduce, n * int64_t(sizeof(float)));
  barrier();
  sum_block_everywhere(a, g, rank(), offset, n);
  barrier();
  charge(Collective::kAllReduce, start, wait_before);
}

bool Communicator::shm_all_reduce(ShmChannel& ch, void* buf, int64_t n, DType t,
                                  double seconds) {
  static_assert(ShmChannel::kSlotBytes == kSlotFloats * 4);
  const int g = size(), me = rank();
  const int64_t es = int64_t(dtype_size(t)), piece = ShmChannel::kSlotBytes / es;
  float* const* peers = ch.window->peers();
  char* out = static_cast<char*>(buf);
  for (int64_t at = 0; at < n; at += piece) {
    const int64_t len = std::min(piece, n - at), slot = kSyncFloats + ch.slot * kSlotFloats;
    // The other slot was read by every peer before it arrived at this barrier,
    // so one barrier per piece suffices. The slot turns even on a timeout, as
    // on the peers that complete this piece later.
    ch.slot ^= 1;
    std::memcpy(ch.window->data() + slot, out + at * es, size_t(len * es));
    if (!shm_barrier(peers, g, me, ch.generation, seconds)) return false;
    if (t == DType::kF64)
      sum_in_rank_order(peers, g, slot, reinterpret_cast<double*>(out) + at, len, false);
    else
      sum_in_rank_order(peers, g, slot, reinterpret_cast<float*>(out) + at, len, false);
  }
  return true;
}

Request Communicator::post(Collective c, int64_t bytes, std::function<void()> fn) {
  count(c, bytes);
  auto impl = std::make_unique<Request::Impl>();
  impl->stats = &stats_;
  impl->group = this;
  impl->kind = static_cast<int>(c);
  impl->task = post_task(std::move(fn));
  return Request(std::move(impl));
}

Request Communicator::iall_gather_private(const SharedArray& a, int64_t offset, float* out,
                                          int64_t n) {
  all_gather(a, offset, out, n);
  return Request();
}

Request Communicator::ireduce_scatter_private(const SharedArray& a, int64_t offset, float* out,
                                              int64_t n, bool accumulate) {
  reduce_scatter(a, offset, out, n, accumulate);
  return Request();
}

Request Communicator::iall_gather(const SharedArray& a, int64_t offset, float* out, int64_t n) {
  const int g = size();
  if (g == 1) {
    all_gather(a, offset, out, n);
    return Request();
  }
  if (!a.shared()) return iall_gather_private(a, offset, out, n);
  return post(Collective::kAllGather, int64_t(g) * n * 4,
              [&a, g, offset, out, n] { gather_shared(a, g, offset, out, n); });
}

Request Communicator::ireduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                                      bool accumulate) {
  const int g = size(), me = rank();
  if (g == 1) {
    reduce_scatter(a, offset, out, n, accumulate);
    return Request();
  }
  if (!a.shared()) return ireduce_scatter_private(a, offset, out, n, accumulate);
  if (!engine_.window) {
    reduce_scatter(a, offset, out, n, accumulate);
    return Request();
  }
  float* const* slots = engine_.window->peers();
  int64_t* gen = &engine_.generation;
  return post(Collective::kReduceScatter, int64_t(g) * n * 4,
              [&a, g, me, offset, out, n, accumulate, slots, gen] {
                shm_barrier(slots, g, me, *gen, 0);
                sum_shared(a, g, offset + int64_t(me) * n, out, n, accumulate);
              });
}

Request Communicator::iall_reduce(SharedArray& a, int64_t offset, int64_t n) {
  const int g = size(), me = rank();
  if (g == 1 || !a.shared()) {
    all_reduce(a, offset, n);
    return Request();
  }
  if (!engine_.window) {
    all_reduce(a, offset, n);
    return Request();
  }
  float* const* slots = engine_.window->peers();
  int64_t* gen = &engine_.generation;
  return post(Collective::kAllReduce, n * 4, [&a, g, me, offset, n, slots, gen] {
    shm_barrier(slots, g, me, *gen, 0);
    sum_block_everywhere(a, g, me, offset, n);
    shm_barrier(slots, g, me, *gen, 0);
  });
}

}  // namespace dendrite
