// Which transport carries the CUDA backend's collectives: NCCL on the
// backend's streams (comm/nccl/) where every rank can use it (a GPU of its
// own, a build with NCCL) and DENDRITE_GPU_TRANSPORT does not say staged,
// else the staged transport (staged_communicator.h); the same on every rank,
// as an NCCL communicator is made by all of its ranks together. Asked for
// NCCL (DENDRITE_GPU_TRANSPORT=nccl) where a rank cannot use it: an error
// saying why.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/backend/cuda/device_setup.h"

namespace dendrite::cuda {

class TransportChoice {
 public:
  explicit TransportChoice(GpuTransport asked) : asked_(asked) {}
  // The transport over world for a backend on GPU gpu whose compute stream
  // is `stream`; kept here until clear(). Collective over world.
  Communicator& make(Communicator& world, Backend& backend, cudaStream_t stream,
                     const DeviceChoice& gpu);
  bool on_streams() const { return on_streams_; }  // NCCL's
  bool made() const { return !transports_.empty(); }
  void clear() { transports_.clear(); }

 private:
  GpuTransport asked_;
  bool on_streams_ = false;
  std::vector<std::unique_ptr<Communicator>> transports_;
};

}  // namespace dendrite::cuda
