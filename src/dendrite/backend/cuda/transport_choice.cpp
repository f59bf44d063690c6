// The CUDA backend's transport (transport_choice.h).
#include "dendrite/backend/cuda/transport_choice.h"

#include <string>

#include "dendrite/backend/cuda/staged_communicator.h"
#ifdef DENDRITE_HAVE_NCCL
#include "dendrite/comm/nccl/nccl_communicator.h"
#endif
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

// Why this rank cannot use NCCL ("" when it can).
std::string nccl_refusal(const DeviceChoice& gpu) {
#ifdef DENDRITE_HAVE_NCCL
  if (gpu.shared_by > 1)
    return str(gpu.shared_by, " ranks share GPU ", gpu.device, " of this node's ", gpu.node_gpus,
               " (NCCL needs a GPU per rank; run one rank per GPU)");
  return "";
#else
  (void)gpu;
  return "this build has no NCCL (CMake found no nccl.h and libnccl beside the CUDA toolkit)";
#endif
}

}  // namespace

Communicator& TransportChoice::make(Communicator& world, Backend& backend, cudaStream_t stream,
                                    const DeviceChoice& gpu) {
  const std::string refusal = nccl_refusal(gpu);
  double able = refusal.empty() ? 1 : 0;
  world.all_reduce(&able, 1);  // the ranks that can run NCCL
  const bool everyone = int(able) == world.size();
  if (asked_ == GpuTransport::kNccl)
    DENDRITE_CHECK(everyone, "device: the NCCL transport was asked for (DENDRITE_GPU_TRANSPORT=",
                   "nccl), but ", refusal.empty() ? "another rank" : "this rank", " cannot use ",
                   "it", refusal.empty() ? "" : ": " + refusal,
                   "; unset DENDRITE_GPU_TRANSPORT to fall back to the staged transport");
#ifdef DENDRITE_HAVE_NCCL
  if (everyone && asked_ != GpuTransport::kStaged) {
    NcclDevice dev;
    dev.memory = &backend;
    dev.compute_stream = stream;
    dev.device = gpu.device;
    dev.groups_of_one = asked_ == GpuTransport::kNccl;
    transports_.push_back(nccl::make_communicator(world, dev));
    on_streams_ = true;
    return *transports_.back();
  }
#else
  (void)stream;
#endif
  transports_.push_back(std::make_unique<StagedCommunicator>(world, backend));
  return *transports_.back();
}

}  // namespace dendrite::cuda
