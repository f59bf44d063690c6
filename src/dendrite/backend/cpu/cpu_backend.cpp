// The CPU backend: the seam of backend/backend.h over the CPU kernels of
// ops/*.h (oneDNN GEMMs, OpenMP loops). Memory is host memory; parameters and
// gradients shared over a group are the communicator's shared-memory windows;
// every op has finished when it returns, so events are complete when recorded.
// The GEMMs' tuning choices and bf16 primitives are the backend's own (GemmCache).
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "dendrite/backend/backend.h"
#include "dendrite/backend/cpu/gemm_cache.h"
#include "dendrite/core/check.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/convert.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/norm.h"
#include "dendrite/ops/peak.h"
#include "dendrite/ops/tensor.h"

namespace dendrite {

namespace {

// The two operands of one product are of one type.
bool both_bf16(Operand a, Operand b, const char* op) {
  DENDRITE_CHECK(a.is_bf16() == b.is_bf16(), op, ": operands of different precision");
  return a.is_bf16();
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string describe() const override {
    return str("cpu (", omp_get_max_threads(), " threads; bf16 GEMMs ",
               ops::bf16_gemm_native() ? "native" : "widened to fp32", ")");
  }

  Communicator& transport(Communicator& world) override { return world; }

  // ---- memory ----
  void* allocate(size_t bytes) override {
    bytes = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return p;
  }
  void release(void* p) override { std::free(p); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  std::unique_ptr<SharedArray> allocate_shared(Communicator& group, int64_t n, DType t) override {
    return group.allocate_shared(n, t);
  }
  void upload(void* dst, const void* host, size_t bytes) override { move(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override { move(host, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { move(dst, src, bytes); }

  // ---- stream: program order ----
  Event record() override { return {++issued_}; }
  void wait(Event) override {}

  // ---- GEMMs ----
  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, Operand A, int lda, Operand B,
            int ldb, float beta, float* C, int ldc) override {
    if (both_bf16(A, B, "gemm"))
      ops::gemm(ta, tb, M, N, K, alpha, A.b16, lda, B.b16, ldb, beta, C, ldc, &gemms_);
    else
      ops::gemm(ta, tb, M, N, K, alpha, A.f32, lda, B.f32, ldb, beta, C, ldc, &gemms_);
  }
  void linear_forward(float* y, Operand x, Operand w, const float* b, int m, int k,
                      int n) override {
    if (both_bf16(x, w, "linear_forward")) {
      ops::linear_forward(y, x.b16, w.b16, m, k, n, &gemms_);
      if (b) ops::add_bias(y, b, m, n);
    } else {
      ops::linear_forward(y, x.f32, w.f32, b, m, k, n, &gemms_);
    }
  }
  void linear_forward_fused(float* y, Operand x, Operand w, int m, int k, int n,
                            const ops::LinearEpilogue& e) override {
    if (both_bf16(x, w, "linear_forward"))
      ops::linear_forward(y, x.b16, w.b16, m, k, n, e, &gemms_);
    else
      ops::linear_forward(y, x.f32, w.f32, m, k, n, e, &gemms_);
  }
  void linear_backward_input(float* dx, Operand dy, Operand w, int m, int k, int n,
                             bool accumulate) override {
    if (both_bf16(dy, w, "linear_backward_input"))
      ops::linear_backward_input(dx, dy.b16, w.b16, m, k, n, accumulate, &gemms_);
    else
      ops::linear_backward_input(dx, dy.f32, w.f32, m, k, n, accumulate, &gemms_);
  }
  void linear_backward_input_dgelu(float* dx, Operand dy, Operand w, const float* gelu_input, int m,
                                   int k, int n) override {
    if (both_bf16(dy, w, "linear_backward_input"))
      ops::linear_backward_input_dgelu(dx, dy.b16, w.b16, gelu_input, m, k, n, &gemms_);
    else
      ops::linear_backward_input_dgelu(dx, dy.f32, w.f32, gelu_input, m, k, n, &gemms_);
  }
  void linear_backward_weight(float* dw, Operand dy, Operand x, int m, int k, int n,
                              bool accumulate) override {
    if (both_bf16(dy, x, "linear_backward_weight"))
      ops::linear_backward_weight(dw, dy.b16, x.b16, m, k, n, accumulate, &gemms_);
    else
      ops::linear_backward_weight(dw, nullptr, dy.f32, x.f32, m, k, n, accumulate, &gemms_);
  }
  void add_bias(float* y, const float* b, int m, int n) override { ops::add_bias(y, b, m, n); }
  void add_column_sums(float* db, const float* dy, int m, int n) override {
    ops::add_column_sums(db, dy, m, n);
  }
  bool bf16_native() const override { return ops::bf16_gemm_native(); }
  std::string bf16_missing() const override { return ops::bf16_gemm_missing(); }
  void set_gemm_tuning(bool on) override { gemms_.set_tuning(on); }
  std::vector<ops::GemmChoice> gemm_choices() const override { return gemms_.choices(); }
  double gemm_tuning_seconds() const override { return gemms_.tuning_seconds(); }
  double peak_gflops(Precision p, int threads, double seconds) override {
    return p == Precision::kBF16 ? ops::measure_bf16_peak_gflops(threads, seconds)
                                 : ops::measure_peak_gflops(threads, seconds);
  }

  // ---- norms ----
  void layernorm_row_sums(double* sums, const float* x, int m, int c) override {
    ops::layernorm_row_sums(sums, x, m, c);
  }
  void layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                       const float* gamma, const float* beta, int m, int c, int c_total,
                       float eps) override {
    ops::layernorm_apply(y, mean, rstd, sums, x, gamma, beta, m, c, c_total, eps);
  }
  void layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd, const double* sums,
                            const float* x, const float* gamma, const float* beta, int m, int c,
                            int c_total, float eps) override {
    ops::layernorm_apply_bf16(y_bf16, y, mean, rstd, sums, x, gamma, beta, m, c, c_total, eps);
  }
  void layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean, float* rstd,
                           const float* x, const float* gamma, const float* beta, int m, int c,
                           float eps) override {
    ops::layernorm_rows_bf16(sums, y_bf16, y, mean, rstd, x, gamma, beta, m, c, eps);
  }
  void layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                               const float* rstd, const float* gamma, int m, int c) override {
    ops::layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, m, c);
  }
  void layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                                const float* dy, const float* x, const float* mean,
                                const float* rstd, const float* gamma, int m, int c,
                                int c_total) override {
    ops::layernorm_backward_apply(dx, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, m, c,
                                  c_total);
  }
  void layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma, float* dbeta,
                                    const double* sums, const float* dy, const float* x,
                                    const float* mean, const float* rstd, const float* gamma, int m,
                                    int c, int c_total) override {
    ops::layernorm_backward_apply_add(dres, scratch, dgamma, dbeta, sums, dy, x, mean, rstd, gamma,
                                      m, c, c_total);
  }
  void rmsnorm_row_sums(double* sums, const float* x, int m, int c) override {
    ops::rmsnorm_row_sums(sums, x, m, c);
  }
  void rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x, const float* gamma,
                     int m, int c, int c_total, float eps) override {
    ops::rmsnorm_apply(y, rstd, sums, x, gamma, m, c, c_total, eps);
  }
  void rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                             int m, int c) override {
    ops::rmsnorm_backward_sums(sums, dy, x, gamma, m, c);
  }
  void rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                              const float* x, const float* rstd, const float* gamma, int m, int c,
                              int c_total) override {
    ops::rmsnorm_backward_apply(dx, dgamma, sums, dy, x, rstd, gamma, m, c, c_total);
  }

  // ---- elementwise ----
  void gelu_forward(float* y, const float* x, long n) override { ops::gelu_forward(y, x, n); }
  void gelu_backward(float* dx, const float* dy, const float* x, long n) override {
    ops::gelu_backward(dx, dy, x, n);
  }
  void swiglu_forward(float* y, const float* gate, const float* up, long n) override {
    ops::swiglu_forward(y, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                       const float* up, long n) override {
    ops::swiglu_backward(dgate, dup, dy, gate, up, n);
  }
  void add(float* y, const float* a, const float* b, long n) override { ops::add(y, a, b, n); }
  void add_inplace(float* y, const float* x, long n) override { ops::add_inplace(y, x, n); }

  // ---- attention ----
  void attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q, Operand k,
                              Operand v, const ops::AttentionShape& s) override {
    DENDRITE_CHECK(q.is_bf16() && k.is_bf16() && v.is_bf16(),
                   "attention_forward_bf16: q, k and v must be bf16");
    ops::attention_forward_bf16(out_bf16, out, lse, q.b16, k.b16, v.b16, s);
  }
  void attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                         const ops::AttentionShape& s) override {
    if (both_bf16(q, k, "attention_forward") && both_bf16(k, v, "attention_forward"))
      ops::attention_forward(out, lse, q.b16, k.b16, v.b16, s);
    else
      ops::attention_forward(out, lse, q.f32, k.f32, v.f32, s);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, Operand out,
                          const float* lse, Operand q, Operand k, Operand v,
                          const ops::AttentionShape& s) override {
    if (both_bf16(q, k, "attention_backward") && both_bf16(v, out, "attention_backward") &&
        both_bf16(q, v, "attention_backward"))
      ops::attention_backward(dq, dk, dv, dout, out.b16, lse, q.b16, k.b16, v.b16, s);
    else
      ops::attention_backward(dq, dk, dv, dout, out.f32, lse, q.f32, k.f32, v.f32, s);
  }
  void attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                        float* k_cache, float* v_cache, const ops::CachedAttentionShape& s) override {
    ops::attention_cached(out, q, k_new, v_new, k_cache, v_cache, s);
  }
  void rope_forward(float* x, int B, int T, int nheads, int hs, int stride,
                    const ops::RopeSpec& rope, int pos0) override {
    ops::rope_forward(x, B, T, nheads, hs, stride, rope, pos0);
  }
  void rope_backward(float* dx, int B, int T, int nheads, int hs, int stride,
                     const ops::RopeSpec& rope) override {
    ops::rope_backward(dx, B, T, nheads, hs, stride, rope);
  }

  // ---- conversions ----
  void to_bf16(bf16* out, const float* in, int64_t n) override { ops::to_bf16(out, in, n); }
  void to_float(float* out, const bf16* in, int64_t n) override { ops::to_float(out, in, n); }
  void to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) override {
    ops::to_bf16_column_sums(out, db, in, m, n);
  }

  // ---- loss ----
  void ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                      const float* weight, int rows, int Vloc, int v0, int V) override {
    ops::ce_local_stats(stats, logits, targets, weight, rows, Vloc, v0, V);
  }
  void ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                  double* total) override {
    ops::ce_combine(lse, gathered, weight, rows, parts, total);
  }
  void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                  double denominator, int rows, int Vloc, int v0, int V) override {
    ops::ce_dlogits(logits, lse, targets, weight, denominator, rows, Vloc, v0, V);
  }
  void ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse, const int32_t* targets,
                       const float* weight, double denominator, int rows, int Vloc, int v0,
                       int V) override {
    ops::ce_dlogits_bf16(dlogits, logits, lse, targets, weight, denominator, rows, Vloc, v0, V);
  }

  // ---- embeddings ----
  void embedding_range_forward(float* out, const int32_t* tokens, Operand w, int v0, int rows,
                               int m, int C) override {
    if (w.is_bf16())
      ops::embedding_range_forward(out, tokens, w.b16, v0, rows, m, C);
    else
      ops::embedding_range_forward(out, tokens, w.f32, v0, rows, m, C);
  }
  void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens, int v0,
                                int rows, int m, int C) override {
    ops::embedding_range_backward(dw, dout, tokens, v0, rows, m, C);
  }
  void embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk, int64_t c0,
                               int64_t n, int v0, int rows, int m, int C) override {
    if (chunk.is_bf16())
      ops::embedding_chunk_forward(out, tokens, chunk.b16, c0, n, v0, rows, m, C);
    else
      ops::embedding_chunk_forward(out, tokens, chunk.f32, c0, n, v0, rows, m, C);
  }
  void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                                int64_t c0, int64_t n, int v0, int rows, int m, int C) override {
    ops::embedding_chunk_backward(dchunk, dout, tokens, c0, n, v0, rows, m, C);
  }
  void position_add(float* out, Operand wpe, int m, int T, int C) override {
    if (wpe.is_bf16())
      ops::position_add(out, wpe.b16, m, T, C);
    else
      ops::position_add(out, wpe.f32, m, T, C);
  }
  void position_backward(float* dwpe, const float* dout, int m, int T, int C) override {
    ops::position_backward(dwpe, dout, m, T, C);
  }

  // ---- optimizer ----
  void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr,
                    int step, bool decay, const ops::AdamWConfig& c, float grad_scale,
                    bf16* param_bf16) override {
    ops::adamw_update(param, grad, m, v, n, lr, step, decay, c, grad_scale, param_bf16);
  }
  double sum_squares(const float* g, long n) override { return ops::sum_squares(g, n); }
  void scale(float* g, float s, long n) override { ops::scale(g, s, n); }
  void sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table,
                           int count, int64_t) override {
    ops::sum_squares_tensors(total, base, table, count);
  }
  void adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                            const ops::FlatTensor* table, int count, int64_t, float lr, int step,
                            const ops::AdamWConfig& c, float grad_scale, bf16* low,
                            int64_t low_count) override {
    ops::adamw_update_tensors(param, grad, m, v, table, count, lr, step, c, grad_scale, low,
                              low_count);
  }

  // ---- data movement ----
  void fill(float* x, float value, int64_t n) override { ops::fill(x, value, n); }
  void copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                 int64_t src_stride) override {
    ops::copy_rows(dst, src, rows, cols, src_stride);
  }
  void interleave_vocab_parts(float* out, const float* parts, int num_parts, int m, int Vloc,
                              int V) override {
    ops::interleave_vocab_parts(out, parts, num_parts, m, Vloc, V);
  }
  int64_t count_nonfinite(const float* x, int64_t n) override {
    return ops::count_nonfinite(x, n);
  }

 private:
  static void move(void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  uint64_t issued_ = 0;
  ops::GemmCache gemms_;  // the GEMMs' tuning and bf16 primitives, this backend's own
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace dendrite
