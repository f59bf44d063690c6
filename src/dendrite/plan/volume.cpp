#include "dendrite/plan/volume.h"

namespace dendrite {

void Volume::add(const std::string& axis, int extent, const char* kind, int64_t b, int64_t n) {
  if (extent <= 1 || n == 0) return;  // a group of one moves nothing
  const std::string key = axis + "." + kind;
  bytes[key] += b;
  calls[key] += n;
}

namespace {

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// The collectives of one step, in the order the model issues them (see
// model/transformer_step.cpp and parallel/{linear,layers}.cpp).
struct Counter {
  const ModelConfig& c;
  GridDims g;
  Volume v;
  int64_t m;  // local rows
  bool keep;  // no second all-gather in the backward
  int weight_bytes;  // of a gathered weight element: 4 (fp32) or 2 (bf16)

  // A weight block of `elements` gathered over Z.
  void all_gather_z(int64_t elements) { v.add("z", g.z, "all_gather", weight_bytes * elements); }
  void reduce_scatter_z(int64_t block_floats) { v.add("z", g.z, "reduce_scatter", 4 * block_floats); }
  void norm() {  // row sums over X: LayerNorm two doubles a row, RMSNorm one
    v.add("x", g.x, "all_reduce", (c.gpt2() ? 16 : 8) * m);
  }
  // A normal (out over Y) or transposed (out over X) layer: forward.
  void linear_forward(int64_t out_loc, int64_t in_loc, bool normal) {
    all_gather_z(out_loc * in_loc);
    v.add(normal ? "x" : "y", normal ? g.x : g.y, "all_reduce", 4 * m * out_loc);
  }
  // Backward; reduce: whether this call sums dx over its backward axis.
  void linear_backward(int64_t out_loc, int64_t in_loc, bool normal, bool reduce) {
    if (!keep) all_gather_z(out_loc * in_loc);
    if (reduce) v.add(normal ? "y" : "x", normal ? g.y : g.x, "all_reduce", 4 * m * in_loc);
    reduce_scatter_z(out_loc * in_loc);
  }
};

}  // namespace

Volume step_volume(const ModelConfig& c, const GridDims& g, int B, int T, int ce_chunk,
                   bool keep_gathered, bool recompute, bool dp_buckets, Precision precision) {
  Counter k{c, g, {}, int64_t(B / (g.d * g.z)) * T, keep_gathered, operand_bytes(precision)};
  const int64_t m = k.m, C = c.n_embd / g.x, hs = c.head_size();
  const int64_t q = int64_t(c.n_head / g.y) * hs, kv = int64_t(c.n_kv_head / g.y) * hs;
  const int64_t F = c.ffn_hidden / g.y, Vl = c.padded_vocab(g.y) / g.y;
  const int64_t chunks = (m + ce_chunk - 1) / ce_chunk;
  const bool gpt2 = c.gpt2();

  // Forward: embedding, layers, final norm, head. The embedding gathers its
  // block when it keeps it for a tied head or the Z group's batch has as many
  // rows as the block; else it all-gathers the group's tokens (int64) and
  // reduce-scatters their rows (parallel/layers.h).
  const bool embedding_gathers = (keep_gathered && c.tied_embeddings()) || g.z * m >= Vl;
  if (embedding_gathers) {
    k.all_gather_z(Vl * C);
  } else {
    k.v.add("z", g.z, "all_gather", 8 * m * g.z);
    k.reduce_scatter_z(m * g.z * C);
  }
  k.v.add("y", g.y, "all_reduce", 4 * m * C);
  if (gpt2) k.all_gather_z(int64_t(c.block_size) * C);
  auto layer_forward = [&] {
    k.norm();
    k.linear_forward(q, C, true);
    k.linear_forward(kv, C, true);
    k.linear_forward(kv, C, true);
    k.linear_forward(C, q, false);
    k.norm();
    k.linear_forward(F, C, true);
    if (!gpt2) k.linear_forward(F, C, true);
    k.linear_forward(C, F, false);
  };
  for (int l = 0; l < c.n_layer; ++l) layer_forward();
  k.norm();
  if (!(keep_gathered && c.tied_embeddings())) k.all_gather_z(Vl * C);  // else kept by the embedding
  k.v.add("x", g.x, "all_reduce", 4 * m * Vl, chunks);
  k.v.add("y", g.y, "all_gather", 4 * 2 * m * g.y, chunks);

  // Backward: head, final norm, layers in reverse, embedding.
  k.v.add("y", g.y, "all_reduce", 4 * m * C);
  k.reduce_scatter_z(Vl * C);
  k.norm();
  for (int l = 0; l < c.n_layer; ++l) {
    if (recompute) layer_forward();
    k.linear_backward(C, F, false, true);
    if (!gpt2) k.linear_backward(F, C, true, false);
    k.linear_backward(F, C, true, true);
    k.norm();
    k.linear_backward(C, q, false, true);
    if (c.qk_norm) k.v.add("y", g.y, "all_reduce", 2 * 4 * hs, 2);  // the per-head gains' gradients
    k.linear_backward(q, C, true, false);
    k.linear_backward(kv, C, true, false);
    k.linear_backward(kv, C, true, true);
    k.norm();
  }
  if (embedding_gathers)
    k.reduce_scatter_z(Vl * C);
  else
    k.v.add("z", g.z, "all_gather", 4 * m * g.z * C);  // the group's dout rows (fp32)
  if (gpt2) k.reduce_scatter_z(int64_t(c.block_size) * C);

  // Gradient reductions: replicated tensors over Z, everything over D (each
  // tensor padded to 16 floats in the flat buffer).
  int64_t chunked = round16(Vl * C / g.z), replicated = 0;
  if (gpt2) chunked += round16(int64_t(c.block_size) * C / g.z);
  if (!c.tied_embeddings()) chunked += round16(Vl * C / g.z);  // untied head
  for (int l = 0; l < c.n_layer; ++l) {
    chunked += round16(q * C / g.z) + 2 * round16(kv * C / g.z) + round16(C * q / g.z);
    chunked += (gpt2 ? 2 : 3) * round16(F * C / g.z);
    replicated += 2 * round16(C);  // norm gains
    if (!gpt2 && c.qkv_bias) replicated += round16(q) + 2 * round16(kv);
    if (c.qk_norm) replicated += 2 * round16(hs);
    if (gpt2) replicated += 2 * round16(C) + round16(q) + 2 * round16(kv) + round16(C) +
                            round16(F) + round16(C);  // norm biases, biases
  }
  replicated += round16(C) + (gpt2 ? round16(C) : 0);  // final norm
  if (dp_buckets && g.d > 1) {
    // One bucket per layer (its chunked and its replicated range), then the
    // rest: embedding (+ GPT-2 positions, adjacent) or embedding and Llama's
    // head (not adjacent), and the final norm.
    const int rest = c.tied_embeddings() ? 2 : 3;
    k.v.add("z", g.z, "all_reduce", 4 * replicated, c.n_layer + 1);
    k.v.add("d", g.d, "all_reduce", 4 * (chunked + replicated), 2 * c.n_layer + rest);
  } else {
    k.v.add("z", g.z, "all_reduce", 4 * replicated);
    k.v.add("d", g.d, "all_reduce", 4 * (chunked + replicated));
  }

  // The loss (over Z and D) and the squared gradient norm (over X, Y and Z): one double each.
  k.v.add("z", g.z, "all_reduce", 8);
  k.v.add("d", g.d, "all_reduce", 8);
  k.v.add("x", g.x, "all_reduce", 8);
  k.v.add("y", g.y, "all_reduce", 8);
  k.v.add("z", g.z, "all_reduce", 8);
  return k.v;
}

}  // namespace dendrite
