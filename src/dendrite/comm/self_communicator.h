// The group of one process, for every backend: its collectives copy or do
// nothing and count no bytes, so serial runs (ProcessGrid::single(), an axis
// of extent 1) take the same code path as P ranks and need no MPI. Its
// SharedArrays are private memory (PrivateArray, also what a backend hands out
// where its ranks share no memory).
#pragma once

#include "dendrite/comm/communicator.h"
#include "dendrite/core/buffer.h"

namespace dendrite {

class PrivateArray final : public SharedArray {
 public:
  PrivateArray(int64_t n, DType t);
  bool shared() const override { return false; }

 private:
  Buffer<std::byte> buf_;
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : Communicator(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int ranks_on_node() const override { return 1; }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;
  using Communicator::all_reduce;
  void all_reduce(void* buf, int64_t n, DType t) override;
  Request iall_reduce(void* buf, int64_t n, DType t) override;
  void all_gather(const void* in, void* out, int64_t n, DType t) override;
  Request iall_gather(const void* in, void* out, int64_t n, DType t) override;
  void reduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  void broadcast(void* buf, int64_t n, DType t, int root) override;
  void barrier() override {}

  std::unique_ptr<SharedArray> allocate_shared(int64_t n, DType t) override;
  void all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override;
  void reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                      bool accumulate) override;
  void all_reduce(SharedArray& a, int64_t offset, int64_t n) override;
  Request iall_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override;
  Request ireduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                          bool accumulate) override;
  Request iall_reduce(SharedArray& a, int64_t offset, int64_t n) override;
};

}  // namespace dendrite
