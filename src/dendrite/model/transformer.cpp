// The Transformer's construction (transformer.h): the parameter table and its
// sharding, the layers over it, the weight stream and the activations.
// Letters as in transformer.h.
#include "dendrite/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dendrite/core/check.h"
#include "dendrite/parallel/head_chunk.h"

namespace dendrite {

namespace {
const Sharding kNormal{Axis::kY, Axis::kX, true};      // rows over Y, columns over X
const Sharding kTransposed{Axis::kX, Axis::kY, true};  // rows over X, columns over Y
const Sharding kColumnsX{Axis::kNone, Axis::kX, true};  // position embedding
const Sharding kVectorX{Axis::kX, Axis::kNone, false};  // stream-width vectors
const Sharding kVectorY{Axis::kY, Axis::kNone, false};  // biases of normal layers
const Sharding kReplicated{Axis::kNone, Axis::kNone, false};  // per-head norm gains
}  // namespace

Transformer::Transformer(const ModelConfig& config, ProcessGrid& grid, Backend& backend, int max_B,
                         int max_T, const ModelOptions& options)
    : cfg_(config), grid_(grid), be_(backend), max_B_(max_B), max_T_(max_T), opt_(options),
      table_(grid.shape(), grid.x(), grid.y(), grid.z()) {
  cfg_.validate();
  DENDRITE_CHECK(max_B > 0 && max_T > 0, "model: batch and sequence must be positive, got B=",
                 max_B, " T=", max_T);
  DENDRITE_CHECK(max_T <= cfg_.block_size, "model: sequence length ", max_T,
                 " exceeds the model's block_size ", cfg_.block_size,
                 "; use a shorter --seq or a model with a larger block_size");
  DENDRITE_CHECK(cfg_.sliding_window == 0 || max_T <= cfg_.sliding_window,
                 "model: ", arch_name(cfg_.arch), "'s sliding_window ", cfg_.sliding_window,
                 " is shorter than the sequence length ", max_T,
                 "; Dendrite attends to every earlier position, the same function only for ",
                 "sequences no longer than the window: use a --seq of at most sliding_window");
  check_grid();
  grid_.connect();  // the axes' device collectives set up now, not in a step
  const GridShape& g = grid.shape();
  nh_ = cfg_.n_head / g.y;
  nkv_ = cfg_.n_kv_head / g.y;
  hs_ = cfg_.head_size();
  qd_ = nh_ * hs_;
  kvd_ = nkv_ * hs_;
  f_ = cfg_.ffn_hidden / g.y;
  c_ = cfg_.n_embd / g.x;
  build_table();
  build_layers();
  const int B_loc = std::max(1, max_B / (g.d * g.z));
  allocate(B_loc * max_T, B_loc);
}

void ModelOptions::set_overlap(const std::string& list) {
  oar = dp = ors = oag = false;
  if (list == "none") return;
  if (list == "all") {
    oar = dp = ors = oag = true;
    return;
  }
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, end - start);
    if (item == "oar")
      oar = true;
    else if (item == "dp")
      dp = true;
    else if (item == "ors")
      ors = true;
    else if (item == "oag")
      oag = true;
    else
      fail("--overlap: unknown overlap '", item, "'; use a list of oar, ors, oag, dp, or all, none");
    start = end + 1;
  }
}

void Transformer::check_grid() const {
  const GridShape& g = grid_.shape();
  const std::string on = " on grid " + g.str();
  DENDRITE_CHECK(cfg_.n_embd % g.x == 0, "model: width n_embd ", cfg_.n_embd,
                 " is not divisible by x=", g.x, on, "; choose an x that divides it");
  DENDRITE_CHECK(cfg_.n_head % g.y == 0 && cfg_.n_kv_head % g.y == 0, "model: ", cfg_.n_head,
                 " heads and ", cfg_.n_kv_head, " key/value heads do not split into y=", g.y,
                 " groups of whole heads", on, "; choose a y that divides both");
  DENDRITE_CHECK(cfg_.ffn_hidden % g.y == 0, "model: MLP width ", cfg_.ffn_hidden,
                 " is not divisible by y=", g.y, on);
  DENDRITE_CHECK(max_B_ % (g.d * g.z) == 0, "model: batch ", max_B_,
                 " is not divisible by d*z=", g.d * g.z, on,
                 "; whole sequences stay on one rank: use a batch that is a multiple of d*z");
}

// Parameter names are Dendrite's own; model/hf_names.cpp maps them to
// Hugging Face's for checkpoints.
void Transformer::build_table() {
  const int64_t C = cfg_.n_embd, F = cfg_.ffn_hidden, Vp = cfg_.padded_vocab(grid_.shape().y);
  const int64_t qd = int64_t(cfg_.n_head) * hs_, kvd = int64_t(cfg_.n_kv_head) * hs_;
  const float std = cfg_.init_std;
  // GPT-2 scales the init of the projections into the residual stream by 1/sqrt(2L).
  const float proj_std = cfg_.gpt2() ? std / std::sqrt(2.0f * cfg_.n_layer) : std;
  const bool bias = cfg_.gpt2(), qkv_bias = bias || cfg_.qkv_bias;
  auto weight = [&](const std::string& n, int64_t out, int64_t in, Sharding s, float sd) {
    table_.add(n, {out, in}, s, true, Init::kNormal, sd);
  };
  auto vec = [&](const std::string& n, int64_t len, Sharding s, Init init) {
    table_.add(n, {len}, s, false, init);
  };
  table_.add("tok_emb", {Vp, C}, kNormal, true, Init::kNormal, std, cfg_.vocab_size);
  if (cfg_.gpt2()) table_.add("pos_emb", {cfg_.block_size, C}, kColumnsX, true, Init::kNormal, std / 2);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    vec(p + "norm1.weight", C, kVectorX, Init::kOnes);
    if (bias) vec(p + "norm1.bias", C, kVectorX, Init::kZeros);
    weight(p + "q.weight", qd, C, kNormal, std);
    weight(p + "k.weight", kvd, C, kNormal, std);
    weight(p + "v.weight", kvd, C, kNormal, std);
    if (qkv_bias) {
      vec(p + "q.bias", qd, kVectorY, Init::kZeros);
      vec(p + "k.bias", kvd, kVectorY, Init::kZeros);
      vec(p + "v.bias", kvd, kVectorY, Init::kZeros);
    }
    if (cfg_.qk_norm) {
      vec(p + "q_norm.weight", hs_, kReplicated, Init::kOnes);
      vec(p + "k_norm.weight", hs_, kReplicated, Init::kOnes);
    }
    weight(p + "o.weight", C, qd, kTransposed, proj_std);
    if (bias) vec(p + "o.bias", C, kVectorX, Init::kZeros);
    vec(p + "norm2.weight", C, kVectorX, Init::kOnes);
    if (bias) vec(p + "norm2.bias", C, kVectorX, Init::kZeros);
    if (!cfg_.gpt2()) weight(p + "gate.weight", F, C, kNormal, std);
    weight(p + "up.weight", F, C, kNormal, std);
    if (bias) vec(p + "up.bias", F, kVectorY, Init::kZeros);
    weight(p + "down.weight", C, F, kTransposed, proj_std);
    if (bias) vec(p + "down.bias", C, kVectorX, Init::kZeros);
  }
  vec("norm_f.weight", C, kVectorX, Init::kOnes);
  if (bias) vec("norm_f.bias", C, kVectorX, Init::kZeros);
  if (!cfg_.tied_embeddings())
    table_.add("lm_head", {Vp, C}, kNormal, true, Init::kNormal, std, cfg_.vocab_size);
  table_.finalize();
  AllocationPurpose purpose("the parameters and their gradients");
  params_ = be_.allocate_shared(grid_.Z(), table_.total());
  grads_ = be_.allocate_shared(grid_.D(), table_.total());
  // bf16: the Z-chunked tensors (the ones GEMMs, lookups and gathers read)
  // rounded, at the same offsets.
  if (low_precision()) {
    params_low_ = be_.allocate_shared(grid_.Z(), table_.replicated_begin(), DType::kBF16);
    replicated_low_ = be_.alloc<bf16>(table_.total() - table_.replicated_begin());
  }
  // Kept blocks are gathered once, into their own buffers: no OAG with them.
  stream_ = WeightStream(grid_.Z(), be_, table_, low_precision() ? *params_low_ : *params_,
                         opt_.oag && !opt_.keep_gathered, opt_.ors);
}

void Transformer::build_layers() {
  auto spec = [&](const std::string& n) { return &table_.find(n); };
  auto maybe = [&](const std::string& n) -> const ParamSpec* {
    for (auto& s : table_.specs())
      if (s.name == n) return &s;
    return nullptr;
  };
  const bool ln = cfg_.gpt2();
  gate_up_fused_ = can_fuse_gate_up();
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    Layer L;
    L.norm1 = ParallelNorm(grid_, be_, ln, *spec(p + "norm1.weight"), maybe(p + "norm1.bias"),
                           cfg_.n_embd, cfg_.norm_eps);
    L.norm2 = ParallelNorm(grid_, be_, ln, *spec(p + "norm2.weight"), maybe(p + "norm2.bias"),
                           cfg_.n_embd, cfg_.norm_eps);
    L.q = ParallelLinear(grid_, be_, *spec(p + "q.weight"), maybe(p + "q.bias"), opt_.keep_gathered, opt_.oar);
    L.k = ParallelLinear(grid_, be_, *spec(p + "k.weight"), maybe(p + "k.bias"), opt_.keep_gathered, opt_.oar);
    L.v = ParallelLinear(grid_, be_, *spec(p + "v.weight"), maybe(p + "v.bias"), opt_.keep_gathered, opt_.oar);
    fuse_qkv(L, p);
    L.o = ParallelLinear(grid_, be_, *spec(p + "o.weight"), maybe(p + "o.bias"), opt_.keep_gathered, opt_.oar);
    L.up = ParallelLinear(grid_, be_, *spec(p + "up.weight"), maybe(p + "up.bias"), opt_.keep_gathered, opt_.oar);
    if (!cfg_.gpt2()) L.gate = ParallelLinear(grid_, be_, *spec(p + "gate.weight"), nullptr, opt_.keep_gathered, opt_.oar);
    if (gate_up_fused_) {
      const ParamSpec &g = *spec(p + "gate.weight"), &u = *spec(p + "up.weight");
      L.gate_up_w = std::make_unique<ParamSpec>(g);
      L.gate_up_w->name = p + "gate and up.weight";
      L.gate_up_w->shape[0] = g.shape[0] + u.shape[0];
      L.gate_up_w->block_rows = g.block_rows + u.block_rows;
      L.gate_up_w->numel = g.numel + u.numel;
      L.gate_up = ParallelLinear(grid_, be_, *L.gate_up_w, nullptr, opt_.keep_gathered, opt_.oar);
    }
    if (cfg_.qk_norm) L.q_norm = spec(p + "q_norm.weight"), L.k_norm = spec(p + "k_norm.weight");
    L.down = ParallelLinear(grid_, be_, *spec(p + "down.weight"), maybe(p + "down.bias"), opt_.keep_gathered, opt_.oar);
    layers_.push_back(std::move(L));
  }
  embedding_ = VocabEmbedding(grid_, be_, *spec("tok_emb"), maybe("pos_emb"),
                              opt_.keep_gathered && cfg_.tied_embeddings());
  norm_f_ = ParallelNorm(grid_, be_, ln, *spec("norm_f.weight"), maybe("norm_f.bias"), cfg_.n_embd,
                         cfg_.norm_eps);
  const ParamSpec& head = cfg_.tied_embeddings() ? *spec("tok_emb") : *spec("lm_head");
  // The head's chunks: as many rows as the device's memory allows, at most
  // this rank's (head_chunk.h, the planner's rule too).
  const int64_t row_bytes = head_chunk_row_bytes(head.block_rows, grid_.shape().y, low_precision());
  const int rows = std::max(1, max_B_ / (grid_.shape().d * grid_.shape().z)) * max_T_;
  head_ =
      VocabCrossEntropy(grid_, be_, head, cfg_.vocab_size,
                        dendrite::head_chunk_rows(be_.device_capacity_bytes(), row_bytes, rows));
  find_gradient_ranges();
  norm_tensors_ = make_tensor_table(be_, table_, /*norm_only=*/true);
  AllocationPurpose totals("the step's loss and gradient norm");
  totals_ = be_.alloc<double>(1 + kLossSlots);
}

// q, k and v as one product (Layer::qkv) where the layout allows it: under
// bf16, where attention reads the bf16 rows of the three with their stride,
// and what comes between the products and attention can run on those rows
// (GPT-2: nothing, the product writes bf16; Llama: RoPE on q and k in fp32
// and the rows' rounding in one pass, the bits of the three products';
// not Qwen2, whose v bias the epilogue adds in bf16, nor Qwen3's head
// norms); X of one rank (the product goes straight to its epilogue: no sum
// over X, so the collectives stay as they were) and Z of one (the product
// reads the stored blocks, and adds dW into the gradients); the three weight
// blocks end to end in the parameters, and the three biases where there are
// biases. On a GPU only: it saves launches and HBM traffic there; on the
// CPU it measured no faster (GPT-2 124M bf16 B4 T128 on 2 cores without
// AVX512_BF16, four runs of each alternated: 7.46 s a step against 7.48,
// with a spread of 5% between runs), so the CPU keeps its three products and
// their bits. Elsewhere q, k and v stay three products.
void Transformer::fuse_qkv(Layer& L, const std::string& p) {
  const bool rows_allow = cfg_.gpt2() || (!cfg_.qkv_bias && !cfg_.qk_norm);
  if (!opt_.fuse_qkv || be_.device() != Device::kCuda || !rows_allow || !low_precision() ||
      grid_.shape().x != 1 || grid_.shape().z != 1)
    return;
  const ParamSpec &q = table_.find(p + "q.weight"), &k = table_.find(p + "k.weight"),
                  &v = table_.find(p + "v.weight");
  auto end_to_end = [](const ParamSpec& a, const ParamSpec& b, const ParamSpec& c) {
    return b.offset == a.offset + a.numel && c.offset == b.offset + b.numel;
  };
  if (!end_to_end(q, k, v)) return;
  const bool biased = cfg_.gpt2();
  if (biased &&
      !end_to_end(table_.find(p + "q.bias"), table_.find(p + "k.bias"), table_.find(p + "v.bias")))
    return;
  auto span = [&](const ParamSpec& a, const ParamSpec& b, const ParamSpec& c, const char* name) {
    auto s = std::make_unique<ParamSpec>(a);
    s->name = p + name;
    s->shape[0] = a.shape[0] + b.shape[0] + c.shape[0];
    s->block_rows = a.block_rows + b.block_rows + c.block_rows;
    s->numel = a.numel + b.numel + c.numel;
    return s;
  };
  L.qkv_w = span(q, k, v, "q, k and v.weight");
  if (biased)
    L.qkv_b = span(table_.find(p + "q.bias"), table_.find(p + "k.bias"), table_.find(p + "v.bias"),
                   "q, k and v.bias");
  L.qkv = ParallelLinear(grid_, be_, *L.qkv_w, L.qkv_b.get(), opt_.keep_gathered, opt_.oar);
}

// SwiGLU's gate and up as one product (Layer::gate_up), as q, k and v are
// (fuse_qkv, whose conditions it shares): under bf16, where SwiGLU's bf16
// forms read the product's rows of gate's values then up's with their stride
// and write their gradients so; X and Z of one rank; gate's and up's weight
// blocks end to end in every layer, and no bias on either (Llama, Mistral
// and Qwen have none). On a GPU only, for launches and HBM traffic: forward,
// one product reads the norm's output once; backward, one product sums the
// input gradient over both (where two added in fp32) and one makes the two
// weight gradients. Otherwise, and in every layer alike, two products.
bool Transformer::can_fuse_gate_up() const {
  if (cfg_.gpt2() || !opt_.fuse_gate_up || be_.device() != Device::kCuda || !low_precision() ||
      grid_.shape().x != 1 || grid_.shape().z != 1)
    return false;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    const ParamSpec &g = table_.find(p + "gate.weight"), &u = table_.find(p + "up.weight");
    if (u.offset != g.offset + g.numel) return false;
    for (const ParamSpec& s : table_.specs())
      if (s.name == p + "gate.bias" || s.name == p + "up.bias") return false;
  }
  return true;
}

void Transformer::find_gradient_ranges() {
  const int L = cfg_.n_layer;
  layer_chunked_.assign(L, {INT64_MAX, 0});
  layer_replicated_.assign(L, {INT64_MAX, 0});
  std::vector<Range> rest_c, rest_r;
  for (const ParamSpec& s : table_.specs()) {
    const Range r{s.offset, s.offset + (s.numel + 15) / 16 * 16};
    int l = -1;
    if (s.name.rfind("layer", 0) == 0) l = std::stoi(s.name.substr(5));
    std::vector<Range>& rest = s.sharding.chunk_z ? rest_c : rest_r;
    if (l < 0) {
      rest.push_back(r);
      continue;
    }
    Range& lr = s.sharding.chunk_z ? layer_chunked_[l] : layer_replicated_[l];
    lr.begin = std::min(lr.begin, r.begin);
    lr.end = std::max(lr.end, r.end);
  }
  auto merge = [](std::vector<Range> v) {
    std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    std::vector<Range> out;
    for (const Range& r : v) {
      if (!out.empty() && out.back().end == r.begin)
        out.back().end = r.end;
      else
        out.push_back(r);
    }
    return out;
  };
  rest_chunked_ = merge(rest_c);
  rest_replicated_ = merge(rest_r);
}

void Transformer::allocate(int m, int B_loc) {
  AllocationPurpose purpose("the activations (they grow with --batch and --seq; --recompute "
                            "keeps one layer's)");
  const long C = c_, F = f_;
  auto f32 = [&](Buffer<float>& b, long n) { b = be_.alloc<float>(n); };
  auto b16 = [&](Buffer<bf16>& b, long n) { b = be_.alloc<bf16>(n); };
  residual_.resize(cfg_.n_layer + 1);
  for (auto& r : residual_) f32(r, m * C);
  acts_.resize(opt_.recompute ? 1 : cfg_.n_layer);
  const bool low = low_precision();  // GEMM inputs saved in bf16 only (LayerActs)
  // The MLP's products' outputs and their gradients (LayerActs::mlp_out):
  // GPT-2's up's; Llama's gate's, then up's (a block on, or F/Gy values on
  // in the same row where gate_up writes them).
  const long glu = cfg_.gpt2() ? 1 : 2;
  auto mlp_halves = [&](auto* base, auto*& gate, auto*& up) {
    if (cfg_.gpt2()) {
      gate = nullptr, up = base;
    } else {
      gate = base;
      up = base + (gate_up_fused_ ? F : m * F);
    }
  };
  for (auto& a : acts_) {
    f32(a.mean1, m), f32(a.rstd1, m);
    f32(a.lse, long(B_loc) * nh_ * max_T_);
    f32(a.mid, m * C), f32(a.mean2, m), f32(a.rstd2, m);
    f32(a.mlp_out, m * F * glu), mlp_halves(a.mlp_out.data(), a.gate_out, a.up_out);
    if (cfg_.qk_norm) {
      f32(a.qpre, m * long(qd_)), f32(a.kpre, m * long(kvd_));
      f32(a.qrstd, m * long(nh_)), f32(a.krstd, m * long(nkv_));
    }
    if (low) {
      b16(a.norm1h, m * C), b16(a.norm2h, m * C), b16(a.acth, m * F);
      b16(a.qkvh, m * long(qkv_width()));
      a.qh = a.qkvh.data(), a.kh = a.qh + m * long(qd_), a.vh = a.kh + m * long(kvd_);
      b16(a.atth, m * long(qd_));
    } else {
      f32(a.norm1, m * C), f32(a.norm2, m * C), f32(a.act, m * F);
      f32(a.q, m * long(qd_)), f32(a.k, m * long(kvd_)), f32(a.v, m * long(kvd_));
      f32(a.att, m * long(qd_));
    }
  }
  f32(normf_, m * C), f32(meanf_, m), f32(rstdf_, m);
  f32(tmp_c_, m * C), f32(dnorm_, m * C), f32(dres_, m * C);
  f32(dqkv_, m * long(qkv_width()));
  dq_ = dqkv_.data(), dk_ = dq_ + m * long(qd_), dv_ = dk_ + m * long(kvd_);
  f32(datt_, m * long(qd_)), f32(dact_, m * F);
  f32(dmlp_, m * F * glu), mlp_halves(dmlp_.data(), dgate_, dup_);
  if (low) {
    b16(normf_h_, m * C), b16(dres_h_, m * C);
    b16(dqkv_h_, m * long(qkv_width()));
    dq_h_ = dqkv_h_.data(), dk_h_ = dq_h_ + m * long(qd_), dv_h_ = dk_h_ + m * long(kvd_);
    b16(dmlp_h_, m * F * glu), mlp_halves(dmlp_h_.data(), dgate_h_, dup_h_);
  }
  sums_ = be_.alloc<double>(2 * long(m));
  if (cfg_.qk_norm) {
    head_sums_ = be_.alloc<double>(long(m) * std::max(nh_, nkv_));
    f32(dqn_, m * long(qd_)), f32(dkn_, m * long(kvd_)), f32(head_dgain_, hs_);
  }
  tokens_ = be_.alloc<int32_t>(m), targets_ = be_.alloc<int32_t>(m), weights_ = be_.alloc<float>(m);
  if (opt_.recompute) f32(recompute_out_, m * C);
}

void Transformer::init(uint64_t seed) {
  float* p = params();
  std::vector<float> host;
  for (const ParamSpec& s : table_.specs()) {
    host.resize(size_t(s.numel));
    table_.initialize(s, host.data(), seed);
    be_.upload(p + s.offset, host.data(), host.size() * sizeof(float));
  }
}

const int32_t* Transformer::upload_ids(Buffer<int32_t>& to, const int32_t* host, int64_t m) {
  be_.upload(to.data(), host, size_t(m) * sizeof(int32_t));
  return to.data();
}

const int32_t* Transformer::upload_targets(const int32_t* host, int64_t m) {
  for (int64_t r = 0; r < m; ++r)
    DENDRITE_CHECK(host[r] >= 0 && host[r] < cfg_.vocab_size, "model: target ", host[r],
                   " at position ", r, " is outside the vocabulary [0, ", cfg_.vocab_size,
                   "); the data was tokenized with another tokenizer");
  return upload_ids(targets_, host, m);
}

void Transformer::zero_grads() { be_.fill(grads_->data(), 0.0f, grads_->size()); }

size_t Transformer::activation_bytes() const {
  size_t n = 0;
  for (auto& r : residual_) n += r.size();
  for (auto& a : acts_)
    for (const Buffer<float>* b :
         {&a.norm1, &a.mean1, &a.rstd1, &a.q, &a.k, &a.v, &a.att, &a.lse, &a.mid, &a.norm2,
          &a.mean2, &a.rstd2, &a.mlp_out, &a.act, &a.qpre, &a.kpre, &a.qrstd, &a.krstd})
      n += b->size();
  for (const Buffer<float>* b :
       {&normf_, &meanf_, &rstdf_, &tmp_c_, &dnorm_, &dres_, &dqkv_, &datt_, &dmlp_, &dact_,
        &recompute_out_, &dqn_, &dkn_, &head_dgain_})
    n += b->size();
  n += head_sums_.size() * 2;  // doubles
  for (size_t l = 0; l < k_cache_.size(); ++l) n += k_cache_[l].size() + v_cache_[l].size();
  n += last_rows_.size() + last_logits_.size();  // generation's, once made
  size_t low = 0;  // bf16 elements
  for (auto& a : acts_)
    for (const Buffer<bf16>* b : {&a.norm1h, &a.qkvh, &a.atth, &a.norm2h, &a.acth})
      low += b->size();
  for (const Buffer<bf16>* b : {&normf_h_, &dres_h_, &dqkv_h_, &dmlp_h_}) low += b->size();
  const size_t ids = tokens_.size() + targets_.size() + weights_.size();  // 4 bytes each
  return n * sizeof(float) + low * sizeof(bf16) + stream_.bytes() + sums_.size() * sizeof(double) +
         ids * 4;
}

void Transformer::check_batch(const int32_t* inputs, int B_loc, int T) const {
  const int cap = std::max(1, max_B_ / (grid_.shape().d * grid_.shape().z));
  DENDRITE_CHECK(B_loc >= 1 && B_loc <= cap && T >= 1 && T <= max_T_, "model: a local batch of ",
                 B_loc, "x", T, " exceeds the ", cap, "x", max_T_, " the model was sized for");
  for (long r = 0; r < long(B_loc) * T; ++r)
    DENDRITE_CHECK(inputs[r] >= 0 && inputs[r] < cfg_.vocab_size, "model: token id ", inputs[r],
                   " at position ", r, " is outside the vocabulary [0, ", cfg_.vocab_size,
                   "); the data was tokenized with another tokenizer");
}

}  // namespace dendrite
