// cuBLASLt GEMMs (gemm.h). cuBLASLt is column-major: the row-major product
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, in which each stored
// row-major matrix is its own column-major transpose, so the operands swap
// and keep their transpose flags.
#include "dendrite/backend/cuda/gemm.h"

#include <algorithm>
#include <cstring>

#include "dendrite/comm/cuda/error_text.h"
#include "dendrite/core/check.h"

namespace dendrite::cuda {

namespace {

void check(cublasStatus_t s, const char* call) {
  DENDRITE_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuda: ", call, " failed: ",
                 cublasLtGetStatusString(s));
}

// The bytes a row-major matrix of `rows` rows, `ld` elements apart, spans.
int64_t span(int64_t rows, int64_t ld, int64_t elem) { return rows * ld * elem; }
// Whether [a, a + an) and [b, b + bn) share a byte (a null pointer: none).
bool overlaps(const void* a, int64_t an, const void* b, int64_t bn) {
  if (!a || !b) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + uint64_t(bn) && y < x + uint64_t(an);
}

// The largest power of two (up to 16) dividing the address.
int alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && u % a) a /= 2;
  return a;
}

// What a split over K adds to a shape's line ("" for none).
std::string split_name(int splits, uint32_t scheme) {
  if (splits <= 1) return "";
  const char* how = scheme == CUBLASLT_REDUCTION_SCHEME_INPLACE        ? "in place"
                    : scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? "fp32 partials"
                                                                       : "partials in D's type";
  return str(" split-K ", splits, " (", how, ")");
}

// What an epilogue adds to a shape's line ("" for none).
std::string epilogue_name(int epilogue, bool out_bf16) {
  std::string s;
  if (epilogue & CUBLASLT_EPILOGUE_BIAS) s += " +bias";
  if (epilogue == CUBLASLT_EPILOGUE_DGELU)
    s += " *gelu'";
  else if (epilogue & CUBLASLT_EPILOGUE_GELU)
    s += " +gelu";
  if (out_bf16) s += " ->bf16";
  return s;
}

}  // namespace

Gemm::Gemm(bool tf32, bool epilogues) : tf32_(tf32), epilogues_(epilogues) {
  check(cublasLtCreate(&handle_), "cublasLtCreate");
  const cudaError_t e = cudaMalloc(&workspace_, workspace_bytes_);
  DENDRITE_CHECK(e == cudaSuccess, "cuda: cudaMalloc of the ", workspace_bytes_ >> 20,
                 " MB GEMM workspace failed: ", error_text(e));
}

Gemm::~Gemm() {
  for (auto& [k, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

void Gemm::set_epilogue_pointers(const Plan& p, const Key& k, const Epilogue& e) const {
  if (k.epilogue == CUBLASLT_EPILOGUE_DEFAULT) return;
  const void* bias = e.bias ? static_cast<const void*>(e.bias) : e.bias_bf16;
  if (bias)
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)),
          "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  const void* aux = e.gelu ? static_cast<const void*>(e.gelu_input) : e.dgelu_input;
  if (aux)
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                         sizeof(aux)),
          "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
}

namespace {

// The epilogue's settings on the descriptor (the pointers are set per product).
void describe_epilogue(cublasLtMatmulDesc_t op, int epilogue, int N, bool out_bf16) {
  const uint32_t epi = uint32_t(epilogue);
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
        "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  if (epilogue & CUBLASLT_EPILOGUE_BIAS) {
    const int32_t type = out_bf16 ? CUDA_R_16BF : CUDA_R_32F;  // D's type, as cuBLASLt's default
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                         sizeof(type)),
          "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
  }
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
      epilogue == CUBLASLT_EPILOGUE_DGELU) {
    const int64_t ld = N;  // the GELU input [M, N] row-major: column-major [N, M]
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)),
          "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
  }
}

// The reduction schemes a split over K may use. None of cuBLASLt's uses
// atomics (cublasLt.h): INPLACE adds the slices into D one after another,
// ordered by counters in the workspace; COMPUTE_TYPE and OUTPUT_TYPE store
// each slice's partial product in the workspace and sum them in a second
// step. So a product's bits are fixed by its algorithm, which is chosen once
// per shape. Into a bf16 D, INPLACE and OUTPUT_TYPE would round every
// partial sum to bf16: only COMPUTE_TYPE (fp32 partials) there.
uint32_t reduction_schemes(bool out_bf16) {
  return out_bf16
             ? uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
             : uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                        CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
}

// The preference: the workspace, the reduction schemes, the operands' alignment.
cublasLtMatmulPreference_t preference(size_t workspace_bytes, int align_bytes, bool out_bf16) {
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof(workspace_bytes)),
        "cublasLtMatmulPreferenceSetAttribute(workspace)");
  const uint32_t scheme = reduction_schemes(out_bf16);
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                             &scheme, sizeof(scheme)),
        "cublasLtMatmulPreferenceSetAttribute(reduction scheme)");
  const uint32_t align = uint32_t(align_bytes);
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)),
          "cublasLtMatmulPreferenceSetAttribute(alignment)");
  return pref;
}

}  // namespace

void Gemm::read_split(Plan& p) const {
  int32_t splits = 1;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t written = 0;
  check(cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof(splits), &written),
        "cublasLtMatmulAlgoConfigGetAttribute(SPLITK_NUM)");
  check(cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                             &scheme, sizeof(scheme), &written),
        "cublasLtMatmulAlgoConfigGetAttribute(REDUCTION_SCHEME)");
  p.splits = splits;
  p.scheme = scheme;
}

Gemm::Plan& Gemm::plan(const Key& k, const Epilogue& e) {
  auto it = plans_.find(k);
  if (it != plans_.end()) return it->second;
  Plan p;
  const cublasComputeType_t compute =
      !k.bf16 && tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // First operand: B (trans_b), second: A (trans_a); the result C^T [N, M].
  const cublasOperation_t first = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first)),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second)),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (k.epilogue != CUBLASLT_EPILOGUE_DEFAULT) describe_epilogue(p.op, k.epilogue, k.N, k.out_bf16);
  set_epilogue_pointers(p, k, e);
  const cudaDataType_t in = k.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // Column-major shapes of the stored matrices: B is [K, N] (or [N, K] when
  // trans_b) row-major, so [N, K] (or [K, N]) column-major; A likewise.
  check(cublasLtMatrixLayoutCreate(&p.b, in, k.tb ? k.K : k.N, k.tb ? k.N : k.K, k.ldb),
        "cublasLtMatrixLayoutCreate(B)");
  check(cublasLtMatrixLayoutCreate(&p.a, in, k.ta ? k.M : k.K, k.ta ? k.K : k.M, k.lda),
        "cublasLtMatrixLayoutCreate(A)");
  check(cublasLtMatrixLayoutCreate(&p.c, k.out_bf16 ? CUDA_R_16BF : CUDA_R_32F, k.N, k.M, k.ldc),
        "cublasLtMatrixLayoutCreate(C)");
  cublasLtMatmulPreference_t pref = preference(workspace_bytes_, k.align, k.out_bf16);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.b, p.a, p.c, p.c, pref, 1, &result, &found);
  // Tuning: the first pick as above (the one an untuned run takes, whatever
  // a longer list would put first), then the heuristic's others.
  if (tuning_ && s == CUBLAS_STATUS_SUCCESS && found > 0) {
    std::vector<cublasLtMatmulHeuristicResult_t> more(kTuneCandidates);
    int listed = 0;
    if (cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.b, p.a, p.c, p.c, pref, kTuneCandidates,
                                       more.data(), &listed) == CUBLAS_STATUS_SUCCESS) {
      p.offered.push_back(result);
      for (int i = 0; i < listed; ++i)
        if (more[i].state == CUBLAS_STATUS_SUCCESS &&
            std::memcmp(&more[i].algo, &result.algo, sizeof result.algo) != 0)
          p.offered.push_back(more[i]);
      if (p.offered.size() < 2) p.offered.clear();  // nothing to choose from
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  // An epilogue cuBLASLt does not offer for this product is no error: its
  // steps run as kernels (run_fused returns false).
  const bool fused = k.epilogue != CUBLASLT_EPILOGUE_DEFAULT || k.out_bf16 || k.residual;
  if (!fused) check(s, "cublasLtMatmulAlgoGetHeuristic");
  DENDRITE_CHECK(fused || found > 0, "cuda: cuBLASLt has no algorithm for the ",
                 k.bf16 ? "bf16" : "fp32", " product ", k.M, "x", k.N, "x", k.K, " (",
                 k.ta ? "T" : "N", k.tb ? "T" : "N", ", alignment ", k.align, " bytes)");
  p.found = s == CUBLAS_STATUS_SUCCESS && found > 0;
  p.algo = result.algo;
  p.workspace = result.workspaceSize;
  if (p.found) read_split(p);
  return plans_.emplace(k, p).first->second;
}

void Gemm::run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
               int lda, const void* B, int ldb, float beta, float* C, int ldc, bool bf16,
               cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  const int align = std::min(std::min(alignment(A), alignment(B)), alignment(C));
  const Key k{trans_a, trans_b, bf16, beta != 0.0f, M, N, K, lda, ldb, ldc, align};
  Plan& p = plan(k);
  auto product = [&](const cublasLtMatmulAlgo_t& algo, size_t workspace) {
    return cublasLtMatmul(handle_, p.op, &alpha, B, p.b, A, p.a, &beta, C, p.c, C, p.c, &algo,
                          workspace_, workspace, stream);
  };
  const bool trial = !p.offered.empty();
  if (trial) {
    // C, read where beta is not 0, is kept for the trial (gemm.h).
    const int64_t elem = bf16 ? 2 : 4, c_bytes = span(M, ldc, 4);
    tune(p, k,
         Trial{product, C, M, int64_t(N) * 4, int64_t(ldc) * 4, nullptr, beta != 0.0f ? c_bytes : 0,
               !overlaps(C, c_bytes, A, span(trans_a ? K : M, lda, elem)) &&
                   !overlaps(C, c_bytes, B, span(trans_b ? N : K, ldb, elem))},
         stream);
  }
  check(product(p.algo, p.workspace), "cublasLtMatmul");
  if (!trial) ++p.choice.calls;  // the products since the trial
}

bool Gemm::run_fused(bool trans_a, bool trans_b, int M, int N, int K, const void* A, int lda,
                     const void* B, int ldb, void* D, bool bf16, const Epilogue& e,
                     cudaStream_t stream) {
  if (M == 0 || N == 0) return true;
  if (!epilogues_) return false;
  // Only what cuBLASLt documents for these types: bias and GELU input take
  // D's type, a bf16 D needs bf16 operands, and the GELU input's leading
  // dimension is a multiple of 8.
  if (e.out_bf16 && (e.bias || e.gelu || e.dgelu_input || !bf16)) return false;
  if (e.bias_bf16 && (!e.out_bf16 || e.bias)) return false;
  if (e.residual && (e.out_bf16 || e.gelu || e.dgelu_input)) return false;
  if (e.gelu && (!e.gelu_input || N % 8 != 0)) return false;
  if (e.dgelu_input && (e.gelu || e.bias || N % 8 != 0)) return false;
  int epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (e.bias || e.bias_bf16) epilogue = CUBLASLT_EPILOGUE_BIAS;
  if (e.gelu) epilogue = e.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (e.dgelu_input) epilogue = CUBLASLT_EPILOGUE_DGELU;
  int align = std::min(std::min(alignment(A), alignment(B)), alignment(D));
  if (e.residual) align = std::min(align, alignment(e.residual));
  int epi_align = 16;
  if (e.bias) epi_align = std::min(epi_align, alignment(e.bias));
  if (e.bias_bf16) epi_align = std::min(epi_align, alignment(e.bias_bf16));
  if (e.gelu) epi_align = std::min(epi_align, alignment(e.gelu_input));
  if (e.dgelu_input) epi_align = std::min(epi_align, alignment(e.dgelu_input));
  Key k{trans_a, trans_b, bf16, e.residual != nullptr, M, N, K, lda, ldb, N, align};
  k.epilogue = epilogue;
  k.out_bf16 = e.out_bf16;
  k.residual = e.residual != nullptr;
  k.epi_align = epi_align;
  Plan& p = plan(k, e);
  if (!p.found) return false;
  set_epilogue_pointers(p, k, e);
  const float alpha = 1.0f, beta = e.residual ? 1.0f : 0.0f;
  const void* C = e.residual ? static_cast<const void*>(e.residual) : D;  // same layout as D
  auto product = [&](const cublasLtMatmulAlgo_t& algo, size_t workspace) {
    return cublasLtMatmul(handle_, p.op, &alpha, B, p.b, A, p.a, &beta, C, p.c, D, p.c, &algo,
                          workspace_, workspace, stream);
  };
  const bool trial = !p.offered.empty();
  if (trial) {
    // What it writes (D, GELU's input) must not overlap what it reads.
    const int64_t elem = bf16 ? 2 : 4, d_elem = e.out_bf16 ? 2 : 4;
    const std::pair<const void*, int64_t> reads[] = {
        {A, span(trans_a ? K : M, lda, elem)},
        {B, span(trans_b ? N : K, ldb, elem)},
        {e.residual, span(M, N, 4)},
        {e.dgelu_input, span(M, N, 4)},
        {e.bias ? static_cast<const void*>(e.bias) : e.bias_bf16, int64_t(N) * 4}};
    const std::pair<const void*, int64_t> writes[] = {{D, span(M, N, d_elem)},
                                                      {e.gelu_input, span(M, N, 4)}};
    bool reruns = true;
    for (const auto& [w, wn] : writes)
      for (const auto& [r, rn] : reads) reruns = reruns && !overlaps(w, wn, r, rn);
    tune(p, k,
         Trial{product, D, M, int64_t(N) * d_elem, int64_t(N) * d_elem,
               e.gelu ? e.gelu_input : nullptr, 0, reruns},
         stream);
  }
  check(product(p.algo, p.workspace), "cublasLtMatmul (with an epilogue)");
  if (!trial) ++p.choice.calls;  // the products since the trial
  return true;
}

std::vector<std::string> Gemm::shapes() const {
  std::vector<std::string> out;
  for (const auto& [k, p] : plans_) {
    const ops::GemmChoice& c = p.choice;  // tuning's, where it timed the shape
    const std::string tuned = !c.ways.empty() && c.way != c.ways[0]
                                  ? " (tuned: " + c.way.substr(0, c.way.find(':')) + ")"
                                  : "";
    out.push_back(str(k.ta ? "T" : "N", k.tb ? "T" : "N", " ", k.M, "x", k.N, "x", k.K,
                      k.bf16 ? " bf16" : (tf32_ ? " tf32" : " fp32"), k.beta ? " +C" : "",
                      epilogue_name(k.epilogue, k.out_bf16), split_name(p.splits, p.scheme),
                      p.found ? "" : " (no algorithm: kernels)", tuned));
  }
  return out;
}

}  // namespace dendrite::cuda
