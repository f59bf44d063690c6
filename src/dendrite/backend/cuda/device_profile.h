// The GPU's work over a stretch of host code, from CUPTI's activity records
// (NVIDIA's profiling library, in the CUDA toolkit): each kernel (cuBLASLt's
// included), copy and memset with its start and end on the GPU, and the host
// time of the runtime or driver call that issued it, joined by CUPTI's
// correlation ids. CUPTI's timestamps are moved onto trace::now()'s clock by
// the offset read when the profile starts.
//
// CUPTI's activity API is process-wide (its buffer callbacks take no
// argument), so a process runs one profile at a time; a second is refused.
// A build whose toolkit has no CUPTI compiles a stand-in that says so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dendrite/core/device_profile.h"

namespace dendrite::cuda {

// Empty where this build can profile; else why not, and the fix.
std::string device_profile_missing();

class DeviceProfile {
 public:
  // Starts recording (fails, naming the CUPTI call, where CUPTI refuses).
  DeviceProfile();
  ~DeviceProfile();
  DeviceProfile(const DeviceProfile&) = delete;
  DeviceProfile& operator=(const DeviceProfile&) = delete;

  // The activities recorded, once the work issued so far has finished (the
  // caller waits for the device first); recording stops.
  std::vector<DeviceActivity> finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dendrite::cuda
