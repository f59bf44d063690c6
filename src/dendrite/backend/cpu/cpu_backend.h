// The CPU backend (DESIGN.md section 10): host memory, oneDNN's products and
// OpenMP loops on the rank's one thread pool. Each op's do_ method is
// defined in the kernel file of its family (matmul.cpp, norm.cpp, ...), the
// file named above its group; the rest (memory, stream, make_cpu_backend)
// in cpu_backend.cpp. Every op has finished when it returns, so events are
// complete when recorded. The GEMMs' tuning choices and bf16 primitives are
// this backend's own (GemmCache), so two backends in a process never share them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/backend/cpu/gemm_cache.h"

namespace dendrite::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string describe() const override;
  Communicator& transport(Communicator& world) override { return world; }

  // ---- memory (cpu_backend.cpp) ----
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void zero(void* p, size_t bytes) override;
  std::unique_ptr<SharedArray> allocate_shared(Communicator& group, int64_t n, DType t) override;
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;

  // ---- stream: program order ----
  Event record() override { return {++issued_}; }
  void wait(Event) override {}

  // ---- GEMM properties (matmul_bf16.cpp, matmul.cpp, peak.cpp) ----
  bool bf16_gemm_native() const override;
  std::string bf16_gemm_missing() const override;
  void set_gemm_tuning(bool on) override { gemms_.set_tuning(on); }
  std::vector<ops::GemmChoice> gemm_choices() const override { return gemms_.choices(); }
  double gemm_tuning_seconds() const override { return gemms_.tuning_seconds(); }
  std::vector<std::string> gemm_plans() const override { return {}; }  // oneDNN plans its own
  double measure_peak_gflops(Precision p, int threads, double seconds) override;

 protected:
  // ---- matmul.cpp and matmul_bf16.cpp: oneDNN products, the layout tuner ----
  void do_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, Operand A, int lda,
               Operand B, int ldb, float beta, float* C, int ldc) override;
  void do_linear_forward(float* y, Operand x, Operand w, const float* b,
                         const ops::LinearShape& s) override;
  void do_linear_forward_fused(float* y, Operand x, Operand w, const ops::LinearShape& s,
                               const ops::LinearEpilogue& e) override;
  void do_linear_backward_input(float* dx, Operand dy, Operand w, const ops::LinearShape& s,
                                bool accumulate) override;
  void do_linear_backward_input_dgelu(float* dx, Operand dy, Operand w, const float* gelu_input,
                                      const ops::LinearShape& s) override;
  void do_linear_backward_weight(float* dw, Operand dy, Operand x, const ops::LinearShape& s,
                                 bool accumulate) override;
  void do_add_bias(float* y, const float* b, int m, int n) override;
  void do_add_column_sums(float* db, const float* dy, int m, int n) override;

  // ---- norm.cpp ----
  void do_layernorm_row_sums(double* sums, const float* x, const ops::NormShape& s) override;
  void do_layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                          const float* gamma, const float* beta, const ops::NormShape& s,
                          float eps) override;
  void do_layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd, const double* sums,
                               const float* x, const float* gamma, const float* beta,
                               const ops::NormShape& s, float eps) override;
  void do_layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean, float* rstd,
                              const float* x, const float* gamma, const float* beta,
                              const ops::NormShape& s, float eps) override;
  void do_layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                                  const float* rstd, const float* gamma,
                                  const ops::NormShape& s) override;
  void do_layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                                   const float* dy, const float* x, const float* mean,
                                   const float* rstd, const float* gamma,
                                   const ops::NormShape& s) override;
  void do_layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma, float* dbeta,
                                       const double* sums, const float* dy, const float* x,
                                       const float* mean, const float* rstd, const float* gamma,
                                       const ops::NormShape& s) override;
  void do_layernorm_backward_rows_add(double* sums, float* dres, float* scratch, float* dgamma,
                                      float* dbeta, const float* dy, const float* x,
                                      const float* mean, const float* rstd, const float* gamma,
                                      const ops::NormShape& s) override;
  void do_layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums,
                                           float* dres, float* scratch, float* dgamma, float* dbeta,
                                           const float* dy, const float* x, const float* mean,
                                           const float* rstd, const float* gamma,
                                           const ops::NormShape& s) override;
  void do_rmsnorm_row_sums(double* sums, const float* x, const ops::NormShape& s) override;
  void do_rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x,
                        const float* gamma, const ops::NormShape& s, float eps) override;
  void do_rmsnorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* rstd, const float* x,
                            const float* gamma, const ops::NormShape& s, float eps) override;
  void do_rmsnorm_backward_rows_add(const ops::ResidualGradBf16* next, double* sums, float* dres,
                                    float* scratch, float* dgamma, const float* dy, const float* x,
                                    const float* rstd, const float* gamma,
                                    const ops::NormShape& s) override;
  void do_rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                                const ops::NormShape& s) override;
  void do_rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                                 const float* x, const float* rstd, const float* gamma,
                                 const ops::NormShape& s) override;

  // ---- activation.cpp ----
  void do_gelu_forward(float* y, const float* x, long n) override;
  void do_gelu_backward(float* dx, const float* dy, const float* x, long n) override;
  void do_swiglu_forward(float* y, const float* gate, const float* up, long n) override;
  void do_swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                          const float* up, long n) override;
  void do_swiglu_forward_bf16(bf16* y_bf16, float* y, const float* gate, const float* up,
                              const ops::GluRows& s) override;
  void do_swiglu_backward_bf16(bf16* dgate_bf16, bf16* dup_bf16, float* dgate, float* dup,
                               const float* dy, const float* gate, const float* up,
                               const ops::GluRows& s) override;
  void do_add(float* y, const float* a, const float* b, long n) override;
  void do_add_inplace(float* y, const float* x, long n) override;

  // ---- attention.cpp ----
  void do_attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                            const ops::AttentionShape& s) override;
  void do_attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q, Operand k,
                                 Operand v, const ops::AttentionShape& s) override;
  void do_attention_backward(float* dq, float* dk, float* dv, const float* dout, Operand out,
                             const float* lse, Operand q, Operand k, Operand v,
                             const ops::AttentionShape& s) override;
  void do_attention_backward_bf16(const ops::AttentionGradsBf16& g, const float* dout, Operand out,
                                  const float* lse, Operand q, Operand k, Operand v,
                                  const ops::AttentionShape& s) override;
  void do_attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                           float* k_cache, float* v_cache,
                           const ops::CachedAttentionShape& s) override;
  void do_rope_forward(float* x, const ops::RopeShape& s, const ops::RopeSpec& rope) override;
  void do_rope_backward(float* dx, const ops::RopeShape& s, const ops::RopeSpec& rope) override;
  void do_rope_bf16(bf16* low, float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
                    bool inverse) override;

  // ---- convert.cpp ----
  void do_to_bf16(bf16* out, const float* in, int64_t n) override;
  void do_to_float(float* out, const bf16* in, int64_t n) override;
  void do_to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) override;

  // ---- cross_entropy.cpp ----
  void do_ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                         const float* weight, const ops::VocabShape& s) override;
  void do_ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                     double* total) override;
  void do_ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                     double denominator, const ops::VocabShape& s) override;
  void do_ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse, const int32_t* targets,
                          const float* weight, double denominator,
                          const ops::VocabShape& s) override;
  void do_ce_stats_dlogits_bf16(float* stats, bf16* dlogits, float* logits, const int32_t* targets,
                                const float* weight, double denominator,
                                const ops::VocabShape& s) override;

  // ---- embedding.cpp ----
  void do_embedding_range_forward(float* out, const int32_t* tokens, Operand w,
                                  const ops::EmbeddingShape& s) override;
  void do_embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                                   const ops::EmbeddingShape& s) override;
  void do_embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk,
                                  const ops::TableChunk& piece,
                                  const ops::EmbeddingShape& s) override;
  void do_embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                                   const ops::TableChunk& piece,
                                   const ops::EmbeddingShape& s) override;
  void do_position_add(float* out, Operand wpe, const ops::PositionShape& s) override;
  void do_position_backward(float* dwpe, const float* dout, const ops::PositionShape& s) override;

  // ---- optim.cpp ----
  void do_adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr,
                       int step, bool decay, const ops::AdamWConfig& c, float grad_scale,
                       bf16* param_bf16) override;
  double do_sum_squares(const float* g, long n) override;
  void do_scale(float* g, float s, long n) override;
  void do_sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table,
                              int count, int64_t values) override;
  void do_adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                               const ops::FlatTensor* table, int count, int64_t values, float lr,
                               int step, const ops::AdamWConfig& c, float grad_scale, bf16* low,
                               int64_t low_count) override;

  // ---- tensor.cpp ----
  void do_fill(float* x, float value, int64_t n) override;
  void do_copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                    int64_t src_stride) override;
  void do_interleave_vocab_parts(float* out, const float* parts, const ops::VocabParts& s) override;
  int64_t do_count_nonfinite(const float* x, int64_t n) override;

 private:
  uint64_t issued_ = 0;
  GemmCache gemms_;  // the GEMMs' tuning and bf16 primitives, this backend's own
};

}  // namespace dendrite::cpu
