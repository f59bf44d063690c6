// The other layers of a transformer on the grid (DESIGN.md section 4), each a
// forward and an explicit backward around the local ops:
//   ParallelNorm         LayerNorm / RMSNorm over the full width of a stream
//                        split over X: row sums all-reduced over X, both ways.
//   VocabEmbedding       the vocabulary-parallel lookup (+ GPT-2 positions):
//                        each Y rank fills the rows of its vocabulary block,
//                        then an all-reduce over Y.
//   VocabCrossEntropy    the LM head and the loss without ever gathering the
//                        logits: [rows, Vp/Gy] per chunk, summed over X; each Y
//                        rank's log-sum-exp and target logit are all-gathered
//                        over Y and combined.
// Letters: m local rows, C width (C/Gx per rank), Vp padded vocabulary (Vp/Gy per rank).
#pragma once

#include <cstdint>
#include <vector>

#include "dendrite/backend/backend.h"
#include "dendrite/comm/grid.h"
#include "dendrite/core/buffer.h"
#include "dendrite/parallel/params.h"
#include "dendrite/parallel/weight_stream.h"

namespace dendrite {

class ParallelNorm {
 public:
  ParallelNorm() = default;
  // layernorm: LayerNorm with gain and bias; else RMSNorm (bias null).
  ParallelNorm(ProcessGrid& grid, Backend& backend, bool layernorm, const ParamSpec& gain,
               const ParamSpec* bias, int c_total, float eps);
  // y, x [m, C/Gx]; mean (LayerNorm only), rstd [m] saved for the backward.
  // y_bf16 (or null) [m, C/Gx]: y rounded to bf16 there, for a bf16 GEMM; y is
  // then scratch (a GPU writes only y_bf16).
  void forward(float* y, float* mean, float* rstd, const float* x, int m, const float* params,
               Buffer<double>& sums, bf16* y_bf16 = nullptr) const;
  // dx [m, C/Gx] overwritten; gain and bias gradients accumulated.
  void backward(float* dx, const float* dy, const float* x, const float* mean, const float* rstd,
                int m, const float* params, float* grads, Buffer<double>& sums) const;
  // The same, dx added to dres [m, C/Gx] (a residual stream's gradient) with
  // the bits of backward into scratch [m, C/Gx] then add_inplace. Given next,
  // the new dres is also the bf16 operand of the product below (next->low
  // [m, C/Gx]) with that product's bias sums added into next->db (or null):
  // the bits of to_bf16_column_sums (to_bf16 without a bias), the sums in the
  // device's order where one pass over whole rows makes them.
  void backward_add(float* dres, float* scratch, const float* dy, const float* x, const float* mean,
                    const float* rstd, int m, const float* params, float* grads,
                    Buffer<double>& sums, const ops::ResidualGradBf16* next = nullptr) const;

 private:
  ProcessGrid* grid_ = nullptr;
  Backend* be_ = nullptr;
  bool layernorm_ = true;
  const ParamSpec* gain_ = nullptr;
  const ParamSpec* bias_ = nullptr;
  int c_ = 0, c_total_ = 0;
  float eps_ = 1e-5f;
};

class VocabEmbedding {
 public:
  VocabEmbedding() = default;
  // table: [Vp, C] sharded as a normal layer; positions: [T_max, C] split over X
  // (columns) and chunked over Z, or null.
  // keep_gathered: hold the Z-gathered table block after the forward, so a
  // tied LM head can use it without gathering again (kept_table()).
  VocabEmbedding(ProcessGrid& grid, Backend& backend, const ParamSpec& table,
                 const ParamSpec* positions, bool keep_gathered = false);
  // The table block gathered by the last forward, or empty when not kept.
  Operand kept_table() const { return keep_ ? kept_block_ : Operand(); }
  // out [m, C/Gx] for tokens [m] (m = B_local * T; in the backend's memory,
  // and a host copy, host_tokens, for the Z gather of the chunked lookup); the
  // table's block (and the positions') from the stream. stored: the
  // parameters in the stream's element type (fp32, or the bf16 copy), for the
  // lookup in this rank's chunk. Row b*T + t sits at position pos0 + t.
  void forward(float* out, const int32_t* tokens, const int32_t* host_tokens, int m, int T,
               Operand stored, WeightStream& stream, int pos0 = 0);
  // Adds the gradients of the table and positions for dout [m, C/Gx] into
  // grads (their dW blocks reduce-scattered over Z through the stream).
  void backward(const float* dout, const int32_t* tokens, int m, int T, float* grads,
                WeightStream& stream);

 private:
  // With Gz > 1, no kept table, and fewer rows in the Z group's batch than
  // in the block (Gz m < block rows), the block is not gathered: the Z ranks
  // all-gather their tokens, each fills the parts of all those rows that lie
  // in its chunk, and a reduce-scatter over Z returns each rank its rows
  // (every float comes from exactly one chunk: the same values as a lookup
  // in the gathered block). The backward all-gathers dout over Z and each
  // rank adds into its own chunk. Gz m rows move each way instead of the
  // block (plan/volume.cpp counts the same rule).
  bool lookup_in_chunks(int m) const {
    const int64_t gz = grid_->shape().z;
    return gz > 1 && !keep_ && gz * m < table_->block_rows;
  }
  ProcessGrid* grid_ = nullptr;
  Backend* be_ = nullptr;
  const ParamSpec* table_ = nullptr;
  const ParamSpec* pos_ = nullptr;
  bool keep_ = false;
  Buffer<float> kept_;                // [Vp/Gy, C/Gx]: the block gathered by the forward
  Operand kept_block_;                // kept_ in the stream's element type
  std::vector<int64_t> mine_, gathered_;  // host: this rank's tokens; the Z group's
  std::vector<int32_t> group_;            // host: the Z group's tokens
  Buffer<int32_t> tokens_;            // the Z group's tokens, kept for the backward
  Buffer<float> rows_;                // [Gz m, C/Gx]: the group's rows (parts of them)
};

class VocabCrossEntropy {
 public:
  VocabCrossEntropy() = default;
  // head: [Vp, C] sharded as a normal layer (GPT-2: the token embedding);
  // V real ids; rows per chunk.
  VocabCrossEntropy(ProcessGrid& grid, Backend& backend, const ParamSpec& head, int V,
                    int chunk_rows);
  // Adds sum_r weight[r] * CE_r over this rank's rows to *loss_sum, one
  // double in the backend's memory (the same on every X and Y rank; the
  // caller divides by the denominator and sums over Z and D). With dx non-null
  // also dx [m, C/Gx] (summed over Y) and the head's gradient.
  // x [m, C/Gx] is fp32, or bf16 under bf16 precision (the logits' GEMMs
  // then run in bf16; the loss and its statistics stay fp32).
  // gathered: the head's block when the caller already holds it, else empty
  // (gathered from the stream).
  void forward_backward(float* dx, Operand x, const int32_t* targets, const float* weight,
                        double denominator, int m, float* grads, WeightStream& stream,
                        double* loss_sum, Operand gathered = {});
  int chunk_rows() const { return chunk_; }
  // logits [m, V] of every row, gathered on every rank (generation, tests),
  // into the backend's memory. keep: its scratch stays for the next call
  // (generation's few rows a token, so that a token allocates nothing), else
  // it is allocated for this call alone.
  void logits(float* out, Operand x, int m, WeightStream& stream, Operand gathered = {},
              bool keep = false);

 private:
  ProcessGrid* grid_ = nullptr;
  Backend* be_ = nullptr;
  const ParamSpec* head_ = nullptr;
  int V_ = 0, chunk_ = 0;
  Buffer<float> logits_, stats_, gathered_, lse_;
  Buffer<bf16> dlogits_;  // [chunk, Vp/Gy]: a chunk's dlogits in bf16 (bf16 precision)
  Buffer<float> kept_local_, kept_all_;  // logits()'s scratch, kept between calls (keep)
};

}  // namespace dendrite
