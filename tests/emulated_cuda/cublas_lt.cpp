// The emulated cuBLASLt (cublasLt.h).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "counters.h"
#include "cublasLt.h"

struct EmulatedLtHandle {
  int unused;
};
struct EmulatedLtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
};
struct EmulatedLtLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct EmulatedLtPreference {
  size_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's defaults
};

namespace {

constexpr uint64_t kMagic = 0x656d756c61746564;  // "emulated"

cublasStatus_t refuse(const std::string& why) {
  std::fprintf(stderr, "cublasLt emulator: %s\n", why.c_str());
  return CUBLAS_STATUS_INVALID_VALUE;
}

// What an algorithm was found for: the descriptors' values.
uint64_t fingerprint(const EmulatedLtDesc& op, const EmulatedLtLayout* const (&l)[4]) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(op.compute), mix(op.scale), mix(op.ta), mix(op.tb);
  for (const EmulatedLtLayout* x : l)
    mix(x->type), mix(x->rows), mix(x->cols), mix(uint64_t(x->ld));
  return h;
}

// The layouts' shapes fit a product; "" or why not.
std::string check_shapes(const EmulatedLtDesc& op, const EmulatedLtLayout& a,
                         const EmulatedLtLayout& b, const EmulatedLtLayout& c,
                         const EmulatedLtLayout& d) {
  const uint64_t m = op.ta == CUBLAS_OP_T ? a.cols : a.rows;
  const uint64_t k = op.ta == CUBLAS_OP_T ? a.rows : a.cols;
  const uint64_t kb = op.tb == CUBLAS_OP_T ? b.cols : b.rows;
  const uint64_t n = op.tb == CUBLAS_OP_T ? b.rows : b.cols;
  auto dims = [](const EmulatedLtLayout& x) {
    return std::to_string(x.rows) + "x" + std::to_string(x.cols) + " (ld " + std::to_string(x.ld) +
           ")";
  };
  if (k != kb)
    return "op(A) is " + std::to_string(m) + "x" + std::to_string(k) + " but op(B) has " +
           std::to_string(kb) + " rows";
  if (c.rows != m || c.cols != n || d.rows != m || d.cols != n)
    return "C " + dims(c) + " / D " + dims(d) + " is not " + std::to_string(m) + "x" +
           std::to_string(n);
  for (const EmulatedLtLayout* x : {&a, &b, &c, &d})
    if (x->ld < int64_t(std::max<uint64_t>(x->rows, 1)))
      return "leading dimension shorter than the rows: " + dims(*x);
  if (a.type != b.type) return "A and B of different types";
  if (c.type != CUDA_R_32F || d.type != CUDA_R_32F) return "C and D must be fp32 here";
  if (op.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type != CUDA_R_32F)
    return "TF32 compute with operands that are not fp32";
  return "";
}

bool device_range(const void* p, const EmulatedLtLayout& l) {
  const size_t elem = l.type == CUDA_R_16BF ? 2 : 4;
  const size_t last = (l.rows - 1 + (l.cols - 1) * size_t(l.ld)) * elem;
  cudaPointerAttributes first{}, end{};
  cudaPointerGetAttributes(&first, p);
  cudaPointerGetAttributes(&end, static_cast<const char*>(p) + last + elem - 1);
  return first.type == cudaMemoryTypeDevice && end.type == cudaMemoryTypeDevice;
}

int alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && u % a) a /= 2;
  return a;
}

double element(const void* p, const EmulatedLtLayout& l, uint64_t r, uint64_t c, bool tf32) {
  const size_t i = r + c * size_t(l.ld);
  if (l.type == CUDA_R_16BF) {
    uint16_t h;
    std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
    return double(__uint_as_float(uint32_t(h) << 16));
  }
  float f;
  std::memcpy(&f, static_cast<const char*>(p) + 4 * i, 4);
  if (tf32) {  // 10 mantissa bits, nearest with ties away (cvt.rna.tf32.f32)
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    f = __uint_as_float(u);
  }
  return double(f);
}

// D = alpha op(A) op(B) + beta C, the products exact and summed in double.
void product(const EmulatedLtDesc& op, const EmulatedLtLayout& a, const EmulatedLtLayout& b,
             const EmulatedLtLayout& c, const EmulatedLtLayout& d, const void* A, const void* B,
             const void* C, void* D, float al, float be) {
  const uint64_t m = d.rows, n = d.cols, k = op.ta == CUBLAS_OP_T ? a.rows : a.cols;
  const bool tf32 = op.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  // op(A) as m rows of k, op(B) as n columns of k, each contiguous.
  std::vector<double> x(size_t(m) * k), y(size_t(n) * k);
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t p = 0; p < k; ++p)
      x[i * k + p] =
          op.ta == CUBLAS_OP_T ? element(A, a, p, i, tf32) : element(A, a, i, p, tf32);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t p = 0; p < k; ++p)
      y[j * k + p] =
          op.tb == CUBLAS_OP_T ? element(B, b, j, p, tf32) : element(B, b, p, j, tf32);
  std::vector<float> out(size_t(m) * n);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      const double* xi = &x[i * k];
      const double* yj = &y[j * k];
      double sum = 0;
      for (uint64_t p = 0; p < k; ++p) sum += xi[p] * yj[p];
      double v = double(al) * sum;
      if (be != 0.0f) v += double(be) * element(C, c, i, j, false);  // beta 0: C is not read
      out[i + j * m] = float(v);
    }
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i)
      std::memcpy(static_cast<char*>(D) + 4 * (i + j * size_t(d.ld)), &out[i + j * m], 4);
}

}  // namespace

const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new EmulatedLtHandle{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *d = new EmulatedLtDesc{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  if (bytes != sizeof(cublasOperation_t)) return refuse("a descriptor attribute of the wrong size");
  cublasOperation_t o;
  std::memcpy(&o, buf, bytes);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA)
    d->ta = o;
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB)
    d->tb = o;
  else
    return refuse("a descriptor attribute the emulator does not know");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *l = new EmulatedLtLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new EmulatedLtPreference{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (bytes != sizeof(uint64_t)) return refuse("the workspace preference is a uint64");
      std::memcpy(&p->workspace, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      if (bytes != sizeof(uint32_t)) return refuse("the reduction scheme is a uint32");
      return CUBLAS_STATUS_SUCCESS;  // the emulator never splits a sum
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
      if (bytes != sizeof(uint32_t)) return refuse("an alignment preference is a uint32");
      uint32_t v;
      std::memcpy(&v, buf, bytes);
      if (v == 0 || (v & (v - 1))) return refuse("an alignment that is not a power of two");
      p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
      return CUBLAS_STATUS_SUCCESS;
    }
  }
  return refuse("a preference the emulator does not know");
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* found) {
  if (!h || !op || !a || !b || !c || !d || !pref || requested < 1)
    return refuse("cublasLtMatmulAlgoGetHeuristic: a null argument");
  *found = 0;
  const std::string why = check_shapes(*op, *a, *b, *c, *d);
  if (!why.empty()) return refuse("cublasLtMatmulAlgoGetHeuristic: " + why);
  results[0] = cublasLtMatmulHeuristicResult_t{};
  const EmulatedLtLayout* const l[4] = {a, b, c, d};
  results[0].algo.data[0] = kMagic;
  results[0].algo.data[1] = fingerprint(*op, l);
  for (int i = 0; i < 4; ++i) results[0].algo.data[2 + i] = pref->align[i];
  results[0].workspaceSize = 0;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!h || !op || !a || !b || !c || !d || !algo) return refuse("cublasLtMatmul: a null argument");
  const std::string why = check_shapes(*op, *a, *b, *c, *d);
  if (!why.empty()) return refuse("cublasLtMatmul: " + why);
  const EmulatedLtLayout* const l[4] = {a, b, c, d};
  if (algo->data[0] != kMagic || algo->data[1] != fingerprint(*op, l))
    return refuse("cublasLtMatmul: the algorithm was not found for these descriptors");
  const void* ptrs[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i)
    if (alignment(ptrs[i]) < int(algo->data[2 + i]))
      return refuse(std::string("cublasLtMatmul: ") + "ABCD"[i] + " is aligned to " +
                    std::to_string(alignment(ptrs[i])) + " bytes, less than the " +
                    std::to_string(algo->data[2 + i]) + " its algorithm was chosen for");
  const uint64_t m = d->rows, n = d->cols, k = op->ta == CUBLAS_OP_T ? a->rows : a->cols;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  if ((k > 0 && (!device_range(A, *a) || !device_range(B, *b))) || !device_range(D, *d) ||
      (be != 0.0f && !device_range(C, *c)))
    return refuse("cublasLtMatmul: an operand is not inside device memory");
  if (workspace_bytes > 0 && !workspace) return refuse("cublasLtMatmul: a null workspace");
  emu::counters::matmul(m, n, k, a->type == CUDA_R_16BF ? 2 : 4, b->type == CUDA_R_16BF ? 2 : 4,
                        d->type == CUDA_R_16BF ? 2 : 4, be != 0.0f);
  if (emu::counters::count_only()) return CUBLAS_STATUS_SUCCESS;
  // The product runs in the stream's order, on copies of the descriptors.
  emu::submit(stream, [op = *op, a = *a, b = *b, c = *c, d = *d, A, B, C, D, al, be] {
    product(op, a, b, c, d, A, B, C, D, al, be);
  });
  return CUBLAS_STATUS_SUCCESS;
}
