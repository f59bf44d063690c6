// The GPU of one rank of the CUDA backend: which of the node's GPUs it takes
// (rank i takes GPU i mod the node's count, so ranks beyond the GPUs share
// them: the staged transport, any grid on one GPU; one rank per GPU is the
// fast way), made current, with its name and memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dendrite/backend/backend.h"

namespace dendrite::cuda {

// The GPUs visible here (0 without a driver or a GPU).
int device_count();
// The CUDA backend (cuda_backend.cpp) of this rank's GPU.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

struct DeviceChoice {
  int device = 0;     // this rank's GPU
  int node_gpus = 1;  // the GPUs this node shows
  int shared_by = 1;  // the node's ranks on this GPU
  std::string name;
  size_t total_bytes = 0;
};

// Picks this rank's GPU by o.node_rank and o.node_ranks and makes it
// current; an error saying so where no GPU is visible.
DeviceChoice choose_device(const BackendOptions& o);

}  // namespace dendrite::cuda
