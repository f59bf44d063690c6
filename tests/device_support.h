// The backend the MPI tests run their grids on, as DENDRITE_TEST_DEVICE says:
// unset, the CPU; `cuda`, the CUDA backend (scripts/gpu_check.sh, on a GPU);
// `emulated`, the CUDA backend built on the CPU emulator (emulated_cuda/), a
// GPU per rank. On a GPU the grids' collectives go through the transport
// DENDRITE_GPU_TRANSPORT names (NCCL, emulated over MPI on the emulator, or
// staged through host memory). One backend per process, as `dendrite` makes.
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "backend_support.h"
#include "dendrite/backend/backend.h"
#include "dendrite/comm/options.h"
#include "emulated_cuda/emulated_backend.h"

namespace dendrite::test {

enum class TestDevice { kCpu, kEmulated, kCuda };

inline TestDevice test_device() {
  const char* d = std::getenv("DENDRITE_TEST_DEVICE");
  const std::string v = d ? d : "";
  return v == "cuda"       ? TestDevice::kCuda
         : v == "emulated" ? TestDevice::kEmulated
                           : TestDevice::kCpu;
}

// DENDRITE_EMULATED_ROUNDING=gpu: the emulated GPUs round their sums of
// products as a model of a GPU's hardware (emu::set_gpu_rounding), and the
// grids are held to a GPU's bounds.
inline bool emulated_gpu_rounding() {
  const char* r = std::getenv("DENDRITE_EMULATED_ROUNDING");
  return test_device() == TestDevice::kEmulated && r && std::string(r) == "gpu";
}

// Collective over MPI_COMM_WORLD the first time (the ranks form one node).
inline Backend& device_backend() {
  static std::unique_ptr<Backend> gpu;
  const TestDevice d = test_device();
  if (d == TestDevice::kCpu) return cpu_backend();
  if (!gpu) {
    BackendOptions o;
    MPI_Comm_rank(MPI_COMM_WORLD, &o.node_rank);  // one node
    MPI_Comm_size(MPI_COMM_WORLD, &o.node_ranks);
    o.tf32 = false;  // fp32 GEMMs in fp32: the tests' tolerances assume it
    o.transport = comm_options_from_environment().gpu_transport;
    if (d == TestDevice::kEmulated) {
      emu::set_device_count(o.node_ranks);  // a GPU per rank: NCCL where it is asked for
      emu::set_gpu_rounding(emulated_gpu_rounding());
      gpu = make_emulated_cuda_backend(o);
    } else {
      gpu = make_backend(Device::kCuda, o);
    }
  }
  return *gpu;
}

}  // namespace dendrite::test
