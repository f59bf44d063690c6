// `dendrite_faults`: the `dendrite` program with failures injected where the
// reliability tests ask for them, through environment variables that only
// this test binary reads:
//   DENDRITE_TEST_NAN_STEPS=a or a-b [DENDRITE_TEST_NAN_RANK=r]: at steps a..b
//     (counted from 1) rank r (default: every rank) fills its gradients with
//     NaN after the backward, as an overflow would.
//   DENDRITE_TEST_HANG_STEP=s [DENDRITE_TEST_HANG_RANK=r]: rank r (default 0)
//     sleeps forever at the start of step s, as a stuck rank would.
//   DENDRITE_TEST_PAUSE_CHECKPOINT=s[:seconds]: the save of step s pauses once
//     its tensors are in the temporary folder (before any rename), after a
//     marker line on stderr: forever, so that a test can kill the process
//     there, or for the seconds given (a slow disk).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

#include "apps/commands.h"
#include "dendrite/core/check.h"
#include "dendrite/core/log.h"
#include "dendrite/train/hooks.h"
#ifdef DENDRITE_EMULATED_GPU
#include "emulated_cuda/counters.h"
#include "emulated_cuda/emulated_backend.h"
#endif

namespace dendrite {
namespace {

long long env_number(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

[[noreturn]] void sleep_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

class EnvironmentFaults : public TrainHooks {
 public:
  EnvironmentFaults() {
    if (const char* v = std::getenv("DENDRITE_TEST_NAN_STEPS"); v && *v) {
      char* rest = nullptr;
      nan_first_ = nan_last_ = std::strtoll(v, &rest, 10);
      if (*rest == '-') nan_last_ = std::strtoll(rest + 1, nullptr, 10);
    }
    nan_rank_ = int(env_number("DENDRITE_TEST_NAN_RANK", -1));
    hang_step_ = env_number("DENDRITE_TEST_HANG_STEP", 0);
    hang_rank_ = int(env_number("DENDRITE_TEST_HANG_RANK", 0));
    if (const char* v = std::getenv("DENDRITE_TEST_PAUSE_CHECKPOINT"); v && *v) {
      char* rest = nullptr;
      pause_step_ = std::strtoll(v, &rest, 10);
      pause_seconds_ = *rest == ':' ? std::strtod(rest + 1, nullptr) : -1;
    }
  }
  void step_start(int64_t step, int rank) const override {
    if (step != hang_step_ || rank != hang_rank_) return;
    log_error(str("test hook: hanging at the start of step ", step, " (DENDRITE_TEST_HANG_STEP)"));
    sleep_forever();
  }
  void gradients_ready(int64_t step, int rank, float* grads, int64_t n) const override {
    if (nan_first_ <= 0 || step < nan_first_ || step > nan_last_ ||
        (nan_rank_ >= 0 && nan_rank_ != rank))
      return;
    std::fill_n(grads, n, std::numeric_limits<float>::quiet_NaN());
  }
  void checkpoint_tensors_written(int64_t step, const std::string& tmp_dir) const override {
    if (step != pause_step_) return;
    std::fprintf(stderr, "checkpoint: test hook: paused saving step %lld in %s\n",
                 static_cast<long long>(step), tmp_dir.c_str());
    std::fflush(stderr);
    if (pause_seconds_ < 0) sleep_forever();
    std::this_thread::sleep_for(std::chrono::duration<double>(pause_seconds_));
  }

 private:
  int64_t nan_first_ = 0, nan_last_ = 0, hang_step_ = 0, pause_step_ = 0;
  int nan_rank_ = -1, hang_rank_ = 0;
  double pause_seconds_ = -1;
};

#ifdef DENDRITE_EMULATED_GPU
// bench step --anatomy: the emulated GPU's counters over each step.
class EmulatedStepCounter final : public app::StepCounter {
 public:
  void begin() override { emu::counters::start(); }
  std::string end() override { return emu::counters::stop(); }
};
#endif

}  // namespace
}  // namespace dendrite

int main(int argc, char** argv) {
#ifdef DENDRITE_EMULATED_GPU
  // dendrite_emulated: --device cuda runs the CUDA backend built on the CPU
  // emulator (tests/emulated_cuda/emulated_devices.cpp, linked in place of
  // backend/backend.cpp), on DENDRITE_EMULATED_GPUS GPUs (default
  // 8: a GPU per rank, so the NCCL transport where it is asked for), its
  // streams as DENDRITE_EMULATED_STREAMS says. DENDRITE_EMULATED_COUNT_ONLY=1:
  // kernels and products are counted, not run (emulated_cuda/counters.h), on
  // a device with an H200's memory (DENDRITE_EMULATED_MEMORY_MIB: another
  // GPU's, 81559 for an H100's), for `bench step --anatomy` at a real model's
  // size (the losses and weights it computes are meaningless).
  emu::set_device_count(int(dendrite::env_number("DENDRITE_EMULATED_GPUS", 8)));
  if (dendrite::env_number("DENDRITE_EMULATED_COUNT_ONLY", 0) == 1) {
    emu::counters::set_count_only(true);
    emu::set_device_memory(size_t(dendrite::env_number("DENDRITE_EMULATED_MEMORY_MIB", 143771))
                           << 20);
  }
  dendrite::EmulatedStepCounter counter;
  const dendrite::EnvironmentFaults faults;
  return dendrite::app::dendrite_main(argc, argv, &faults, &counter);
#else
  const dendrite::EnvironmentFaults faults;
  return dendrite::app::dendrite_main(argc, argv, &faults);
#endif
}
