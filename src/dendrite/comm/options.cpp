// The one place the communication settings are read from the environment.
#include "dendrite/comm/options.h"

#include <cstdlib>
#include <string>

#include "dendrite/core/check.h"

namespace dendrite {

CommOptions comm_options_from_environment() {
  CommOptions o;
  const char* v = std::getenv("DENDRITE_SHARED_MEMORY");
  o.shared_memory = !v || std::string(v) != "0";
  if (const char* n = std::getenv("DENDRITE_RANKS_PER_NODE"); n && *n) {
    char* end = nullptr;
    const long k = std::strtol(n, &end, 10);
    DENDRITE_CHECK(*end == '\0' && k >= 1 && k <= 1 << 20, "DENDRITE_RANKS_PER_NODE='", n,
                   "' is not a positive number of ranks per simulated node; unset it, or give "
                   "e.g. 2");
    o.ranks_per_node = int(k);
  }
  if (const char* t = std::getenv("DENDRITE_GPU_TRANSPORT"); t && *t) {
    const std::string v = t;
    DENDRITE_CHECK(v == "auto" || v == "nccl" || v == "staged", "DENDRITE_GPU_TRANSPORT='", v,
                   "' is not a GPU transport; give auto, nccl or staged (or unset it)");
    o.gpu_transport = v == "nccl"     ? GpuTransport::kNccl
                      : v == "staged" ? GpuTransport::kStaged
                                      : GpuTransport::kAuto;
  }
  return o;
}

}  // namespace dendrite
