// The counting Backend (counting_backend.h): every method of backend.h
// forwarded, the ops inside a counters::OpScope that names them and records
// their sizes (ints, whether an operand is bf16, the attention shape; not
// pointers, learning rates or strides). A method added to Backend must be
// added here too (a pure one fails to compile without it; one with a default
// would otherwise run the default instead of the wrapped backend's).
#include "counting_backend.h"

#include "counters.h"

namespace dendrite {
namespace {

namespace counters = emu::counters;

// What the roofline reads of an attention forward: operand types and shape.
counters::OpArgs attention_forward_args(Operand q, Operand k, Operand v,
                                        const ops::AttentionShape& s) {
  return {{"q_bf16", double(q.is_bf16())},
          {"k_bf16", double(k.is_bf16())},
          {"v_bf16", double(v.is_bf16())},
          {"B", double(s.B)},
          {"T", double(s.T)},
          {"NH", double(s.NH)},
          {"NKV", double(s.NKV)},
          {"hs", double(s.hs)}};
}

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // ---- Allocator ----
  void* allocate(size_t bytes) override {
    const counters::OpScope op("allocate", {{"bytes", double(bytes)}});
    return inner_->allocate(bytes);
  }
  void release(void* p) override {
    const counters::OpScope op("release", {});
    inner_->release(p);
  }
  void zero(void* p, size_t bytes) override {
    const counters::OpScope op("zero", {{"bytes", double(bytes)}});
    inner_->zero(p, bytes);
  }

  // ---- Backend (backend.h, in its order) ----
  Device device() const override { return inner_->device(); }
  std::string describe() const override { return inner_->describe(); }
  Communicator& transport(Communicator& world) override { return inner_->transport(world); }
  int64_t device_bytes() const override { return inner_->device_bytes(); }
  int64_t device_peak_bytes() const override { return inner_->device_peak_bytes(); }
  int64_t device_capacity_bytes() const override { return inner_->device_capacity_bytes(); }
  std::unique_ptr<SharedArray> allocate_shared(Communicator& group, int64_t n, DType t) override {
    const counters::OpScope op("allocate_shared",
                               {{"n", double(n)}, {"bytes_per_element", double(dtype_size(t))}});
    return inner_->allocate_shared(group, n, t);
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    const counters::OpScope op("upload", {{"bytes", double(bytes)}});
    inner_->upload(dst, host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    const counters::OpScope op("download", {{"bytes", double(bytes)}});
    inner_->download(host, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const counters::OpScope op("copy", {{"bytes", double(bytes)}});
    inner_->copy(dst, src, bytes);
  }
  Event record() override {
    const counters::OpScope op("record", {});
    return inner_->record();
  }
  void wait(Event e) override {
    const counters::OpScope op("wait", {});
    inner_->wait(e);
  }
  bool transport_on_streams() const override { return inner_->transport_on_streams(); }
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, Operand A, int lda,
            Operand B, int ldb, float beta, float* C, int ldc) override {
    const counters::OpScope op("gemm", {{"trans_a", double(trans_a)},
                                        {"trans_b", double(trans_b)},
                                        {"M", double(M)},
                                        {"N", double(N)},
                                        {"K", double(K)},
                                        {"A_bf16", double(A.is_bf16())},
                                        {"B_bf16", double(B.is_bf16())},
                                        {"beta", double(beta)}});
    inner_->gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void linear_forward(float* y, Operand x, Operand w, const float* b, int m, int k,
                      int n) override {
    const counters::OpScope op("linear_forward", {{"x_bf16", double(x.is_bf16())},
                                                  {"w_bf16", double(w.is_bf16())},
                                                  {"bias", double(b != nullptr)},
                                                  {"m", double(m)},
                                                  {"k", double(k)},
                                                  {"n", double(n)}});
    inner_->linear_forward(y, x, w, b, m, k, n);
  }
  void linear_forward_fused(float* y, Operand x, Operand w, int m, int k, int n,
                            const ops::LinearEpilogue& e) override {
    const counters::OpScope op("linear_forward_fused",
                               {{"x_bf16", double(x.is_bf16())},
                                {"w_bf16", double(w.is_bf16())},
                                {"bias", double(e.bias != nullptr)},
                                {"gelu", double(e.gelu)},
                                {"residual", double(e.residual != nullptr)},
                                {"bias_bf16", double(ops::adds_bf16_bias(e))},
                                {"y_bf16", double(e.y_bf16 != nullptr)},
                                {"m", double(m)},
                                {"k", double(k)},
                                {"n", double(n)}});
    inner_->linear_forward_fused(y, x, w, m, k, n, e);
  }
  void linear_backward_input_dgelu(float* dx, Operand dy, Operand w, const float* gelu_input, int m,
                                   int k, int n) override {
    const counters::OpScope op("linear_backward_input_dgelu", {{"dy_bf16", double(dy.is_bf16())},
                                                               {"w_bf16", double(w.is_bf16())},
                                                               {"m", double(m)},
                                                               {"k", double(k)},
                                                               {"n", double(n)}});
    inner_->linear_backward_input_dgelu(dx, dy, w, gelu_input, m, k, n);
  }
  void linear_backward_input(float* dx, Operand dy, Operand w, int m, int k, int n,
                             bool accumulate) override {
    const counters::OpScope op("linear_backward_input", {{"dy_bf16", double(dy.is_bf16())},
                                                         {"w_bf16", double(w.is_bf16())},
                                                         {"m", double(m)},
                                                         {"k", double(k)},
                                                         {"n", double(n)},
                                                         {"accumulate", double(accumulate)}});
    inner_->linear_backward_input(dx, dy, w, m, k, n, accumulate);
  }
  void linear_backward_weight(float* dw, Operand dy, Operand x, int m, int k, int n,
                              bool accumulate) override {
    const counters::OpScope op("linear_backward_weight", {{"dy_bf16", double(dy.is_bf16())},
                                                          {"x_bf16", double(x.is_bf16())},
                                                          {"m", double(m)},
                                                          {"k", double(k)},
                                                          {"n", double(n)},
                                                          {"accumulate", double(accumulate)}});
    inner_->linear_backward_weight(dw, dy, x, m, k, n, accumulate);
  }
  void add_bias(float* y, const float* b, int m, int n) override {
    const counters::OpScope op("add_bias", {{"m", double(m)}, {"n", double(n)}});
    inner_->add_bias(y, b, m, n);
  }
  void add_column_sums(float* db, const float* dy, int m, int n) override {
    const counters::OpScope op("add_column_sums", {{"m", double(m)}, {"n", double(n)}});
    inner_->add_column_sums(db, dy, m, n);
  }
  bool bf16_native() const override { return inner_->bf16_native(); }
  std::string bf16_missing() const override { return inner_->bf16_missing(); }
  void set_gemm_tuning(bool on) override { inner_->set_gemm_tuning(on); }
  std::vector<ops::GemmChoice> gemm_choices() const override { return inner_->gemm_choices(); }
  double gemm_tuning_seconds() const override { return inner_->gemm_tuning_seconds(); }
  double peak_gflops(Precision p, int threads, double seconds) override {
    const counters::OpScope op(
        "peak_gflops", {{"bf16", double(p == Precision::kBF16)}, {"threads", double(threads)}});
    return inner_->peak_gflops(p, threads, seconds);
  }
  void layernorm_row_sums(double* sums, const float* x, int m, int c) override {
    const counters::OpScope op("layernorm_row_sums", {{"m", double(m)}, {"c", double(c)}});
    inner_->layernorm_row_sums(sums, x, m, c);
  }
  void layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                       const float* gamma, const float* beta, int m, int c, int c_total,
                       float eps) override {
    const counters::OpScope op("layernorm_apply",
                               {{"m", double(m)}, {"c", double(c)}, {"c_total", double(c_total)}});
    inner_->layernorm_apply(y, mean, rstd, sums, x, gamma, beta, m, c, c_total, eps);
  }
  void layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd, const double* sums,
                            const float* x, const float* gamma, const float* beta, int m, int c,
                            int c_total, float eps) override {
    const counters::OpScope op("layernorm_apply_bf16",
                               {{"m", double(m)}, {"c", double(c)}, {"c_total", double(c_total)}});
    inner_->layernorm_apply_bf16(y_bf16, y, mean, rstd, sums, x, gamma, beta, m, c, c_total, eps);
  }
  void layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean, float* rstd,
                           const float* x, const float* gamma, const float* beta, int m, int c,
                           float eps) override {
    const counters::OpScope op("layernorm_rows_bf16", {{"m", double(m)}, {"c", double(c)}});
    inner_->layernorm_rows_bf16(sums, y_bf16, y, mean, rstd, x, gamma, beta, m, c, eps);
  }
  void layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                               const float* rstd, const float* gamma, int m, int c) override {
    const counters::OpScope op("layernorm_backward_sums", {{"m", double(m)}, {"c", double(c)}});
    inner_->layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, m, c);
  }
  void layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                                const float* dy, const float* x, const float* mean,
                                const float* rstd, const float* gamma, int m, int c,
                                int c_total) override {
    const counters::OpScope op("layernorm_backward_apply",
                               {{"m", double(m)}, {"c", double(c)}, {"c_total", double(c_total)}});
    inner_->layernorm_backward_apply(dx, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, m, c,
                                     c_total);
  }
  void layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma, float* dbeta,
                                    const double* sums, const float* dy, const float* x,
                                    const float* mean, const float* rstd, const float* gamma, int m,
                                    int c, int c_total) override {
    const counters::OpScope op("layernorm_backward_apply_add",
                               {{"m", double(m)}, {"c", double(c)}, {"c_total", double(c_total)}});
    inner_->layernorm_backward_apply_add(dres, scratch, dgamma, dbeta, sums, dy, x, mean, rstd,
                                         gamma, m, c, c_total);
  }
  void rmsnorm_row_sums(double* sums, const float* x, int m, int c) override {
    const counters::OpScope op("rmsnorm_row_sums", {{"m", double(m)}, {"c", double(c)}});
    inner_->rmsnorm_row_sums(sums, x, m, c);
  }
  void rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x, const float* gamma,
                     int m, int c, int c_total, float eps) override {
    const counters::OpScope op("rmsnorm_apply",
                               {{"m", double(m)}, {"c", double(c)}, {"c_total", double(c_total)}});
    inner_->rmsnorm_apply(y, rstd, sums, x, gamma, m, c, c_total, eps);
  }
  void rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                             int m, int c) override {
    const counters::OpScope op("rmsnorm_backward_sums", {{"m", double(m)}, {"c", double(c)}});
    inner_->rmsnorm_backward_sums(sums, dy, x, gamma, m, c);
  }
  void rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                              const float* x, const float* rstd, const float* gamma, int m, int c,
                              int c_total) override {
    const counters::OpScope op("rmsnorm_backward_apply",
                               {{"m", double(m)}, {"c", double(c)}, {"c_total", double(c_total)}});
    inner_->rmsnorm_backward_apply(dx, dgamma, sums, dy, x, rstd, gamma, m, c, c_total);
  }
  void gelu_forward(float* y, const float* x, long n) override {
    const counters::OpScope op("gelu_forward", {{"n", double(n)}});
    inner_->gelu_forward(y, x, n);
  }
  void gelu_backward(float* dx, const float* dy, const float* x, long n) override {
    const counters::OpScope op("gelu_backward", {{"n", double(n)}});
    inner_->gelu_backward(dx, dy, x, n);
  }
  void swiglu_forward(float* y, const float* gate, const float* up, long n) override {
    const counters::OpScope op("swiglu_forward", {{"n", double(n)}});
    inner_->swiglu_forward(y, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                       const float* up, long n) override {
    const counters::OpScope op("swiglu_backward", {{"n", double(n)}});
    inner_->swiglu_backward(dgate, dup, dy, gate, up, n);
  }
  void add(float* y, const float* a, const float* b, long n) override {
    const counters::OpScope op("add", {{"n", double(n)}});
    inner_->add(y, a, b, n);
  }
  void add_inplace(float* y, const float* x, long n) override {
    const counters::OpScope op("add_inplace", {{"n", double(n)}});
    inner_->add_inplace(y, x, n);
  }
  void attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                         const ops::AttentionShape& s) override {
    const counters::OpScope op("attention_forward", attention_forward_args(q, k, v, s));
    inner_->attention_forward(out, lse, q, k, v, s);
  }
  void attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q, Operand k,
                              Operand v, const ops::AttentionShape& s) override {
    const counters::OpScope op("attention_forward_bf16", attention_forward_args(q, k, v, s));
    inner_->attention_forward_bf16(out_bf16, out, lse, q, k, v, s);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, Operand out,
                          const float* lse, Operand q, Operand k, Operand v,
                          const ops::AttentionShape& s) override {
    const counters::OpScope op("attention_backward", {{"out_bf16", double(out.is_bf16())},
                                                      {"q_bf16", double(q.is_bf16())},
                                                      {"k_bf16", double(k.is_bf16())},
                                                      {"v_bf16", double(v.is_bf16())},
                                                      {"B", double(s.B)},
                                                      {"T", double(s.T)},
                                                      {"NH", double(s.NH)},
                                                      {"NKV", double(s.NKV)},
                                                      {"hs", double(s.hs)}});
    inner_->attention_backward(dq, dk, dv, dout, out, lse, q, k, v, s);
  }
  void attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                        float* k_cache, float* v_cache,
                        const ops::CachedAttentionShape& s) override {
    const counters::OpScope op("attention_cached", {});
    inner_->attention_cached(out, q, k_new, v_new, k_cache, v_cache, s);
  }
  void rope_forward(float* x, int B, int T, int nheads, int hs, int stride,
                    const ops::RopeSpec& rope, int pos0) override {
    const counters::OpScope op("rope_forward", {{"B", double(B)},
                                                {"T", double(T)},
                                                {"nheads", double(nheads)},
                                                {"hs", double(hs)},
                                                {"pos0", double(pos0)}});
    inner_->rope_forward(x, B, T, nheads, hs, stride, rope, pos0);
  }
  void rope_backward(float* dx, int B, int T, int nheads, int hs, int stride,
                     const ops::RopeSpec& rope) override {
    const counters::OpScope op(
        "rope_backward",
        {{"B", double(B)}, {"T", double(T)}, {"nheads", double(nheads)}, {"hs", double(hs)}});
    inner_->rope_backward(dx, B, T, nheads, hs, stride, rope);
  }
  void to_bf16(bf16* out, const float* in, int64_t n) override {
    const counters::OpScope op("to_bf16", {{"n", double(n)}});
    inner_->to_bf16(out, in, n);
  }
  void to_float(float* out, const bf16* in, int64_t n) override {
    const counters::OpScope op("to_float", {{"n", double(n)}});
    inner_->to_float(out, in, n);
  }
  void to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) override {
    const counters::OpScope op("to_bf16_column_sums", {{"m", double(m)}, {"n", double(n)}});
    inner_->to_bf16_column_sums(out, db, in, m, n);
  }
  void ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                      const float* weight, int rows, int Vloc, int v0, int V) override {
    const counters::OpScope op("ce_local_stats",
                               {{"rows", double(rows)}, {"Vloc", double(Vloc)}, {"V", double(V)}});
    inner_->ce_local_stats(stats, logits, targets, weight, rows, Vloc, v0, V);
  }
  void ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                  double* total) override {
    const counters::OpScope op("ce_combine", {{"rows", double(rows)}, {"parts", double(parts)}});
    inner_->ce_combine(lse, gathered, weight, rows, parts, total);
  }
  int lm_head_chunk_rows(int64_t bytes_per_row) const override {
    return inner_->lm_head_chunk_rows(bytes_per_row);
  }
  void ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                  double denominator, int rows, int Vloc, int v0, int V) override {
    const counters::OpScope op("ce_dlogits",
                               {{"rows", double(rows)}, {"Vloc", double(Vloc)}, {"V", double(V)}});
    inner_->ce_dlogits(logits, lse, targets, weight, denominator, rows, Vloc, v0, V);
  }
  void ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse, const int32_t* targets,
                       const float* weight, double denominator, int rows, int Vloc, int v0,
                       int V) override {
    const counters::OpScope op("ce_dlogits_bf16",
                               {{"rows", double(rows)}, {"Vloc", double(Vloc)}, {"V", double(V)}});
    inner_->ce_dlogits_bf16(dlogits, logits, lse, targets, weight, denominator, rows, Vloc, v0, V);
  }
  void embedding_range_forward(float* out, const int32_t* tokens, Operand w, int v0, int rows,
                               int m, int C) override {
    const counters::OpScope op("embedding_range_forward", {{"w_bf16", double(w.is_bf16())},
                                                           {"rows", double(rows)},
                                                           {"m", double(m)},
                                                           {"C", double(C)}});
    inner_->embedding_range_forward(out, tokens, w, v0, rows, m, C);
  }
  void embedding_range_backward(float* dw, const float* dout, const int32_t* tokens, int v0,
                                int rows, int m, int C) override {
    const counters::OpScope op("embedding_range_backward",
                               {{"rows", double(rows)}, {"m", double(m)}, {"C", double(C)}});
    inner_->embedding_range_backward(dw, dout, tokens, v0, rows, m, C);
  }
  void embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk, int64_t c0,
                               int64_t n, int v0, int rows, int m, int C) override {
    const counters::OpScope op("embedding_chunk_forward", {{"chunk_bf16", double(chunk.is_bf16())},
                                                           {"n", double(n)},
                                                           {"rows", double(rows)},
                                                           {"m", double(m)},
                                                           {"C", double(C)}});
    inner_->embedding_chunk_forward(out, tokens, chunk, c0, n, v0, rows, m, C);
  }
  void embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens, int64_t c0,
                                int64_t n, int v0, int rows, int m, int C) override {
    const counters::OpScope op(
        "embedding_chunk_backward",
        {{"n", double(n)}, {"rows", double(rows)}, {"m", double(m)}, {"C", double(C)}});
    inner_->embedding_chunk_backward(dchunk, dout, tokens, c0, n, v0, rows, m, C);
  }
  void position_add(float* out, Operand wpe, int m, int T, int C) override {
    const counters::OpScope op("position_add", {{"wpe_bf16", double(wpe.is_bf16())},
                                                {"m", double(m)},
                                                {"T", double(T)},
                                                {"C", double(C)}});
    inner_->position_add(out, wpe, m, T, C);
  }
  void position_backward(float* dwpe, const float* dout, int m, int T, int C) override {
    const counters::OpScope op("position_backward",
                               {{"m", double(m)}, {"T", double(T)}, {"C", double(C)}});
    inner_->position_backward(dwpe, dout, m, T, C);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr, int step,
                    bool decay, const ops::AdamWConfig& c, float grad_scale,
                    bf16* param_bf16) override {
    const counters::OpScope op(
        "adamw_update",
        {{"n", double(n)}, {"decay", double(decay)}, {"bf16_copy", double(param_bf16 != nullptr)}});
    inner_->adamw_update(param, grad, m, v, n, lr, step, decay, c, grad_scale, param_bf16);
  }
  void sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table,
                           int count, int64_t values) override {
    const counters::OpScope op("sum_squares_tensors",
                               {{"tensors", double(count)}, {"n", double(values)}});
    inner_->sum_squares_tensors(total, base, table, count, values);
  }
  void adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                            const ops::FlatTensor* table, int count, int64_t values, float lr,
                            int step, const ops::AdamWConfig& c, float grad_scale, bf16* low,
                            int64_t low_count) override {
    const counters::OpScope op("adamw_update_tensors", {{"tensors", double(count)},
                                                        {"n", double(values)},
                                                        {"bf16_copy", double(low_count)}});
    inner_->adamw_update_tensors(param, grad, m, v, table, count, values, lr, step, c, grad_scale,
                                 low, low_count);
  }
  double sum_squares(const float* g, long n) override {
    const counters::OpScope op("sum_squares", {{"n", double(n)}});
    return inner_->sum_squares(g, n);
  }
  void scale(float* g, float s, long n) override {
    const counters::OpScope op("scale", {{"n", double(n)}});
    inner_->scale(g, s, n);
  }
  void fill(float* x, float value, int64_t n) override {
    const counters::OpScope op("fill", {{"n", double(n)}});
    inner_->fill(x, value, n);
  }
  void copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                 int64_t src_stride) override {
    const counters::OpScope op("copy_rows", {{"rows", double(rows)}, {"cols", double(cols)}});
    inner_->copy_rows(dst, src, rows, cols, src_stride);
  }
  void interleave_vocab_parts(float* out, const float* parts, int num_parts, int m, int Vloc,
                              int V) override {
    const counters::OpScope op("interleave_vocab_parts", {{"num_parts", double(num_parts)},
                                                          {"m", double(m)},
                                                          {"Vloc", double(Vloc)},
                                                          {"V", double(V)}});
    inner_->interleave_vocab_parts(out, parts, num_parts, m, Vloc, V);
  }
  int64_t count_nonfinite(const float* x, int64_t n) override {
    const counters::OpScope op("count_nonfinite", {{"n", double(n)}});
    return inner_->count_nonfinite(x, n);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace

std::unique_ptr<Backend> make_counting_backend(std::unique_ptr<Backend> inner) {
  return std::make_unique<CountingBackend>(std::move(inner));
}

}  // namespace dendrite
