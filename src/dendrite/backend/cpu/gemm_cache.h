// What the CPU backend's GEMMs keep between calls, owned by one CpuBackend
// (cpu_backend.h) and passed to its products (gemm.h): the layout
// tuner's choice per shape (--gemm-tune; matmul.cpp) and oneDNN's bf16 matmul
// primitives per shape (matmul_bf16.cpp: making one costs far more than
// running a small product). Nothing of it is process-wide: two backends in
// one process tune and cache apart. A product called without one runs the
// default way and makes its primitive for the call.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "dendrite/ops/matmul.h"

namespace dendrite::cpu {

using ops::GemmChoice;

struct GemmCache {
  // GEMM layout tuning (ops/matmul.h), off until set.
  void set_tuning(bool on) { tuner.on = on; }
  // The shapes tuned so far with their choices, and the seconds spent trying.
  std::vector<GemmChoice> choices() const;
  double tuning_seconds() const { return tuner.seconds; }

  // An fp32 product as the tuner keys it.
  struct Shape {
    char ta, tb;
    int M, N, K, threads;
    bool accumulate;
    bool operator<(const Shape& o) const {
      return std::tie(ta, tb, M, N, K, threads, accumulate) <
             std::tie(o.ta, o.tb, o.M, o.N, o.K, o.threads, o.accumulate);
    }
  };
  struct Tuner {
    bool on = false;
    double seconds = 0;
    mutable std::mutex mutex;
    std::map<Shape, GemmChoice> choices;
  };
  // A bf16 product as its primitive is made for it.
  struct MatmulKey {
    bool ta, tb;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    bool operator<(const MatmulKey& o) const {
      return std::tie(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta) <
             std::tie(o.ta, o.tb, o.M, o.N, o.K, o.lda, o.ldb, o.ldc, o.alpha, o.beta);
    }
  };
  // oneDNN's CPU engine and stream, and the primitives made so far.
  struct Matmuls {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    std::mutex mutex;
    std::map<MatmulKey, dnnl::matmul> made;
  };

  Tuner tuner;
  // Made at the first native bf16 product (matmul_bf16.cpp: matmuls()).
  std::once_flag matmuls_made;
  std::unique_ptr<Matmuls> matmuls;
};

}  // namespace dendrite::cpu
