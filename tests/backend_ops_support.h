// The op harness: every op of the Backend seam (backend/backend.h), forward
// and backward, on every backend this build has (the CPU always; CUDA when
// built with it, as the `gpu` tests that run where a GPU is found; the CUDA
// backend's code on the CPU emulator of emulated_cuda/ always), in fp32
// and with bf16 operands, against the double-precision oracles of
// ops/reference/ (or the formula, for data movement). Inputs go in with
// upload and results come out with download, as the model moves them.
// One test program per op family (backend_ops_*_test.cpp), each with the
// same fixture and instances, from here.
// Tolerances, as |got - want| <= tol (|want| + rms(want)):
//   fp32 elementwise and norms 1e-5; GEMMs and attention 1e-4 (fp32 sums
//   over up to a few hundred terms; GPUs run them in full fp32 here, no
//   TF32); bf16 operands are rounded on the host first and the oracle reads
//   the rounded values, so the same bounds hold (the rounding is the
//   precision's, not an error); conversions and data movement are exact.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/ops/attention.h"
#include "emulated_cuda/emulated_backend.h"
#include "op_test_support.h"

namespace dendrite::test {

using Vb = std::vector<bf16>;

inline Vb rounded(const Vf& x) {
  Vb out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(x[i]);
  return out;
}
inline Vf widened(const Vb& x) {
  Vf out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_float(x[i]);
  return out;
}

// Where the ops run: a device's backend, or the CUDA backend on the emulator
// (reversed: its threads, lanes and blocks run from the last, which exposes
// a read of what another thread wrote without a barrier between; blocks > 1:
// that many blocks run together, their threads interleaved at barriers, which
// exposes a block that writes what another block reads or writes).
struct Target {
  Device device;
  bool emulated;
  bool reversed = false;
  int blocks = 1;
  // Sums of products rounded as a model of a GPU's hardware
  // (emu::set_gpu_rounding): the tolerances above hold for a GPU's rounding.
  bool gpu_rounding = false;
};

inline void PrintTo(const Target& t, std::ostream* os) {
  if (t.emulated)
    *os << "the CUDA backend on the emulator" << (t.reversed ? ", threads reversed" : "")
        << (t.blocks > 1 ? ", blocks interleaved" : "")
        << (t.gpu_rounding ? ", rounding as a GPU's hardware (a model)" : "");
  else
    *os << (t.device == Device::kCuda ? "cuda" : "cpu");
}

class BackendOps : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (GetParam().emulated) {
      emu::set_reverse_order(GetParam().reversed);
      emu::set_interleaved_blocks(GetParam().blocks);
      emu::set_gpu_rounding(GetParam().gpu_rounding);
    }
    be_ = another_backend();
  }
  // A backend of this target's device, made as the fixture's is.
  std::unique_ptr<Backend> another_backend() const {
    BackendOptions o;
    o.tf32 = false;  // full fp32 GEMMs: the tolerances above
    return GetParam().emulated ? make_emulated_cuda_backend(o) : make_backend(GetParam().device, o);
  }
  void TearDown() override {
    if (GetParam().emulated) {
      emu::set_reverse_order(false);
      emu::set_interleaved_blocks(1);
      emu::set_gpu_rounding(false);
    }
  }
  Backend& be() { return *be_; }
  template <class T>
  Buffer<T> put(const std::vector<T>& h) {
    Buffer<T> b = be_->alloc<T>(int64_t(h.size()));
    be_->upload(b.data(), h.data(), h.size() * sizeof(T));
    return b;
  }
  // Attention forward and backward against the oracle for one shape and
  // precision (backend_ops_attention_test.cpp).
  void check_attention(const ops::AttentionShape& s, bool low);
  template <class T>
  Buffer<T> zeros(size_t n) {
    return be_->alloc<T>(int64_t(n));
  }
  template <class T>
  std::vector<T> get(const Buffer<T>& b) {
    std::vector<T> h(b.size());
    be_->download(h.data(), b.data(), h.size() * sizeof(T));
    return h;
  }
  std::unique_ptr<Backend> be_;
};

// The instances every program of the harness runs its tests on, named
// Cpu/, Emulated/ and Cuda/ (the filters of tests/CMakeLists.txt and
// scripts/gpu_check.sh select by these):
//   INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Values(kCpuTarget), target_name);
//   INSTANTIATE_TEST_SUITE_P(Emulated, BackendOps, ::testing::ValuesIn(kEmulatedTargets),
//                            target_name);
//   INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::Values(kCudaTarget), target_name);
// the last under #ifdef DENDRITE_HAVE_CUDA.
inline constexpr Target kCpuTarget{Device::kCpu, false, false};
inline constexpr Target kEmulatedTargets[] = {
    Target{Device::kCuda, true, false}, Target{Device::kCuda, true, true},
    Target{Device::kCuda, true, false, 64}, Target{Device::kCuda, true, false, 1, true}};
inline constexpr Target kCudaTarget{Device::kCuda, false, false};

inline std::string target_name(const ::testing::TestParamInfo<Target>& p) {
  if (p.param.emulated)
    return p.param.gpu_rounding ? "emulated_gpu_rounding"
           : p.param.blocks > 1 ? "emulated_interleaved"
           : p.param.reversed   ? "emulated_reversed"
                                : "emulated";
  return p.param.device == Device::kCuda ? "cuda" : "cpu";
}

}  // namespace dendrite::test
