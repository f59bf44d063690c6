// Shared by the planner's tests (plan_test, plan_machine_test,
// plan_overlap_test): a small machine and the message of an error.
#pragma once

#include <string>

#include "dendrite/core/check.h"
#include "dendrite/plan/machine.h"

namespace dendrite::test {

inline Machine test_machine() {
  Machine m;
  m.name = "test";
  m.ranks_per_node = 2;
  m.threads_per_rank = 1;
  m.memory_per_rank_bytes = 64e9;
  m.peak_gflops = 100;
  m.memory_bandwidth = 10e9;
  m.gemm = {{256, 768, 768, 50}, {2048, 3072, 768, 80}};
  m.node.all = {1e9, 1e-6};
  m.node.by_kind["all_gather"] = {2e9, 2e-6};
  m.network.all = {1e8, 1e-5};
  return m;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A machine whose node-local shared-memory collectives are 10x the messages'.
inline Machine shm_machine() {
  Machine m = test_machine();
  m.has_shm = true;
  m.shm.all = {10e9, 5e-6};
  m.shm.by_kind["reduce_scatter"] = {20e9, 4e-6};
  return m;
}

}  // namespace dendrite::test
