// Launches of the tensor-core attention kernels (flash_mma.cuh) for bf16
// operands: one block of 4 warps per (b, head) and tile of 64 rows; dynamic
// shared memory for the bf16 tiles (past 48 KB for head sizes over 64, which
// allow_shared permits once per device).
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

unsigned tiles(int T) { return unsigned((T + kRows - 1) / kRows); }

template <int D>
void forward_launch(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                    const ops::AttentionShape& s, cudaStream_t stream) {
  const size_t bytes = shared_bytes<D>(3, 0);
  allow_shared<forward_kernel<D>>(bytes, "attention_forward (tensor cores)");
  DENDRITE_LAUNCH(dim3(unsigned(s.B * s.NH), tiles(s.T)), kThreads, bytes, stream,
                  forward_kernel<D>)(
      out, lse, q, k, v, s, vector_loads(s, q, k, v));
  check_launch("attention_forward (tensor cores)");
}

template <int D>
void backward_launch(float* dq, float* dk, float* dv, const float* dout, const bf16* out,
                     const float* lse, const bf16* q, const bf16* k, const bf16* v,
                     const ops::AttentionShape& s, cudaStream_t stream) {
  const bool vec = vector_loads(s, q, k, v);
  const size_t dq_bytes = shared_bytes<D>(4, kRows);
  allow_shared<dq_kernel<D>>(dq_bytes, "attention_backward_dq (tensor cores)");
  DENDRITE_LAUNCH(dim3(unsigned(s.B * s.NH), tiles(s.T)), kThreads, dq_bytes, stream, dq_kernel<D>)(
      dq, dout, out, lse, q, k, v, s, vec);
  check_launch("attention_backward_dq (tensor cores)");
  const size_t kv_bytes = shared_bytes<D>(4, 2 * kCols);
  allow_shared<dkv_kernel<D>>(kv_bytes, "attention_backward_dkv (tensor cores)");
  DENDRITE_LAUNCH(dim3(unsigned(s.B * s.NKV), tiles(s.T)), kThreads, kv_bytes, stream,
                  dkv_kernel<D>)(
      dk, dv, dout, out, lse, q, k, v, s, vec);
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

void backward(float* dq, float* dk, float* dv, const float* dout, const bf16* out, const float* lse,
              const bf16* q, const bf16* k, const bf16* v, const ops::AttentionShape& s,
              cudaStream_t stream) {
  if (s.hs <= 64)
    backward_launch<64>(dq, dk, dv, dout, out, lse, q, k, v, s, stream);
  else
    backward_launch<128>(dq, dk, dv, dout, out, lse, q, k, v, s, stream);
}

}  // namespace dendrite::cuda::flash
