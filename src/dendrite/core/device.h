// The device a run computes on (DESIGN.md section 10): the CPU, or an NVIDIA
// GPU through the CUDA backend. A build has the CUDA backend only when
// configured with -DDENDRITE_CUDA=ON; asking a build without it for a GPU is
// an error that says so (make_backend, backend/backend.h).
#pragma once

#include <string>

namespace dendrite {

enum class Device { kCpu, kCuda };

// "cpu" or "cuda"; anything else is an error naming them ("auto" is
// resolve_device's, backend/backend.h).
Device parse_device(const std::string& text);
const char* device_name(Device d);

}  // namespace dendrite
