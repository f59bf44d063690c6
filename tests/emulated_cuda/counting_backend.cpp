// The counting Backend (counting_backend.h): every method of backend.h
// forwarded, the ops inside a counters::OpScope that names them and records
// their sizes (ints, whether an operand is bf16, the attention shape; not
// pointers, learning rates or strides). An op is Backend's public method,
// which checks the arguments, and its protected do_ method: each do_ here
// opens the scope, named as the op, and calls the inner backend's public
// method. An op added to Backend needs its do_ here (it is pure: the build
// fails without it); a virtual added with a default must be forwarded too,
// or the default would run instead of the wrapped backend's.
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

// The norms' sizes: the row sums' (and layernorm_rows_bf16's) m and c; the
// others' with the full width too.
counters::OpArgs row_sums_args(const ops::NormShape& s) {
  return {{"m", double(s.m)}, {"c", double(s.c)}};
}
counters::OpArgs norm_args(const ops::NormShape& s) {
  return {{"m", double(s.m)}, {"c", double(s.c)}, {"c_total", double(s.c_total)}};
}

// SwiGLU's bf16 forms: n values as the flat ops count them, and the rows'
// stride (twice the width where one product wrote gate and up).
counters::OpArgs glu_args(const ops::GluRows& s) {
  return {{"n", double(s.count())}, {"width", double(s.width)}, {"stride", double(s.stride)}};
}

// The loss's sizes (not v0, which moves no bytes).
counters::OpArgs vocab_args(const ops::VocabShape& s) {
  return {{"rows", double(s.rows)}, {"Vloc", double(s.Vloc)}, {"V", double(s.V)}};
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
  bool bf16_gemm_native() const override { return inner_->bf16_gemm_native(); }
  std::string bf16_gemm_missing() const override { return inner_->bf16_gemm_missing(); }
  void set_gemm_tuning(bool on) override { inner_->set_gemm_tuning(on); }
  std::vector<ops::GemmChoice> gemm_choices() const override { return inner_->gemm_choices(); }
  double gemm_tuning_seconds() const override { return inner_->gemm_tuning_seconds(); }
  std::vector<std::string> gemm_plans() const override { return inner_->gemm_plans(); }
  double measure_peak_gflops(Precision p, int threads, double seconds) override {
    const counters::OpScope op("measure_peak_gflops", {{"bf16", double(p == Precision::kBF16)},
                                                       {"threads", double(threads)}});
    return inner_->measure_peak_gflops(p, threads, seconds);
  }
  std::string device_profile_missing() const override { return inner_->device_profile_missing(); }
  void start_device_profile() override { inner_->start_device_profile(); }
  std::vector<DeviceActivity> stop_device_profile() override {
    return inner_->stop_device_profile();
  }

 protected:
  // ---- the ops: Backend's public method has checked the arguments; the
  // inner backend's checks them again and runs its own do_ method ----
  void do_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, Operand A, int lda,
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
  void do_linear_forward(float* y, Operand x, Operand w, const float* b,
                         const ops::LinearShape& s) override {
    const counters::OpScope op("linear_forward", {{"x_bf16", double(x.is_bf16())},
                                                  {"w_bf16", double(w.is_bf16())},
                                                  {"bias", double(b != nullptr)},
                                                  {"m", double(s.m)},
                                                  {"k", double(s.k)},
                                                  {"n", double(s.n)}});
    inner_->linear_forward(y, x, w, b, s);
  }
  void do_linear_forward_fused(float* y, Operand x, Operand w, const ops::LinearShape& s,
                               const ops::LinearEpilogue& e) override {
    const counters::OpScope op("linear_forward_fused",
                               {{"x_bf16", double(x.is_bf16())},
                                {"w_bf16", double(w.is_bf16())},
                                {"bias", double(e.bias != nullptr)},
                                {"gelu", double(e.gelu)},
                                {"residual", double(e.residual != nullptr)},
                                {"bias_bf16", double(ops::adds_bf16_bias(e))},
                                {"y_bf16", double(e.y_bf16 != nullptr)},
                                {"m", double(s.m)},
                                {"k", double(s.k)},
                                {"n", double(s.n)}});
    inner_->linear_forward_fused(y, x, w, s, e);
  }
  void do_linear_backward_input_dgelu(float* dx, Operand dy, Operand w, const float* gelu_input,
                                      const ops::LinearShape& s) override {
    const counters::OpScope op("linear_backward_input_dgelu", {{"dy_bf16", double(dy.is_bf16())},
                                                               {"w_bf16", double(w.is_bf16())},
                                                               {"m", double(s.m)},
                                                               {"k", double(s.k)},
                                                               {"n", double(s.n)}});
    inner_->linear_backward_input_dgelu(dx, dy, w, gelu_input, s);
  }
  void do_linear_backward_input(float* dx, Operand dy, Operand w, const ops::LinearShape& s,
                                bool accumulate) override {
    const counters::OpScope op("linear_backward_input", {{"dy_bf16", double(dy.is_bf16())},
                                                         {"w_bf16", double(w.is_bf16())},
                                                         {"m", double(s.m)},
                                                         {"k", double(s.k)},
                                                         {"n", double(s.n)},
                                                         {"accumulate", double(accumulate)}});
    inner_->linear_backward_input(dx, dy, w, s, accumulate);
  }
  void do_linear_backward_weight(float* dw, Operand dy, Operand x, const ops::LinearShape& s,
                                 bool accumulate) override {
    const counters::OpScope op("linear_backward_weight", {{"dy_bf16", double(dy.is_bf16())},
                                                          {"x_bf16", double(x.is_bf16())},
                                                          {"m", double(s.m)},
                                                          {"k", double(s.k)},
                                                          {"n", double(s.n)},
                                                          {"accumulate", double(accumulate)}});
    inner_->linear_backward_weight(dw, dy, x, s, accumulate);
  }
  void do_add_bias(float* y, const float* b, int m, int n) override {
    const counters::OpScope op("add_bias", {{"m", double(m)}, {"n", double(n)}});
    inner_->add_bias(y, b, m, n);
  }
  void do_add_column_sums(float* db, const float* dy, int m, int n) override {
    const counters::OpScope op("add_column_sums", {{"m", double(m)}, {"n", double(n)}});
    inner_->add_column_sums(db, dy, m, n);
  }
  void do_layernorm_row_sums(double* sums, const float* x, const ops::NormShape& s) override {
    const counters::OpScope op("layernorm_row_sums", row_sums_args(s));
    inner_->layernorm_row_sums(sums, x, s);
  }
  void do_layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                          const float* gamma, const float* beta, const ops::NormShape& s,
                          float eps) override {
    const counters::OpScope op("layernorm_apply", norm_args(s));
    inner_->layernorm_apply(y, mean, rstd, sums, x, gamma, beta, s, eps);
  }
  void do_layernorm_apply_bf16(bf16* y_bf16, float* y, float* mean, float* rstd, const double* sums,
                               const float* x, const float* gamma, const float* beta,
                               const ops::NormShape& s, float eps) override {
    const counters::OpScope op("layernorm_apply_bf16", norm_args(s));
    inner_->layernorm_apply_bf16(y_bf16, y, mean, rstd, sums, x, gamma, beta, s, eps);
  }
  void do_layernorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* mean, float* rstd,
                              const float* x, const float* gamma, const float* beta,
                              const ops::NormShape& s, float eps) override {
    const counters::OpScope op("layernorm_rows_bf16", row_sums_args(s));
    inner_->layernorm_rows_bf16(sums, y_bf16, y, mean, rstd, x, gamma, beta, s, eps);
  }
  void do_layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                                  const float* rstd, const float* gamma,
                                  const ops::NormShape& s) override {
    const counters::OpScope op("layernorm_backward_sums", row_sums_args(s));
    inner_->layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, s);
  }
  void do_layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                                   const float* dy, const float* x, const float* mean,
                                   const float* rstd, const float* gamma,
                                   const ops::NormShape& s) override {
    const counters::OpScope op("layernorm_backward_apply", norm_args(s));
    inner_->layernorm_backward_apply(dx, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s);
  }
  void do_layernorm_backward_apply_add(float* dres, float* scratch, float* dgamma, float* dbeta,
                                       const double* sums, const float* dy, const float* x,
                                       const float* mean, const float* rstd, const float* gamma,
                                       const ops::NormShape& s) override {
    const counters::OpScope op("layernorm_backward_apply_add", norm_args(s));
    inner_->layernorm_backward_apply_add(dres, scratch, dgamma, dbeta, sums, dy, x, mean, rstd,
                                         gamma, s);
  }
  void do_layernorm_backward_rows_add(double* sums, float* dres, float* scratch, float* dgamma,
                                      float* dbeta, const float* dy, const float* x,
                                      const float* mean, const float* rstd, const float* gamma,
                                      const ops::NormShape& s) override {
    const counters::OpScope op("layernorm_backward_rows_add", row_sums_args(s));
    inner_->layernorm_backward_rows_add(sums, dres, scratch, dgamma, dbeta, dy, x, mean, rstd,
                                        gamma, s);
  }
  void do_layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums,
                                           float* dres, float* scratch, float* dgamma, float* dbeta,
                                           const float* dy, const float* x, const float* mean,
                                           const float* rstd, const float* gamma,
                                           const ops::NormShape& s) override {
    const counters::OpScope op(
        "layernorm_backward_rows_add_bf16",
        {{"m", double(s.m)}, {"c", double(s.c)}, {"bias", double(next.db != nullptr)}});
    inner_->layernorm_backward_rows_add_bf16(next, sums, dres, scratch, dgamma, dbeta, dy, x, mean,
                                             rstd, gamma, s);
  }
  void do_rmsnorm_row_sums(double* sums, const float* x, const ops::NormShape& s) override {
    const counters::OpScope op("rmsnorm_row_sums", row_sums_args(s));
    inner_->rmsnorm_row_sums(sums, x, s);
  }
  void do_rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x,
                        const float* gamma, const ops::NormShape& s, float eps) override {
    const counters::OpScope op("rmsnorm_apply", norm_args(s));
    inner_->rmsnorm_apply(y, rstd, sums, x, gamma, s, eps);
  }
  void do_rmsnorm_rows_bf16(double* sums, bf16* y_bf16, float* y, float* rstd, const float* x,
                            const float* gamma, const ops::NormShape& s, float eps) override {
    const counters::OpScope op("rmsnorm_rows_bf16", row_sums_args(s));
    inner_->rmsnorm_rows_bf16(sums, y_bf16, y, rstd, x, gamma, s, eps);
  }
  void do_rmsnorm_backward_rows_add(const ops::ResidualGradBf16* next, double* sums, float* dres,
                                    float* scratch, float* dgamma, const float* dy, const float* x,
                                    const float* rstd, const float* gamma,
                                    const ops::NormShape& s) override {
    if (next) {
      const counters::OpScope op(
          "rmsnorm_backward_rows_add_bf16",
          {{"m", double(s.m)}, {"c", double(s.c)}, {"bias", double(next->db != nullptr)}});
      inner_->rmsnorm_backward_rows_add_bf16(*next, sums, dres, scratch, dgamma, dy, x, rstd, gamma,
                                             s);
    } else {
      const counters::OpScope op("rmsnorm_backward_rows_add", row_sums_args(s));
      inner_->rmsnorm_backward_rows_add(sums, dres, scratch, dgamma, dy, x, rstd, gamma, s);
    }
  }
  void do_rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                                const ops::NormShape& s) override {
    const counters::OpScope op("rmsnorm_backward_sums", row_sums_args(s));
    inner_->rmsnorm_backward_sums(sums, dy, x, gamma, s);
  }
  void do_rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                                 const float* x, const float* rstd, const float* gamma,
                                 const ops::NormShape& s) override {
    const counters::OpScope op("rmsnorm_backward_apply", norm_args(s));
    inner_->rmsnorm_backward_apply(dx, dgamma, sums, dy, x, rstd, gamma, s);
  }
  void do_gelu_forward(float* y, const float* x, long n) override {
    const counters::OpScope op("gelu_forward", {{"n", double(n)}});
    inner_->gelu_forward(y, x, n);
  }
  void do_gelu_backward(float* dx, const float* dy, const float* x, long n) override {
    const counters::OpScope op("gelu_backward", {{"n", double(n)}});
    inner_->gelu_backward(dx, dy, x, n);
  }
  void do_swiglu_forward(float* y, const float* gate, const float* up, long n) override {
    const counters::OpScope op("swiglu_forward", {{"n", double(n)}});
    inner_->swiglu_forward(y, gate, up, n);
  }
  void do_swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                          const float* up, long n) override {
    const counters::OpScope op("swiglu_backward", {{"n", double(n)}});
    inner_->swiglu_backward(dgate, dup, dy, gate, up, n);
  }
  void do_swiglu_forward_bf16(bf16* y_bf16, float* y, const float* gate, const float* up,
                              const ops::GluRows& s) override {
    const counters::OpScope op("swiglu_forward_bf16", glu_args(s));
    inner_->swiglu_forward_bf16(y_bf16, y, gate, up, s);
  }
  void do_swiglu_backward_bf16(bf16* dgate_bf16, bf16* dup_bf16, float* dgate, float* dup,
                               const float* dy, const float* gate, const float* up,
                               const ops::GluRows& s) override {
    const counters::OpScope op("swiglu_backward_bf16", glu_args(s));
    inner_->swiglu_backward_bf16(dgate_bf16, dup_bf16, dgate, dup, dy, gate, up, s);
  }
  void do_add(float* y, const float* a, const float* b, long n) override {
    const counters::OpScope op("add", {{"n", double(n)}});
    inner_->add(y, a, b, n);
  }
  void do_add_inplace(float* y, const float* x, long n) override {
    const counters::OpScope op("add_inplace", {{"n", double(n)}});
    inner_->add_inplace(y, x, n);
  }
  void do_attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                            const ops::AttentionShape& s) override {
    const counters::OpScope op("attention_forward", attention_forward_args(q, k, v, s));
    inner_->attention_forward(out, lse, q, k, v, s);
  }
  void do_attention_forward_bf16(bf16* out_bf16, float* out, float* lse, Operand q, Operand k,
                                 Operand v, const ops::AttentionShape& s) override {
    const counters::OpScope op("attention_forward_bf16", attention_forward_args(q, k, v, s));
    inner_->attention_forward_bf16(out_bf16, out, lse, q, k, v, s);
  }
  void do_attention_backward(float* dq, float* dk, float* dv, const float* dout, Operand out,
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
  void do_attention_backward_bf16(const ops::AttentionGradsBf16& g, const float* dout, Operand out,
                                  const float* lse, Operand q, Operand k, Operand v,
                                  const ops::AttentionShape& s) override {
    const counters::OpScope op("attention_backward_bf16", {{"out_bf16", double(out.is_bf16())},
                                                           {"q_bf16", double(q.is_bf16())},
                                                           {"B", double(s.B)},
                                                           {"T", double(s.T)},
                                                           {"NH", double(s.NH)},
                                                           {"NKV", double(s.NKV)},
                                                           {"hs", double(s.hs)},
                                                           {"bias_q", double(g.db_q != nullptr)},
                                                           {"bias_k", double(g.db_k != nullptr)},
                                                           {"bias_v", double(g.db_v != nullptr)}});
    inner_->attention_backward_bf16(g, dout, out, lse, q, k, v, s);
  }
  void do_attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                           float* k_cache, float* v_cache,
                           const ops::CachedAttentionShape& s) override {
    const counters::OpScope op("attention_cached", {});
    inner_->attention_cached(out, q, k_new, v_new, k_cache, v_cache, s);
  }
  void do_rope_forward(float* x, const ops::RopeShape& s, const ops::RopeSpec& rope) override {
    const counters::OpScope op("rope_forward", {{"B", double(s.B)},
                                                {"T", double(s.T)},
                                                {"nheads", double(s.nheads)},
                                                {"hs", double(s.hs)},
                                                {"pos0", double(s.pos0)}});
    inner_->rope_forward(x, s, rope);
  }
  void do_rope_backward(float* dx, const ops::RopeShape& s, const ops::RopeSpec& rope) override {
    const counters::OpScope op("rope_backward", {{"B", double(s.B)},
                                                 {"T", double(s.T)},
                                                 {"nheads", double(s.nheads)},
                                                 {"hs", double(s.hs)}});
    inner_->rope_backward(dx, s, rope);
  }
  void do_rope_bf16(bf16* low, float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
                    bool inverse) override {
    const counters::OpScope op(inverse ? "rope_backward_bf16" : "rope_forward_bf16",
                               {{"B", double(s.B)},
                                {"T", double(s.T)},
                                {"nheads", double(s.nheads)},
                                {"hs", double(s.hs)},
                                {"width", double(s.stride)}});
    if (inverse)
      inner_->rope_backward_bf16(low, x, s, rope);
    else
      inner_->rope_forward_bf16(low, x, s, rope);
  }
  void do_to_bf16(bf16* out, const float* in, int64_t n) override {
    const counters::OpScope op("to_bf16", {{"n", double(n)}});
    inner_->to_bf16(out, in, n);
  }
  void do_to_float(float* out, const bf16* in, int64_t n) override {
    const counters::OpScope op("to_float", {{"n", double(n)}});
    inner_->to_float(out, in, n);
  }
  void do_to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) override {
    const counters::OpScope op("to_bf16_column_sums", {{"m", double(m)}, {"n", double(n)}});
    inner_->to_bf16_column_sums(out, db, in, m, n);
  }
  void do_ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                         const float* weight, const ops::VocabShape& s) override {
    const counters::OpScope op("ce_local_stats", vocab_args(s));
    inner_->ce_local_stats(stats, logits, targets, weight, s);
  }
  void do_ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                     double* total) override {
    const counters::OpScope op("ce_combine", {{"rows", double(rows)}, {"parts", double(parts)}});
    inner_->ce_combine(lse, gathered, weight, rows, parts, total);
  }
  void do_ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                     double denominator, const ops::VocabShape& s) override {
    const counters::OpScope op("ce_dlogits", vocab_args(s));
    inner_->ce_dlogits(logits, lse, targets, weight, denominator, s);
  }
  void do_ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse, const int32_t* targets,
                          const float* weight, double denominator,
                          const ops::VocabShape& s) override {
    const counters::OpScope op("ce_dlogits_bf16", vocab_args(s));
    inner_->ce_dlogits_bf16(dlogits, logits, lse, targets, weight, denominator, s);
  }
  void do_ce_stats_dlogits_bf16(float* stats, bf16* dlogits, float* logits, const int32_t* targets,
                                const float* weight, double denominator,
                                const ops::VocabShape& s) override {
    const counters::OpScope op("ce_stats_dlogits_bf16", vocab_args(s));
    inner_->ce_stats_dlogits_bf16(stats, dlogits, logits, targets, weight, denominator, s);
  }
  void do_embedding_range_forward(float* out, const int32_t* tokens, Operand w,
                                  const ops::EmbeddingShape& s) override {
    const counters::OpScope op("embedding_range_forward", {{"w_bf16", double(w.is_bf16())},
                                                           {"rows", double(s.rows)},
                                                           {"m", double(s.m)},
                                                           {"C", double(s.C)}});
    inner_->embedding_range_forward(out, tokens, w, s);
  }
  void do_embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                                   const ops::EmbeddingShape& s) override {
    const counters::OpScope op("embedding_range_backward",
                               {{"rows", double(s.rows)}, {"m", double(s.m)}, {"C", double(s.C)}});
    inner_->embedding_range_backward(dw, dout, tokens, s);
  }
  void do_embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk,
                                  const ops::TableChunk& piece,
                                  const ops::EmbeddingShape& s) override {
    const counters::OpScope op("embedding_chunk_forward", {{"chunk_bf16", double(chunk.is_bf16())},
                                                           {"n", double(piece.n)},
                                                           {"rows", double(s.rows)},
                                                           {"m", double(s.m)},
                                                           {"C", double(s.C)}});
    inner_->embedding_chunk_forward(out, tokens, chunk, piece, s);
  }
  void do_embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                                   const ops::TableChunk& piece,
                                   const ops::EmbeddingShape& s) override {
    const counters::OpScope op(
        "embedding_chunk_backward",
        {{"n", double(piece.n)}, {"rows", double(s.rows)}, {"m", double(s.m)}, {"C", double(s.C)}});
    inner_->embedding_chunk_backward(dchunk, dout, tokens, piece, s);
  }
  void do_position_add(float* out, Operand wpe, const ops::PositionShape& s) override {
    const counters::OpScope op("position_add", {{"wpe_bf16", double(wpe.is_bf16())},
                                                {"m", double(s.m)},
                                                {"T", double(s.T)},
                                                {"C", double(s.C)}});
    inner_->position_add(out, wpe, s);
  }
  void do_position_backward(float* dwpe, const float* dout, const ops::PositionShape& s) override {
    const counters::OpScope op("position_backward",
                               {{"m", double(s.m)}, {"T", double(s.T)}, {"C", double(s.C)}});
    inner_->position_backward(dwpe, dout, s);
  }
  void do_adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr,
                       int step, bool decay, const ops::AdamWConfig& c, float grad_scale,
                       bf16* param_bf16) override {
    const counters::OpScope op(
        "adamw_update",
        {{"n", double(n)}, {"decay", double(decay)}, {"bf16_copy", double(param_bf16 != nullptr)}});
    inner_->adamw_update(param, grad, m, v, n, lr, step, decay, c, grad_scale, param_bf16);
  }
  void do_sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table,
                              int count, int64_t values) override {
    const counters::OpScope op("sum_squares_tensors",
                               {{"tensors", double(count)}, {"n", double(values)}});
    inner_->sum_squares_tensors(total, base, table, count, values);
  }
  void do_adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                               const ops::FlatTensor* table, int count, int64_t values, float lr,
                               int step, const ops::AdamWConfig& c, float grad_scale, bf16* low,
                               int64_t low_count) override {
    const counters::OpScope op("adamw_update_tensors", {{"tensors", double(count)},
                                                        {"n", double(values)},
                                                        {"bf16_copy", double(low_count)}});
    inner_->adamw_update_tensors(param, grad, m, v, table, count, values, lr, step, c, grad_scale,
                                 low, low_count);
  }
  double do_sum_squares(const float* g, long n) override {
    const counters::OpScope op("sum_squares", {{"n", double(n)}});
    return inner_->sum_squares(g, n);
  }
  void do_scale(float* g, float s, long n) override {
    const counters::OpScope op("scale", {{"n", double(n)}});
    inner_->scale(g, s, n);
  }
  void do_fill(float* x, float value, int64_t n) override {
    const counters::OpScope op("fill", {{"n", double(n)}});
    inner_->fill(x, value, n);
  }
  void do_copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                    int64_t src_stride) override {
    const counters::OpScope op("copy_rows", {{"rows", double(rows)}, {"cols", double(cols)}});
    inner_->copy_rows(dst, src, rows, cols, src_stride);
  }
  void do_interleave_vocab_parts(float* out, const float* parts,
                                 const ops::VocabParts& s) override {
    const counters::OpScope op("interleave_vocab_parts", {{"num_parts", double(s.parts)},
                                                          {"m", double(s.m)},
                                                          {"Vloc", double(s.Vloc)},
                                                          {"V", double(s.V)}});
    inner_->interleave_vocab_parts(out, parts, s);
  }
  int64_t do_count_nonfinite(const float* x, int64_t n) override {
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
