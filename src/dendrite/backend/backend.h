// The device seam (DESIGN.md section 10). One Backend is made per rank, in
// the command that also makes the process grid, and passed by reference to
// the model, its layers, the optimizer and the trainer. It
//  - owns memory: every Buffer those allocate comes from it (Backend is their
//    Allocator), and so do the parameters and gradients that a communicator
//    group reads in place (allocate_shared); host code moves data in and out
//    with upload and download, and nothing outside backend/ dereferences it;
//  - runs every op: the methods below, one per op of ops/*.h, whose comments
//    there give the shapes and the semantics. Each method checks its
//    arguments here, once for every backend, and calls the backend's do_
//    method (non-virtual interface). Ops that read GEMM operands take
//    an Operand (core/operand.h), fp32 or bf16, so that the layers need no
//    branch on the precision;
//  - orders work on a compute stream: record() marks the work issued so far,
//    and wait() blocks the host until it is done. The layers record an event
//    before they hand a buffer the compute stream wrote to a collective, and
//    wait for it before a host-driven transport reads it. On the CPU an op has
//    finished when it returns (a stream is program order), so events are
//    complete when recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/comm/communicator.h"
#include "dendrite/comm/options.h"
#include "dendrite/core/bf16.h"
#include "dendrite/core/buffer.h"
#include "dendrite/core/check.h"
#include "dendrite/core/device.h"
#include "dendrite/core/device_profile.h"
#include "dendrite/core/operand.h"
#include "dendrite/core/precision.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/attention.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/norm.h"
#include "dendrite/ops/optim.h"
#include "dendrite/ops/tensor.h"

namespace dendrite {

// A point on a backend's compute stream.
struct Event {
  uint64_t seq = 0;
};

class Backend : public Allocator {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // One line for logs: the device and what it runs with.
  virtual std::string describe() const = 0;

  // The communicator the process grid is built on: `world` itself where the
  // collectives can read this backend's memory (the CPU), else a transport
  // over it that stages the backend's memory through host memory (CUDA
  // without NCCL: DESIGN.md section 10), owned by the backend.
  virtual Communicator& transport(Communicator& world) = 0;
  // Bytes of device memory allocated now and at most so far (0 on the CPU,
  // whose memory the process's RSS measures).
  virtual int64_t device_bytes() const { return 0; }
  virtual int64_t device_peak_bytes() const { return 0; }
  // The device memory this rank's device has (0 on the CPU).
  virtual int64_t device_capacity_bytes() const { return 0; }

  // ---- memory ----
  // n zeroed elements in this backend's memory.
  template <class T>
  Buffer<T> alloc(int64_t n) {
    return Buffer<T>(size_t(n), this);
  }
  // Memory of n elements that the ranks of `group` read in place where the
  // backend and the communicator allow it (CPU: a shared-memory window).
  virtual std::unique_ptr<SharedArray> allocate_shared(Communicator& group, int64_t n,
                                                       DType t = DType::kF32) = 0;
  // Copies between host memory and this backend's memory (and within it).
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;

  // ---- the compute stream ----
  virtual Event record() = 0;
  virtual void wait(Event e) = 0;
  // Before the host reads what the stream wrote: waits for the work issued so far.
  void ready_for_host() { wait(record()); }
  // Before a collective reads what the stream wrote: a transport driven from
  // the host (MPI, the staged one) needs that work done; one ordered on the
  // streams (NCCL) makes its own stream wait for it, and the host goes on.
  void before_collective() {
    if (!transport_on_streams()) ready_for_host();
  }
  // Whether transport() orders its collectives on the device's streams.
  virtual bool transport_on_streams() const { return false; }

  // ---- the ops ----
  // Each op is a public method here, with the name, arguments and semantics
  // of its contract in ops/*.h. The method checks the shapes and operand
  // types (the same checks on every backend) and runs the backend's do_
  // method of the same name (protected, below), which assumes them valid.

  // ---- GEMMs (ops/matmul.h) ----
  // C = alpha op(A) op(B) + beta C, row-major (BLAS's arguments).
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, Operand A, int lda,
            Operand B, int ldb, float beta, float* C, int ldc) {
    ops::check_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, ldc);
    do_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  // y = x w^T (+ b, may be null)
  void linear_forward(float* y, Operand x, Operand w, const float* b, const ops::LinearShape& s) {
    ops::check_linear(s, x, w, "linear_forward");
    do_linear_forward(y, x, w, b, s);
  }
  // y = x w^T then the epilogue e (ops/matmul.h: bias, GELU keeping its
  // input, a residual, a bf16 output), fused into the product where the device can.
  void linear_forward_fused(float* y, Operand x, Operand w, const ops::LinearShape& s,
                            const ops::LinearEpilogue& e) {
    ops::check_linear(s, x, w, "linear_forward");
    ops::check_epilogue(e, "linear_forward");
    do_linear_forward_fused(y, x, w, s, e);
  }
  void linear_backward_input(float* dx, Operand dy, Operand w, const ops::LinearShape& s,
                             bool accumulate) {
    ops::check_linear(s, dy, w, "linear_backward_input");
    do_linear_backward_input(dx, dy, w, s, accumulate);
  }
  // dx = (dy w) * gelu'(gelu_input), overwritten, fused where the device can.
  void linear_backward_input_dgelu(float* dx, Operand dy, Operand w, const float* gelu_input,
                                   const ops::LinearShape& s) {
    ops::check_linear(s, dy, w, "linear_backward_input");
    do_linear_backward_input_dgelu(dx, dy, w, gelu_input, s);
  }
  // dw (+)= dy^T x; the bias gradient is add_column_sums of the fp32 dy.
  void linear_backward_weight(float* dw, Operand dy, Operand x, const ops::LinearShape& s,
                              bool accumulate) {
    ops::check_linear(s, dy, x, "linear_backward_weight");
    do_linear_backward_weight(dw, dy, x, s, accumulate);
  }
  void add_bias(float* y, const float* b, int m, int n) {
    ops::check_matrix(m, n, "add_bias");
    do_add_bias(y, b, m, n);
  }
  void add_column_sums(float* db, const float* dy, int m, int n) {
    ops::check_matrix(m, n, "add_column_sums");
    do_add_column_sums(db, dy, m, n);
  }
  // Whether bf16 GEMMs run natively; when not, the instruction set missing.
  virtual bool bf16_gemm_native() const = 0;
  virtual std::string bf16_gemm_missing() const = 0;
  // GEMM layout tuning (ops/matmul.h), this backend's own, and what it chose.
  virtual void set_gemm_tuning(bool on) = 0;
  virtual std::vector<ops::GemmChoice> gemm_choices() const = 0;
  virtual double gemm_tuning_seconds() const = 0;
  // How each GEMM shape met so far runs, one line each, where the backend
  // plans its products (a GPU's cuBLASLt: the split over K, the epilogue, or
  // that none was offered and kernels take its steps); none on the CPU.
  virtual std::vector<std::string> gemm_plans() const = 0;
  // The peak rate MFU divides by (GFLOP/s; the CPU: FMA chains on the pool, twice
  // that for bf16 with AVX512_BF16; a GPU: its GEMM peak); threads 0: all of the backend's.
  virtual double measure_peak_gflops(Precision p, int threads = 0, double seconds = 0.2) = 0;
  // What the device runs between start_device_profile and
  // stop_device_profile (which waits for it): each kernel, copy and memset,
  // with its device times and when the host issued it (core/device_profile.h;
  // CUPTI on a GPU). Empty where the backend can; else why not and the fix
  // (then start_device_profile refuses with it): the CPU has no device to
  // profile, a CUDA build may lack CUPTI.
  virtual std::string device_profile_missing() const {
    return "the CPU runs its ops as they are called, so it has no device work to profile; "
           "time the steps without --profile, or use --trace for the host's timeline";
  }
  virtual void start_device_profile() { fail("profile: ", device_profile_missing()); }
  virtual std::vector<DeviceActivity> stop_device_profile() { return {}; }

  // ---- norms (ops/norm.h) ----
  void layernorm_row_sums(double* sums, const float* x, const ops::NormShape& s) {
    ops::check_norm(s, "layernorm_row_sums");
    do_layernorm_row_sums(sums, x, s);
  }
  void layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                       const float* gamma, const float* beta, const ops::NormShape& s, float eps) {
    ops::check_norm(s, "layernorm_apply");
    do_layernorm_apply(y, mean, rstd, sums, x, gamma, beta, s, eps);
  }
  // y_bf16 = bf16(layernorm_apply's y); y is scratch.
  void layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd, const double* sums,
                            const float* x, const float* gamma, const float* beta,
                            const ops::NormShape& s, float eps) {
    ops::check_norm(s, "layernorm_apply_bf16");
    do_layernorm_apply_bf16(y_bf16, y, mean, rstd, sums, x, gamma, beta, s, eps);
  }
  // Whole rows (c == c_total): layernorm_row_sums then layernorm_apply_bf16,
  // one pass on a GPU.
  void layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean, float* rstd,
                           const float* x, const float* gamma, const float* beta,
                           const ops::NormShape& s, float eps) {
    ops::check_whole_rows(s, "layernorm_rows_bf16");
    do_layernorm_rows_bf16(sums, y_bf16, y, mean, rstd, x, gamma, beta, s, eps);
  }
  void layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                               const float* rstd, const float* gamma, const ops::NormShape& s) {
    ops::check_norm(s, "layernorm_backward_sums");
    do_layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, s);
  }
  void layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                                const float* dy, const float* x, const float* mean,
                                const float* rstd, const float* gamma, const ops::NormShape& s) {
    ops::check_norm(s, "layernorm_backward_apply");
    do_layernorm_backward_apply(dx, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s);
  }
  // dres += layernorm_backward_apply's dx; scratch [m, c].
  void layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma, float* dbeta,
                                    const double* sums, const float* dy, const float* x,
                                    const float* mean, const float* rstd, const float* gamma,
                                    const ops::NormShape& s) {
    ops::check_norm(s, "layernorm_backward_apply_add");
    do_layernorm_backward_apply_add(dres, scratch, dgamma, dbeta, sums, dy, x, mean, rstd, gamma,
                                    s);
  }
  // Whole rows (c == c_total): layernorm_backward_sums then
  // layernorm_backward_apply_add in one pass where the device can.
  void layernorm_backward_rows_add(double* sums, float* dres, float* scratch, float* dgamma,
                                   float* dbeta, const float* dy, const float* x, const float* mean,
                                   const float* rstd, const float* gamma, const ops::NormShape& s) {
    ops::check_whole_rows(s, "layernorm_backward_rows_add");
    do_layernorm_backward_rows_add(sums, dres, scratch, dgamma, dbeta, dy, x, mean, rstd, gamma, s);
  }
  // The same, and the new dres as the next product's bf16 operand, its bias
  // sums beside (ops/norm.h: layernorm_backward_rows_add_bf16).
  void layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums,
                                        float* dres, float* scratch, float* dgamma, float* dbeta,
                                        const float* dy, const float* x, const float* mean,
                                        const float* rstd, const float* gamma,
                                        const ops::NormShape& s) {
    ops::check_whole_rows(s, "layernorm_backward_rows_add_bf16");
    DENDRITE_CHECK(next.low, "layernorm_backward_rows_add_bf16: no bf16 output given");
    do_layernorm_backward_rows_add_bf16(next, sums, dres, scratch, dgamma, dbeta, dy, x, mean, rstd,
                                        gamma, s);
  }
  void rmsnorm_row_sums(double* sums, const float* x, const ops::NormShape& s) {
    ops::check_norm(s, "rmsnorm_row_sums");
    do_rmsnorm_row_sums(sums, x, s);
  }
  void rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x, const float* gamma,
                     const ops::NormShape& s, float eps) {
    ops::check_norm(s, "rmsnorm_apply");
    do_rmsnorm_apply(y, rstd, sums, x, gamma, s, eps);
  }
  // Whole rows (c == c_total): rmsnorm_row_sums, rmsnorm_apply and to_bf16,
  // one pass on a GPU.
  void rmsnorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* rstd, const float* x,
                         const float* gamma, const ops::NormShape& s, float eps) {
    ops::check_whole_rows(s, "rmsnorm_rows_bf16");
    do_rmsnorm_rows_bf16(sums, y_bf16, y, rstd, x, gamma, s, eps);
  }
  void rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                             const ops::NormShape& s) {
    ops::check_norm(s, "rmsnorm_backward_sums");
    do_rmsnorm_backward_sums(sums, dy, x, gamma, s);
  }
  // Whole rows (c == c_total): rmsnorm_backward_sums, rmsnorm_backward_apply
  // into scratch and add_inplace into dres, one pass on a GPU; the _bf16 form
  // also writes the new dres as the next product's operand (ops/norm.h).
  void rmsnorm_backward_rows_add(double* sums, float* dres, float* scratch, float* dgamma,
                                 const float* dy, const float* x, const float* rstd,
                                 const float* gamma, const ops::NormShape& s) {
    ops::check_whole_rows(s, "rmsnorm_backward_rows_add");
    do_rmsnorm_backward_rows_add(nullptr, sums, dres, scratch, dgamma, dy, x, rstd, gamma, s);
  }
  void rmsnorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums, float* dres,
                                      float* scratch, float* dgamma, const float* dy,
                                      const float* x, const float* rstd, const float* gamma,
                                      const ops::NormShape& s) {
    ops::check_whole_rows(s, "rmsnorm_backward_rows_add_bf16");
    DENDRITE_CHECK(next.low, "rmsnorm_backward_rows_add_bf16: no bf16 output given");
    do_rmsnorm_backward_rows_add(&next, sums, dres, scratch, dgamma, dy, x, rstd, gamma, s);
  }
  void rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                              const float* x, const float* rstd, const float* gamma,
                              const ops::NormShape& s) {
    ops::check_norm(s, "rmsnorm_backward_apply");
    do_rmsnorm_backward_apply(dx, dgamma, sums, dy, x, rstd, gamma, s);
  }

  // ---- elementwise (ops/activation.h) ----
  void gelu_forward(float* y, const float* x, long n) {
    ops::check_count(n, "gelu_forward");
    do_gelu_forward(y, x, n);
  }
  void gelu_backward(float* dx, const float* dy, const float* x, long n) {
    ops::check_count(n, "gelu_backward");
    do_gelu_backward(dx, dy, x, n);
  }
  void swiglu_forward(float* y, const float* gate, const float* up, long n) {
    ops::check_count(n, "swiglu_forward");
    do_swiglu_forward(y, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                       const float* up, long n) {
    ops::check_count(n, "swiglu_backward");
    do_swiglu_backward(dgate, dup, dy, gate, up, n);
  }
  // The products' bf16 operands alone; y, dgate and dup are scratch.
  void swiglu_forward_bf16(bf16* y_bf16, float* y, const float* gate, const float* up,
                           const ops::GluRows& s) {
    ops::check_glu_rows(s, "swiglu_forward_bf16");
    do_swiglu_forward_bf16(y_bf16, y, gate, up, s);
  }
  void swiglu_backward_bf16(bf16* dgate_bf16, bf16* dup_bf16, float* dgate, float* dup,
                            const float* dy, const float* gate, const float* up,
                            const ops::GluRows& s) {
    ops::check_glu_rows(s, "swiglu_backward_bf16");
    do_swiglu_backward_bf16(dgate_bf16, dup_bf16, dgate, dup, dy, gate, up, s);
  }
  void add(float* y, const float* a, const float* b, long n) {
    ops::check_count(n, "add");
    do_add(y, a, b, n);
  }
  void add_inplace(float* y, const float* x, long n) {
    ops::check_count(n, "add_inplace");
    do_add_inplace(y, x, n);
  }

  // ---- attention (ops/attention.h); q, k, v and the saved output as operands ----
  void attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                         const ops::AttentionShape& s) {
    ops::check_attention(s, q, k, v, q, "attention_forward");
    do_attention_forward(out, lse, q, k, v, s);
  }
  // out_bf16 = bf16(attention_forward's out), q, k, v in bf16; out is scratch.
  void attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q, Operand k,
                              Operand v, const ops::AttentionShape& s) {
    ops::check_attention(s, q, k, v, q, "attention_forward_bf16");
    ops::check_bf16(q, "attention_forward_bf16");
    do_attention_forward_bf16(out_bf16, out, lse, q, k, v, s);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, Operand out,
                          const float* lse, Operand q, Operand k, Operand v,
                          const ops::AttentionShape& s) {
    ops::check_attention(s, q, k, v, out, "attention_backward");
    do_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, s);
  }
  // The gradients in bf16 with their bias gradients (ops::AttentionGradsBf16).
  void attention_backward_bf16(const ops::AttentionGradsBf16& g, const float* dout, Operand out,
                               const float* lse, Operand q, Operand k, Operand v,
                               const ops::AttentionShape& s) {
    ops::check_attention(s, q, k, v, out, "attention_backward_bf16");
    ops::check_bf16(q, "attention_backward_bf16");
    do_attention_backward_bf16(g, dout, out, lse, q, k, v, s);
  }
  // Generation: writes the new keys and values into the caches, then attends (fp32).
  void attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                        float* k_cache, float* v_cache, const ops::CachedAttentionShape& s) {
    ops::check_cached_attention(s);
    do_attention_cached(out, q, k_new, v_new, k_cache, v_cache, s);
  }
  void rope_forward(float* x, const ops::RopeShape& s, const ops::RopeSpec& rope) {
    ops::check_rope(s, rope, "rope_forward");
    do_rope_forward(x, s, rope);
  }
  // The inverse rotation (s.pos0 is 0).
  void rope_backward(float* dx, const ops::RopeShape& s, const ops::RopeSpec& rope) {
    ops::check_rope(s, rope, "rope_backward");
    do_rope_backward(dx, s, rope);
  }
  // The rows turned, then all s.stride values of each rounded into low [B*T, s.stride]; x is
  // scratch.
  void rope_forward_bf16(bf16* low, float* x, const ops::RopeShape& s, const ops::RopeSpec& rope) {
    ops::check_rope(s, rope, "rope_forward_bf16");
    do_rope_bf16(low, x, s, rope, false);
  }
  void rope_backward_bf16(bf16* low, float* dx, const ops::RopeShape& s,
                          const ops::RopeSpec& rope) {
    ops::check_rope(s, rope, "rope_backward_bf16");
    do_rope_bf16(low, dx, s, rope, true);
  }

  // ---- conversions (ops/convert.h) ----
  void to_bf16(bf16* out, const float* in, int64_t n) {
    ops::check_count(n, "to_bf16");
    do_to_bf16(out, in, n);
  }
  void to_float(float* out, const bf16* in, int64_t n) {
    ops::check_count(n, "to_float");
    do_to_float(out, in, n);
  }
  // out = bf16(in) and db += in's column sums, one pass where the device can.
  void to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) {
    ops::check_matrix(m, n, "to_bf16_column_sums");
    do_to_bf16_column_sums(out, db, in, m, n);
  }

  // ---- the vocabulary-parallel loss (ops/cross_entropy.h) ----
  void ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                      const float* weight, const ops::VocabShape& s) {
    ops::check_vocab(s, "ce_local_stats");
    do_ce_local_stats(stats, logits, targets, weight, s);
  }
  // Adds the summed weighted loss to *total (this backend's memory).
  void ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                  double* total) {
    ops::check_combine(rows, parts);
    do_ce_combine(lse, gathered, weight, rows, parts, total);
  }
  void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                  double denominator, const ops::VocabShape& s) {
    ops::check_vocab(s, "ce_dlogits");
    ops::check_denominator(denominator, "ce_dlogits");
    do_ce_dlogits(logits, lse, targets, weight, denominator, s);
  }
  // dlogits = bf16(ce_dlogits' result); logits are scratch afterwards.
  void ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse, const int32_t* targets,
                       const float* weight, double denominator, const ops::VocabShape& s) {
    ops::check_vocab(s, "ce_dlogits_bf16");
    ops::check_denominator(denominator, "ce_dlogits_bf16");
    do_ce_dlogits_bf16(dlogits, logits, lse, targets, weight, denominator, s);
  }
  // ce_local_stats and ce_dlogits_bf16 in one pass, where one rank holds the
  // whole vocabulary; logits are scratch afterwards.
  void ce_stats_dlogits_bf16(float* stats, bf16* dlogits, float* logits, const int32_t* targets,
                             const float* weight, double denominator, const ops::VocabShape& s) {
    ops::check_whole_vocab(s, "ce_stats_dlogits_bf16");
    ops::check_denominator(denominator, "ce_stats_dlogits_bf16");
    do_ce_stats_dlogits_bf16(stats, dlogits, logits, targets, weight, denominator, s);
  }

  // ---- embeddings (ops/embedding.h); tables as operands ----
  void embedding_range_forward(float* out, const int32_t* tokens, Operand w,
                               const ops::EmbeddingShape& s) {
    ops::check_embedding(s, "embedding_range_forward");
    do_embedding_range_forward(out, tokens, w, s);
  }
  void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                                const ops::EmbeddingShape& s) {
    ops::check_embedding(s, "embedding_range_backward");
    do_embedding_range_backward(dw, dout, tokens, s);
  }
  void embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk,
                               const ops::TableChunk& piece, const ops::EmbeddingShape& s) {
    ops::check_chunk(piece, s, "embedding_chunk_forward");
    do_embedding_chunk_forward(out, tokens, chunk, piece, s);
  }
  void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                                const ops::TableChunk& piece, const ops::EmbeddingShape& s) {
    ops::check_chunk(piece, s, "embedding_chunk_backward");
    do_embedding_chunk_backward(dchunk, dout, tokens, piece, s);
  }
  void position_add(float* out, Operand wpe, const ops::PositionShape& s) {
    ops::check_positions(s, "position_add");
    do_position_add(out, wpe, s);
  }
  void position_backward(float* dwpe, const float* dout, const ops::PositionShape& s) {
    ops::check_positions(s, "position_backward");
    do_position_backward(dwpe, dout, s);
  }

  // ---- the optimizer (ops/optim.h) ----
  void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr, int step,
                    bool decay, const ops::AdamWConfig& c, float grad_scale, bf16* param_bf16) {
    ops::check_count(n, "adamw_update");
    ops::check_step(step, "adamw_update");
    do_adamw_update(param, grad, m, v, n, lr, step, decay, c, grad_scale, param_bf16);
  }
  double sum_squares(const float* g, long n) {
    ops::check_count(n, "sum_squares");
    return do_sum_squares(g, n);
  }
  void scale(float* g, float s, long n) {
    ops::check_count(n, "scale");
    do_scale(g, s, n);
  }
  // Over a table of tensors (in this backend's memory) numbered by
  // ops::number_tensors, which returned `values`: the squared norm into *total (this backend's
  // memory; no host sync), and AdamW in one pass (one launch on a GPU).
  void sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table,
                           int count, int64_t values) {
    ops::check_table(count, values, "sum_squares_tensors");
    do_sum_squares_tensors(total, base, table, count, values);
  }
  void adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                            const ops::FlatTensor* table, int count, int64_t values, float lr,
                            int step, const ops::AdamWConfig& c, float grad_scale, bf16* low,
                            int64_t low_count) {
    ops::check_table(count, values, "adamw_update_tensors");
    ops::check_step(step, "adamw_update_tensors");
    do_adamw_update_tensors(param, grad, m, v, table, count, values, lr, step, c, grad_scale, low,
                            low_count);
  }

  // ---- data movement (ops/tensor.h) ----
  void fill(float* x, float value, int64_t n) {
    ops::check_count(n, "fill");
    do_fill(x, value, n);
  }
  void copy_rows(float* dst, const float* src, int64_t rows, int64_t cols, int64_t src_stride) {
    ops::check_rows(rows, cols, src_stride);
    do_copy_rows(dst, src, rows, cols, src_stride);
  }
  void interleave_vocab_parts(float* out, const float* parts, const ops::VocabParts& s) {
    ops::check_vocab_parts(s);
    do_interleave_vocab_parts(out, parts, s);
  }
  int64_t count_nonfinite(const float* x, int64_t n) {
    ops::check_count(n, "count_nonfinite");
    return do_count_nonfinite(x, n);
  }

 protected:
  // The ops as each backend runs them, their arguments checked (above).
  virtual void do_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, Operand A,
                       int lda, Operand B, int ldb, float beta, float* C, int ldc) = 0;
  virtual void do_linear_forward(float* y, Operand x, Operand w, const float* b,
                                 const ops::LinearShape& s) = 0;
  virtual void do_linear_forward_fused(float* y, Operand x, Operand w, const ops::LinearShape& s,
                                       const ops::LinearEpilogue& e) = 0;
  virtual void do_linear_backward_input(float* dx, Operand dy, Operand w, const ops::LinearShape& s,
                                        bool accumulate) = 0;
  virtual void do_linear_backward_input_dgelu(float* dx, Operand dy, Operand w,
                                              const float* gelu_input,
                                              const ops::LinearShape& s) = 0;
  virtual void do_linear_backward_weight(float* dw, Operand dy, Operand x,
                                         const ops::LinearShape& s, bool accumulate) = 0;
  virtual void do_add_bias(float* y, const float* b, int m, int n) = 0;
  virtual void do_add_column_sums(float* db, const float* dy, int m, int n) = 0;

  virtual void do_layernorm_row_sums(double* sums, const float* x, const ops::NormShape& s) = 0;
  virtual void do_layernorm_apply(float* y, float* mean, float* rstd, const double* sums,
                                  const float* x, const float* gamma, const float* beta,
                                  const ops::NormShape& s, float eps) = 0;
  virtual void do_layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd,
                                       const double* sums, const float* x, const float* gamma,
                                       const float* beta, const ops::NormShape& s, float eps) = 0;
  virtual void do_layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean,
                                      float* rstd, const float* x, const float* gamma,
                                      const float* beta, const ops::NormShape& s, float eps) = 0;
  virtual void do_layernorm_backward_sums(double* sums, const float* dy, const float* x,
                                          const float* mean, const float* rstd, const float* gamma,
                                          const ops::NormShape& s) = 0;
  virtual void do_layernorm_backward_apply(float* dx, float* dgamma, float* dbeta,
                                           const double* sums, const float* dy, const float* x,
                                           const float* mean, const float* rstd, const float* gamma,
                                           const ops::NormShape& s) = 0;
  virtual void do_layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma,
                                               float* dbeta, const double* sums, const float* dy,
                                               const float* x, const float* mean, const float* rstd,
                                               const float* gamma, const ops::NormShape& s) = 0;
  virtual void do_layernorm_backward_rows_add(double* sums, float* dres, float* scratch,
                                              float* dgamma, float* dbeta, const float* dy,
                                              const float* x, const float* mean, const float* rstd,
                                              const float* gamma, const ops::NormShape& s) = 0;
  virtual void do_layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums,
                                                   float* dres, float* scratch, float* dgamma,
                                                   float* dbeta, const float* dy, const float* x,
                                                   const float* mean, const float* rstd,
                                                   const float* gamma, const ops::NormShape& s) = 0;
  virtual void do_rmsnorm_row_sums(double* sums, const float* x, const ops::NormShape& s) = 0;
  virtual void do_rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x,
                                const float* gamma, const ops::NormShape& s, float eps) = 0;
  virtual void do_rmsnorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* rstd,
                                    const float* x, const float* gamma, const ops::NormShape& s,
                                    float eps) = 0;
  // next: null for rmsnorm_backward_rows_add, given for its _bf16 form.
  virtual void do_rmsnorm_backward_rows_add(const ops::ResidualGradBf16* next, double* sums,
                                            float* dres, float* scratch, float* dgamma,
                                            const float* dy, const float* x, const float* rstd,
                                            const float* gamma, const ops::NormShape& s) = 0;
  virtual void do_rmsnorm_backward_sums(double* sums, const float* dy, const float* x,
                                        const float* gamma, const ops::NormShape& s) = 0;
  virtual void do_rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums,
                                         const float* dy, const float* x, const float* rstd,
                                         const float* gamma, const ops::NormShape& s) = 0;

  virtual void do_gelu_forward(float* y, const float* x, long n) = 0;
  virtual void do_gelu_backward(float* dx, const float* dy, const float* x, long n) = 0;
  virtual void do_swiglu_forward(float* y, const float* gate, const float* up, long n) = 0;
  virtual void do_swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                                  const float* up, long n) = 0;
  virtual void do_swiglu_forward_bf16(bf16* y_bf16, float* y, const float* gate, const float* up,
                                      const ops::GluRows& s) = 0;
  virtual void do_swiglu_backward_bf16(bf16* dgate_bf16, bf16* dup_bf16, float* dgate, float* dup,
                                       const float* dy, const float* gate, const float* up,
                                       const ops::GluRows& s) = 0;
  virtual void do_add(float* y, const float* a, const float* b, long n) = 0;
  virtual void do_add_inplace(float* y, const float* x, long n) = 0;

  virtual void do_attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                                    const ops::AttentionShape& s) = 0;
  virtual void do_attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q,
                                         Operand k, Operand v, const ops::AttentionShape& s) = 0;
  virtual void do_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                     Operand out, const float* lse, Operand q, Operand k, Operand v,
                                     const ops::AttentionShape& s) = 0;
  virtual void do_attention_backward_bf16(const ops::AttentionGradsBf16& g, const float* dout,
                                          Operand out, const float* lse, Operand q, Operand k,
                                          Operand v, const ops::AttentionShape& s) = 0;
  virtual void do_attention_cached(float* out, const float* q, const float* k_new,
                                   const float* v_new, float* k_cache, float* v_cache,
                                   const ops::CachedAttentionShape& s) = 0;
  virtual void do_rope_forward(float* x, const ops::RopeShape& s, const ops::RopeSpec& rope) = 0;
  virtual void do_rope_backward(float* dx, const ops::RopeShape& s, const ops::RopeSpec& rope) = 0;
  // rope_forward_bf16, or rope_backward_bf16 where inverse.
  virtual void do_rope_bf16(bf16* low, float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
                            bool inverse) = 0;

  virtual void do_to_bf16(bf16* out, const float* in, int64_t n) = 0;
  virtual void do_to_float(float* out, const bf16* in, int64_t n) = 0;
  virtual void do_to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) = 0;

  virtual void do_ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                                 const float* weight, const ops::VocabShape& s) = 0;
  virtual void do_ce_combine(float* lse, const float* gathered, const float* weight, int rows,
                             int parts, double* total) = 0;
  virtual void do_ce_dlogits(float* logits, const float* lse, const int32_t* targets,
                             const float* weight, double denominator, const ops::VocabShape& s) = 0;
  virtual void do_ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse,
                                  const int32_t* targets, const float* weight, double denominator,
                                  const ops::VocabShape& s) = 0;
  virtual void do_ce_stats_dlogits_bf16(float* stats, bf16* dlogits, float* logits,
                                        const int32_t* targets, const float* weight,
                                        double denominator, const ops::VocabShape& s) = 0;

  virtual void do_embedding_range_forward(float* out, const int32_t* tokens, Operand w,
                                          const ops::EmbeddingShape& s) = 0;
  virtual void do_embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                                           const ops::EmbeddingShape& s) = 0;
  virtual void do_embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk,
                                          const ops::TableChunk& piece,
                                          const ops::EmbeddingShape& s) = 0;
  virtual void do_embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                                           const ops::TableChunk& piece,
                                           const ops::EmbeddingShape& s) = 0;
  virtual void do_position_add(float* out, Operand wpe, const ops::PositionShape& s) = 0;
  virtual void do_position_backward(float* dwpe, const float* dout,
                                    const ops::PositionShape& s) = 0;

  virtual void do_adamw_update(float* param, const float* grad, float* m, float* v, long n,
                               float lr, int step, bool decay, const ops::AdamWConfig& c,
                               float grad_scale, bf16* param_bf16) = 0;
  virtual double do_sum_squares(const float* g, long n) = 0;
  virtual void do_scale(float* g, float s, long n) = 0;
  virtual void do_sum_squares_tensors(double* total, const float* base,
                                      const ops::FlatTensor* table, int count, int64_t values) = 0;
  virtual void do_adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                                       const ops::FlatTensor* table, int count, int64_t values,
                                       float lr, int step, const ops::AdamWConfig& c,
                                       float grad_scale, bf16* low, int64_t low_count) = 0;

  virtual void do_fill(float* x, float value, int64_t n) = 0;
  virtual void do_copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                            int64_t src_stride) = 0;
  virtual void do_interleave_vocab_parts(float* out, const float* parts,
                                         const ops::VocabParts& s) = 0;
  virtual int64_t do_count_nonfinite(const float* x, int64_t n) = 0;
};

struct BackendOptions {
  // The rank's index among the ranks of its node, and their number: pick its
  // GPU (rank i takes GPU i mod the node's count; ranks sharing a GPU use the
  // staged transport).
  int node_rank = 0;
  int node_ranks = 1;
  GpuTransport transport = GpuTransport::kAuto;
  // GPUs: fp32 products on the tensor cores in TF32 (--precision fp32), or in
  // full fp32 (the tests).
  bool tf32 = true;
  // GPUs: bias, GELU, the residual and bf16 outputs inside cuBLASLt's
  // products where it offers them; false runs those steps as kernels after a
  // bare product (bench step --no-gemm-epilogues: the two side by side).
  bool gemm_epilogues = true;
};

// The backend of `device` for this rank. A device this build has no backend
// for is an error naming the CMake option that adds it; a CUDA build on a
// machine without a GPU is an error saying so. Both functions are defined in
// backend.cpp alone, which a test program may replace with its own
// (tests/emulated_cuda/emulated_devices.cpp: --device cuda on the CPU
// emulator).
std::unique_ptr<Backend> make_backend(Device device, const BackendOptions& options = {});
// The device "auto" means here: cuda when this build has the CUDA backend and
// the machine a GPU, else cpu.
Device default_device();
// parse_device, with "auto" resolved.
inline Device resolve_device(const std::string& text) {
  return text == "auto" ? default_device() : parse_device(text);
}

}  // namespace dendrite
