// The CUDA backend's kernels (backend/cuda/*.cu), called by CudaBackend
// (cuda_backend.cpp). Each function enqueues its work on `stream` and returns
// at once, except those that return a value to the host, which wait for it.
// Shapes, layouts and semantics are those of the op of the same name in
// ops/*.h; bf16 is dendrite::bf16 (the upper half of an fp32), rounded from
// fp32 to nearest-even as dendrite::to_bf16 does. A launcher takes the op's
// shape struct where the op does, and assumes it valid: Backend's public
// methods (backend.h) check sizes and operand types before they get here, so
// the checks here are these kernels' own limits (grids, scratch, head size).
// Every kernel is deterministic: no atomics in sums, reductions in a fixed
// order, so the same inputs give the same bits on every run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dendrite/core/bf16.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/attention.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/norm.h"
#include "dendrite/ops/optim.h"
#include "dendrite/ops/tensor.h"

namespace dendrite::cuda {

// Device scratch for the reductions that return a value to the host: at
// least kScratchBytes, 256-byte aligned, owned by the caller and used by one
// call at a time on its stream.
constexpr size_t kScratchBytes = size_t(1) << 20;

// ---- elementwise (elementwise.cu) ----
void gelu_forward(float* y, const float* x, long n, cudaStream_t stream);
// gelu_forward's values rounded to bf16 (to_bf16's rounding), the fp32 values not written.
void gelu_forward_bf16(bf16* y, const float* x, long n, cudaStream_t stream);
void gelu_backward(float* dx, const float* dy, const float* x, long n, cudaStream_t stream);
void swiglu_forward(float* y, const float* gate, const float* up, long n, cudaStream_t stream);
void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                     long n, cudaStream_t stream);
// swiglu_forward's and swiglu_backward's values rounded to bf16, the fp32 values not written;
// gate's and up's rows (and dgate's and dup's) at s.stride.
void swiglu_forward_bf16(bf16* y, const float* gate, const float* up, const ops::GluRows& s,
                         cudaStream_t stream);
void swiglu_backward_bf16(bf16* dgate, bf16* dup, const float* dy, const float* gate,
                          const float* up, const ops::GluRows& s, cudaStream_t stream);
void add(float* y, const float* a, const float* b, long n, cudaStream_t stream);
void add_inplace(float* y, const float* x, long n, cudaStream_t stream);
void to_bf16(bf16* out, const float* in, int64_t n, cudaStream_t stream);
void to_float(float* out, const bf16* in, int64_t n, cudaStream_t stream);
void fill(float* x, float value, int64_t n, cudaStream_t stream);
void copy_rows(float* dst, const float* src, int64_t rows, int64_t cols, int64_t src_stride,
               cudaStream_t stream);
void interleave_vocab_parts(float* out, const float* parts, const ops::VocabParts& s,
                            cudaStream_t stream);
void add_bias(float* y, const float* b, int m, int n, cudaStream_t stream);
// scratch: kScratchBytes of device scratch (above), for the row blocks' partial sums.
void add_column_sums(float* db, const float* dy, int m, int n, void* scratch, cudaStream_t stream);
// add_column_sums, writing dy rounded to bf16 into low [m, n] in the same pass
// (ops/convert.h: to_bf16_column_sums).
void to_bf16_column_sums(bf16* low, float* db, const float* dy, int m, int n, void* scratch,
                         cudaStream_t stream);
int64_t count_nonfinite(const float* x, int64_t n, void* scratch, cudaStream_t stream);

// ---- norms (norm.cu); the row sums read s.m and s.c only ----
void layernorm_row_sums(double* sums, const float* x, const ops::NormShape& s, cudaStream_t stream);
void layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                     const float* gamma, const float* beta, const ops::NormShape& s, float eps,
                     cudaStream_t stream);
// y written in bf16 only (ops/norm.h: layernorm_apply_bf16's scratch is not touched).
void layernorm_apply_bf16(bf16* y, float* mean, float* rstd, const double* sums, const float* x,
                          const float* gamma, const float* beta, const ops::NormShape& s, float eps,
                          cudaStream_t stream);
void layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                             const float* rstd, const float* gamma, const ops::NormShape& s,
                             cudaStream_t stream);
// Whole rows (s.c_total = s.c): the row sums and the bf16 apply in one pass
// (ops/norm.h: layernorm_rows_bf16; the scratch y is not touched).
void layernorm_rows_bf16(double* sums, bf16* y, float* mean, float* rstd, const float* x,
                         const float* gamma, const float* beta, const ops::NormShape& s, float eps,
                         cudaStream_t stream);
// accumulate: dx += the gradient (ops/norm.h: layernorm_backward_apply_add), else dx = it.
void layernorm_backward_apply(float* dx, bool accumulate, float* dgamma, float* dbeta,
                              const double* sums, const float* dy, const float* x,
                              const float* mean, const float* rstd, const float* gamma,
                              const ops::NormShape& s, void* scratch, cudaStream_t stream);
// Whole rows (s.c_total = s.c): the backward's row sums and dres += dx in one
// pass, dgamma and dbeta from each block of rows' partials in scratch [m, c]
// (ops/norm.h: layernorm_backward_rows_add); op_scratch is the backend's, for
// widths past what a block keeps (then the two kernels run).
void layernorm_backward_rows_add(double* sums, float* dres, float* scratch, float* dgamma,
                                 float* dbeta, const float* dy, const float* x, const float* mean,
                                 const float* rstd, const float* gamma, const ops::NormShape& s,
                                 void* op_scratch, cudaStream_t stream);
// The same, and the new dres rounded into next.low with its column sums added
// into next.db from a third set of partials (ops/norm.h:
// layernorm_backward_rows_add_bf16).
void layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums, float* dres,
                                      float* scratch, float* dgamma, float* dbeta, const float* dy,
                                      const float* x, const float* mean, const float* rstd,
                                      const float* gamma, const ops::NormShape& s, void* op_scratch,
                                      cudaStream_t stream);
void rmsnorm_row_sums(double* sums, const float* x, const ops::NormShape& s, cudaStream_t stream);
void rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x, const float* gamma,
                   const ops::NormShape& s, float eps, cudaStream_t stream);
// Whole rows (s.c_total = s.c): the row sums, the apply and the bf16 rounding
// in one pass (ops/norm.h: rmsnorm_rows_bf16; the scratch y is not touched).
void rmsnorm_rows_bf16(double* sums, bf16* y, float* rstd, const float* x, const float* gamma,
                       const ops::NormShape& s, float eps, cudaStream_t stream);
void rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                           const ops::NormShape& s, cudaStream_t stream);
// Whole rows: the backward's row sums and dres += dx in one pass, dgamma from
// each block of rows' partials in scratch [m, c]; given next, the new dres
// rounded into next->low with its column sums added into next->db (ops/norm.h:
// rmsnorm_backward_rows_add and its _bf16 form).
void rmsnorm_backward_rows_add(const ops::ResidualGradBf16* next, double* sums, float* dres,
                               float* scratch, float* dgamma, const float* dy, const float* x,
                               const float* rstd, const float* gamma, const ops::NormShape& s,
                               void* op_scratch, cudaStream_t stream);
void rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                            const float* x, const float* rstd, const float* gamma,
                            const ops::NormShape& s, void* scratch, cudaStream_t stream);

// ---- sums over the rows in blocks of rows (elementwise.cu) ----
// Column sums over m rows (bias gradients, the norms' dgamma and dbeta) run
// on many blocks of rows at once: each block of `rows` rows writes its
// partial sums of `outputs` vectors of n columns to scratch, and
// add_row_block_partials adds them into the outputs in block order, so the
// order depends only on m and n and no sum needs atomics.
struct RowBlocks {
  int count = 1;  // blocks of rows
  int rows = 0;   // rows per block (the last may have fewer), a multiple of step
};
RowBlocks row_blocks(int m, int n, int outputs, int step, const char* op);
// out [n] += the sum over blocks of partials [blocks, n], block 0 first.
void add_row_block_partials(float* out, const float* partials, int blocks, int n,
                            cudaStream_t stream);
// Up to three such sums in one launch, each out[k] from its partials[k]
// (skipped where out[k] is null): the bits of add_row_block_partials on each.
struct RowBlockSums {
  static constexpr int kMax = 3;
  float* out[kMax] = {};
  const float* partials[kMax] = {};
};
void add_row_block_partials(const RowBlockSums& sums, int blocks, int n, cudaStream_t stream);

// ---- optimizer (optim.cu) ----
void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr, int step,
                  bool decay, const ops::AdamWConfig& c, float grad_scale, bf16* param_bf16,
                  cudaStream_t stream);
double sum_squares(const float* g, long n, void* scratch, cudaStream_t stream);
void scale(float* g, float s, long n, cudaStream_t stream);
// The table forms of ops/optim.h, each one launch (the norm two: block sums,
// then their sum into *total); values: the sum of the table's n.
void sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table, int count,
                         int64_t values, void* scratch, cudaStream_t stream);
void adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                          const ops::FlatTensor* table, int count, int64_t values, float lr,
                          int step, const ops::AdamWConfig& c, float grad_scale, bf16* low,
                          int64_t low_count, cudaStream_t stream);

// ---- attention (attention.cu) ----
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const ops::AttentionShape& s, cudaStream_t stream);
void attention_forward(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                       const ops::AttentionShape& s, cudaStream_t stream);
// The output written in bf16 only (ops/attention.h: attention_forward_bf16).
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                       const ops::AttentionShape& s, cudaStream_t stream);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const ops::AttentionShape& s, cudaStream_t stream);
// The bf16 backward's scratch: dO rounded to bf16 and D = rowsum(dO * O),
// written by its pre-pass and read by its two kernels, and the bias
// gradients' run sums of the bf16 form; device memory of at
// least attention_backward_scratch_bytes(s) bytes, 256-byte aligned.
size_t attention_backward_scratch_bytes(const ops::AttentionShape& s);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const bf16* out,
                        const float* lse, const bf16* q, const bf16* k, const bf16* v,
                        const ops::AttentionShape& s, void* scratch, size_t scratch_bytes,
                        cudaStream_t stream);
// The gradients in bf16 with their bias gradients (ops/attention.h:
// attention_backward_bf16), with the same scratch; g's fp32 scratch is not
// touched.
void attention_backward(const ops::AttentionGradsBf16& g, const float* dout, const bf16* out,
                        const float* lse, const bf16* q, const bf16* k, const bf16* v,
                        const ops::AttentionShape& s, void* scratch, size_t scratch_bytes,
                        cudaStream_t stream);
void attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                      float* k_cache, float* v_cache, const ops::CachedAttentionShape& s,
                      cudaStream_t stream);
void rope_forward(float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
                  cudaStream_t stream);
// The inverse rotation, at positions from s.pos0.
void rope_backward(float* dx, const ops::RopeShape& s, const ops::RopeSpec& rope,
                   cudaStream_t stream);
// The rotation (the inverse where inverse), then every one of a row's
// s.stride values rounded into low [B*T, s.stride]; x is read, not written.
void rope_bf16(bf16* low, const float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
               bool inverse, cudaStream_t stream);

// ---- embeddings (embedding.cu) ----
void embedding_range_forward(float* out, const int32_t* tokens, const float* w,
                             const ops::EmbeddingShape& s, cudaStream_t stream);
void embedding_range_forward(float* out, const int32_t* tokens, const bf16* w,
                             const ops::EmbeddingShape& s, cudaStream_t stream);
void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                              const ops::EmbeddingShape& s, cudaStream_t stream);
void embedding_chunk_forward(float* out, const int32_t* tokens, const float* chunk,
                             const ops::TableChunk& piece, const ops::EmbeddingShape& s,
                             cudaStream_t stream);
void embedding_chunk_forward(float* out, const int32_t* tokens, const bf16* chunk,
                             const ops::TableChunk& piece, const ops::EmbeddingShape& s,
                             cudaStream_t stream);
void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                              const ops::TableChunk& piece, const ops::EmbeddingShape& s,
                              cudaStream_t stream);
void position_add(float* out, const float* wpe, const ops::PositionShape& s, cudaStream_t stream);
void position_add(float* out, const bf16* wpe, const ops::PositionShape& s, cudaStream_t stream);
void position_backward(float* dwpe, const float* dout, const ops::PositionShape& s,
                       cudaStream_t stream);

// ---- the vocabulary-parallel loss (cross_entropy.cu) ----
void ce_local_stats(float* stats, const float* logits, const int32_t* targets, const float* weight,
                    const ops::VocabShape& s, cudaStream_t stream);
void ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                double* total, cudaStream_t stream);
void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                double denominator, const ops::VocabShape& s, cudaStream_t stream);
// dlogits written in bf16 only; logits read (ops/cross_entropy.h: ce_dlogits_bf16).
void ce_dlogits_bf16(bf16* dlogits, const float* logits, const float* lse, const int32_t* targets,
                     const float* weight, double denominator, const ops::VocabShape& s,
                     cudaStream_t stream);
// The statistics and the bf16 dlogits in one pass over a row (ops/cross_entropy.h:
// ce_stats_dlogits_bf16; the whole vocabulary on this rank).
void ce_stats_dlogits_bf16(float* stats, bf16* dlogits, const float* logits, const int32_t* targets,
                           const float* weight, double denominator, const ops::VocabShape& s,
                           cudaStream_t stream);

// ---- GEMM tuning's check of a result (bits_hash.cu) ----
// A hash of the bits of `rows` rows of `row_bytes` bytes, `ld_bytes` apart
// (both even): the same for the same bits, whatever the order of the GPU's
// threads. scratch: kScratchBytes of device scratch. Waits for the stream.
uint64_t bits_hash(const void* p, int64_t rows, int64_t row_bytes, int64_t ld_bytes, void* scratch,
                   cudaStream_t stream);

// A kernel launch's error, as an Error naming the kernel: one the launch
// itself met, or, when every launch waits for its kernel
// (CUDA_LAUNCH_BLOCKING=1), one the kernel met while it ran; else the error
// of an earlier kernel, said as such (check.cu).
void check_launch(const char* kernel);
// e, if not cudaSuccess, as an Error naming the call.
void check_cuda(cudaError_t e, const char* call);
// cudaSuccess where the build has code for the current GPU; else the error
// that asking for a kernel's attributes gave (cudaErrorNoKernelImageForDevice).
cudaError_t kernel_image_error();

}  // namespace dendrite::cuda
