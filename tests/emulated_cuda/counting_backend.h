// A Backend that forwards every call to another and names, for the emulated
// GPU's counters (counters.h), the op each launch, product, copy,
// synchronisation and allocation came from, with the op's sizes: the
// anatomy of a training step by op. Tests only (dendrite_emulated and the
// anatomy test wrap the emulated CUDA backend in it); outside
// counters::start() and stop() it costs an atomic load per call.
#pragma once

#include <memory>

#include "dendrite/backend/backend.h"

namespace dendrite {

std::unique_ptr<Backend> make_counting_backend(std::unique_ptr<Backend> inner);

}  // namespace dendrite
