// The CUDA backend: the seam of backend/backend.h on one NVIDIA GPU per rank
// (device_setup.h). Memory is device memory (device_memory.h: cudaMalloc,
// counted: device_bytes()); every op is enqueued on one compute stream;
// events are CUDA events on it. GEMMs go through cuBLASLt (gemm.h; its peak:
// gemm_peak.h), the rest through the kernels of kernels.h. The collectives
// reach device memory through the staged transport (staged_communicator.h)
// or NCCL on the backend's streams (comm/nccl/nccl_communicator.h), as
// transport_choice.h finds them possible. The ops are Backend's protected do_
// methods: backend.h has checked their sizes and operand types, so what they
// check here is the device's own limits (scratch, grids, head size).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/backend/cuda/device_memory.h"
#include "dendrite/backend/cuda/device_profile.h"
#include "dendrite/backend/cuda/device_setup.h"
#include "dendrite/backend/cuda/gemm.h"
#include "dendrite/backend/cuda/gemm_peak.h"
#include "dendrite/backend/cuda/kernels.h"
#include "dendrite/backend/cuda/pinned_staging.h"
#include "dendrite/backend/cuda/transport_choice.h"
#include "dendrite/comm/cuda/error_text.h"
#include "dendrite/core/check.h"

namespace dendrite {

namespace {

using cuda::check_cuda;

const void* ptr(Operand o) {
  return o.is_bf16() ? static_cast<const void*>(o.b16) : static_cast<const void*>(o.f32);
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& o)
      : gpu_(cuda::choose_device(o)), transports_(o.transport), gemm_(nullptr) {
    total_ = gpu_.total_bytes;
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (cudaEvent_t& e : events_)
      check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    gemm_ = std::make_unique<cuda::Gemm>(o.tf32, o.gemm_epilogues);
    // Counted with what the run holds.
    memory_ = std::make_unique<cuda::DeviceMemory>(gemm_->workspace_bytes());
    tf32_ = o.tf32;
    epilogues_ = o.gemm_epilogues;
    scratch_ = allocate(cuda::kScratchBytes);
    staging_ = std::make_unique<cuda::PinnedStaging>(kStagingBytes);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    staging_.reset();
    transports_.clear();
    if (scratch_) cudaFree(scratch_);
    if (attention_scratch_) cudaFree(attention_scratch_);
    gemm_.reset();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::kCuda; }
  std::string describe() const override {
    return str("cuda:", gpu_.device, " (", gpu_.name, ", ", total_ >> 20, " MiB; fp32 GEMMs ",
               tf32_ ? "in TF32" : "in full fp32",
               epilogues_ ? std::string() : "; no cuBLASLt epilogues",
               gpu_.shared_by > 1 ? str("; shared by ", gpu_.shared_by, " ranks") : std::string(),
               !transports_.made()        ? ""
               : transports_.on_streams() ? "; collectives over NCCL"
                                          : "; collectives staged through host memory",
               ")");
  }
  // NCCL or the staged transport, the same on every rank (transport_choice.h).
  // Collective over world.
  Communicator& transport(Communicator& world) override {
    return transports_.make(world, *this, stream_, gpu_);
  }
  bool transport_on_streams() const override { return transports_.on_streams(); }
  int64_t device_bytes() const override { return int64_t(memory_->bytes()); }
  int64_t device_peak_bytes() const override { return int64_t(memory_->peak_bytes()); }
  int64_t device_capacity_bytes() const override { return int64_t(total_); }

  // ---- memory ----
  void* allocate(size_t asked) override { return memory_->allocate(asked, stream_); }
  void release(void* p) override { memory_->release(p, stream_); }
  void zero(void* p, size_t bytes) override {
    check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
  }
  std::unique_ptr<SharedArray> allocate_shared(Communicator&, int64_t n, DType t) override {
    return std::make_unique<cuda::DeviceArray>(*this, n, t);
  }
  // Through the pinned ring: no wait (a step's ids and weights); larger ones
  // (parameters at load) from pageable memory, waiting for the copy.
  void upload(void* dst, const void* host, size_t bytes) override {
    if (!bytes || staging_->upload(dst, host, bytes, stream_)) return;
    check_cuda(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync (upload)");
    synchronize("upload");
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (!bytes) return;
    check_cuda(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (download)");
    synchronize("download");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (!bytes || dst == src) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync (device to device)");
  }

  // ---- stream ----
  Event record() override {
    const Event e{++issued_};
    check_cuda(cudaEventRecord(events_[e.seq % events_.size()], stream_), "cudaEventRecord");
    return e;
  }
  void wait(Event e) override {
    // An event recorded so long ago that its slot was reused has completed
    // before the one now in the slot.
    check_cuda(cudaEventSynchronize(events_[e.seq % events_.size()]),
               "cudaEventSynchronize (a kernel before it failed)");
  }

  // ---- GEMM properties and tuning ----
  std::string device_profile_missing() const override { return cuda::device_profile_missing(); }
  void start_device_profile() override {
    DENDRITE_CHECK(!profile_, "profile: start_device_profile was called twice");
    const std::string missing = device_profile_missing();
    DENDRITE_CHECK(missing.empty(), "profile: ", missing);
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    profile_ = std::make_unique<cuda::DeviceProfile>();
  }
  std::vector<DeviceActivity> stop_device_profile() override {
    DENDRITE_CHECK(profile_, "profile: stop_device_profile without start_device_profile");
    // The collectives' streams end before the compute stream's work that reads them.
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    std::vector<DeviceActivity> got = profile_->finish();
    profile_.reset();
    return got;
  }
  bool bf16_gemm_native() const override { return true; }
  std::string bf16_gemm_missing() const override { return ""; }
  // The fastest of cuBLASLt's picks with the first's bits, per shape (gemm_tuning.cpp).
  void set_gemm_tuning(bool on) override { gemm_->set_tuning(on); }
  std::vector<ops::GemmChoice> gemm_choices() const override { return gemm_->choices(); }
  double gemm_tuning_seconds() const override { return gemm_->tuning_seconds(); }
  std::vector<std::string> gemm_plans() const override { return gemm_->shapes(); }
  double measure_peak_gflops(Precision p, int, double seconds) override {
    return cuda::gemm_peak_gflops(*this, *gemm_, stream_, p, seconds);  // gemm_peak.h
  }

  cudaStream_t stream() const { return stream_; }

 protected:
  // ---- the ops; the operands of one product, or of one attention, are of
  // one precision (backend.h checked it) ----

  // ---- GEMMs ----
  void do_gemm(bool ta, bool tb, int M, int N, int K, float alpha, Operand A, int lda, Operand B,
               int ldb, float beta, float* C, int ldc) override {
    gemm_->run(ta, tb, M, N, K, alpha, ptr(A), lda, ptr(B), ldb, beta, C, ldc, A.is_bf16(),
               stream_);
  }
  void do_linear_forward(float* y, Operand x, Operand w, const float* b,
                         const ops::LinearShape& s) override {
    ops::LinearEpilogue e;
    e.bias = b;
    do_linear_forward_fused(y, x, w, s, e);
  }
  // The epilogue in the product where cuBLASLt offers it (gemm.h: bias and
  // GELU into fp32, bf16 alone; for GELU with a bf16 output, the bias, then
  // one kernel); what it does not, as the kernels the CPU's separate ops mirror.
  void do_linear_forward_fused(float* y, Operand x, Operand w, const ops::LinearShape& s,
                               const ops::LinearEpilogue& e) override {
    const int m = s.m, k = s.k, n = s.n;
    const bool low = x.is_bf16();
    const int64_t mn = int64_t(m) * n;
    if (e.gelu && e.y_bf16) {
      // cuBLASLt keeps GELU's input in D's type, and the backward reads it in
      // fp32: the product stops at GELU's input (with the bias), and one
      // kernel writes GELU's output in bf16 alone (y is scratch: matmul.h).
      cuda::Gemm::Epilogue biased;
      biased.bias = e.bias;
      if (!gemm_->run_fused(false, true, m, n, k, ptr(x), k, ptr(w), k, e.pre_gelu, low, biased,
                            stream_)) {
        gemm_->run(false, true, m, n, k, 1.0f, ptr(x), k, ptr(w), k, 0.0f, e.pre_gelu, n, low,
                   stream_);
        if (e.bias) cuda::add_bias(e.pre_gelu, e.bias, m, n, stream_);
      }
      cuda::gelu_forward_bf16(e.y_bf16, e.pre_gelu, mn, stream_);
      return;
    }
    // bf16 out of the product: alone, or after a bias it takes in bf16 (matmul.h)
    const bool low_bias = ops::adds_bf16_bias(e);
    const bool bf16_alone = e.y_bf16 && (!e.bias || low_bias) && !e.gelu && !e.residual;
    cuda::Gemm::Epilogue fused;
    fused.bias = low_bias ? nullptr : e.bias;
    fused.bias_bf16 = low_bias ? e.bias_bf16 : nullptr;
    fused.residual = e.residual;
    fused.gelu = e.gelu;
    fused.gelu_input = e.pre_gelu;
    fused.out_bf16 = bf16_alone;
    void* d = bf16_alone ? static_cast<void*>(e.y_bf16) : static_cast<void*>(y);  // [m, n]
    if (gemm_->run_fused(false, true, m, n, k, ptr(x), k, ptr(w), k, d, low, fused, stream_)) {
      if (e.y_bf16 && !bf16_alone) cuda::to_bf16(e.y_bf16, y, mn, stream_);
      return;
    }
    float* t = e.gelu ? e.pre_gelu : y;  // [m, n]
    gemm_->run(false, true, m, n, k, 1.0f, ptr(x), k, ptr(w), k, 0.0f, t, n, low, stream_);
    if (low_bias) {  // widened into the scratch, then added as the CPU adds it
      DENDRITE_CHECK(size_t(n) * sizeof(float) <= cuda::kScratchBytes, "linear_forward: a bias of ",
                     n, " outputs does not fit the scratch");
      float* b = static_cast<float*>(scratch_);
      cuda::to_float(b, e.bias_bf16, n, stream_);
      cuda::add_bias(t, b, m, n, stream_);
    } else if (e.bias) {
      cuda::add_bias(t, e.bias, m, n, stream_);
    }
    if (e.gelu) cuda::gelu_forward(y, t, mn, stream_);
    if (e.residual) cuda::add(y, e.residual, y, mn, stream_);
    if (e.y_bf16) cuda::to_bf16(e.y_bf16, y, mn, stream_);
  }
  void do_linear_backward_input(float* dx, Operand dy, Operand w, const ops::LinearShape& s,
                                bool accumulate) override {
    gemm_->run(false, false, s.m, s.k, s.n, 1.0f, ptr(dy), s.n, ptr(w), s.k,
               accumulate ? 1.0f : 0.0f, dx, s.k, dy.is_bf16(), stream_);
  }
  // cuBLASLt's DGELU epilogue where it offers it, else the product and the
  // gelu_backward kernel.
  void do_linear_backward_input_dgelu(float* dx, Operand dy, Operand w, const float* gelu_input,
                                      const ops::LinearShape& s) override {
    const int m = s.m, k = s.k, n = s.n;
    const bool low = dy.is_bf16();
    cuda::Gemm::Epilogue e;
    e.dgelu_input = gelu_input;
    if (gemm_->run_fused(false, false, m, k, n, ptr(dy), n, ptr(w), k, dx, low, e, stream_)) return;
    gemm_->run(false, false, m, k, n, 1.0f, ptr(dy), n, ptr(w), k, 0.0f, dx, k, low, stream_);
    cuda::gelu_backward(dx, dx, gelu_input, long(m) * k, stream_);
  }
  void do_linear_backward_weight(float* dw, Operand dy, Operand x, const ops::LinearShape& s,
                                 bool accumulate) override {
    gemm_->run(true, false, s.n, s.k, s.m, 1.0f, ptr(dy), s.n, ptr(x), s.k,
               accumulate ? 1.0f : 0.0f, dw, s.k, dy.is_bf16(), stream_);
  }
  void do_add_bias(float* y, const float* b, int m, int n) override {
    cuda::add_bias(y, b, m, n, stream_);
  }
  void do_add_column_sums(float* db, const float* dy, int m, int n) override {
    cuda::add_column_sums(db, dy, m, n, scratch_, stream_);
  }

  // ---- norms ----
  void do_layernorm_row_sums(double* sums, const float* x, const ops::NormShape& s) override {
    cuda::layernorm_row_sums(sums, x, s, stream_);
  }
  void do_layernorm_apply(float* y, float* mean, float* rstd, const double* sums, const float* x,
                          const float* gamma, const float* beta, const ops::NormShape& s,
                          float eps) override {
    cuda::layernorm_apply(y, mean, rstd, sums, x, gamma, beta, s, eps, stream_);
  }
  void do_layernorm_apply_bf16(bf16* y_bf16, float*, float* mean, float* rstd, const double* sums,
                               const float* x, const float* gamma, const float* beta,
                               const ops::NormShape& s, float eps) override {
    cuda::layernorm_apply_bf16(y_bf16, mean, rstd, sums, x, gamma, beta, s, eps, stream_);
  }
  void do_layernorm_rows_bf16(double* sums, bf16* y_bf16, float*, float* mean, float* rstd,
                              const float* x, const float* gamma, const float* beta,
                              const ops::NormShape& s, float eps) override {
    cuda::layernorm_rows_bf16(sums, y_bf16, mean, rstd, x, gamma, beta, s, eps, stream_);
  }
  void do_layernorm_backward_sums(double* sums, const float* dy, const float* x, const float* mean,
                                  const float* rstd, const float* gamma,
                                  const ops::NormShape& s) override {
    cuda::layernorm_backward_sums(sums, dy, x, mean, rstd, gamma, s, stream_);
  }
  void do_layernorm_backward_apply(float* dx, float* dgamma, float* dbeta, const double* sums,
                                   const float* dy, const float* x, const float* mean,
                                   const float* rstd, const float* gamma,
                                   const ops::NormShape& s) override {
    cuda::layernorm_backward_apply(dx, false, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s,
                                   scratch_, stream_);
  }
  void do_layernorm_backward_apply_add(float* dres, float*, float* dgamma, float* dbeta,
                                       const double* sums, const float* dy, const float* x,
                                       const float* mean, const float* rstd, const float* gamma,
                                       const ops::NormShape& s) override {
    cuda::layernorm_backward_apply(dres, true, dgamma, dbeta, sums, dy, x, mean, rstd, gamma, s,
                                   scratch_, stream_);
  }
  void do_layernorm_backward_rows_add(double* sums, float* dres, float* scratch, float* dgamma,
                                      float* dbeta, const float* dy, const float* x,
                                      const float* mean, const float* rstd, const float* gamma,
                                      const ops::NormShape& s) override {
    cuda::layernorm_backward_rows_add(sums, dres, scratch, dgamma, dbeta, dy, x, mean, rstd, gamma,
                                      s, scratch_, stream_);
  }
  void do_layernorm_backward_rows_add_bf16(const ops::ResidualGradBf16& next, double* sums,
                                           float* dres, float* scratch, float* dgamma, float* dbeta,
                                           const float* dy, const float* x, const float* mean,
                                           const float* rstd, const float* gamma,
                                           const ops::NormShape& s) override {
    cuda::layernorm_backward_rows_add_bf16(next, sums, dres, scratch, dgamma, dbeta, dy, x, mean,
                                           rstd, gamma, s, scratch_, stream_);
  }
  void do_rmsnorm_row_sums(double* sums, const float* x, const ops::NormShape& s) override {
    cuda::rmsnorm_row_sums(sums, x, s, stream_);
  }
  void do_rmsnorm_apply(float* y, float* rstd, const double* sums, const float* x,
                        const float* gamma, const ops::NormShape& s, float eps) override {
    cuda::rmsnorm_apply(y, rstd, sums, x, gamma, s, eps, stream_);
  }
  void do_rmsnorm_rows_bf16(double* sums, bf16* y_bf16, float*, float* rstd, const float* x,
                            const float* gamma, const ops::NormShape& s, float eps) override {
    cuda::rmsnorm_rows_bf16(sums, y_bf16, rstd, x, gamma, s, eps, stream_);
  }
  void do_rmsnorm_backward_rows_add(const ops::ResidualGradBf16* next, double* sums, float* dres,
                                    float* scratch, float* dgamma, const float* dy, const float* x,
                                    const float* rstd, const float* gamma,
                                    const ops::NormShape& s) override {
    cuda::rmsnorm_backward_rows_add(next, sums, dres, scratch, dgamma, dy, x, rstd, gamma, s,
                                    scratch_, stream_);
  }
  void do_rmsnorm_backward_sums(double* sums, const float* dy, const float* x, const float* gamma,
                                const ops::NormShape& s) override {
    cuda::rmsnorm_backward_sums(sums, dy, x, gamma, s, stream_);
  }
  void do_rmsnorm_backward_apply(float* dx, float* dgamma, const double* sums, const float* dy,
                                 const float* x, const float* rstd, const float* gamma,
                                 const ops::NormShape& s) override {
    cuda::rmsnorm_backward_apply(dx, dgamma, sums, dy, x, rstd, gamma, s, scratch_, stream_);
  }

  // ---- elementwise ----
  void do_gelu_forward(float* y, const float* x, long n) override {
    cuda::gelu_forward(y, x, n, stream_);
  }
  void do_gelu_backward(float* dx, const float* dy, const float* x, long n) override {
    cuda::gelu_backward(dx, dy, x, n, stream_);
  }
  void do_swiglu_forward(float* y, const float* gate, const float* up, long n) override {
    cuda::swiglu_forward(y, gate, up, n, stream_);
  }
  void do_swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate,
                          const float* up, long n) override {
    cuda::swiglu_backward(dgate, dup, dy, gate, up, n, stream_);
  }
  void do_swiglu_forward_bf16(bf16* y_bf16, float*, const float* gate, const float* up,
                              const ops::GluRows& s) override {
    cuda::swiglu_forward_bf16(y_bf16, gate, up, s, stream_);
  }
  void do_swiglu_backward_bf16(bf16* dgate_bf16, bf16* dup_bf16, float*, float*, const float* dy,
                               const float* gate, const float* up, const ops::GluRows& s) override {
    cuda::swiglu_backward_bf16(dgate_bf16, dup_bf16, dy, gate, up, s, stream_);
  }
  void do_add(float* y, const float* a, const float* b, long n) override {
    cuda::add(y, a, b, n, stream_);
  }
  void do_add_inplace(float* y, const float* x, long n) override {
    cuda::add_inplace(y, x, n, stream_);
  }

  // ---- attention ----
  void do_attention_forward(float* out, float* lse, Operand q, Operand k, Operand v,
                            const ops::AttentionShape& s) override {
    if (q.is_bf16())
      cuda::attention_forward(out, lse, q.b16, k.b16, v.b16, s, stream_);
    else
      cuda::attention_forward(out, lse, q.f32, k.f32, v.f32, s, stream_);
  }
  void do_attention_forward_bf16(bf16* out_bf16, float*, float* lse, Operand q, Operand k,
                                 Operand v, const ops::AttentionShape& s) override {
    cuda::attention_forward(out_bf16, lse, q.b16, k.b16, v.b16, s, stream_);
  }
  void do_attention_backward(float* dq, float* dk, float* dv, const float* dout, Operand out,
                             const float* lse, Operand q, Operand k, Operand v,
                             const ops::AttentionShape& s) override {
    if (q.is_bf16()) {
      void* scratch = attention_scratch(s);
      cuda::attention_backward(dq, dk, dv, dout, out.b16, lse, q.b16, k.b16, v.b16, s, scratch,
                               attention_scratch_bytes_, stream_);
    } else {
      cuda::attention_backward(dq, dk, dv, dout, out.f32, lse, q.f32, k.f32, v.f32, s, stream_);
    }
  }
  void do_attention_backward_bf16(const ops::AttentionGradsBf16& g, const float* dout, Operand out,
                                  const float* lse, Operand q, Operand k, Operand v,
                                  const ops::AttentionShape& s) override {
    void* scratch = attention_scratch(s);
    cuda::attention_backward(g, dout, out.b16, lse, q.b16, k.b16, v.b16, s, scratch,
                             attention_scratch_bytes_, stream_);
  }
  void do_attention_cached(float* out, const float* q, const float* k_new, const float* v_new,
                           float* k_cache, float* v_cache,
                           const ops::CachedAttentionShape& s) override {
    cuda::attention_cached(out, q, k_new, v_new, k_cache, v_cache, s, stream_);
  }
  void do_rope_forward(float* x, const ops::RopeShape& s, const ops::RopeSpec& rope) override {
    cuda::rope_forward(x, s, rope, stream_);
  }
  void do_rope_backward(float* dx, const ops::RopeShape& s, const ops::RopeSpec& rope) override {
    cuda::rope_backward(dx, s, rope, stream_);
  }
  void do_rope_bf16(bf16* low, float* x, const ops::RopeShape& s, const ops::RopeSpec& rope,
                    bool inverse) override {
    cuda::rope_bf16(low, x, s, rope, inverse, stream_);
  }

  // ---- conversions ----
  void do_to_bf16(bf16* out, const float* in, int64_t n) override {
    cuda::to_bf16(out, in, n, stream_);
  }
  void do_to_float(float* out, const bf16* in, int64_t n) override {
    cuda::to_float(out, in, n, stream_);
  }
  void do_to_bf16_column_sums(bf16* out, float* db, const float* in, int m, int n) override {
    cuda::to_bf16_column_sums(out, db, in, m, n, scratch_, stream_);
  }

  // ---- loss ----
  void do_ce_local_stats(float* stats, const float* logits, const int32_t* targets,
                         const float* weight, const ops::VocabShape& s) override {
    cuda::ce_local_stats(stats, logits, targets, weight, s, stream_);
  }
  void do_ce_combine(float* lse, const float* gathered, const float* weight, int rows, int parts,
                     double* total) override {
    cuda::ce_combine(lse, gathered, weight, rows, parts, total, stream_);
  }
  void do_ce_dlogits(float* logits, const float* lse, const int32_t* targets, const float* weight,
                     double denominator, const ops::VocabShape& s) override {
    cuda::ce_dlogits(logits, lse, targets, weight, denominator, s, stream_);
  }
  void do_ce_dlogits_bf16(bf16* dlogits, float* logits, const float* lse, const int32_t* targets,
                          const float* weight, double denominator,
                          const ops::VocabShape& s) override {
    cuda::ce_dlogits_bf16(dlogits, logits, lse, targets, weight, denominator, s, stream_);
  }
  void do_ce_stats_dlogits_bf16(float* stats, bf16* dlogits, float* logits, const int32_t* targets,
                                const float* weight, double denominator,
                                const ops::VocabShape& s) override {
    cuda::ce_stats_dlogits_bf16(stats, dlogits, logits, targets, weight, denominator, s, stream_);
  }

  // ---- embeddings ----
  void do_embedding_range_forward(float* out, const int32_t* tokens, Operand w,
                                  const ops::EmbeddingShape& s) override {
    if (w.is_bf16())
      cuda::embedding_range_forward(out, tokens, w.b16, s, stream_);
    else
      cuda::embedding_range_forward(out, tokens, w.f32, s, stream_);
  }
  void do_embedding_range_backward(float* dw, const float* dout, const int32_t* tokens,
                                   const ops::EmbeddingShape& s) override {
    cuda::embedding_range_backward(dw, dout, tokens, s, stream_);
  }
  void do_embedding_chunk_forward(float* out, const int32_t* tokens, Operand chunk,
                                  const ops::TableChunk& piece,
                                  const ops::EmbeddingShape& s) override {
    if (chunk.is_bf16())
      cuda::embedding_chunk_forward(out, tokens, chunk.b16, piece, s, stream_);
    else
      cuda::embedding_chunk_forward(out, tokens, chunk.f32, piece, s, stream_);
  }
  void do_embedding_chunk_backward(float* dchunk, const float* dout, const int32_t* tokens,
                                   const ops::TableChunk& piece,
                                   const ops::EmbeddingShape& s) override {
    cuda::embedding_chunk_backward(dchunk, dout, tokens, piece, s, stream_);
  }
  void do_position_add(float* out, Operand wpe, const ops::PositionShape& s) override {
    if (wpe.is_bf16())
      cuda::position_add(out, wpe.b16, s, stream_);
    else
      cuda::position_add(out, wpe.f32, s, stream_);
  }
  void do_position_backward(float* dwpe, const float* dout, const ops::PositionShape& s) override {
    cuda::position_backward(dwpe, dout, s, stream_);
  }

  // ---- optimizer ----
  void do_adamw_update(float* param, const float* grad, float* m, float* v, long n, float lr,
                       int step, bool decay, const ops::AdamWConfig& c, float grad_scale,
                       bf16* param_bf16) override {
    cuda::adamw_update(param, grad, m, v, n, lr, step, decay, c, grad_scale, param_bf16, stream_);
  }
  double do_sum_squares(const float* g, long n) override {
    return cuda::sum_squares(g, n, scratch_, stream_);
  }
  void do_scale(float* g, float s, long n) override { cuda::scale(g, s, n, stream_); }
  void do_sum_squares_tensors(double* total, const float* base, const ops::FlatTensor* table,
                              int count, int64_t values) override {
    cuda::sum_squares_tensors(total, base, table, count, values, scratch_, stream_);
  }
  void do_adamw_update_tensors(float* param, const float* grad, float* m, float* v,
                               const ops::FlatTensor* table, int count, int64_t values, float lr,
                               int step, const ops::AdamWConfig& c, float grad_scale, bf16* low,
                               int64_t low_count) override {
    cuda::adamw_update_tensors(param, grad, m, v, table, count, values, lr, step, c, grad_scale,
                               low, low_count, stream_);
  }

  // ---- data movement ----
  void do_fill(float* x, float value, int64_t n) override { cuda::fill(x, value, n, stream_); }
  void do_copy_rows(float* dst, const float* src, int64_t rows, int64_t cols,
                    int64_t src_stride) override {
    cuda::copy_rows(dst, src, rows, cols, src_stride, stream_);
  }
  void do_interleave_vocab_parts(float* out, const float* parts,
                                 const ops::VocabParts& s) override {
    cuda::interleave_vocab_parts(out, parts, s, stream_);
  }
  int64_t do_count_nonfinite(const float* x, int64_t n) override {
    return cuda::count_nonfinite(x, n, scratch_, stream_);
  }

 private:
  // The bf16 backward's scratch, made at its first call and grown only for a
  // larger shape (a run's shape is fixed, so once).
  void* attention_scratch(const ops::AttentionShape& s) {
    const size_t need = cuda::attention_backward_scratch_bytes(s);
    if (need > attention_scratch_bytes_) {
      release(attention_scratch_);
      attention_scratch_ = nullptr;
      attention_scratch_bytes_ = 0;
      AllocationPurpose purpose(
          "the attention backward's scratch (dO in bf16, rowsum(dO * O), bias sums)");
      attention_scratch_ = allocate(need);
      attention_scratch_bytes_ = need;
    }
    return attention_scratch_;
  }
  void synchronize(const char* after) {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    DENDRITE_CHECK(e == cudaSuccess, "cuda: a kernel before the ", after,
                   " failed: ", cuda::error_text(e));
  }

  cuda::DeviceChoice gpu_;
  cuda::TransportChoice transports_;
  size_t total_ = 0;  // the GPU's memory
  bool tf32_ = true;
  bool epilogues_ = true;
  cudaStream_t stream_ = nullptr;
  std::array<cudaEvent_t, 64> events_{};
  uint64_t issued_ = 0;
  std::unique_ptr<cuda::Gemm> gemm_;
  void* scratch_ = nullptr;
  void* attention_scratch_ = nullptr;
  size_t attention_scratch_bytes_ = 0;
  static constexpr size_t kStagingBytes = size_t(8) << 20;
  std::unique_ptr<cuda::PinnedStaging> staging_;
  std::unique_ptr<cuda::DeviceMemory> memory_;
  std::unique_ptr<cuda::DeviceProfile> profile_;  // between start_ and stop_device_profile
};

}  // namespace

std::unique_ptr<Backend> cuda::make_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace dendrite
