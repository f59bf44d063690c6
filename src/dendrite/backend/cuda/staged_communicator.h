// The staged transport of DESIGN.md section 10: a Communicator over another
// (MPI, or the group of one) whose collectives accept device memory. Each
// collective copies its device inputs to host memory, runs the inner
// communicator's collective there, and copies the results back; host buffers
// pass straight through. Non-blocking collectives complete before returning
// (a request already done): correct on any grid, without overlap. It serves
// GPU runs until the NCCL communicator exists, and any grid on one GPU.
// SharedArrays are device memory held privately (shared() false); their
// collectives stage the range.
#pragma once

#include <memory>
#include <vector>

#include "dendrite/comm/communicator.h"

namespace dendrite {
class Backend;
}

namespace dendrite::cuda {

class StagedCommunicator final : public Communicator {
 public:
  // Over `inner`, which the caller keeps alive; device memory from `backend`.
  StagedCommunicator(Communicator& inner, Backend& backend);
  // Over a communicator of its own (the axes that split() makes).
  StagedCommunicator(std::unique_ptr<Communicator> inner, Backend& backend);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int ranks_on_node() const override { return inner_->ranks_on_node(); }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;
  std::unique_ptr<Communicator> group_of_one(std::string name) override;

  using Communicator::all_reduce;
  void all_reduce(void* buf, int64_t n, DType t) override;
  Request iall_reduce(void* buf, int64_t n, DType t) override;
  void all_gather(const void* in, void* out, int64_t n, DType t) override;
  Request iall_gather(const void* in, void* out, int64_t n, DType t) override;
  void reduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  Request ireduce_scatter(const void* in, void* out, int64_t n, DType t) override;
  void broadcast(void* buf, int64_t n, DType t, int root) override;
  void barrier() override { inner_->barrier(); }

  std::unique_ptr<SharedArray> allocate_shared(int64_t n, DType t) override;
  void all_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override;
  void reduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                      bool accumulate) override;
  void all_reduce(SharedArray& a, int64_t offset, int64_t n) override;
  Request iall_gather(const SharedArray& a, int64_t offset, void* out, int64_t n) override;
  Request ireduce_scatter(const SharedArray& a, int64_t offset, float* out, int64_t n,
                          bool accumulate) override;
  Request iall_reduce(SharedArray& a, int64_t offset, int64_t n) override;

  const CommStats& stats() const override { return inner_->stats(); }
  void reset_stats() override { inner_->reset_stats(); }
  void set_timeout(double seconds) override {
    Communicator::set_timeout(seconds);
    inner_->set_timeout(seconds);
  }

 private:
  // A host copy of n bytes at p (p itself when p is host memory).
  const void* to_host(const void* p, size_t bytes, std::vector<std::byte>& stage);
  bool on_device(const void* p) const;

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  Backend& be_;
  std::vector<std::byte> in_, out_;  // host staging
};

}  // namespace dendrite::cuda
