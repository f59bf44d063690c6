// The GPT-2 and Llama transformer on the 4D process grid (DESIGN.md sections
// 2-4): sharded parameters, local activations, and an explicit forward and
// backward that read top to bottom as layer calls. One process is the grid
// 1x1x1x1, through the same code.
//
// Letters: B global batch, B_loc = B / (Gd Gz) sequences on this rank,
// T sequence, m = B_loc T local rows, C width, NH / NKV heads (NH/Gy and
// NKV/Gy here), hs head size, F MLP width (F/Gy here), V vocabulary (Vp padded).
//
// GPT-2 block:  x += o(attn(q, k, v of LayerNorm1(x)));  x += down(gelu(up(LayerNorm2(x))))
// Llama block:  x += o(attn(rope q, rope k, v of RMSNorm1(x)));
//               x += down(silu(gate(h)) * up(h)),  h = RMSNorm2(x)
// (Qwen2: q, k, v with biases; Qwen3: q and k through an RMSNorm over each
// head, qn and kn, before RoPE; the head size hs need not be C/NH.)
// then the final norm and the LM head (GPT-2: tied to the token embedding).
// q, k, v, up, gate are normal layers; o and down transposed, so the stream
// [m, C/Gx] and the MLP/attention [m, ./Gy] alternate with no redistribution.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/comm/grid.h"
#include "dendrite/core/buffer.h"
#include "dendrite/core/operand.h"
#include "dendrite/core/precision.h"
#include "dendrite/model/config.h"
#include "dendrite/parallel/layers.h"
#include "dendrite/parallel/linear.h"
#include "dendrite/parallel/params.h"
#include "dendrite/parallel/weight_stream.h"

namespace dendrite {

// How the model runs on its grid; none of it changes the results beyond rounding.
struct ModelOptions {
  bool keep_gathered = false;  // keep Z-gathered weights from the forward to the backward
  bool recompute = false;      // keep only each block's input; recompute the block in the backward
  bool oar = true;             // overlap the backward all-reduce of dx with the dW product
  // Reduce gradients over D per layer during the backward, in buckets posted
  // in a fixed order (on the progress engine: shared memory on a node, rings
  // of messages across nodes).
  bool dp = true;
  // ORS: the dW reduce-scatters over Z run behind the backward of earlier
  // layers. OAG: each Z gather of weights is posted one layer ahead. With the
  // Z ranks on one node they run on the progress engine over shared memory;
  // across nodes, rings of MPI messages on the engine (MPI_THREAD_MULTIPLE).
  bool ors = true, oag = true;
  // fp32, or bf16: GEMM operands and Z gathers of weights in bf16, with fp32
  // accumulation, statistics, gradients and master weights (DESIGN.md
  // section 10; core/precision.h).
  Precision precision = Precision::kF32;
  // q, k and v as one product where the layout allows (Transformer::fuse_qkv);
  // off: three, to time the two side by side (bench step --no-fused-qkv).
  bool fuse_qkv = true;
  // SwiGLU's gate and up as one product where the layout allows
  // (Transformer::can_fuse_gate_up); off: two (bench step --no-fused-gate-up).
  bool fuse_gate_up = true;
  // Sets the overlaps from "none", "all" or a list such as "oar,ors"; an
  // unknown one is an error naming it.
  void set_overlap(const std::string& list);
};

class Transformer {
 public:
  // Activations are sized for global batches of up to max_B sequences of up
  // to max_T tokens. Throws, naming the sizes and the grid, when the grid
  // does not divide the model or the batch.
  // Parameters, gradients and activations live in the backend's memory.
  Transformer(const ModelConfig& config, ProcessGrid& grid, Backend& backend, int max_B, int max_T,
              const ModelOptions& options = {});

  const ModelConfig& config() const { return cfg_; }
  int max_batch() const { return max_B_; }
  int max_sequence() const { return max_T_; }
  ProcessGrid& grid() { return grid_; }
  Backend& backend() { return be_; }
  const ParamTable& table() const { return table_; }
  // The fp32 parameters of this rank (the backend's memory). Writing through the non-const form
  // (initialising, loading, a test's update) makes the next forward round
  // them to bf16 again under bf16 precision.
  float* params() {
    low_fresh_ = false;
    return params_->data();
  }
  const float* params() const { return params_->data(); }
  // For an optimizer that writes the fp32 parameters and, under bf16
  // precision, their bf16 copy in one pass (AdamW::step): the copy of the
  // first low_count values (null in fp32), which from now on counts as
  // rounded from what the optimizer writes.
  struct Writable {
    float* params = nullptr;
    bf16* low = nullptr;
    int64_t low_count = 0;
  };
  Writable params_and_copy();
  Precision precision() const { return opt_.precision; }
  float* grads() { return grads_->data(); }
  const float* grads() const { return grads_->data(); }
  int64_t num_floats() const { return table_.total(); }
  // The initial values (ParamTable::initialize), made on the host and uploaded.
  void init(uint64_t seed);
  void zero_grads();
  size_t activation_bytes() const;
  // Sequences of a global batch of B on this rank: [first, first + count).
  int local_batch(int B) const { return B / (grid_.shape().d * grid_.shape().z); }
  int first_sequence(int B) const { return (grid_.d() * grid_.shape().z + grid_.z()) * local_batch(B); }

  // Forward and backward on this rank's inputs, targets [B_loc*T] of a global
  // batch of B. Returns the global loss sum_r weight[r] * CE_r / denominator
  // (weights null: all ones), summed over the whole batch; adds to grads()
  // the gradient of that loss. With sync (the default, and the last
  // micro-batch of a step under gradient accumulation) grads() is then summed
  // over every axis along which data differs; without it, only this rank's
  // share is added (the Z reduce-scatters of the chunked weights included),
  // and the Z and D sums wait for the micro-batch that syncs.
  double forward_backward(const int32_t* inputs, const int32_t* targets, const float* weights,
                          double denominator, int B, int T, bool sync = true);
  // The same global loss, no gradients.
  double forward_loss(const int32_t* inputs, const int32_t* targets, const float* weights,
                      double denominator, int B, int T);
  // Global L2 norm of the gradients, each value counted once: one reduction
  // over this rank's gradient tensors on the device, one read.
  double grad_norm();

  // A step that reads the device once: forward_backward and grad_norm
  // without their reads (the loss and the norm stay in the backend's memory),
  // then read_step_totals reads both. The values, and on the CPU the bits,
  // are those forward_backward and grad_norm return.
  struct StepTotals {
    double loss = 0;       // the sum of the passes' global losses since the last read
    double grad_norm = 0;  // 0 unless reduce_grad_norm ran since the last read
  };
  void forward_backward_unread(const int32_t* inputs, const int32_t* targets, const float* weights,
                               double denominator, int B, int T, bool sync = true);
  void reduce_grad_norm();
  StepTotals read_step_totals();
  // Rows of the LM head's chunks (parallel/head_chunk.h: at most a batch's rows).
  int head_chunk_rows() const { return head_.chunk_rows(); }
  // The logits below are written to host memory.
  // logits [B_loc*T, V] of this rank's rows (on every rank of the X and Y axes).
  void logits(const int32_t* inputs, int B, int T, float* out);
  // logits [B_loc, V] of the last position of each of this rank's sequences of
  // a global batch of B sequences of T tokens (on every X and Y rank; any grid).
  void last_position_logits(const int32_t* inputs, int B, int T, float* out);

  // Generation with a key/value cache: each layer keeps the keys and values
  // (after RoPE) of up to max_T positions of this rank's max_B / (Gd Gz)
  // sequences, so that each new token runs the model over one position.
  // start_generation empties the cache (allocated at first use, and counted
  // by activation_bytes from then on).
  void start_generation();
  // Runs the next T tokens of each of this rank's sequences of a global batch
  // of B (inputs [B_loc*T], at positions cached_positions() ..
  // cached_positions()+T-1; B the same since start_generation), keeps their
  // keys and values, and writes to host memory the logits [B_loc, V] of the
  // last of them: what last_position_logits gives on the whole sequences, up
  // to the rounding of products over fewer rows. Every rank of the grid calls it.
  void generation_logits(const int32_t* inputs, int B, int T, float* out);
  int cached_positions() const { return cache_len_; }

 private:
  struct Layer {
    int64_t norm1_w = -1, norm1_b = -1, norm2_w = -1, norm2_b = -1;
    ParallelNorm norm1, norm2;
    ParallelLinear q, k, v, o, up, gate, down;
    const ParamSpec* q_norm = nullptr;  // Qwen3's per-head gains [hs], or null
    const ParamSpec* k_norm = nullptr;
    // q, k and v as one product, where the layout allows (build_layers):
    // their weight blocks, and their biases, lie end to end in the
    // parameters, so [Wq; Wk; Wv] is one [qd/Gy + 2 kvd/Gy, C/Gx] block (and
    // its gradient one block of the gradients). qkv's specs span the three.
    ParallelLinear qkv;
    std::unique_ptr<ParamSpec> qkv_w, qkv_b;  // null: q, k and v run apart
    // SwiGLU's gate and up as one product (the model's gate_up_fused_): [Wg;
    // Wu] one [2F/Gy, C/Gx] block, its rows of output gate's then up's.
    ParallelLinear gate_up;
    std::unique_ptr<ParamSpec> gate_up_w;
  };
  // Saved for the backward. The inputs of GEMMs (norm1, q, k, v, att, norm2,
  // act) are kept in the run's precision: fp32, or bf16 (the *h buffers; the
  // fp32 ones are then not allocated).
  struct LayerActs {
    Buffer<float> norm1, mean1, rstd1, q, k, v, att, lse, mid, norm2, mean2, rstd2, act;
    // The MLP's products' outputs: up's [m, F/Gy] (GPT-2: GELU's input), and
    // Llama's gate's [m, F/Gy] beside it in one buffer, as the products write
    // them (glu_rows): gate's block then up's, or rows of gate's values then
    // up's, from gate_up's one product. gate_out and up_out: the first of each.
    Buffer<float> mlp_out;
    float *gate_out = nullptr, *up_out = nullptr;
    Buffer<bf16> norm1h, atth, norm2h, acth;
    // bf16: q, k and v [m, qd/Gy], [m, kvd/Gy] in one buffer, either as three
    // blocks (qh, kh, vh at their starts) or, written by the one product of
    // a layer with qkv, interleaved as rows [m, qd/Gy + 2 kvd/Gy].
    Buffer<bf16> qkvh;
    bf16 *qh = nullptr, *kh = nullptr, *vh = nullptr;
    // Qwen3: q and k before their per-head norms [m, qd/Gy], [m, kvd/Gy],
    // and the norms' rstd [m * NH/Gy], [m * NKV/Gy].
    Buffer<float> qpre, kpre, qrstd, krstd;
  };
  bool low_precision() const { return opt_.precision == Precision::kBF16; }
  // The GEMM operand of an fp32 activation x [n]: x itself, or under bf16
  // precision its rounding written to low.
  Operand operand(const float* x, bf16* low, int64_t n) const;
  // A linear layer's epilogue that writes its output as bf16 to `low` (none:
  // fp32 only), the bias taken in bf16 as the product's epilogue takes it.
  ops::LinearEpilogue bf16_output(const ParallelLinear& layer, bf16* low) const {
    ops::LinearEpilogue e;
    e.y_bf16 = low;
    if (low && layer.bias())
      e.bias_bf16 = replicated_low_.data() + (layer.bias()->offset - table_.replicated_begin());
    return e;
  }
  // A saved GEMM input: the fp32 or the bf16 buffer.
  Operand saved(const Buffer<float>& f32, const Buffer<bf16>& b16) const {
    return low_precision() ? Operand(b16.data()) : Operand(f32.data());
  }
  Operand saved(const Buffer<float>& f32, const bf16* b16) const {
    return low_precision() ? Operand(b16) : Operand(f32.data());
  }
  // The width of q, k and v's rows together on this rank.
  int qkv_width() const { return qd_ + 2 * kvd_; }
  // The parameters as the weight stream and lookups read them: fp32, or the
  // bf16 copy (rounded from the fp32 values first when they changed).
  Operand stored_params();
  void check_grid() const;
  void build_table();
  void build_layers();
  void fuse_qkv(Layer& L, const std::string& prefix);
  bool can_fuse_gate_up() const;
  // SwiGLU's inputs (LayerActs::mlp_out) and their gradients: m rows of F/Gy,
  // in blocks or side by side.
  ops::GluRows glu_rows(int m) const { return {m, f_, gate_up_fused_ ? 2 * int64_t(f_) : f_}; }
  void allocate(int m_max, int B_loc_max);
  void check_batch(const int32_t* inputs, int B_loc, int T) const;
  // Copies this rank's m token ids (host) into the backend's memory (tokens_,
  // or targets_), and returns them there.
  const int32_t* upload_ids(Buffer<int32_t>& to, const int32_t* host, int64_t m);
  // The targets, checked on the host to lie in the vocabulary (a GPU's loss
  // kernels do not check them), then uploaded.
  const int32_t* upload_targets(const int32_t* host, int64_t m);
  // The same for the loss weights (null stays null).
  const float* upload_weights(const float* host, int64_t m);
  // The kinds of pass whose gathers the weight stream records (one order each).
  enum Pass {
    kPassStep, kPassLoss, kPassLogits, kPassLastPosition, kPassPrefill,
    kPassDecode
  };
  // pos: the position of the first of the T tokens; caching (generation): the
  // layers' attention reads and extends the key/value cache.
  void forward(const int32_t* inputs, int B_loc, int T, int pass, int pos = 0,
               bool caching = false);
  // After a forward of B_loc sequences of T rows: the logits of each one's
  // last row into host memory out [B_loc, V], and the pass ended.
  void finish_last_positions(int B_loc, int T, float* out);
  // The end of a pass: the last prefetch dropped, then the parameters' fence.
  void end_pass();
  void layer_forward(int l, const float* x, float* out, int B_loc, int T, int pos = 0,
                     bool caching = false);
  // The saved activations of layer l (one shared set when recomputing).
  LayerActs& acts(int l) { return acts_[opt_.recompute ? 0 : l]; }
  void layer_backward(int l, float* dres, int B_loc, int T);
  // Qwen3's RMSNorm over each head: x, y [rows = m * heads, hs] (whole heads
  // on this rank, the same on every X rank). The gain is replicated on every
  // rank; its gradient sums over Y (other heads) here, then over Z and D with
  // the other replicated tensors.
  void head_norm_forward(float* y, float* rstd, const float* x, int rows, const ParamSpec& gain);
  void head_norm_backward(float* dx, const float* dy, const float* x, const float* rstd, int rows,
                          const ParamSpec& gain);
  // One linear layer's part of a backward.
  struct LinearGrad;
  // A layer's part given its output gradient dy [m, out_local]: under bf16
  // precision dy is rounded into low with the bias gradient summed in that pass.
  LinearGrad grad_of(const ParallelLinear& layer, const float* dy, bf16* low, Operand x, int m);
  // Its bias's gradient (null where it has none).
  float* bias_grad(const ParallelLinear& layer);
  struct LinearGrad {
    const ParallelLinear* layer = nullptr;  // null: none (gate of GPT-2)
    // [m, out_local], for its bias gradient; null under bf16, where that was
    // summed as dy was rounded (grad_of) or made (attention_backward_bf16).
    const float* dy_f32 = nullptr;
    Operand dy;                             // the same as a GEMM operand
    Operand x;                              // [m, in_local], its forward input
  };
  // The backward of layers that read one input, with OAR over the group
  // (transformer_step.cpp).
  // gelu_input [m, in_local]: dx then goes through GELU's backward (in
  // place), fused into a lone layer's product where nothing sums dx.
  void linear_backward(float* dx, int m, std::initializer_list<LinearGrad> group,
                       const LinearGrad& behind, LinearGrad* hand_on,
                       const float* gelu_input = nullptr);
  double global_sum(double local);  // over Z and D
  struct Range {
    int64_t begin, end;  // in the flat buffer
  };
  void find_gradient_ranges();
  Request post_dp_sum(const Range& r);
  bool dp_buckets() const { return opt_.dp && grid_.shape().d > 1; }
  // Sums a layer's gradients over Z (replicated tensors) and posts their sum over D.
  void reduce_bucket(const Range& chunked, const Range& replicated);
  // The LM head's block kept from the embedding's forward (tied, keep_gathered), or null.
  Operand tied_head() const { return embedding_.kept_table(); }
  void sync_gradients();  // the Z and D sums of a step's accumulated gradients
  // Z peers read this rank's parameters directly: everyone passes a barrier
  // after the last write (optimizer, load) and after the last read of a pass.
  void params_fence();

  ModelConfig cfg_;
  ProcessGrid& grid_;
  Backend& be_;
  int max_B_, max_T_;
  ModelOptions opt_;
  int nh_, nkv_, hs_, qd_, kvd_, f_, c_;  // local head counts and widths on this rank
  ParamTable table_;
  std::vector<Layer> layers_;
  bool gate_up_fused_ = false;  // every layer's gate and up one product (Layer::gate_up)
  VocabEmbedding embedding_;
  ParallelNorm norm_f_;
  VocabCrossEntropy head_;
  // Parameters shared over Z and gradients over D where those ranks share a
  // node (comm/communicator.h: SharedArray), so Z gathers and the D sum of
  // gradients read the peers' memory directly.
  std::unique_ptr<SharedArray> params_, grads_;
  // bf16 precision: the parameters rounded to bf16 (the Z-chunked range,
  // shared over Z like params_), and whether they match params_.
  std::unique_ptr<SharedArray> params_low_;
  bool low_fresh_ = false;
  // bf16 precision: the replicated range (biases, norms' gains) rounded at
  // the start of each forward, for the epilogues that add a bias in bf16.
  Buffer<bf16> replicated_low_;
  // The Z gathers of weight blocks and reduce-scatters of their gradients.
  WeightStream stream_;

  // Activations saved for the backward, and scratch.
  std::vector<Buffer<float>> residual_;  // L+1 of [m, C/Gx]: each layer's input, then the output
  std::vector<LayerActs> acts_;
  Buffer<float> normf_, meanf_, rstdf_;
  Buffer<float> tmp_c_, dnorm_, dres_, datt_, dact_;
  // The MLP products' output gradients, laid out as LayerActs::mlp_out: up's
  // (GPT-2: GELU's backward's output), and Llama's gate's; in bf16 too, the
  // products' operands, under bf16 precision.
  Buffer<float> dmlp_;
  float *dgate_ = nullptr, *dup_ = nullptr;
  Buffer<bf16> dmlp_h_;
  bf16 *dgate_h_ = nullptr, *dup_h_ = nullptr;
  // dq, dk, dv [m, qd/Gy], [m, kvd/Gy]: three blocks of dqkv_, or its rows
  // interleaved (as LayerActs::qkvh).
  Buffer<float> dqkv_;
  float *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr;
  // bf16 precision: the final norm's output and the gradients that feed GEMMs.
  Buffer<bf16> normf_h_, dres_h_;
  Buffer<bf16> dqkv_h_;  // as dqkv_
  bf16 *dq_h_ = nullptr, *dk_h_ = nullptr, *dv_h_ = nullptr;
  Buffer<double> sums_;
  Buffer<double> head_sums_;              // Qwen3: [m * NH/Gy] per-head row sums
  Buffer<float> dqn_, dkn_, head_dgain_;  // Qwen3: dq, dk before the head norms; a gain's [hs]
  // The gradient tensors this rank counts in the norm, and the device sums
  // of a step that the host reads (read_step_totals): [0] the squared norm
  // of those tensors, [1 + k] the loss sum of the k-th pass since the last
  // read, whose denominator is pending_[k]; grown (with its contents) when a
  // step has more passes than it holds.
  static constexpr int kLossSlots = 8;
  double* loss_slot(double denominator);
  TensorTable norm_tensors_;
  Buffer<double> totals_;
  std::vector<double> pending_, read_;
  bool norm_pending_ = false;
  Buffer<int32_t> tokens_, targets_;  // [m]: this rank's token ids and targets
  Buffer<float> weights_;             // [m]: the loss weights, when given
  Buffer<float> recompute_out_;  // [m, C/Gx]: where a recomputed layer writes its output
  // Gradient buckets: each layer's chunked and replicated ranges, and the
  // other tensors' (embedding, head, final norm), merged where adjacent.
  std::vector<Range> layer_chunked_, layer_replicated_, rest_chunked_, rest_replicated_;
  std::vector<Request> dp_pending_;
  // Generation: per layer the keys and values [B_loc, max_T, kvd/Gy] of the
  // cached positions; the positions filled and the global batch they hold.
  std::vector<Buffer<float>> k_cache_, v_cache_;
  Buffer<float> last_rows_, last_logits_;  // finish_last_positions's, kept between tokens
  int cache_len_ = 0, cache_B_ = 0;
};

}  // namespace dendrite
