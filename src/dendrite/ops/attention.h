// Causal self-attention and rotary position embedding.
// B batch, T sequence, NH query heads, NKV key/value heads (NH % NKV == 0;
// grouped-query attention shares KV head h / (NH/NKV)), hs head size.
// Activations are row-major with row r = b*T + t; within a row the heads are
// consecutive blocks of hs values. Rows have a stride (in floats) so q, k and v
// can be separate buffers or slices of one.
#pragma once

#include "dendrite/core/bf16.h"
#include "dendrite/core/operand.h"
#include "dendrite/ops/rope.h"

namespace dendrite::ops {

struct AttentionShape {
  int B, T, NH, NKV, hs;
  int q_stride, kv_stride, out_stride;  // floats between consecutive rows
};
// Where attention_backward_bf16 writes. dq, dk, dv [B*T rows, the shape's
// q_stride / kv_stride] = attention_backward's, rounded to bf16 (to_bf16,
// convert.h); fq, fk, fv (the same layouts) are scratch afterwards: the CPU
// computes attention_backward in them, a GPU writes only the bf16. db_q
// [NH*hs], db_k and db_v [NKV*hs] (each may be null) += the column sums of the
// fp32 dq, dk, dv, in a fixed order: each sequence's rows in runs of
// kAttentionSumRows from its first row (the last run may be shorter), each
// run summed row by row from its first, then the runs' sums added one after
// another in row order, starting from the first run's, and that total added
// to db. A GPU's blocks each own one run; the CPU sums in the same order,
// so on each backend the op has the bits of its attention_backward,
// to_bf16 and those sums.
struct AttentionGradsBf16 {
  bf16 *dq, *dk, *dv;
  float *fq, *fk, *fv;
  float *db_q = nullptr, *db_k = nullptr, *db_v = nullptr;
};
constexpr int kAttentionSumRows = 64;

// Throws, naming the op, unless the shape is valid (positive sizes, NH a
// multiple of NKV, strides that hold the heads) and q, k, v and out are of
// one precision.
void check_attention(const AttentionShape& s, Operand q, Operand k, Operand v, Operand out,
                     const char* op);
// Throws unless the operand is bf16.
void check_bf16(Operand a, const char* op);

// attention_forward(out, lse, q, k, v, s):
//   out[b,t,h,:] = sum_{s<=t} softmax_s(q[b,t,h]·k[b,s,g] / sqrt(hs)) v[b,s,g],  g = h/(NH/NKV)
//   lse [B, NH, T]: log-sum-exp of each row of scaled scores, saved for the
//   backward. Never holds a [T,T] matrix for more than one (b, h) per thread at once.
// attention_backward(dq, dk, dv, dout, out, lse, q, k, v, s): recomputes the
//   probabilities from q, k and lse. dq, dk, dv overwritten (with q_stride /
//   kv_stride layouts).
// q, k, v and the saved output are operands: fp32, or all bf16 (bf16
// precision: widened as they are read, computed in fp32); out, dq, dk, dv stay fp32.
// attention_backward_bf16(g, dout, out, lse, q, k, v, s): attention_backward's
//   gradients as the q, k and v products' bf16 operands, with their bias
//   gradients beside (AttentionGradsBf16). q, k, v and out bf16.
// attention_forward_bf16(out_bf16, out, lse, q, k, v, s): the forward's output
//   rounded to bf16 into out_bf16 [B*T, out_stride], the heads' columns (the
//   output projection's bf16 operand): attention_forward into out, then
//   to_bf16 (convert.h), the same bits. q, k, v bf16. out is scratch
//   afterwards (the CPU computes in it; a GPU writes only out_bf16).

// Attention over a key/value cache, for generation: each of B sequences has
// Tq new rows at positions pos .. pos+Tq-1. q [B*Tq rows, q_stride], and the
// new keys and values k_new, v_new [B*Tq rows, kv_stride]. The op first writes
// the new keys and values into rows pos .. pos+Tq-1 of each sequence of the
// caches k_cache, v_cache [B, T_cache, NKV*hs] (rows 0 .. pos-1 hold the
// earlier positions), then
//   out[b,t,h,:] = sum_{s<=pos+t} softmax_s(q[b,t,h]·k_cache[b,s,g] / sqrt(hs)) v_cache[b,s,g]
// which for pos = 0 is attention_forward's output. Under bf16 precision the
// caller passes q, k and v rounded to bf16 (and widened back), as the
// training forward reads them.
// The op: attention_cached(out, q, k_new, v_new, k_cache, v_cache, s).
struct CachedAttentionShape {
  int B, Tq, pos, T_cache, NH, NKV, hs;
  int q_stride, kv_stride, out_stride;  // floats between rows of q, k_new/v_new, out
};
// Throws unless the shape is valid and the new rows fit the cache.
void check_cached_attention(const CachedAttentionShape& s);

// The rows a rotary embedding turns: B*T rows of nheads heads of hs values
// (hs even), rows `stride` floats apart; row b*T + t at position pos0 + t.
struct RopeShape {
  int B, T, nheads, hs, stride;
  int pos0 = 0;
};
// Throws, naming the op, unless the shape and the spec are valid.
void check_rope(const RopeShape& s, const RopeSpec& rope, const char* op);

// Rotary embedding in the Hugging Face Llama convention ("rotate half"): for
// position t and i < hs/2, with f = rope_frequency(rope, i, hs) (ops/rope.h;
// theta^(-2i/hs) unscaled):
//   x'[i]        = x[i] cos(t f) - x[i+hs/2] sin(t f)
//   x'[i+hs/2]   = x[i+hs/2] cos(t f) + x[i] sin(t f)
// applied in place to x [B*T rows, nheads * hs] with the given row stride
// (rope_forward(x, s, rope), on RopeShape s above). Row b*T + t sits at
// position pos0 + t (pos0 > 0: new rows after a cache).
// rope_backward(dx, s, rope): the inverse rotation, applied in place to the gradient.
//
// rope_forward_bf16(low, x, s, rope) and rope_backward_bf16(low, dx, s, rope):
// the same rotation, then every one of a row's s.stride values rounded to
// bf16 (to_bf16) into low [B*T, s.stride]: the turned heads and the values
// after them in the row (Llama's fused rows of q, k and v: q's and k's heads
// turned, v's rounded as they are). x is scratch afterwards: the CPU turns it
// in place and rounds it (the two separate ops, so the same bits); a GPU
// reads it once and writes low alone.

}  // namespace dendrite::ops
