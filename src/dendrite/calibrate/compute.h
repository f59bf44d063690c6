// The compute figures of a machine file (plan/machine.h), measured on this
// rank's backend with every rank at once: memory per rank, the FMA peak,
// memory bandwidth, the optimizer's seconds per parameter and the GEMM rates
// of a step's shapes (m, n, k) in fp32, and in bf16 where the backend runs
// bf16 natively.
#pragma once

#include "dendrite/backend/backend.h"
#include "dendrite/comm/communicator.h"
#include "dendrite/plan/machine.h"

namespace dendrite {

// Fills mach's compute figures (memory_per_rank_bytes, peak_gflops,
// memory_bandwidth, optimizer_seconds_per_param, gemm, gemm_bf16,
// threads_per_rank) from measurements on be. quick: fewer GEMM shapes.
// Collective over world.
void calibrate_compute(Communicator& world, Backend& be, bool quick, Machine& mach);

}  // namespace dendrite
