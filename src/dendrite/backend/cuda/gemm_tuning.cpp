// GEMM tuning on the GPU (gemm.h: Gemm::set_tuning). DESIGN.md section 10
// asks that each shape's ways be timed at its first product and the fastest
// kept for the run. On a GPU the ways are the algorithms cuBLASLt's heuristic
// offers for the shape (tile, stages, split over K, ...); their results may
// differ in the last bits where they sum in another order, so the trial keeps
// only those that give the bits of the heuristic's first pick (a hash of the
// result, bits_hash.cu), as the CPU's tuning does: tuning never changes a
// result.
#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "dendrite/backend/cuda/gemm.h"
#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

constexpr int kTrialRuns = 3;  // timed products per algorithm, after the one checked

// An attribute of an algorithm's configuration, or 0 where this cuBLASLt
// does not say.
template <class T>
T config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written) !=
      CUBLAS_STATUS_SUCCESS)
    return T{};
  return v;
}

// The i-th pick's name: its rank and what sets it apart.
std::string way_name(int i, const cublasLtMatmulAlgo_t& algo) {
  std::string s = str("pick ", i, ": algo ", config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                      " tile ", config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID), " stages ",
                      config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID));
  const int32_t splits = config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  if (splits > 1)
    s += str(" split-K ", splits, " scheme ",
             config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  if (const uint32_t swizzle = config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING))
    s += str(" swizzle ", swizzle);
  if (const int32_t option = config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION))
    s += str(" option ", option);
  return s;
}

}  // namespace

uint64_t Gemm::result_hash(const Key& k, const Trial& t, cudaStream_t stream) const {
  uint64_t h = bits_hash(t.d, t.rows, t.row_bytes, t.ld_bytes, workspace_, stream);
  if (t.aux)
    h = h * 0x100000001b3ull +
        bits_hash(t.aux, t.rows, int64_t(k.N) * 4, int64_t(k.N) * 4, workspace_, stream);
  return h;
}

void Gemm::tune(Plan& p, const Key& k, const Trial& t, cudaStream_t stream) {
  std::vector<cublasLtMatmulHeuristicResult_t> offered;
  offered.swap(p.offered);  // tried once, whatever happens
  if (!t.reruns) return;    // the first pick, untimed (gemm.h)
  const auto start = std::chrono::steady_clock::now();
  // The trial's device memory and events, given back however it ends.
  struct Held {
    void* kept = nullptr;  // C's values, for a sum into C
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    ~Held() {
      if (t0) cudaEventDestroy(t0);
      if (t1) cudaEventDestroy(t1);
      if (kept) cudaFree(kept);
    }
  } held;
  // A sum into C: C's values kept, and put back before each pick's checked
  // run and after the trial. Without the memory for them, no trial.
  if (t.kept_bytes > 0) {
    if (cudaMalloc(&held.kept, size_t(t.kept_bytes)) != cudaSuccess) {
      held.kept = nullptr;
      cudaGetLastError();  // that allocation's error alone: the first pick, untimed
      return;
    }
    check_cuda(
        cudaMemcpyAsync(held.kept, t.d, size_t(t.kept_bytes), cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync (GEMM tuning keeps C)");
  }
  auto put_back = [&] {
    if (held.kept)
      check_cuda(
          cudaMemcpyAsync(t.d, held.kept, size_t(t.kept_bytes), cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync (GEMM tuning puts C back)");
  };
  check_cuda(cudaEventCreate(&held.t0), "cudaEventCreate (GEMM tuning)");
  check_cuda(cudaEventCreate(&held.t1), "cudaEventCreate (GEMM tuning)");
  ops::GemmChoice c{};
  c.ta = k.ta ? 'T' : 'N';
  c.tb = k.tb ? 'T' : 'N';
  c.M = k.M, c.N = k.N, c.K = k.K, c.threads = 1, c.accumulate = k.beta;
  uint64_t want = 0;
  size_t pick = 0;
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < offered.size(); ++i) {
    const cublasLtMatmulHeuristicResult_t& r = offered[i];
    c.ways.push_back(way_name(int(i), r.algo));
    c.ms.push_back(-1);
    put_back();
    const cublasStatus_t s = t.run(r.algo, r.workspaceSize);
    DENDRITE_CHECK(i > 0 || s == CUBLAS_STATUS_SUCCESS,
                   "cuda: cublasLtMatmul (the first pick, at GEMM tuning) failed: ",
                   cublasLtGetStatusString(s));
    if (s != CUBLAS_STATUS_SUCCESS) continue;  // a pick that does not run: rejected
    const uint64_t h = result_hash(k, t, stream);
    if (i == 0) want = h;
    if (h != want) continue;  // other bits: rejected
    check_cuda(cudaEventRecord(held.t0, stream), "cudaEventRecord (GEMM tuning)");
    for (int run = 0; run < kTrialRuns; ++run)
      DENDRITE_CHECK(t.run(r.algo, r.workspaceSize) == CUBLAS_STATUS_SUCCESS,
                     "cuda: cublasLtMatmul (a trial at GEMM tuning) failed");
    check_cuda(cudaEventRecord(held.t1, stream), "cudaEventRecord (GEMM tuning)");
    check_cuda(cudaEventSynchronize(held.t1), "cudaEventSynchronize (GEMM tuning)");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, held.t0, held.t1), "cudaEventElapsedTime (GEMM tuning)");
    c.ms.back() = double(ms) / kTrialRuns;
    if (c.ms.back() < best) best = c.ms.back(), pick = i;
  }
  put_back();
  if (held.kept) {
    check_cuda(cudaFree(held.kept), "cudaFree (GEMM tuning's copy of C)");
    held.kept = nullptr;
  }
  c.way = c.ways[pick];
  p.choice = std::move(c);
  p.algo = offered[pick].algo;
  p.workspace = offered[pick].workspaceSize;
  read_split(p);
  tuning_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<ops::GemmChoice> Gemm::choices() const {
  std::vector<ops::GemmChoice> out;
  for (const auto& [k, p] : plans_)
    if (!p.choice.ways.empty()) out.push_back(p.choice);
  return out;
}

}  // namespace dendrite::cuda
