// `dendrite plan` and `dendrite calibrate` (the performance model of DESIGN.md
// section 6). Placeholder registration; the commands are being built.
#include "apps/commands.h"
#include "dendrite/core/check.h"

namespace dendrite::app {

Runner add_plan(CLI::App& app) {
  app.allow_extras();
  return []() -> int { fail("plan: not built yet (issue 5)"); };
}

Runner add_calibrate(CLI::App& app) {
  app.allow_extras();
  return []() -> int { fail("calibrate: not built yet (issue 5)"); };
}

}  // namespace dendrite::app
