// The staged transport (staged_communicator.h).
#include "dendrite/backend/cuda/staged_communicator.h"

#include "dendrite/backend/backend.h"
#include "dendrite/comm/cuda/device_pointer.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

StagedCommunicator::StagedCommunicator(Communicator& inner, Backend& backend)
    : Communicator(inner.name()), inner_(&inner), be_(backend) {
  timeout_s_ = inner.timeout();
}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> inner, Backend& backend)
    : Communicator(inner->name()), owned_(std::move(inner)), inner_(owned_.get()), be_(backend) {
  timeout_s_ = inner_->timeout();
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key, std::string name) {
  return std::make_unique<StagedCommunicator>(inner_->split(color, key, std::move(name)), be_);
}

// A group of one over device memory: its copies stage through the host too.
std::unique_ptr<Communicator> StagedCommunicator::group_of_one(std::string name) {
  return std::make_unique<StagedCommunicator>(inner_->group_of_one(std::move(name)), be_);
}

bool StagedCommunicator::on_device(const void* p) const { return is_device_pointer(p); }

const void* StagedCommunicator::to_host(const void* p, size_t bytes, std::vector<std::byte>& stage) {
  if (!on_device(p)) return p;
  if (stage.size() < bytes) stage.resize(bytes);
  be_.download(stage.data(), p, bytes);  // waits for the stream: p is final
  return stage.data();
}

void StagedCommunicator::all_reduce(void* buf, int64_t n, DType t) {
  const size_t bytes = size_t(n) * dtype_size(t);
  if (!on_device(buf)) return inner_->all_reduce(buf, n, t);
  void* h = const_cast<void*>(to_host(buf, bytes, in_));
  inner_->all_reduce(h, n, t);
  be_.upload(buf, h, bytes);
}

void StagedCommunicator::all_gather(const void* in, void* out, int64_t n, DType t) {
  const size_t part = size_t(n) * dtype_size(t), whole = part * size_t(size());
  const void* hin = to_host(in, part, in_);
  if (!on_device(out)) return inner_->all_gather(hin, out, n, t);
  if (out_.size() < whole) out_.resize(whole);
  inner_->all_gather(hin, out_.data(), n, t);
  be_.upload(out, out_.data(), whole);
}

void StagedCommunicator::reduce_scatter(const void* in, void* out, int64_t n, DType t) {
  const size_t part = size_t(n) * dtype_size(t), whole = part * size_t(size());
  const void* hin = to_host(in, whole, in_);
  if (!on_device(out)) return inner_->reduce_scatter(hin, out, n, t);
  if (out_.size() < part) out_.resize(part);
  inner_->reduce_scatter(hin, out_.data(), n, t);
  be_.upload(out, out_.data(), part);
}

void StagedCommunicator::broadcast(void* buf, int64_t n, DType t, int root) {
  const size_t bytes = size_t(n) * dtype_size(t);
  if (!on_device(buf)) return inner_->broadcast(buf, n, t, root);
  void* h = const_cast<void*>(to_host(buf, bytes, in_));
  inner_->broadcast(h, n, t, root);
  be_.upload(buf, h, bytes);
}

// Non-blocking: done before returning.
Request StagedCommunicator::iall_reduce(void* buf, int64_t n, DType t) {
  all_reduce(buf, n, t);
  return {};
}
Request StagedCommunicator::iall_gather(const void* in, void* out, int64_t n, DType t) {
  all_gather(in, out, n, t);
  return {};
}
Request StagedCommunicator::ireduce_scatter(const void* in, void* out, int64_t n, DType t) {
  reduce_scatter(in, out, n, t);
  return {};
}

std::unique_ptr<SharedArray> StagedCommunicator::allocate_shared(int64_t n, DType t) {
  return be_.allocate_shared(*this, n, t);
}

void StagedCommunicator::all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) {
  const size_t es = dtype_size(a.dtype());
  all_gather(a.bytes() + offset * int64_t(es), out, n, a.dtype());
}

void StagedCommunicator::reduce_scatter(const SharedArray& a, int64_t offset, float* out,
                                        int64_t n, bool accumulate) {
  check_summable("reduce_scatter", *this, a.dtype());
  const size_t part = size_t(n) * sizeof(float), whole = part * size_t(size());
  const void* hin = to_host(a.data() + offset, whole, in_);
  std::vector<float> sum(static_cast<size_t>(n));
  inner_->reduce_scatter(hin, sum.data(), n, DType::kF32);
  if (accumulate) {  // out += sum, on the host (this transport is for correctness, not speed)
    std::vector<float> now(static_cast<size_t>(n));
    be_.download(now.data(), out, part);
    for (size_t i = 0; i < now.size(); ++i) sum[i] += now[i];
  }
  be_.upload(out, sum.data(), part);
}

void StagedCommunicator::all_reduce(SharedArray& a, int64_t offset, int64_t n) {
  check_summable("all_reduce", *this, a.dtype());
  all_reduce(a.data() + offset, n, DType::kF32);
}

Request StagedCommunicator::iall_gather(const SharedArray& a, int64_t offset, void* out,
                                        int64_t n) {
  all_gather(a, offset, out, n);
  return {};
}
Request StagedCommunicator::ireduce_scatter(const SharedArray& a, int64_t offset, float* out,
                                            int64_t n, bool accumulate) {
  reduce_scatter(a, offset, out, n, accumulate);
  return {};
}
Request StagedCommunicator::iall_reduce(SharedArray& a, int64_t offset, int64_t n) {
  all_reduce(a, offset, n);
  return {};
}

}  // namespace dendrite::cuda
