// Launches of the tensor-core attention kernels (flash_mma.cuh) for bf16
// operands: one block of 4 warps per (b, head) and tile of 64 rows (16 rows
// a warp, the height of an mma tile); dynamic shared memory for the bf16
// tiles, with two stages of the tiles a loop walks (46-105 KB: past the
// default 48 KB for all but the forward at D = 64, which allow_shared
// permits once per device). The backward's pre-pass runs a warp per (row,
// head), 4 to a block: hs is at most 128, so a warp's lanes take at most 4
// columns each and the grid has enough warps to fill the GPU.
#include <cuda_runtime.h>

#include "dendrite/backend/cuda/common.cuh"
#include "dendrite/backend/cuda/flash_mma.cuh"
#include "dendrite/backend/cuda/vector.cuh"

namespace dendrite::cuda::flash {
namespace {

// 16-byte loads need the head size, both strides and the bases in multiples of 8 bf16.
bool vector_loads(const ops::AttentionShape& s, const bf16* q, const bf16* k, const bf16* v) {
  return s.hs % 8 == 0 && s.q_stride % 8 == 0 && s.kv_stride % 8 == 0 && aligned_to(16, q, k, v);
}

static_assert(kRows == ops::kAttentionSumRows, "a block's rows are one run of the bias sums");

unsigned tiles(int T) { return unsigned((T + kRows - 1) / kRows); }

template <int D, class Out>
void forward_launch(Out* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                    const ops::AttentionShape& s, cudaStream_t stream) {
  const size_t bytes = shared_bytes<D>(5, 0);
  allow_shared<forward_kernel<D, Out>>(bytes, "attention_forward (tensor cores)");
  DENDRITE_LAUNCH(dim3(unsigned(s.B * s.NH), tiles(s.T)), kThreads, bytes, stream,
                  forward_kernel<D, Out>)
  (out, lse, q, k, v, s, vector_loads(s, q, k, v));
  check_launch("attention_forward (tensor cores)");
}

// ---- the backward's pre-pass: grid (B*T*NH / kWarps), a warp per (row r =
// b*T + t, head h): dob[r][h*hs + c] = bf16(dout[r][h*hs + c]) ([B*T, NH*hs]),
// and Dg[(b*NH + h)*T + t] = the sum over c of dob * out ([B, NH, T], the
// layout of lse). Lane l takes columns l, l+32, ... with fmaf, then a
// butterfly over the warp: a fixed order, the same bits on every run. D
// uses the rounded dO of the products, so that it is the sum of P dP it
// stands for up to the rounding of O alone (for the first query, exactly).
__global__ void __launch_bounds__(kThreads) prepare_kernel(bf16* dob, float* Dg, const float* dout,
                                                           const bf16* out, ops::AttentionShape s) {
  const int lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= int64_t(s.B) * s.T * s.NH) return;  // whole warps leave
  const int h = int(item % s.NH);
  const int64_t r = item / s.NH;
  const float* d = dout + r * s.out_stride + h * s.hs;
  const bf16* o = out + r * s.out_stride + h * s.hs;
  bf16* w = dob + r * (int64_t(s.NH) * s.hs) + h * s.hs;
  float acc = 0.0f;
  for (int c = lane; c < s.hs; c += 32) {
    const uint16_t bits = bf16_bits(d[c]);
    w[c].bits = bits;
    acc = fmaf(__uint_as_float(uint32_t(bits) << 16), __uint_as_float(uint32_t(o[c].bits) << 16),
               acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) Dg[(r / s.T * s.NH + h) * s.T + r % s.T] = acc;
}

// The scratch's first part: dO in bf16 [B*T, NH*hs], to 256 bytes.
size_t dob_bytes(const ops::AttentionShape& s) {
  return (size_t(s.B) * s.T * s.NH * s.hs * sizeof(bf16) + 255) / 256 * 256;
}

// With its second: D [B, NH, T], to 256 bytes.
size_t prepared_bytes(const ops::AttentionShape& s) {
  return dob_bytes(s) + (size_t(s.B) * s.NH * s.T * sizeof(float) + 255) / 256 * 256;
}

// The pre-pass, then the dq and dk/dv kernels. Out: fp32, or bf16 with the
// bias gradients' run sums (sums_q, sums_k, sums_v: rows of sums_ld floats,
// each null where no sum is wanted).
template <int D, class Out>
void backward_launch(Out* dq, Out* dk, Out* dv, float* sums_q, float* sums_k, float* sums_v,
                     int sums_ld, const float* dout, const bf16* out, const float* lse,
                     const bf16* q, const bf16* k, const bf16* v, const ops::AttentionShape& s,
                     void* scratch, cudaStream_t stream) {
  bf16* dob = static_cast<bf16*>(scratch);
  float* Dg = reinterpret_cast<float*>(static_cast<char*>(scratch) + dob_bytes(s));
  const int64_t warps = int64_t(s.B) * s.T * s.NH;
  const int64_t blocks = (warps + kWarps - 1) / kWarps;
  DENDRITE_CHECK(blocks <= int64_t(0x7fffffff), "attention_backward: B*T*NH = ", warps,
                 " (row, head) pairs exceed the pre-pass's grid; use a smaller batch");
  DENDRITE_LAUNCH(unsigned(blocks), kThreads, 0, stream, prepare_kernel)(dob, Dg, dout, out, s);
  check_launch("attention_backward_prepare (tensor cores)");
  const bool vec = vector_loads(s, q, k, v);
  const size_t dq_bytes = shared_bytes<D>(6, 0);
  static_assert(stage_bytes<D> <= shared_bytes<D>(6, 0));
  allow_shared<dq_kernel<D, Out>>(dq_bytes, "attention_backward_dq (tensor cores)");
  DENDRITE_LAUNCH(dim3(unsigned(s.B * s.NH), tiles(s.T)), kThreads, dq_bytes, stream,
                  dq_kernel<D, Out>)
  (dq, sums_q, sums_ld, dob, Dg, lse, q, k, v, s, vec);
  check_launch("attention_backward_dq (tensor cores)");
  const size_t kv_bytes = shared_bytes<D>(6, 4 * kCols);
  allow_shared<dkv_kernel<D, Out>>(kv_bytes, "attention_backward_dkv (tensor cores)");
  DENDRITE_LAUNCH(dim3(unsigned(s.B * s.NKV), tiles(s.T)), kThreads, kv_bytes, stream,
                  dkv_kernel<D, Out>)
  (dk, dv, sums_k, sums_v, sums_ld, dob, Dg, lse, q, k, v, s, vec);
  check_launch("attention_backward_dkv (tensor cores)");
}

}  // namespace

void forward(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
             const ops::AttentionShape& s, cudaStream_t stream) {
  if (s.hs <= 64)
    forward_launch<64>(out, lse, q, k, v, s, stream);
  else
    forward_launch<128>(out, lse, q, k, v, s, stream);
}

void forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
             const ops::AttentionShape& s, cudaStream_t stream) {
  if (s.hs <= 64)
    forward_launch<64>(out, lse, q, k, v, s, stream);
  else
    forward_launch<128>(out, lse, q, k, v, s, stream);
}

// The pre-pass's dO and D, then the bias gradients' run sums of the bf16
// form: [B * tiles] rows of q's, k's and v's columns side by side.
size_t backward_scratch_bytes(const ops::AttentionShape& s) {
  const size_t runs = size_t(s.B) * tiles(s.T);
  return prepared_bytes(s) + runs * (size_t(s.NH) + 2 * size_t(s.NKV)) * s.hs * sizeof(float);
}

void backward(float* dq, float* dk, float* dv, const float* dout, const bf16* out, const float* lse,
              const bf16* q, const bf16* k, const bf16* v, const ops::AttentionShape& s,
              void* scratch, cudaStream_t stream) {
  if (s.hs <= 64)
    backward_launch<64>(dq, dk, dv, nullptr, nullptr, nullptr, 0, dout, out, lse, q, k, v, s,
                        scratch, stream);
  else
    backward_launch<128>(dq, dk, dv, nullptr, nullptr, nullptr, 0, dout, out, lse, q, k, v, s,
                         scratch, stream);
}

namespace {

// The bias gradients' second pass: column j of runs [count, qd + 2 kvd] (q's
// columns, then k's, then v's) summed over the rows in order, the first row
// first, and added into db_q, db_k or db_v (a null one is skipped).
__global__ void add_run_sums_kernel(float* db_q, float* db_k, float* db_v, const float* runs,
                                    int count, int qd, int kvd) {
  const int ld = qd + 2 * kvd;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= ld) return;
  float* db = j < qd ? db_q : j < qd + kvd ? db_k : db_v;
  if (!db) return;
  float total = runs[j];
  for (int r = 1; r < count; ++r) total += runs[int64_t(r) * ld + j];
  db[j < qd ? j : j < qd + kvd ? j - qd : j - qd - kvd] += total;
}

}  // namespace

// The kernels write the bf16 gradients and each block's run sums; then one
// kernel adds the runs into the bias gradients in row order.
void backward(const ops::AttentionGradsBf16& g, const float* dout, const bf16* out,
              const float* lse, const bf16* q, const bf16* k, const bf16* v,
              const ops::AttentionShape& s, void* scratch, cudaStream_t stream) {
  const int runs = s.B * int(tiles(s.T));
  const int qd = s.NH * s.hs, kvd = s.NKV * s.hs, ld = qd + 2 * kvd;
  float* sums = reinterpret_cast<float*>(static_cast<char*>(scratch) + prepared_bytes(s));
  float* sq = g.db_q ? sums : nullptr;
  float* sk = g.db_k ? sums + qd : nullptr;
  float* sv = g.db_v ? sums + qd + kvd : nullptr;
  if (s.hs <= 64)
    backward_launch<64>(g.dq, g.dk, g.dv, sq, sk, sv, ld, dout, out, lse, q, k, v, s, scratch,
                        stream);
  else
    backward_launch<128>(g.dq, g.dk, g.dv, sq, sk, sv, ld, dout, out, lse, q, k, v, s, scratch,
                         stream);
  if (!g.db_q && !g.db_k && !g.db_v) return;
  DENDRITE_LAUNCH(unsigned((ld + kThreads - 1) / kThreads), kThreads, 0, stream,
                  add_run_sums_kernel)
  (g.db_q, g.db_k, g.db_v, sums, runs, qd, kvd);
  check_launch("attention_backward_bf16 (bias sums)");
}

}  // namespace dendrite::cuda::flash
