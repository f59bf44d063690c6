// The performance model: GEMMs at the machine's measured rate for their shape,
// the other ops by the bytes they stream over the memory bandwidth, the
// collectives of step_volume at ring cost over the slowest link each group
// spans (plus a per-call penalty on an oversubscribed node, and the wait for
// the group's last rank as a calibrated fraction of the compute), what the overlap
// options hide by overlap.h, and memory by the formulas of Transformer::allocate.
#include "dendrite/plan/model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "dendrite/core/check.h"
#include "dendrite/parallel/head_chunk.h"

namespace dendrite {

namespace {

int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

// Local sizes of the model on a grid.
struct Local {
  int64_t B_loc, m, C, q, kv, F, Vl, nh;
  Local(const ModelConfig& c, const GridDims& g, const PlanOptions& o)
      : B_loc(std::max(1, o.B / (g.d * g.z))), m(B_loc * o.T), C(c.n_embd / g.x),
        q(int64_t(c.n_head / g.y) * c.head_size()), kv(int64_t(c.n_kv_head / g.y) * c.head_size()),
        F(c.ffn_hidden / g.y), Vl(c.padded_vocab(g.y) / g.y), nh(c.n_head / g.y) {}
};

// One linear of a layer with its local [out, in] block; reduce: the axis its
// backward sums dx over ("" when it only accumulates), as step_volume counts.
struct LayerLinear {
  const char* name;
  int64_t out, in;
  const char* reduce;
};

// In the order of step_gemms; backward reductions as in volume.cpp.
std::vector<LayerLinear> layer_linears(const ModelConfig& c, const Local& s) {
  std::vector<LayerLinear> v = {{"layer.q", s.q, s.C, ""},   {"layer.k", s.kv, s.C, ""},
                                {"layer.v", s.kv, s.C, "y"}, {"layer.o", s.C, s.q, "x"},
                                {"layer.up", s.F, s.C, "y"}};
  if (!c.gpt2()) v.push_back({"layer.gate", s.F, s.C, ""});
  v.push_back({"layer.down", s.C, s.F, "x"});
  return v;
}

// Adds the forward, input-gradient and weight-gradient GEMMs of a linear layer
// with a local [out, in] block applied to `rows` rows, `count` times.
void add_linear(std::vector<GemmCall>& v, const std::string& name, int64_t rows, int64_t out,
                int64_t in, int64_t count) {
  v.push_back({name + ".forward", rows, out, in, count});   // y = x W^T
  v.push_back({name + ".dinput", rows, in, out, count});    // dx = dy W
  v.push_back({name + ".dweight", out, in, rows, count});   // dW = dy^T x
}

// Floats streamed through memory by the ops that are not GEMMs (a simple
// estimate: each op reads and writes its operands once): per layer, and in all.
struct OtherFloats {
  double layer = 0, total = 0;
};
OtherFloats other_op_floats(const ModelConfig& c, const Local& s) {
  const double m = double(s.m), C = double(s.C), F = double(s.F);
  const double lin_out = s.q + 2.0 * s.kv + C + F + C;  // outputs of the biased layers
  double layer = 0;
  layer += (3 + 5) * 2 * m * C;                 // two norms, forward (2 reads, 1 write) and backward
  layer += 2 * 3 * m * C * 2;                   // two residual adds, forward and backward
  layer += c.gpt2() ? 2 * m * lin_out : 0;      // bias adds
  layer += c.gpt2() ? (2 + 3) * m * F : (3 + 5) * m * F;  // GELU or SwiGLU, forward and backward
  layer += c.gpt2() ? 0 : 2 * 2 * m * (s.q + s.kv);       // rotary, forward and backward
  double total = layer * c.n_layer;
  total += 8 * m * C;              // final norm, embedding lookup and its backward
  total += 4 * m * double(s.Vl);   // cross-entropy statistics and dlogits
  return {layer, total};
}

// Attention's flops on this rank: causal QK^T and PV forward (2 T(T+1) hs per
// head and sequence), the backward 2.5 times that (recomputed scores, dV, dP,
// dQ, dK); recomputation runs the forward once more.
double attention_flops(const ModelConfig& c, const Local& s, const PlanOptions& o) {
  const double fwd = 2.0 * o.T * (o.T + 1.0) * c.head_size() * double(s.nh) * double(s.B_loc);
  return (o.recompute ? 4.5 : 3.5) * fwd * c.n_layer;
}

}  // namespace

std::string grid_str(const GridDims& g) {
  return str("x=", g.x, ",y=", g.y, ",z=", g.z, ",d=", g.d);
}

std::vector<GemmCall> step_gemms(const ModelConfig& c, const GridDims& g, const PlanOptions& o) {
  const Local s(c, g, o);
  std::vector<GemmCall> v;
  const int64_t L = c.n_layer;
  const size_t first = v.size();
  for (const LayerLinear& l : layer_linears(c, s)) add_linear(v, l.name, s.m, l.out, l.in, L);
  if (o.recompute)  // the layers' forward products run twice
    for (size_t i = first; i < v.size(); ++i)
      if (v[i].what.ends_with(".forward")) v[i].count *= 2;
  // The LM head in chunks of step_head_chunk rows.
  const int chunk = step_head_chunk(c, g, o);
  const int64_t full = s.m / chunk, rest = s.m % chunk;
  if (full > 0) add_linear(v, "head", chunk, s.Vl, s.C, full);
  if (rest > 0) add_linear(v, "head.last", rest, s.Vl, s.C, 1);
  return v;
}

double collective_seconds(const Machine& mach, const std::string& kind, int stride, int g,
                          double bytes, double calls) {
  return collective_seconds(mach, kind, stride, g, bytes, calls, false);
}

double collective_seconds(const Machine& mach, const std::string& kind, int stride, int g,
                          double bytes, double calls, bool shared, bool shared_memory) {
  if (g <= 1 || calls <= 0) return 0;
  const LinkCost& link = mach.link(kind, stride, g, shared, shared_memory);
  const double factor = kind == "all_reduce" ? 2.0 : 1.0;
  return calls * link.seconds(bytes / calls, g, factor);
}

namespace {

// Floats of one layer's parameters on this rank, and of all of them.
struct ParamFloats {
  int64_t layer = 0, total = 0;
};
ParamFloats param_floats(const ModelConfig& c, const GridDims& g) {
  const Local s(c, g, PlanOptions{});
  const int64_t z = g.z;
  const bool gpt2 = c.gpt2();
  int64_t n = pad16(s.Vl * s.C / z);                                 // token embedding (tied head)
  if (gpt2) n += pad16(int64_t(c.block_size) * s.C / z);             // position embedding
  if (!c.tied_embeddings()) n += pad16(s.Vl * s.C / z);              // LM head
  int64_t layer = pad16(s.q * s.C / z) + 2 * pad16(s.kv * s.C / z) + pad16(s.C * s.q / z);
  layer += (gpt2 ? 2 : 3) * pad16(s.F * s.C / z);
  layer += 2 * pad16(s.C);                                           // norm gains
  if (gpt2)
    layer += 2 * pad16(s.C) + pad16(s.q) + 2 * pad16(s.kv) + pad16(s.C) + pad16(s.F) + pad16(s.C);
  if (!gpt2 && c.qkv_bias) layer += pad16(s.q) + 2 * pad16(s.kv);  // Qwen2's q, k, v biases
  if (c.qk_norm) layer += 2 * pad16(c.head_size());                // Qwen3's per-head gains
  n += layer * c.n_layer;
  n += pad16(s.C) * (gpt2 ? 2 : 1);                                  // final norm
  return {layer, n};
}

// Stride and size of each axis' groups.
std::pair<int, int> axis_group(const GridDims& g, const std::string& axis) {
  if (axis == "x") return {1, g.x};
  if (axis == "y") return {g.x, g.y};
  if (axis == "z") return {g.x * g.y, g.z};
  return {g.x * g.y * g.z, g.d};
}

// Whether the trainer keeps this axis' collective of this kind in shared memory
// when its group is inside a node (Z parameters, D gradients).
bool shm_kind(const std::string& axis, const std::string& kind) {
  return (axis == "z" && (kind == "all_gather" || kind == "reduce_scatter")) ||
         (axis == "d" && kind == "all_reduce");
}

double cost(const Machine& mach, const GridDims& g, const std::string& axis, const char* kind,
            double bytes, double calls, const PlanOptions& o) {
  auto [stride, size] = axis_group(g, axis);
  return collective_seconds(mach, kind, stride, size, bytes, calls,
                            o.shared_memory && shm_kind(axis, kind), o.shared_memory);
}

// What the CUDA backend holds beside the model's buffers: cuBLASLt's
// workspace and the kernels' scratch (backend/cuda/gemm.h, kernels.h), and
// under bf16 the attention backward's scratch (attention_mma.cu: dO in bf16
// and D = rowsum(dO * O), each to 256 bytes, and the bias gradients' sums of
// each run of 64 rows).
double gpu_buffers(const ModelConfig& c, const Local& s, const PlanOptions& o) {
  constexpr double kGemmWorkspace = 32 << 20, kKernelScratch = 1 << 20;
  double b = kGemmWorkspace + kKernelScratch;
  if (o.precision == Precision::kBF16) {
    auto to256 = [](double bytes) { return std::ceil(bytes / 256) * 256; };
    const double hs = c.head_size(), nkv = double(c.n_kv_head) * s.nh / c.n_head;
    const double runs = double(s.B_loc) * std::ceil(o.T / 64.0);
    b += to256(2.0 * s.m * s.nh * hs) + to256(4.0 * s.m * s.nh) + 4 * runs * (s.nh + 2 * nkv) * hs;
  }
  return b;
}

}  // namespace

bool uses_shared_memory(const Machine& mach, const GridDims& g, const std::string& axis,
                        const std::string& kind, const PlanOptions& o) {
  auto [stride, size] = axis_group(g, axis);
  return shm_kind(axis, kind) && mach.uses_shm(stride, size, o.shared_memory);
}

int64_t local_parameter_floats(const ModelConfig& c, const GridDims& g) {
  return param_floats(c, g).total;
}

int step_head_chunk(const ModelConfig& c, const GridDims& g, const PlanOptions& o) {
  const Local s(c, g, o);
  const int64_t row = head_chunk_row_bytes(s.Vl, g.y, o.precision == Precision::kBF16);
  return head_chunk_rows(int64_t(o.device_bytes), row, s.m);
}

MemoryEstimate step_memory(const ModelConfig& c, const GridDims& g, const PlanOptions& o) {
  const Local s(c, g, o);
  const double m = double(s.m), C = double(s.C), q = double(s.q), kv = double(s.kv), F = double(s.F);
  const bool llama = !c.gpt2(), low = o.precision == Precision::kBF16;
  const double elem = operand_bytes(o.precision);  // a gathered weight or saved GEMM input
  MemoryEstimate e;
  const ParamFloats pf = param_floats(c, g);
  // bf16 adds a copy of every tensor in bf16: the Z-chunked ones for the
  // GEMMs, lookups and gathers, the replicated ones for the epilogues' biases.
  e.params = 16.0 * double(pf.total) + (low ? 2.0 * double(pf.total) : 0.0);
  // Transformer::allocate: residual stream, per-layer saved activations, scratch.
  // A layer's GEMM inputs (norm1, q, k, v, att, norm2, act) in the run's
  // precision; the rest (mid, the norms' statistics, lse, up and gate) fp32.
  const double inputs = 2 * m * C + 2 * m * q + 2 * m * kv + m * F;
  // Qwen3 also saves q and k before their per-head norms and the norms' rstd.
  const double nkv = double(c.n_kv_head / g.y), head_norms = m * (q + kv + s.nh + nkv);
  const double layer = inputs * elem + 4 * (m * C + 4 * m + double(s.B_loc) * s.nh * o.T +
                                            (llama ? 2 : 1) * m * F + (c.qk_norm ? head_norms : 0));
  double floats = (c.n_layer + 1.0) * m * C;
  if (o.recompute) floats += m * C;  // the recomputed layer's output
  floats += m * C + 2 * m + 3 * m * C + 2 * m * q + 2 * m * kv + (llama ? 3 : 2) * m * F;
  // Qwen3: dq and dk before the head norms, a gain's gradient, the rows' sums (doubles).
  if (c.qk_norm) floats += m * (q + kv) + c.head_size() + 2 * m * std::max(double(s.nh), nkv);
  // bf16: the final norm's output and the gradients that feed GEMMs, rounded.
  const double scratch16 = low ? 2 * m * C + m * q + 2 * m * kv + (llama ? 2 : 1) * m * F : 0;
  // + the norms' row sums (16 bytes a row), and the rows' token ids, targets and loss weights
  e.activations =
      4 * floats + (o.recompute ? 1 : c.n_layer) * layer + 2 * scratch16 + 16 * m + 12 * m;
  // Only when Z splits the weights: two gather slots of the largest block
  // (three when it is larger than a layer's), eight dW slots of a layer's
  // block and two of the largest (parallel/weight_stream.h), and the embedding's
  // rows of the Z group (layers.h). Gathered blocks in the run's precision.
  const double vocab_block = double(s.Vl) * s.C;
  const double pos_block = c.gpt2() ? double(c.block_size) * s.C : 0;
  const double largest = std::max({vocab_block, pos_block, q * C, F * C});
  double layer_block = 0;
  for (double b : {vocab_block, pos_block, q * C, kv * C, F * C})
    if (4 * b <= largest) layer_block = std::max(layer_block, b);
  if (layer_block == 0) layer_block = largest;
  double ws = 0, gathered = 0;  // fp32 floats; gathered elements
  if (g.z > 1) {
    gathered = 2 * largest + (largest > layer_block ? largest : 0);
    ws = 8 * layer_block + (largest > layer_block ? 2 * largest : 0);
    // the embedding's rows of the Z group, and the group's token ids (int32)
    if (!(o.keep_gathered && c.tied_embeddings()) && g.z * m < s.Vl)
      ws += double(g.z) * m * (C + 1);
  }
  if (o.keep_gathered && g.z > 1) {
    gathered += c.n_layer * (q * C + 2 * kv * C + C * q + (llama ? 3 : 2) * F * C);
    if (c.tied_embeddings()) gathered += vocab_block;
  }
  const double chunk = step_head_chunk(c, g, o);
  ws += chunk * s.Vl + 3 * chunk + 2 * chunk * g.y;  // the head's chunk buffers
  e.workspace = 4 * ws + elem * gathered + (low ? 2 * chunk * s.Vl : 0);  // + bf16 dlogits
  if (o.device_bytes > 0) {
    e.workspace += gpu_buffers(c, s, o);
    // NCCL's reduce-scatter into an accumulator lands in a scratch of the
    // largest shard first (comm/nccl, reserved by the weight stream).
    if (g.z > 1) e.workspace += 4 * std::ceil(largest / g.z);
  }
  return e;
}

OverlapInputs overlap_inputs(const ModelConfig& c, const Machine& mach, const GridDims& g,
                             const PlanOptions& o) {
  const Local s(c, g, o);
  const double slow = mach.oversubscription();
  auto gemm_s = [&](int64_t m, int64_t n, int64_t k) {
    return slow * 2.0 * m * n * k / (mach.gemm_gflops(m, n, k, o.precision) * 1e9);
  };
  const double elem = operand_bytes(o.precision);  // a gathered weight element
  OverlapInputs in;
  in.layers = c.n_layer;
  double gemm_fwd = 0, gemm_bwd = 0, gather = 0, scatter = 0;
  std::map<std::string, double> dweight;
  for (const LayerLinear& l : layer_linears(c, s)) {
    gemm_fwd += gemm_s(s.m, l.out, l.in);
    dweight[l.name] = gemm_s(l.out, l.in, s.m);
    gemm_bwd += gemm_s(s.m, l.in, l.out) + dweight[l.name];
    gather += cost(mach, g, "z", "all_gather", elem * l.out * l.in, 1, o);
    scatter += cost(mach, g, "z", "reduce_scatter", 4.0 * l.out * l.in, 1, o);
  }
  // OAR over groups (model/transformer_step.cpp): the dx sum of the layers that
  // share an input hides behind their dW products and, where the transposed
  // layer before them has no sum of its own (Gx = 1), behind its product too.
  const bool x_sums = axis_group(g, "x").second > 1;
  for (const LayerLinear& l : layer_linears(c, s)) {
    const std::string axis = l.reduce, name = l.name;
    if (axis.empty() || axis_group(g, axis).second == 1) continue;
    double behind = dweight[name];
    if (name == "layer.v")
      behind += dweight["layer.q"] + dweight["layer.k"] + (x_sums ? 0 : dweight["layer.o"]);
    if (name == "layer.up")
      behind += (c.gpt2() ? 0 : dweight["layer.gate"]) + (x_sums ? 0 : dweight["layer.down"]);
    in.oar.push_back(
        {axis, cost(mach, g, axis, "all_reduce", 4.0 * s.m * l.in, 1, o), behind});
  }
  PlanOptions once = o;  // one forward of attention per layer
  once.recompute = false;
  const double attn_fwd =
      slow * attention_flops(c, s, once) / 3.5 / c.n_layer / (0.5 * mach.peak_gflops * 1e9);
  const double other = slow * 4 * other_op_floats(c, s).layer / mach.memory_bandwidth;
  in.layer_forward_s = gemm_fwd + attn_fwd + other / 3;
  in.layer_backward_s = gemm_bwd + 2.5 * attn_fwd + 2 * other / 3;
  if (o.recompute) in.layer_backward_s += in.layer_forward_s;
  in.tail_backward_s = slow * 4 * 2.0 * s.m * s.C / mach.memory_bandwidth;  // embedding backward
  in.z_gather_forward_s = gather;
  in.z_gather_backward_s = (o.keep_gathered ? 0 : gather) + (o.recompute ? gather : 0);
  in.z_scatter_layer_s = scatter;
  in.z_scatters_per_layer = int(layer_linears(c, s).size());
  in.z_scatters_wait_each_layer =
      o.overlap.dp && g.d > 1 && g.z > 1 &&
      !(uses_shared_memory(mach, g, "z", "reduce_scatter", o) &&
        uses_shared_memory(mach, g, "d", "all_reduce", o));
  if (o.overlap.dp)
    in.d_bucket_s = cost(mach, g, "d", "all_reduce", 4.0 * param_floats(c, g).layer, 2, o);
  return in;
}

namespace {

// The step's compute on one rank: GEMMs at the machine's rate for their
// shape, attention and the other ops (with the optimizer step) by their flops
// and bytes; all stretched by ranks over cores on an oversubscribed node.
void predict_compute(StepPrediction& p, const ModelConfig& c, const Machine& mach,
                     const GridDims& g, const PlanOptions& o) {
  const Local s(c, g, o);
  const double slow = mach.oversubscription();
  for (const GemmCall& call : step_gemms(c, g, o))
    p.gemm_s += call.flops() / (mach.gemm_gflops(call.m, call.n, call.k, o.precision) * 1e9);
  // Attention runs in Dendrite's own flash-style kernel: half the FMA peak.
  p.attention_s = attention_flops(c, s, o) / (0.5 * mach.peak_gflops * 1e9);
  p.local_floats = local_parameter_floats(c, g);
  // The optimizer step: measured seconds per parameter when the machine has
  // them, else AdamW's 28 bytes per local parameter (reads p, g, m, v; writes
  // p, m, v) plus 8 for zeroing the gradients and their norm.
  const double optimizer_s = mach.optimizer_seconds_per_param > 0
                                 ? mach.optimizer_seconds_per_param * double(p.local_floats)
                                 : 36.0 * double(p.local_floats) / mach.memory_bandwidth;
  p.other_s = 4 * other_op_floats(c, s).total / mach.memory_bandwidth + optimizer_s;
  p.gemm_s *= slow, p.attention_s *= slow, p.other_s *= slow;
  p.compute_s = p.gemm_s + p.attention_s + p.other_s;
}

// The step's collectives (step_volume, into p.volume) at ring cost over the
// slowest link each group spans: seconds per axis, before any overlap. The
// oversubscription penalty per call goes to p.penalty_s and, exposed, to
// p.comm_s.
std::map<std::string, double> predict_ring_seconds(StepPrediction& p, const ModelConfig& c,
                                                   const Machine& mach, const GridDims& g,
                                                   const PlanOptions& o) {
  p.volume = step_volume(c, g, o.B, o.T, step_head_chunk(c, g, o), o.keep_gathered, o.recompute,
                         o.overlap.dp, o.precision);
  // Oversubscribed, every collective call waits about one scheduler slice for
  // a descheduled peer (machine.h): exposed, whatever overlap is on.
  const double penalty = mach.oversubscription() > 1 ? mach.oversubscribed_call_penalty_s : 0.0;
  std::map<std::string, double> ring;
  for (auto& [key, b] : p.volume.bytes) {
    const std::string axis = key.substr(0, key.find('.')), kind = key.substr(key.find('.') + 1);
    const double calls = double(p.volume.calls.at(key));
    ring[axis] += cost(mach, g, axis, kind.c_str(), double(b), calls, o);
    p.penalty_s += penalty * calls;
    p.comm_s[axis] += penalty * calls;
  }
  return ring;
}

// What the overlaps hide of each axis' ring seconds (overlap.h), into
// p.hidden_s and p.comm_hidden_s; the rest is exposed, added to p.comm_s.
void predict_hidden(StepPrediction& p, const std::map<std::string, double>& ring,
                    const ModelConfig& c, const Machine& mach, const GridDims& g,
                    const PlanOptions& o) {
  Overlap overlap = o.overlap;  // the trainer turns oag off when blocks are kept
  if (o.keep_gathered) overlap.oag = false;
  const std::map<std::string, double> hidden = hidden_seconds(overlap, overlap_inputs(c, mach, g, o));
  for (auto& [axis, t] : ring) {
    const double h = hidden.count(axis) ? std::min(hidden.at(axis), t) : 0.0;
    p.hidden_s[axis] = h;
    p.comm_s[axis] += t - h;
    p.comm_hidden_s += h;
  }
}

// The engine's shared-memory work (hidden Z collectives; D with dp) takes
// cycles from the GEMMs when no core is spare: p.engine_s, added to the compute.
void predict_engine_work(StepPrediction& p, const Machine& mach, const GridDims& g,
                         const PlanOptions& o) {
  const bool no_spare_core = mach.cores_per_node > 0 &&
                             mach.ranks_per_node * mach.threads_per_rank >= mach.cores_per_node;
  if (!no_spare_core) return;
  const std::pair<const char*, const char*> engine[] = {{"z", "all_gather"}, {"d", "all_reduce"}};
  for (auto [axis, kind] : engine)
    if (p.hidden_s.count(axis) && uses_shared_memory(mach, g, axis, kind, o))
      p.engine_s += kEngineWorkFraction * p.hidden_s.at(axis);
  p.compute_s += p.engine_s;
}

// The ranks of each group drift apart while they compute; the group's
// collectives wait for the last one (calibrated per group size), for the
// compute between calls up to the interval the fraction was measured over:
// p.peer_wait_s and p.peer_wait_axis_s, exposed in p.comm_s.
void predict_peer_wait(StepPrediction& p, const std::map<std::string, double>& ring,
                       const Machine& mach, const GridDims& g) {
  std::map<std::string, double> axis_calls;
  for (auto& [key, n] : p.volume.calls) axis_calls[key.substr(0, key.find('.'))] += double(n);
  for (auto& [axis, t] : ring) {
    const double span = mach.peer_wait_interval_s > 0
                            ? std::min(p.compute_s, axis_calls[axis] * mach.peer_wait_interval_s)
                            : p.compute_s;
    const double w = mach.peer_wait(axis_group(g, axis).second) * span;
    p.peer_wait_s += w;
    p.peer_wait_axis_s[axis] = w;
  }
  // Oversubscribed, the compute above is stretched by ranks over cores: the
  // time a rank is not on a core. A rank that ran ahead spends part of that
  // time waiting for its group at the next collective instead of inside its
  // own compute, so the wait is carved out of the stretch, not added to it
  // (measured: the stretched compute matched the measured compute plus the
  // wait within 14%, docs/planner.md), and cannot exceed it.
  const double slow = mach.oversubscription();
  if (slow > 1 && p.peer_wait_s > 0) {
    const double stretch = p.compute_s * (1 - 1 / slow);
    const double scale = std::min(1.0, stretch / p.peer_wait_s);
    p.peer_wait_s *= scale;
    for (auto& [axis, w] : p.peer_wait_axis_s) w *= scale;
    p.compute_s -= p.peer_wait_s;
  }
  for (auto& [axis, w] : p.peer_wait_axis_s) p.comm_s[axis] += w;
}

// The step's totals from its parts: exposed and total communication, the
// step's seconds and its tokens per second.
void predict_totals(StepPrediction& p, const PlanOptions& o) {
  for (auto& [axis, t] : p.comm_s) p.comm_exposed_s += t;
  p.comm_total_s = p.comm_exposed_s + p.comm_hidden_s;
  p.step_s = p.compute_s + p.comm_exposed_s;
  p.tokens_per_s = double(o.B) * o.T / p.step_s;
}

}  // namespace

StepPrediction predict_step(const ModelConfig& c, const Machine& mach, const GridDims& g,
                            const PlanOptions& options) {
  PlanOptions o = options;
  o.device_bytes = mach.gpu ? mach.memory_per_rank_bytes : 0;
  StepPrediction p;
  p.grid = g;
  predict_compute(p, c, mach, g, o);
  const std::map<std::string, double> ring = predict_ring_seconds(p, c, mach, g, o);
  predict_hidden(p, ring, c, mach, g, o);
  predict_engine_work(p, mach, g, o);
  predict_peer_wait(p, ring, mach, g);
  predict_totals(p, o);
  p.memory = step_memory(c, g, o);
  return p;
}

std::vector<GridDims> enumerate_grids(int P) {
  DENDRITE_CHECK(P >= 1, "plan: the world size must be positive, got ", P);
  std::vector<GridDims> out;
  for (int x = 1; x <= P; ++x)
    for (int y = 1; x * y <= P; ++y)
      for (int z = 1; x * y * z <= P; ++z)
        if (P % (x * y * z) == 0) out.push_back({x, y, z, P / (x * y * z)});
  return out;
}

std::string grid_exclusion(const ModelConfig& c, const GridDims& g, const PlanOptions& o) {
  if (c.n_embd % g.x != 0) return str("width ", c.n_embd, " is not divisible by x=", g.x);
  if (c.n_head % g.y != 0 || c.n_kv_head % g.y != 0)
    return str(c.n_head, " heads (", c.n_kv_head, " key/value) do not split into y=", g.y);
  if (c.ffn_hidden % g.y != 0) return str("MLP width ", c.ffn_hidden, " is not divisible by y=", g.y);
  if (o.B % (g.d * g.z) != 0) return str("batch ", o.B, " is not divisible by d*z=", g.d * g.z);
  const Local s(c, g, o);
  const std::pair<const char*, int64_t> blocks[] = {
      {"vocabulary", s.Vl * s.C}, {"q", s.q * s.C}, {"k/v", s.kv * s.C}, {"MLP", s.F * s.C},
      {"position", c.gpt2() ? int64_t(c.block_size) * s.C : 0}};
  for (auto [name, numel] : blocks)
    if (numel % g.z != 0) return str("the ", name, " block does not split into z=", g.z, " chunks");
  return "";
}

Plan plan_grids(const ModelConfig& c, const Machine& mach, int P, const PlanOptions& o) {
  c.validate();
  DENDRITE_CHECK(o.B >= 1 && o.T >= 1 && o.T <= c.block_size, "plan: batch ", o.B, " and sequence ",
                 o.T, " must be positive, the sequence at most the model's block_size ", c.block_size);
  Plan plan;
  for (const GridDims& g : enumerate_grids(P)) {
    std::string why = grid_exclusion(c, g, o);
    if (!why.empty()) {
      plan.excluded.push_back({g, why});
      continue;
    }
    StepPrediction p = predict_step(c, mach, g, o);
    if (p.memory.total() > mach.memory_per_rank_bytes) {
      plan.excluded.push_back({g, str("needs ", std::lround(p.memory.total() / 1048576.0),
                                      " MB per rank, above the machine's ",
                                      std::lround(mach.memory_per_rank_bytes / 1048576.0), " MB")});
      continue;
    }
    plan.ranked.push_back(std::move(p));
  }
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(),
                   [](const StepPrediction& a, const StepPrediction& b) { return a.step_s < b.step_s; });
  return plan;
}

}  // namespace dendrite
