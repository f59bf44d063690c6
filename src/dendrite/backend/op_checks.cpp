// The ops' argument checks (ops/*.h), which Backend's methods run before a
// backend's own (backend.h): the same checks, and the same messages, on
// every device. They read sizes and operand types only, never the data.
#include <cmath>

#include "dendrite/core/check.h"
#include "dendrite/ops/activation.h"
#include "dendrite/ops/attention.h"
#include "dendrite/ops/cross_entropy.h"
#include "dendrite/ops/embedding.h"
#include "dendrite/ops/matmul.h"
#include "dendrite/ops/norm.h"
#include "dendrite/ops/optim.h"
#include "dendrite/ops/tensor.h"

namespace dendrite::ops {

namespace {

void check_same_precision(Operand a, Operand b, const char* op) {
  DENDRITE_CHECK(a.is_bf16() == b.is_bf16(), op, ": operands of different precision");
}

}  // namespace

void check_count(int64_t n, const char* op) {
  DENDRITE_CHECK(n >= 0, op, ": need n >= 0 elements, got n=", n);
}

void check_glu_rows(const GluRows& s, const char* op) {
  DENDRITE_CHECK(s.rows >= 0 && s.width > 0 && s.stride >= s.width, op,
                 ": need rows >= 0 and 0 < width <= stride, got rows=", s.rows, " width=", s.width,
                 " stride=", s.stride);
}

void check_matrix(int m, int n, const char* op) {
  DENDRITE_CHECK(m >= 0 && n >= 0, op, ": need m >= 0 rows and n >= 0 columns, got m=", m,
                 " n=", n);
}

void check_linear(const LinearShape& s, Operand a, Operand b, const char* op) {
  DENDRITE_CHECK(s.m >= 0 && s.k > 0 && s.n > 0, op, ": need m >= 0 rows and k, n > 0, got m=", s.m,
                 " k=", s.k, " n=", s.n);
  check_same_precision(a, b, op);
}

void check_gemm(bool trans_a, bool trans_b, int M, int N, int K, Operand A, int lda, Operand B,
                int ldb, int ldc) {
  DENDRITE_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: need M, N, K >= 0, got M=", M, " N=", N,
                 " K=", K);
  DENDRITE_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
                 "gemm: leading dimensions lda=", lda, " ldb=", ldb, " ldc=", ldc,
                 " are shorter than the rows they step over");
  check_same_precision(A, B, "gemm");
}

void check_norm(const NormShape& s, const char* op) {
  DENDRITE_CHECK(s.m >= 0 && s.c > 0, op, ": need m >= 0 rows and c > 0 columns, got m=", s.m,
                 " c=", s.c);
  DENDRITE_CHECK(s.c_total >= s.c, op, ": c_total=", s.c_total,
                 " is the full width and must be >= the local width c=", s.c,
                 "; pass the unsplit model width");
}

void check_whole_rows(const NormShape& s, const char* op) {
  check_norm(s, op);
  DENDRITE_CHECK(s.c_total == s.c, op, ": rows must be whole (c_total=", s.c_total, " but c=", s.c,
                 "); a split width takes the row sums and the apply apart");
}

void check_attention(const AttentionShape& s, Operand q, Operand k, Operand v, Operand out,
                     const char* op) {
  DENDRITE_CHECK(s.B > 0 && s.T > 0 && s.NH > 0 && s.NKV > 0 && s.hs > 0, op,
                 ": sizes must be positive, got B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV,
                 " hs=", s.hs);
  DENDRITE_CHECK(s.NH % s.NKV == 0, op, ": NH=", s.NH, " must be a multiple of NKV=", s.NKV,
                 "; choose a KV head count that divides the query head count");
  DENDRITE_CHECK(s.q_stride >= s.NH * s.hs && s.out_stride >= s.NH * s.hs, op,
                 ": q_stride=", s.q_stride, " and out_stride=", s.out_stride,
                 " must be at least NH*hs=", s.NH * s.hs);
  DENDRITE_CHECK(s.kv_stride >= s.NKV * s.hs, op, ": kv_stride=", s.kv_stride,
                 " must be at least NKV*hs=", s.NKV * s.hs);
  check_same_precision(q, k, op);
  check_same_precision(k, v, op);
  check_same_precision(v, out, op);
}

void check_bf16(Operand a, const char* op) {
  DENDRITE_CHECK(a.is_bf16(), op, ": q, k and v must be bf16");
}

void check_cached_attention(const CachedAttentionShape& s) {
  const AttentionShape keys{s.B,  s.pos + s.Tq, s.NH,        s.NKV,
                            s.hs, s.q_stride,   s.kv_stride, s.out_stride};
  const Operand none;
  check_attention(keys, none, none, none, none, "attention_cached");
  DENDRITE_CHECK(s.pos >= 0 && s.Tq >= 1 && s.pos + s.Tq <= s.T_cache, "attention_cached: ", s.Tq,
                 " new positions after ", s.pos, " do not fit the cache of ", s.T_cache,
                 " positions");
}

void check_rope(const RopeShape& s, const RopeSpec& rope, const char* op) {
  DENDRITE_CHECK(s.B > 0 && s.T > 0 && s.nheads > 0 && s.hs > 0 && s.hs % 2 == 0, op,
                 ": need positive sizes and an even head size, got B=", s.B, " T=", s.T,
                 " nheads=", s.nheads, " hs=", s.hs);
  DENDRITE_CHECK(s.stride >= s.nheads * s.hs, op, ": stride=", s.stride,
                 " must be at least nheads*hs=", s.nheads * s.hs);
  const char* problem = rope_spec_problem(rope);
  DENDRITE_CHECK(!problem, op, ": theta=", rope.theta, " factor=", rope.factor, ": ",
                 problem ? problem : "");
  DENDRITE_CHECK(s.pos0 >= 0, op, ": the first position ", s.pos0, " is negative");
}

void check_vocab(const VocabShape& s, const char* op) {
  DENDRITE_CHECK(s.rows >= 0 && s.Vloc > 0 && s.v0 >= 0 && s.V > 0, op,
                 ": need rows >= 0, Vloc > 0, v0 >= 0 and V > 0, got rows=", s.rows,
                 " Vloc=", s.Vloc, " v0=", s.v0, " V=", s.V);
}

void check_whole_vocab(const VocabShape& s, const char* op) {
  check_vocab(s, op);
  DENDRITE_CHECK(
      s.v0 == 0 && s.Vloc >= s.V, op,
      ": needs the whole vocabulary on one rank (v0=0, Vloc >= V), got v0=", s.v0, " Vloc=", s.Vloc,
      " V=", s.V,
      "; with the vocabulary split over Y use ce_local_stats, ce_combine and ce_dlogits_bf16");
}

void check_combine(int rows, int parts) {
  DENDRITE_CHECK(rows >= 0 && parts >= 1,
                 "ce_combine: need rows >= 0 and parts >= 1, got rows=", rows, " parts=", parts,
                 "; parts is the size of the vocabulary split");
}

void check_denominator(double denominator, const char* op) {
  DENDRITE_CHECK(std::isfinite(denominator) && denominator > 0.0, op, ": denominator=", denominator,
                 " must be a positive count of supervised tokens");
}

void check_embedding(const EmbeddingShape& s, const char* op) {
  DENDRITE_CHECK(s.m >= 0 && s.C > 0, op, ": need m >= 0 rows and C > 0 channels, got m=", s.m,
                 " C=", s.C);
  DENDRITE_CHECK(s.v0 >= 0 && s.rows >= 0, op, ": need v0 >= 0 and rows >= 0, got v0=", s.v0,
                 " rows=", s.rows, "; pass this rank's first vocabulary id and block size");
}

void check_chunk(const TableChunk& piece, const EmbeddingShape& s, const char* op) {
  check_embedding(s, op);
  DENDRITE_CHECK(piece.c0 >= 0 && piece.n >= 0, op, ": need c0 >= 0 and n >= 0, got c0=", piece.c0,
                 " n=", piece.n);
}

void check_positions(const PositionShape& s, const char* op) {
  DENDRITE_CHECK(s.m >= 0 && s.C > 0, op, ": need m >= 0 rows and C > 0 channels, got m=", s.m,
                 " C=", s.C);
  DENDRITE_CHECK(s.T > 0, op, ": need T > 0 positions, got T=", s.T);
}

void check_step(int step, const char* op) {
  DENDRITE_CHECK(step >= 1, op, ": step counts from 1, got step=", step);
}

void check_table(int count, int64_t values, const char* op) {
  DENDRITE_CHECK(count >= 0 && values >= 0, op, ": need count >= 0 tensors and values >= 0, got ",
                 "count=", count, " values=", values);
}

void check_vocab_parts(const VocabParts& s) {
  DENDRITE_CHECK(s.parts >= 1 && s.m >= 0 && s.Vloc > 0 && s.V > 0 && s.V <= s.parts * s.Vloc,
                 "interleave_vocab_parts: need parts >= 1, m >= 0, Vloc > 0 and 0 < V <= ",
                 "parts*Vloc, got parts=", s.parts, " m=", s.m, " Vloc=", s.Vloc, " V=", s.V);
}

void check_rows(int64_t rows, int64_t cols, int64_t src_stride) {
  DENDRITE_CHECK(rows >= 0 && cols >= 0 && (src_stride >= cols || rows <= 1),
                 "copy_rows: need rows, cols >= 0 and src_stride >= cols, got rows=", rows,
                 " cols=", cols, " src_stride=", src_stride);
}

}  // namespace dendrite::ops
