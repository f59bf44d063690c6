// The one place the communication settings are read from the environment.
#include "dendrite/comm/options.h"

#include <cstdlib>
#include <string>

namespace dendrite {

CommOptions comm_options_from_environment() {
  CommOptions o;
  const char* v = std::getenv("DENDRITE_SHARED_MEMORY");
  o.shared_memory = !v || std::string(v) != "0";
  return o;
}

}  // namespace dendrite
