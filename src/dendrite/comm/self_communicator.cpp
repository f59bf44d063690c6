// The group of one process (self_communicator.h): nothing moves between ranks.
#include "dendrite/comm/self_communicator.h"

#include <cstring>

#include "dendrite/core/check.h"

namespace dendrite {

PrivateArray::PrivateArray(int64_t n, DType t) : buf_(size_t(n) * dtype_size(t)) {
  bytes_ = buf_.data();
  n_ = n;
  dtype_ = t;
}

namespace {
void copy_if_distinct(const void* in, void* out, int64_t n, DType t, const char* op) {
  DENDRITE_CHECK(n >= 0, op, ": element count ", n, " is negative");
  if (in != out && n > 0) std::memcpy(out, in, n * dtype_size(t));
}
}  // namespace

std::unique_ptr<Communicator> SelfCommunicator::split(int, int, std::string name) {
  return std::make_unique<SelfCommunicator>(std::move(name));
}

void SelfCommunicator::all_reduce(void*, int64_t n, DType t) {
  DENDRITE_CHECK(n >= 0, "all_reduce: element count ", n, " is negative");
  check_summable("all_reduce", *this, t);
}

Request SelfCommunicator::iall_reduce(void* buf, int64_t n, DType t) {
  all_reduce(buf, n, t);
  return Request();
}

void SelfCommunicator::all_gather(const void* in, void* out, int64_t n, DType t) {
  copy_if_distinct(in, out, n, t, "all_gather");
}

Request SelfCommunicator::iall_gather(const void* in, void* out, int64_t n, DType t) {
  all_gather(in, out, n, t);
  return Request();
}

void SelfCommunicator::reduce_scatter(const void* in, void* out, int64_t n, DType t) {
  check_summable("reduce_scatter", *this, t);
  copy_if_distinct(in, out, n, t, "reduce_scatter");
}

Request SelfCommunicator::ireduce_scatter(const void* in, void* out, int64_t n, DType t) {
  reduce_scatter(in, out, n, t);
  return Request();
}

void SelfCommunicator::broadcast(void*, int64_t n, DType, int root) {
  DENDRITE_CHECK(n >= 0, "broadcast: element count ", n, " is negative");
  DENDRITE_CHECK(root == 0, "broadcast on ", name_, ": root ", root,
                 " is outside the group of 1 rank; pass root 0");
}

std::unique_ptr<SharedArray> SelfCommunicator::allocate_shared(int64_t n, DType t) {
  DENDRITE_CHECK(n >= 0, "allocate_shared on ", name_, ": negative size ", n);
  return std::make_unique<PrivateArray>(n, t);
}

void SelfCommunicator::all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) {
  const size_t es = dtype_size(a.dtype());
  copy_if_distinct(a.bytes() + offset * es, out, n, a.dtype(), "all_gather");
}

void SelfCommunicator::reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                                      bool accumulate) {
  check_summable("reduce_scatter", *this, a.dtype());
  const float* mine = a.data() + offset;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = accumulate ? out[i] + mine[i] : mine[i];
}

void SelfCommunicator::all_reduce(SharedArray& a, int64_t, int64_t) {
  check_summable("all_reduce", *this, a.dtype());
}

Request SelfCommunicator::iall_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) {
  all_gather(a, offset, out, n);
  return Request();
}

Request SelfCommunicator::ireduce_scatter(const SharedArray& a, int64_t offset, float* out,
                                          int64_t n, bool accumulate) {
  reduce_scatter(a, offset, out, n, accumulate);
  return Request();
}

Request SelfCommunicator::iall_reduce(SharedArray& a, int64_t offset, int64_t n) {
  all_reduce(a, offset, n);
  return Request();
}

}  // namespace dendrite
