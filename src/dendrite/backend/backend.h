// The device seam (DESIGN.md section 10). One Backend is made per rank, in
// the command that also makes the process grid, and passed by reference to
// the model, its layers, the optimizer and the trainer. It
//  - owns memory: every Buffer those allocate comes from it (Backend is their
//    Allocator), and so do the parameters and gradients that a communicator
//    group reads in place (allocate_shared); host code moves data in and out
//    with upload and download, and nothing outside backend/ dereferences it;
//  - runs every op: the methods below, one per op of ops/*.h, whose comments
//    there give the shapes and the semantics. Ops that read GEMM operands take
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
#include "dendrite/core/device.h"
#include "dendrite/core/operand.h"
#include "dendrite/core/precision.h"
#include "dendrite/ops/attention.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/optim.h"

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

  // ---- GEMMs (ops/matmul.h) ----
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, Operand A,
                    int lda, Operand B, int ldb, float beta, float* C, int ldc) = 0;
  // y = x w^T (+ b, may be null)
  virtual void linear_forward(float* y, Operand x, Operand w, const float* b, int m, int k,
                              int n) = 0;
  // y = x w^T then the epilogue e (ops/matmul.h: bias, GELU keeping its
  // input, a bf16 output), fused into the product where the device can.
  virtual void linear_forward_fused(float* y, Operand x, Operand w, int m, int k, int n,
                                    const ops::LinearEpilogue& e) = 0;
  virtual void linear_backward_input(float* dx, Operand dy, Operand w, int m, int k, int n,
                                     bool accumulate) = 0;
  // dx = (dy w) * gelu'(gelu_input), overwritten (ops/matmul.h), fused where the device can.
  virtual void linear_backward_input_dgelu(float* dx, Operand dy, Operand w,
                                           const float* gelu_input, int m, int k, int n) = 0;
  // dw (+)= dy^T x; the bias gradient is add_column_sums of the fp32 dy.
  virtual void linear_backward_weight(float* dw, Operand dy, Operand x, int m, int k, int n,
                                      bool accumulate) = 0;
  virtual void add_bias(float* y, const float* b, int m, int n) = 0;
  virtual void add_column_sums(float* db, const float* dy, int m, int n) = 0;
  // Whether bf16 GEMMs run natively; when not, the instruction set missing.
  virtual bool bf16_native() const = 0;
  virtual std::string bf16_missing() const = 0;
  // GEMM layout tuning (ops/matmul.h), this backend's own, and what it chose.
  virtual void set_gemm_tuning(bool on) = 0;
  virtual std::vector<ops::GemmChoice> gemm_choices() const = 0;
  virtual double gemm_tuning_seconds() const = 0;
  // The peak rates MFU divides by (ops/peak.h); threads 0: all of the backend's.
  virtual double peak_gflops(Precision p, int threads = 0, double seconds = 0.2) = 0;

  // ---- norms (ops/norm.h) ----
  virtual void layernorm_row_sums(double* sums, const float* x, int m, int c) = 0;
  virtual void layernorm_apply(float* y, float* mean, float* rstd, const double* sums,
                               const float* x, const float* gamma, const float* beta, int m, int c,
                               int c_total, float eps) = 0;
  // y_bf16 = bf16(layernorm_apply's y); y is scratch (ops/norm.h).
  virtual void layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd,
                                    const double* sums, const float* x, const float* gamma,
                                    const float* beta, int m, int c, int c_total, float eps) = 0;
  // Whole rows: layernorm_row_sums then layernorm_apply_bf16, one pass on a GPU.
  virtual void layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean, float* rstd,
                                   const float* x, const float* gamma, const float* beta, int m,
                                   int c, float eps) = 0;
  virtual void layernorm_backward_sums(double* sums, const float* dy, const float* x,
                                       const float* mean, const float* rstd, const float* gamma,
                                       int m, int c) = 0;
  virtual void layernorm_backward_apply(float* dx, float* dgamma, float* dbeta,
                                        const double* sums, const float* dy, const float* x,
                                        const float* mean, const float* rstd, const float* gamma,
                                        int m, int c, int c_total) = 0;
  // dres += layernorm_backward_apply's dx; scratch [m, c] (ops/norm.h).
  virtual void layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma,
                                            float* dbeta, const double* sums, const float* dy,
                                            const float* x, const float* mean, const float* rstd,
                                            const float* gamma, int m, int c, int c_total) = 0;
  virtual void rmsnorm_row_sums(double* sums, const float* x, int m, int c) = 0;
  virtual void rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x,
                             const float* gamma, int m, int c, int c_total, float eps) = 0;
  virtual void rmsnorm_backward_sums(double* sums, const float* dy, const float* x,
                                     const float* gamma, int m, int c) = 0;
  virtual void rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums,
                                      const float* dy, const float* x, const float* rstd,
                                      const float* gamma, int m, int c, int c_total) = 0;

  // ---- elementwise (ops/activation.h) ----
  virtual void gelu_forward(float* y, const float* x, long n) = 0;
  virtual void gelu_backward(float* dx, const float* dy, const float* x, long n) = 0;
  virtual void swiglu_forward(float* y, const float* gate, const float* up, long n) = 0;
  virtual void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                               const float* up, long n) = 0;
  virtual void add(float* y, const float* a, const float* b, long n) = 0;
  virtual void add_inplace(float* y, const float* x, long n) = 0;

  // ---- attention (ops/attention.h); q, k, v and the saved output as operands ----
  virtual void attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                                 const ops::AttentionShape& s) = 0;
  // out_bf16 = bf16(attention_forward's out), q, k, v in bf16; out is scratch.
  virtual void attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q, Operand k,
                                      Operand v, const ops::AttentionShape& s) = 0;
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout, Operand out,
                                  const float* lse, Operand q, Operand k, Operand v,
                                  const ops::AttentionShape& s) = 0;
  // Generation: writes the new keys and values into the caches, then attends (fp32).
  virtual void attention_cached(float* out, const float* q, const float* k_new,
                                const float* v_new, float* k_cache, float* v_cache,
                                const ops::CachedAttentionShape& s) = 0;
  // Rows b*T + t at position pos0 + t.
  virtual void rope_forward(float* x, int B, int T, int nheads, int hs, int stride,
                            const ops::RopeSpec& rope, int pos0 = 0) = 0;
  virtual void rope_backward(float* dx, int B, int T, int nheads, int hs, int stride,
                             const ops::RopeSpec& rope) = 0;

  // ---- conversions (ops/convert.h) ----
  virtual void to_bf16(bf16* out, const float* in, int64_t n) = 0;
  virtual void to_float(float* out, const bf16* in, int64_t n) = 0;
  // out = bf16(in) and db += in's column sums, one pass where the device can.
  virtual void to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) = 0;

  // ---- the vocabulary-parallel loss (ops/cross_entropy.h) ----
  virtual void ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                              const float* weight, int rows, int Vloc, int v0, int V) = 0;
  // Adds the summed weighted loss to *total (this backend's memory).
  virtual void ce_combine(float* lse, const float* gathered, const float* weight, int rows,
                          int parts, double* total) = 0;
  // Rows of the LM head's chunks (ops/cross_entropy.h) whose buffers take
  // bytes_per_row each: 256 on the CPU; on a GPU, thousands, as its memory allows.
  virtual int lm_head_chunk_rows(int64_t bytes_per_row) const {
    (void)bytes_per_row;
    return 256;
  }
  virtual void ce_dlogits(float* logits, const float* lse, const int32_t* targets,
                          const float* weight, double denominator, int rows, int Vloc, int v0,
                          int V) = 0;
  // dlogits = bf16(ce_dlogits' result); logits are scratch afterwards.
  virtual void ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse,
                               const int32_t* targets, const float* weight, double denominator,
                               int rows, int Vloc, int v0, int V) = 0;

  // ---- embeddings (ops/embedding.h); tables as operands ----
  virtual void embedding_range_forward(float* out, const int32_t* tokens, Operand w, int v0,
                                       int rows, int m, int C) = 0;
  virtual void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                                        int v0, int rows, int m, int C) = 0;
  virtual void embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk,
                                       int64_t c0, int64_t n, int v0, int rows, int m, int C) = 0;
  virtual void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                                        int64_t c0, int64_t n, int v0, int rows, int m,
                                        int C) = 0;
  virtual void position_add(float* out, Operand wpe, int m, int T, int C) = 0;
  virtual void position_backward(float* dwpe, const float* dout, int m, int T, int C) = 0;

  // ---- the optimizer (ops/optim.h) ----
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr,
                            int step, bool decay, const ops::AdamWConfig& c, float grad_scale,
                            bf16* param_bf16) = 0;
  virtual double sum_squares(const float* g, long n) = 0;
  virtual void scale(float* g, float s, long n) = 0;
  // Over a table of tensors (in this backend's memory) numbered by
  // ops::number_tensors, which returned `values`: the squared norm into *total (this backend's
  // memory; no host sync), and AdamW in one pass (one launch on a GPU).
  virtual void sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table,
                                   int count, int64_t values) = 0;
  virtual void adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                                    const ops::FlatTensor* table, int count, int64_t values,
                                    float lr, int step, const ops::AdamWConfig& c, float grad_scale,
                                    bf16* low, int64_t low_count) = 0;

  // ---- data movement (ops/tensor.h) ----
  virtual void fill(float* x, float value, int64_t n) = 0;
  virtual void copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                         int64_t src_stride) = 0;
  virtual void interleave_vocab_parts(float* out, const float* parts, int num_parts, int m,
                                      int Vloc, int V) = 0;
  virtual int64_t count_nonfinite(const float* x, int64_t n) = 0;
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
