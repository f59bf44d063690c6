// The one seam through which tests inject failures into a training run: a
// rank that hangs, gradients that overflow, a checkpoint write that stalls.
// `dendrite` passes no hooks; the test build's fault-injection binary
// (tests/fault_injection_main.cpp) passes hooks it reads from its
// environment, so production code reads no test switches.
#pragma once

#include <cstdint>
#include <string>

namespace dendrite {

struct TrainHooks {
  virtual ~TrainHooks() = default;
  // At the start of step (counted from 1) on this rank, before its batch.
  virtual void step_start(int64_t /*step*/, int /*rank*/) const {}
  // After the step's backward (every micro-batch), before the gradient norm:
  // may overwrite the n gradients of this rank (a host copy, written back).
  virtual void gradients_ready(int64_t /*step*/, int /*rank*/, float* /*grads*/, int64_t /*n*/) const {}
  // On the writing rank, once the tensors of step's checkpoint are in the
  // temporary folder and before anything is renamed into place.
  virtual void checkpoint_tensors_written(int64_t /*step*/, const std::string& /*tmp_dir*/) const {}
};

}  // namespace dendrite
