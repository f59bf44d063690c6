// The emulated cuBLASLt (cublasLt.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "counters.h"
#include "cublasLt.h"
#include "cupti.h"
#include "emulator_internal.h"

struct EmulatedLtHandle {
  int unused;
};
struct EmulatedLtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t bias_type = -1;  // -1: D's type
};
struct EmulatedLtLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct EmulatedLtPreference {
  size_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};           // A, B, C, D: cuBLASLt's defaults
  uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK;  // cuBLASLt's default: all allowed
};

std::atomic<int> g_last_splits{1};

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
  mix(op.epilogue), mix(uint64_t(op.aux_ld)), mix(uint64_t(int64_t(op.bias_type)));
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
  if (c.type != d.type) return "C and D of different types";
  if (d.type != CUDA_R_32F && !(d.type == CUDA_R_16BF && a.type == CUDA_R_16BF))
    return "D must be fp32, or bf16 with bf16 operands";
  if (op.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type != CUDA_R_32F)
    return "TF32 compute with operands that are not fp32";
  return "";
}

bool has_bias(uint32_t e) { return e & CUBLASLT_EPILOGUE_BIAS; }
bool has_gelu(uint32_t e) { return e & CUBLASLT_EPILOGUE_GELU; }
bool keeps_gelu_input(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool is_dgelu(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU; }
bool has_aux(uint32_t e) { return keeps_gelu_input(e) || is_dgelu(e); }

// The epilogue is one the emulator implements, set up as cuBLASLt documents; "" or why not.
std::string check_epilogue(const EmulatedLtDesc& op, const EmulatedLtLayout& d) {
  switch (op.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
      break;
    default:
      return "epilogue " + std::to_string(op.epilogue) + " is not emulated";
  }
  if (has_bias(op.epilogue) && op.bias_type != -1 && op.bias_type != d.type)
    return "a bias of another type than D's is not emulated";
  if (has_aux(op.epilogue) && (op.aux_ld % 8 != 0 || op.aux_ld < int64_t(d.rows)))
    return "the GELU input's leading dimension " + std::to_string(op.aux_ld) +
           " is not a multiple of 8 at least D's " + std::to_string(d.rows) + " rows";
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

// Bits of a bf16 rounded from f to nearest-even (NaN stays NaN).
uint16_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Stores v at element i of a matrix of `type`.
void store(void* p, size_t i, float v, cudaDataType_t type) {
  if (type == CUDA_R_16BF) {
    const uint16_t h = bf16_bits(v);
    std::memcpy(static_cast<char*>(p) + 2 * i, &h, 2);
  } else {
    std::memcpy(static_cast<char*>(p) + 4 * i, &v, 4);
  }
}

// v rounded to a matrix type's precision.
float rounded_to(float v, cudaDataType_t type) {
  return type == CUDA_R_16BF ? __uint_as_float(uint32_t(bf16_bits(v)) << 16) : v;
}

// How the emulated heuristic splits K, as a model of cuBLASLt's: where the
// output has few 128x128 tiles (not enough to fill a GPU of 132 SMs) and K
// is long, into slices of at least 256, at most 16 of them.
struct Split {
  int slices = 1;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t workspace = 0;
};
// A split of the sum into `slices` (1: none) with the first scheme the
// preference allows whose workspace fits; none where none does.
Split split_into(int slices, uint64_t m, uint64_t n, const EmulatedLtPreference& pref,
                 cudaDataType_t d_type) {
  if (slices < 2) return {};
  const uint64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);
  const size_t partials = size_t(slices) * m * n;
  // The first scheme allowed whose workspace fits: partial products in fp32
  // (the compute type), then in place in D (counters in the workspace), then
  // partial products in D's type.
  const size_t d_elem = d_type == CUDA_R_16BF ? 2 : 4;
  const std::pair<uint32_t, size_t> order[] = {
      {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, 4 * partials},
      {CUBLASLT_REDUCTION_SCHEME_INPLACE, 4 * tiles},
      {CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE, d_elem * partials}};
  for (const auto& [scheme, bytes] : order)
    if ((pref.schemes & scheme) && bytes <= pref.workspace) return {slices, scheme, bytes};
  return {};
}
Split choose_split(uint64_t m, uint64_t n, uint64_t k, const EmulatedLtPreference& pref,
                   cudaDataType_t d_type) {
  const uint64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);
  const uint64_t want = std::min<uint64_t>({16, k / 256, 132 / std::max<uint64_t>(tiles, 1)});
  if (tiles >= 32 || k < 1024 || want < 2) return {};
  return split_into(int(want), m, n, pref, d_type);
}

// The algorithms the emulated heuristic offers, best first, as a model of
// cuBLASLt's list: its choice; the same split with other tiles (the same
// sums, so the same bits); and another split (other bits), none where its
// choice splits K, two slices where it does not and K is 512 or more.
// Each is its split and a tile number (ALGO_CONFIG_TILE_ID).
std::vector<std::pair<Split, uint32_t>> offers(uint64_t m, uint64_t n, uint64_t k,
                                               const EmulatedLtPreference& pref,
                                               cudaDataType_t d_type) {
  const Split first = choose_split(m, n, k, pref, d_type);
  std::vector<std::pair<Split, uint32_t>> out{{first, 0}, {first, 1}};
  const Split other = first.slices > 1 ? Split{} : split_into(k >= 512 ? 2 : 1, m, n, pref, d_type);
  if (other.slices != first.slices) out.push_back({other, 0});
  out.push_back({first, 2});
  return out;
}

double gelu(double x) {
  const double s = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
double gelu_derivative(double x) {
  const double s = std::sqrt(2.0 / 3.14159265358979323846);
  const double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
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

// The sum of the products x[p] y[p] for p in [p0, p1): in double, or with
// set_gpu_rounding as a GPU's kernel sums it (a model, gpu_rounding.cpp):
// on tensor cores (bf16 or TF32 operands, whose products fit fp32 exactly)
// the accumulator and 8 products at a time, else one fp32 FMA per product.
double slice_sum(const double* x, const double* y, uint64_t p0, uint64_t p1, bool tensor_cores) {
  if (!emu::gpu_rounds()) {
    double v = 0;
    for (uint64_t p = p0; p < p1; ++p) v += x[p] * y[p];
    return v;
  }
  float acc = 0;
  if (!tensor_cores) {
    for (uint64_t p = p0; p < p1; ++p) acc = std::fma(float(x[p]), float(y[p]), acc);
    return acc;
  }
  float products[8];
  for (uint64_t p = p0; p < p1; p += 8) {
    const int n = int(std::min<uint64_t>(8, p1 - p));
    for (int i = 0; i < n; ++i) products[i] = float(x[p + i] * y[p + i]);
    acc = emu::tensor_core_sum(acc, products, n);
  }
  return acc;
}

// alpha times the sum of the k products x[p] y[p]: one sum (slice_sum), or
// split: each slice summed so, rounded as its scheme stores it (fp32
// partials for COMPUTE_TYPE, D's type otherwise), the slices added in order.
double sum_of_products(const double* x, const double* y, uint64_t k, float al, const Split& split,
                       cudaDataType_t d_type, bool tensor_cores) {
  if (split.slices == 1) {
    const double v = slice_sum(x, y, 0, k, tensor_cores);
    // On the GPU alpha scales the fp32 accumulator.
    return emu::gpu_rounds() ? double(al * float(v)) : double(al) * v;
  }
  const cudaDataType_t part =
      split.scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? CUDA_R_32F : d_type;
  float acc = 0;
  for (int s = 0; s < split.slices; ++s) {
    const double slice =
        slice_sum(x, y, k * s / split.slices, k * (s + 1) / split.slices, tensor_cores);
    const float term = rounded_to(float(double(al) * slice), part);
    acc = s == 0 ? term : rounded_to(acc + term, part);
  }
  return double(acc);
}

// D = alpha op(A) op(B) + beta C, the products exact and summed in double,
// then the epilogue.
void product(const EmulatedLtDesc& op, const EmulatedLtLayout& a, const EmulatedLtLayout& b,
             const EmulatedLtLayout& c, const EmulatedLtLayout& d, const void* A, const void* B,
             const void* C, void* D, float al, float be, const Split& split) {
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
      double v = sum_of_products(&x[i * k], &y[j * k], k, al, split, d.type,
                                 tf32 || a.type == CUDA_R_16BF);
      if (be != 0.0f) v += double(be) * element(C, c, i, j, false);  // beta 0: C is not read
      if (has_bias(op.epilogue)) v += element(op.bias, d, i, 0, false);
      out[i + j * m] = float(v);
    }
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      float t = out[i + j * m];
      if (keeps_gelu_input(op.epilogue)) store(op.aux, i + j * size_t(op.aux_ld), t, d.type);
      if (is_dgelu(op.epilogue)) {
        const EmulatedLtLayout aux{d.type, d.rows, d.cols, op.aux_ld};
        t = float(double(t) * gelu_derivative(element(op.aux, aux, i, j, false)));
      } else if (has_gelu(op.epilogue)) {
        t = float(gelu(double(t)));
      }
      store(D, i + j * size_t(d.ld), t, d.type);
    }
}

// The bias and the GELU input lie in device memory, aligned as the algorithm
// was found for; "" or why not.
std::string check_epilogue_pointers(const EmulatedLtDesc& op, const EmulatedLtLayout& d,
                                    const cublasLtMatmulAlgo_t& algo) {
  if (has_bias(op.epilogue)) {
    if (!op.bias || !device_range(op.bias, EmulatedLtLayout{d.type, d.rows, 1, int64_t(d.rows)}))
      return "the bias is not a vector of D's rows in device memory";
    if (alignment(op.bias) < int(algo.data[6] & 0xff))
      return "the bias is less aligned than its algorithm was chosen for";
  }
  if (has_aux(op.epilogue)) {
    if (!op.aux || !device_range(op.aux, EmulatedLtLayout{d.type, d.rows, d.cols, op.aux_ld}))
      return "the GELU input is not a matrix of D's shape in device memory";
    if (alignment(op.aux) < int(algo.data[6] >> 8))
      return "the GELU input is less aligned than its algorithm was chosen for";
  }
  return "";
}

// The split an algorithm was found with, and the workspace it needs.
Split split_of(const cublasLtMatmulAlgo_t& algo, uint64_t m, uint64_t n, cudaDataType_t d_type) {
  Split s;
  s.slices = int(algo.data[7] & 0xff);
  s.scheme = uint32_t(algo.data[7] >> 8 & 0xff);
  const size_t partials = size_t(s.slices) * m * n;
  if (s.scheme == CUBLASLT_REDUCTION_SCHEME_INPLACE)
    s.workspace = 4 * ((m + 127) / 128) * ((n + 127) / 128);
  else if (s.scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
    s.workspace = 4 * partials;
  else if (s.scheme == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)
    s.workspace = (d_type == CUDA_R_16BF ? 2 : 4) * partials;
  return s;
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
  // Each attribute's size, as cublasLt.h documents it.
  auto take = [&](auto& field, const char* what) {
    if (bytes != sizeof(field))
      return refuse(std::string("the attribute ") + what + " of the wrong size");
    std::memcpy(&field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take(d->ta, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take(d->tb, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(d->epilogue, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(d->bias, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return take(d->aux, "EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return take(d->aux_ld, "EPILOGUE_AUX_LD");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return take(d->bias_type, "BIAS_DATA_TYPE");
  }
  return refuse("a descriptor attribute the emulator does not know");
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
      std::memcpy(&p->schemes, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
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
  std::string why = check_shapes(*op, *a, *b, *c, *d);
  if (why.empty()) why = check_epilogue(*op, *d);
  if (!why.empty()) return refuse("cublasLtMatmulAlgoGetHeuristic: " + why);
  const EmulatedLtLayout* const l[4] = {a, b, c, d};
  // The bias's and the GELU input's alignment, read from their pointers
  // (up to the 16 bytes of a vector access).
  const uint64_t bias_align = has_bias(op->epilogue) ? std::min(alignment(op->bias), 16) : 1;
  const uint64_t aux_align = has_aux(op->epilogue) ? std::min(alignment(op->aux), 16) : 1;
  const uint64_t k = op->ta == CUBLAS_OP_T ? a->rows : a->cols;
  const auto offered = offers(d->rows, d->cols, k, *pref, d->type);
  *found = std::min(requested, int(offered.size()));
  for (int j = 0; j < *found; ++j) {
    const auto& [split, tile] = offered[size_t(j)];
    cublasLtMatmulHeuristicResult_t& r = results[j];
    r = cublasLtMatmulHeuristicResult_t{};
    r.algo.data[0] = kMagic;
    r.algo.data[1] = fingerprint(*op, l);
    for (int i = 0; i < 4; ++i) r.algo.data[2 + i] = pref->align[i];
    r.algo.data[6] = bias_align | aux_align << 8;
    r.algo.data[7] = uint64_t(split.slices) | uint64_t(split.scheme) << 8 | uint64_t(tile) << 32;
    r.workspaceSize = split.workspace;
    r.state = CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!h || !op || !a || !b || !c || !d || !algo) return refuse("cublasLtMatmul: a null argument");
  std::string why = check_shapes(*op, *a, *b, *c, *d);
  if (why.empty()) why = check_epilogue(*op, *d);
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
  if (std::string e = check_epilogue_pointers(*op, *d, *algo); !e.empty())
    return refuse("cublasLtMatmul: " + e);
  const uint64_t m = d->rows, n = d->cols, k = op->ta == CUBLAS_OP_T ? a->rows : a->cols;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  if ((k > 0 && (!device_range(A, *a) || !device_range(B, *b))) || !device_range(D, *d) ||
      (be != 0.0f && !device_range(C, *c)))
    return refuse("cublasLtMatmul: an operand is not inside device memory");
  if (workspace_bytes > 0 && !workspace) return refuse("cublasLtMatmul: a null workspace");
  const Split split = split_of(*algo, d->rows, d->cols, d->type);
  if (workspace_bytes < split.workspace)
    return refuse("cublasLtMatmul: a workspace of " + std::to_string(workspace_bytes) +
                  " bytes, less than the " + std::to_string(split.workspace) +
                  " its algorithm needs");
  const int d_bytes = d->type == CUDA_R_16BF ? 2 : 4;  // the aux takes D's type
  emu::counters::matmul(m, n, k, a->type == CUDA_R_16BF ? 2 : 4, b->type == CUDA_R_16BF ? 2 : 4,
                        d_bytes, be != 0.0f, has_aux(op->epilogue) ? d_bytes : 0);
  constexpr const char* kName = "emulated_cublasLt_matmul";  // as CUPTI names the kernel
  if (emu::counters::count_only()) {
    emu::activity::issue(emu::activity::Work::kKernel, kName, 0, 0, nullptr)();
    return CUBLAS_STATUS_SUCCESS;
  }
  // The product runs in the stream's order, on copies of the descriptors.
  emu::submit(stream, emu::activity::issue(
                          emu::activity::Work::kKernel, kName, 0, 0,
                          [op = *op, a = *a, b = *b, c = *c, d = *d, A, B, C, D, al, be, split] {
                            g_last_splits.store(split.slices, std::memory_order_relaxed);
                            product(op, a, b, c, d, A, B, C, D, al, be, split);
                          }));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, size_t bytes, size_t* written) {
  if (!algo || !buf || algo->data[0] != kMagic)
    return refuse("cublasLtMatmulAlgoConfigGetAttribute: a null or unknown algorithm");
  // Each of these is 4 bytes in cuBLASLt (int32_t or uint32_t).
  if (bytes == 4 && attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM) {
    const int32_t v = int32_t(algo->data[7] & 0xff);
    std::memcpy(buf, &v, sizeof(v));
  } else if (bytes == 4 && attr == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) {
    const uint32_t v = uint32_t(algo->data[7] >> 8 & 0xff);
    std::memcpy(buf, &v, sizeof(v));
  } else if (bytes == 4 && attr == CUBLASLT_ALGO_CONFIG_TILE_ID) {
    const uint32_t v = uint32_t(algo->data[7] >> 32);
    std::memcpy(buf, &v, sizeof(v));
  } else if (bytes == 4 &&
             (attr == CUBLASLT_ALGO_CONFIG_ID || attr == CUBLASLT_ALGO_CONFIG_STAGES_ID ||
              attr == CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING ||
              attr == CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION)) {
    std::memset(buf, 0, bytes);  // one algorithm, stages and swizzle in the emulator
  } else {
    return refuse("cublasLtMatmulAlgoConfigGetAttribute: an attribute or size not emulated");
  }
  if (written) *written = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

namespace emu {
int last_gemm_splits() { return g_last_splits.load(std::memory_order_relaxed); }
}  // namespace emu
