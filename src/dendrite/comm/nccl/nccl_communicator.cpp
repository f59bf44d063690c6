// The NCCL transport (nccl_communicator.h): the communicator and its pending
// collectives (event waits); the watchdog thread that follows them is
// nccl_watchdog.cpp.
#include "dendrite/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <functional>
#include <vector>

#include "dendrite/comm/cuda/device_pointer.h"
#include "dendrite/comm/nccl/accumulate.h"
#include "dendrite/comm/nccl/nccl_op.h"
#include "dendrite/comm/nccl/nccl_watchdog.h"
#include "dendrite/comm/self_communicator.h"
#include "dendrite/core/check.h"
#include "dendrite/core/log.h"

namespace dendrite {

namespace {

using nccl::check_cuda;
using nccl::Op;

bool on_device(const void* p) { return cuda::is_device_pointer(p); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI64:
      return ncclInt64;
    case DType::kBF16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

// A device array no peer reads in place: the collectives move its ranges.
class DeviceArray final : public SharedArray {
 public:
  DeviceArray(Allocator& memory, int64_t n, DType t) : memory_(memory) {
    n_ = n;
    dtype_ = t;
    bytes_ =
        static_cast<std::byte*>(memory.allocate(std::max<size_t>(1, size_t(n) * dtype_size(t))));
  }
  ~DeviceArray() override { memory_.release(bytes_); }
  bool shared() const override { return false; }

 private:
  Allocator& memory_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> owned, Communicator* inner, const NcclDevice& dev)
      : Communicator(inner->name()), owned_(std::move(owned)), inner_(inner), dev_(dev) {
    timeout_s_ = inner_->timeout();
    watched_timeout_ = timeout_s_;
  }
  ~NcclCommunicator() override {
    if (stream_) {  // it ran a device collective on its stream
      if (std::uncaught_exceptions() > 0) {
        // An error unwinds and a peer may be dead: abort first (it ends the
        // kernels that wait for peers), instead of the orderly destroy.
        watchdog_.reset();
        if (comm_) ncclCommAbort(comm_);
        comm_ = nullptr;
      }
      cudaStreamSynchronize(stream_);
      watchdog_.reset();
      if (comm_) ncclCommDestroy(comm_);
    }
    if (scratch_) dev_.memory->release(scratch_);  // syncs the compute stream first
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int ranks_on_node() const override { return inner_->ranks_on_node(); }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override {
    std::unique_ptr<Communicator> inner = inner_->split(color, key, std::move(name));
    Communicator* raw = inner.get();
    return std::make_unique<NcclCommunicator>(std::move(inner), raw, dev_);
  }
  std::unique_ptr<Communicator> group_of_one(std::string name) override {
    auto inner = std::make_unique<SelfCommunicator>(std::move(name));
    Communicator* raw = inner.get();
    return std::make_unique<NcclCommunicator>(std::move(inner), raw, dev_);
  }

  using Communicator::all_reduce;
  void all_reduce(void* buf, int64_t n, DType t) override {
    if (!on_device(buf)) return inner_->all_reduce(buf, n, t);
    check_summable("all_reduce", *this, t);
    run_blocking(post_all_reduce(buf, n, t));
  }
  Request iall_reduce(void* buf, int64_t n, DType t) override {
    if (!on_device(buf)) return inner_->iall_reduce(buf, n, t);
    check_summable("iall_reduce", *this, t);
    return request(post_all_reduce(buf, n, t));
  }
  void all_gather(const void* in, void* out, int64_t n, DType t) override {
    const Place p = place(in, out);
    if (p == Place::kHost) return inner_->all_gather(in, out, n, t);
    if (p == Place::kMixed) return staged_all_gather(in, out, n, t);
    run_blocking(post_all_gather(in, out, n, t));
  }
  Request iall_gather(const void* in, void* out, int64_t n, DType t) override {
    const Place p = place(in, out);
    if (p == Place::kHost) return inner_->iall_gather(in, out, n, t);
    if (p == Place::kMixed) {  // completes here, as a blocking call
      staged_all_gather(in, out, n, t);
      return Request();
    }
    return request(post_all_gather(in, out, n, t));
  }
  void reduce_scatter(const void* in, void* out, int64_t n, DType t) override {
    const Place p = place(in, out);
    if (p == Place::kHost) return inner_->reduce_scatter(in, out, n, t);
    if (p == Place::kMixed) return staged_reduce_scatter(in, out, n, t);
    check_summable("reduce_scatter", *this, t);
    run_blocking(post_reduce_scatter(in, out, n, t, false));
  }
  Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) override {
    const Place p = place(in, out);
    if (p == Place::kHost) return inner_->ireduce_scatter(in, out, n, t);
    if (p == Place::kMixed) {
      staged_reduce_scatter(in, out, n, t);
      return Request();
    }
    check_summable("ireduce_scatter", *this, t);
    return request(post_reduce_scatter(in, out, n, t, false));
  }
  void broadcast(void* buf, int64_t n, DType t, int root) override {
    if (!on_device(buf)) return inner_->broadcast(buf, n, t, root);
    DENDRITE_CHECK(root >= 0 && root < size(), "broadcast on ", name_, ": root ", root,
                   " is outside the group of ", size(), " ranks; pass a root in [0, ", size(), ")");
    run_blocking(
        post(Collective::kBroadcast, n * int64_t(dtype_size(t)), [=, this](cudaStream_t s) {
          if (!comm_) return ncclSuccess;
          return ncclBroadcast(buf, buf, size_t(n), nccl_type(t), root, comm_, s);
        }));
  }
  void barrier() override { inner_->barrier(); }
  void connect() override {
    if (!local()) ensure_comm();
  }
  void reserve_accumulating(int64_t n) override { scratch(size_t(n) * sizeof(float)); }

  std::unique_ptr<SharedArray> allocate_shared(int64_t n, DType t) override {
    return std::make_unique<DeviceArray>(*dev_.memory, n, t);
  }
  void all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override {
    all_gather(range(a, offset), out, n, a.dtype());
  }
  void reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                      bool accumulate) override {
    check_summable("reduce_scatter", *this, a.dtype());
    run_blocking(post_reduce_scatter(range(a, offset), out, n, DType::kF32, accumulate));
  }
  void all_reduce(SharedArray& a, int64_t offset, int64_t n) override {
    check_summable("all_reduce", *this, a.dtype());
    all_reduce(a.data() + offset, n, DType::kF32);
  }
  Request iall_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override {
    return iall_gather(range(a, offset), out, n, a.dtype());
  }
  Request ireduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                          bool accumulate) override {
    check_summable("ireduce_scatter", *this, a.dtype());
    return request(post_reduce_scatter(range(a, offset), out, n, DType::kF32, accumulate));
  }
  Request iall_reduce(SharedArray& a, int64_t offset, int64_t n) override {
    check_summable("iall_reduce", *this, a.dtype());
    return iall_reduce(a.data() + offset, n, DType::kF32);
  }

  // Counted here (device collectives) plus what the MPI communicator inside
  // counted (host ones); the times from the events the watchdog has seen
  // complete.
  const CommStats& stats() const override {
    merged_ = inner_->stats();
    for (int k = 0; k < static_cast<int>(Collective::kCount); ++k) {
      merged_.bytes[k] += stats_.bytes[k] - setup_.bytes[k];
      merged_.calls[k] += stats_.calls[k] - setup_.calls[k];
      merged_.total_seconds[k] -= setup_.total_seconds[k];
      merged_.exposed_seconds[k] -= setup_.exposed_seconds[k];
      merged_.peer_wait_seconds[k] -= setup_.peer_wait_seconds[k];
    }
    merged_.wait_seconds -= setup_.wait_seconds;
    if (watchdog_) watchdog_->fold_into(merged_, false);
    return merged_;
  }
  void reset_stats() override {
    inner_->reset_stats();
    stats_ = CommStats{};
    setup_ = CommStats{};
    CommStats discard;
    if (watchdog_) watchdog_->fold_into(discard, true);
  }
  void set_timeout(double seconds) override {
    Communicator::set_timeout(seconds);
    inner_->set_timeout(seconds);
    watched_timeout_ = seconds;
  }

  // The compute stream waits for op (an event wait; the host goes on).
  void wait_on_compute(Op& op) {
    if (op.waited.load(std::memory_order_relaxed)) return;
    const auto compute = static_cast<cudaStream_t>(dev_.compute_stream);
    check_cuda(cudaEventRecord(op.wait_begin, compute), "cudaEventRecord", name_);
    check_cuda(cudaStreamWaitEvent(compute, op.done, 0), "cudaStreamWaitEvent", name_);
    check_cuda(cudaEventRecord(op.wait_end, compute), "cudaEventRecord", name_);
    op.waited.store(true, std::memory_order_release);
  }
  // The NCCL communicator, for another thread (a request's abort_job).
  ncclComm_t nccl() const { return watched_comm_.load(); }

 private:
  // Where a collective's buffers are: both on the device (NCCL), both on the
  // host (the MPI communicator inside), or one of each (a checkpoint's gather
  // of device shards into a host tensor: staged through host memory).
  enum class Place { kHost, kDevice, kMixed };
  static Place place(const void* in, const void* out) {
    const bool a = on_device(in), b = on_device(out);
    return a && b ? Place::kDevice : !a && !b ? Place::kHost : Place::kMixed;
  }
  // A host copy of n bytes at p (p itself when p is host memory), after the
  // work the compute stream has issued.
  const void* to_host(const void* p, size_t bytes, std::vector<std::byte>& stage) {
    if (!on_device(p)) return p;
    stage.resize(std::max(stage.size(), bytes));
    copy_on_compute(stage.data(), p, bytes, cudaMemcpyDeviceToHost);
    return stage.data();
  }
  void copy_on_compute(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return;
    const auto compute = static_cast<cudaStream_t>(dev_.compute_stream);
    check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, compute), "cudaMemcpyAsync", name_);
    check_cuda(cudaStreamSynchronize(compute), "cudaStreamSynchronize", name_);
  }
  void staged_all_gather(const void* in, void* out, int64_t n, DType t) {
    const size_t part = size_t(n) * dtype_size(t), whole = part * size_t(size());
    const void* hin = to_host(in, part, stage_in_);
    if (!on_device(out)) return inner_->all_gather(hin, out, n, t);
    stage_out_.resize(std::max(stage_out_.size(), whole));
    inner_->all_gather(hin, stage_out_.data(), n, t);
    copy_on_compute(out, stage_out_.data(), whole, cudaMemcpyHostToDevice);
  }
  void staged_reduce_scatter(const void* in, void* out, int64_t n, DType t) {
    check_summable("reduce_scatter", *this, t);
    const size_t part = size_t(n) * dtype_size(t), whole = part * size_t(size());
    const void* hin = to_host(in, whole, stage_in_);
    if (!on_device(out)) return inner_->reduce_scatter(hin, out, n, t);
    stage_out_.resize(std::max(stage_out_.size(), part));
    inner_->reduce_scatter(hin, stage_out_.data(), n, t);
    copy_on_compute(out, stage_out_.data(), part, cudaMemcpyHostToDevice);
  }
  static const void* range(const SharedArray& a, int64_t offset) {
    return a.bytes() + offset * int64_t(dtype_size(a.dtype()));
  }

  // The axis stream, the watchdog and the NCCL communicator: rank 0's unique
  // id broadcast over the MPI communicator inside (collective, in the same
  // order everywhere). connect() makes them when the model is built; a group
  // it was not called for (world) makes them at its first device collective.
  void ensure_comm() {
    if (!stream_) {  // the first device collective: the axis stream and its watchdog
      check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate",
                 name_);
      watchdog_ =
          std::make_unique<nccl::Watchdog>(*this, dev_.device, watched_comm_, watched_timeout_);
    }
    if (comm_ || (size() == 1 && !dev_.groups_of_one)) return;
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    static_assert(sizeof(id) % sizeof(int64_t) == 0);
    if (size() > 1) {
      // Setup, not the step's traffic: left out of the counters, which the
      // closed-form volume must match to the byte.
      const CommStats before = inner_->stats();
      inner_->broadcast(&id, sizeof(id) / sizeof(int64_t), DType::kI64, 0);
      const CommStats& after = inner_->stats();
      for (int k = 0; k < static_cast<int>(Collective::kCount); ++k) {
        setup_.bytes[k] += after.bytes[k] - before.bytes[k];
        setup_.calls[k] += after.calls[k] - before.calls[k];
        setup_.total_seconds[k] += after.total_seconds[k] - before.total_seconds[k];
        setup_.exposed_seconds[k] += after.exposed_seconds[k] - before.exposed_seconds[k];
        setup_.peer_wait_seconds[k] += after.peer_wait_seconds[k] - before.peer_wait_seconds[k];
      }
      setup_.wait_seconds += after.wait_seconds - before.wait_seconds;
    }
    check_nccl(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
    watched_comm_ = comm_;
  }
  void check_nccl(ncclResult_t r, const char* call) const {
    if (r == ncclSuccess) return;
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    fail(call, " on ", name_, " (", size(), " ranks) failed: ", ncclGetErrorString(r),
         last && *last ? str(" (", last, ")") : std::string());
  }

  // A group of one without an NCCL communicator: its copies run on the
  // compute stream itself, with no events, as a SelfCommunicator's would.
  bool local() const { return size() == 1 && !dev_.groups_of_one; }

  // Counts the collective (a group larger than one), makes the axis stream
  // wait for the compute stream's work so far, and enqueues call(stream) on
  // it; a local group runs call on the compute stream and returns null.
  template <class Call>
  std::shared_ptr<Op> post(Collective kind, int64_t bytes, Call&& call) {
    if (local()) {
      check_nccl(call(static_cast<cudaStream_t>(dev_.compute_stream)), collective_name(kind));
      check_cuda(cudaGetLastError(), collective_name(kind), name_);
      return nullptr;
    }
    ensure_comm();
    if (size() > 1) count(kind, bytes);
    auto op = std::make_shared<Op>();
    op->kind = kind;
    op->bytes = bytes;
    const auto compute = static_cast<cudaStream_t>(dev_.compute_stream);
    check_cuda(cudaEventRecord(op->ready, compute), "cudaEventRecord", name_);
    check_cuda(cudaStreamWaitEvent(stream_, op->ready, 0), "cudaStreamWaitEvent", name_);
    check_cuda(cudaEventRecord(op->start, stream_), "cudaEventRecord", name_);
    check_nccl(call(stream_), collective_name(kind));
    check_cuda(cudaGetLastError(), collective_name(kind), name_);
    check_cuda(cudaEventRecord(op->done, stream_), "cudaEventRecord", name_);
    watchdog_->follow(op);
    return op;
  }
  void run_blocking(const std::shared_ptr<Op>& op) {
    if (op) wait_on_compute(*op);
  }
  Request request(std::shared_ptr<Op> op);

  std::shared_ptr<Op> post_all_reduce(void* buf, int64_t n, DType t) {
    return post(Collective::kAllReduce, n * int64_t(dtype_size(t)), [=, this](cudaStream_t s) {
      if (!comm_) return ncclSuccess;
      return ncclAllReduce(buf, buf, size_t(n), nccl_type(t), ncclSum, comm_, s);
    });
  }
  std::shared_ptr<Op> post_all_gather(const void* in, void* out, int64_t n, DType t) {
    const size_t part = size_t(n) * dtype_size(t);
    return post(Collective::kAllGather, int64_t(size()) * int64_t(part), [=, this](cudaStream_t s) {
      if (comm_) return ncclAllGather(in, out, size_t(n), nccl_type(t), comm_, s);
      if (in != out && part)
        check_cuda(cudaMemcpyAsync(out, in, part, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync",
                   name_);
      return ncclSuccess;
    });
  }
  // out[n] (+)= the sum over ranks of in's block of this rank.
  std::shared_ptr<Op> post_reduce_scatter(const void* in, void* out, int64_t n, DType t,
                                          bool accumulate) {
    const size_t part = size_t(n) * dtype_size(t);
    if (!local()) ensure_comm();
    void* target = out;
    if (accumulate) target = scratch(part);
    return post(
        Collective::kReduceScatter, int64_t(size()) * int64_t(part), [=, this](cudaStream_t s) {
          const void* mine = static_cast<const std::byte*>(in) + size_t(rank()) * part;
          if (comm_) {
            const ncclResult_t r =
                ncclReduceScatter(in, target, size_t(n), nccl_type(t), ncclSum, comm_, s);
            if (r != ncclSuccess) return r;
          } else if (target != mine && part) {
            check_cuda(cudaMemcpyAsync(target, mine, part, cudaMemcpyDeviceToDevice, s),
                       "cudaMemcpyAsync", name_);
          }
          if (accumulate)
            check_cuda(
                nccl::accumulate(static_cast<float*>(out), static_cast<const float*>(target), n, s),
                "the accumulate kernel", name_);
          return ncclSuccess;
        });
  }
  // Device scratch of at least `bytes`, used on one stream only (the axis
  // stream, or the compute stream of a local group: its collectives run in
  // order there, so one buffer serves them all). Sized by
  // reserve_accumulating() when the weight stream is made; growing it later
  // (a caller that reserved less) synchronises the axis stream.
  void* scratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return scratch_;
    if (stream_) check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", name_);
    if (scratch_) dev_.memory->release(scratch_);
    scratch_ = dev_.memory->allocate(bytes);
    scratch_bytes_ = bytes;
    return scratch_;
  }

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  NcclDevice dev_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  // What the watchdog thread reads: comm_ and the timeout.
  std::atomic<ncclComm_t> watched_comm_{nullptr};
  std::atomic<double> watched_timeout_{0};
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::unique_ptr<nccl::Watchdog> watchdog_;
  std::vector<std::byte> stage_in_, stage_out_;  // host staging of mixed collectives
  mutable CommStats merged_;                     // what stats() returns: rebuilt at each call
  CommStats setup_;  // what the inner communicator counted for the unique id's broadcast
};

// A posted device collective: waiting is an event wait on the compute stream.
class NcclRequest final : public Request::Impl {
 public:
  NcclRequest(NcclCommunicator& c, std::shared_ptr<Op> op) : c_(c), op_(std::move(op)) {}
  void wait() override {
    if (!op_) return;
    c_.wait_on_compute(*op_);
    op_.reset();
  }
  bool test() override {
    if (!op_) return true;
    const cudaError_t e = cudaEventQuery(op_->done);
    if (e == cudaErrorNotReady) return false;
    check_cuda(e, "cudaEventQuery", c_.name());
    wait();
    return true;
  }
  bool pending() const override { return op_ != nullptr; }
  bool needs_polling() const override { return false; }
  [[noreturn]] void abort_job() noexcept override {
    if (c_.nccl()) ncclCommAbort(c_.nccl());
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

 private:
  NcclCommunicator& c_;
  std::shared_ptr<Op> op_;
};

Request NcclCommunicator::request(std::shared_ptr<Op> op) {
  if (!op) return Request();  // a local group's copy, already on the compute stream
  return Request(std::make_unique<NcclRequest>(*this, std::move(op)));
}

}  // namespace

namespace {

// An NCCL kernel waits for its peers. Two communicators' kernels on one GPU,
// each on its axis stream, may start in one order on a rank and in the other
// on its peer, and wait for each other for ever where the GPU cannot run
// both at once (NCCL's "Using multiple NCCL communicators concurrently").
// From NCCL 2.26, NCCL_LAUNCH_ORDER_IMPLICIT=1 runs them in the order the
// host issued them, and every rank of a grid issues its collectives in the
// same order (SPMD): set here, before any communicator is made (NCCL reads
// it then), unless the user set it. Before 2.26 a grid with two axes over
// NCCL may hang, which the watchdog ends (--timeout).
void order_kernels_as_issued() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return;
  if (version >= 22600) {
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
  } else {
    log_info(str("warning: NCCL ", version / 10000, ".", version / 100 % 100,
                 " cannot order the kernels of two communicators (2.26 can): a grid with two "
                 "axes over NCCL may hang until the watchdog ends it (--timeout)"));
  }
}

}  // namespace

std::unique_ptr<Communicator> nccl::make_communicator(Communicator& world, const NcclDevice& dev) {
  DENDRITE_CHECK(dev.memory && dev.compute_stream,
                 "nccl::make_communicator: pass the backend's memory and compute stream");
  order_kernels_as_issued();
  return std::make_unique<NcclCommunicator>(nullptr, &world, dev);
}

}  // namespace dendrite
