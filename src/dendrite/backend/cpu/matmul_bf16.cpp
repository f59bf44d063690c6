// bf16 x bf16 -> fp32 matrix products on the CPU through oneDNN's matmul
// primitive (its C API has no bf16 GEMM call). A primitive is made once per
// shape, transposes, leading dimensions, alpha and beta, and kept in the
// backend's GemmCache (gemm_cache.h): making one costs far more than running
// a small product. Operands
// stay in their row-major layout (strides describe the transposes), so
// nothing is reordered per call. With AVX512_BF16 or AMX the bf16 kernels
// run at about twice the fp32 rate; elsewhere oneDNN would emulate them
// slowly (or not at all), so the operands are widened and sgemm runs.
#include <omp.h>

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "dendrite/backend/cpu/cpu_backend.h"
#include "dendrite/backend/cpu/gemm.h"
#include "dendrite/core/check.h"

namespace dendrite::cpu {

namespace {

using dnnl::memory;

using Key = GemmCache::MatmulKey;
using Matmuls = GemmCache::Matmuls;

// The cache's engine, stream and primitives, made at its first use.
Matmuls& matmuls(GemmCache& cache) {
  std::call_once(cache.matmuls_made, [&] { cache.matmuls = std::make_unique<Matmuls>(); });
  return *cache.matmuls;
}

memory::desc operand(int rows, int cols, int ld, bool transposed, memory::data_type t) {
  // A row-major [rows, cols] matrix, or the transpose of a row-major [cols, rows] one.
  return memory::desc({rows, cols}, t, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

dnnl::matmul make(const Key& k, const dnnl::engine& engine) {
  using dt = memory::data_type;
  const memory::desc a = operand(k.M, k.K, k.lda, k.ta, dt::bf16);
  const memory::desc b = operand(k.K, k.N, k.ldb, k.tb, dt::bf16);
  const memory::desc c = operand(k.M, k.N, k.ldc, false, dt::f32);
  dnnl::primitive_attr attr;
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(k.beta);
    attr.set_post_ops(po);
  }
  try {
    return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine));
  } catch (const dnnl::error& e) {
    fail("gemm (bf16): oneDNN has no bf16 matmul for ", k.ta ? 'T' : 'N', k.tb ? 'T' : 'N', " M=",
         k.M, " N=", k.N, " K=", k.K, " here (", e.what(), ")");
  }
}

// out[n] = in[n] widened, in parallel where n is large (as to_float).
void widen(float* out, const bf16* in, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

// Without native bf16: widen, then the fp32 product.
void widened(bool ta, bool tb, int M, int N, int K, float alpha, const bf16* A, int lda,
             const bf16* B, int ldb, float beta, float* C, int ldc, GemmCache* cache) {
  std::vector<float> a(size_t(ta ? K : M) * lda), b(size_t(tb ? N : K) * ldb);
  widen(a.data(), A, int64_t(a.size()));
  widen(b.data(), B, int64_t(b.size()));
  gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc, cache);
}

}  // namespace

// AMX-BF16 CPUs (Sapphire Rapids and later) have AVX512_BF16 too, so it is
// the one flag to ask for (and the one clang's builtin knows).
bool bf16_gemm_native() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
}

const char* bf16_gemm_missing() { return bf16_gemm_native() ? "" : "AVX512_BF16"; }

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
          int ldb, float beta, float* C, int ldc, GemmCache* cache) {
  if (M == 0 || N == 0) return;
  if (!bf16_gemm_native())
    return widened(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cache);
  std::unique_ptr<Matmuls> own;  // without a cache: an engine and a primitive for this call
  if (!cache) own = std::make_unique<Matmuls>();
  Matmuls& mm = cache ? matmuls(*cache) : *own;
  const Key key{ta, tb, M, N, K, lda, ldb, ldc, alpha, beta};
  dnnl::matmul* prim;
  {
    std::lock_guard<std::mutex> lock(mm.mutex);
    auto it = mm.made.find(key);
    if (it == mm.made.end()) it = mm.made.emplace(key, make(key, mm.engine)).first;
    prim = &it->second;
  }
  using dt = memory::data_type;
  memory a(operand(M, K, lda, ta, dt::bf16), mm.engine, const_cast<bf16*>(A));
  memory b(operand(K, N, ldb, tb, dt::bf16), mm.engine, const_cast<bf16*>(B));
  memory c(operand(M, N, ldc, false, dt::f32), mm.engine, C);
  prim->execute(mm.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  mm.stream.wait();
}

bool CpuBackend::bf16_gemm_native() const { return cpu::bf16_gemm_native(); }

std::string CpuBackend::bf16_gemm_missing() const { return cpu::bf16_gemm_missing(); }

}  // namespace dendrite::cpu
