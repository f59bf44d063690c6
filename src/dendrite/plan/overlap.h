// What the overlap options hide (DESIGN.md section 5), as the performance
// model counts it: a collective posted non-blocking is hidden only up to the
// computation that runs beside it, never more.
//  - oar: each layer's backward all-reduce of dx (over Y or X) runs behind the
//    dW GEMM of the same linear: hidden min(all-reduce, that GEMM) per call.
//  - dp:  each layer's gradients are summed over D (one bucket per layer,
//    posted after its backward) behind the backward of the layers below it;
//    the rest (embedding, head, final norm) is posted at the end, exposed.
//  - ors: each layer's dW reduce-scatters over Z run behind the backward of the
//    layers below it (the same pipeline as dp); with dp across nodes, only
//    behind the rest of their own layer's backward (each linear's posted when
//    its dW is done, all waited for at the layer's end).
//  - oag: the Z all-gather of layer l+1's weights runs behind layer l's
//    forward and backward (the trainer turns it off with --keep-gathered).
// Axes x, y, z, d as in the grid; all times in seconds on one rank.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dendrite {

struct Overlap {
  bool oar = false, ors = false, oag = false, dp = false;
  // "none", "all" or a comma list of oar, ors, oag, dp; anything else is an
  // error naming the item.
  static Overlap parse(const std::string& list);
  std::string str() const;  // "none", "all" or the list
};

// One all-reduce of dx posted beside its dW GEMM (per layer).
struct OarCall {
  std::string axis;  // "x" or "y"
  double comm_s = 0, dweight_s = 0;
};

// The per-layer figures the overlap model needs (one layer; every layer is alike).
struct OverlapInputs {
  int layers = 0;
  double layer_forward_s = 0, layer_backward_s = 0;  // compute of one layer
  double tail_backward_s = 0;       // compute after the last layer's backward (embedding)
  std::vector<OarCall> oar;         // dx all-reduces of one layer's backward
  double z_gather_forward_s = 0;    // one layer's Z all-gathers in the forward
  double z_gather_backward_s = 0;   // ... and in the backward (0 with --keep-gathered)
  double z_scatter_layer_s = 0;     // one layer's dW reduce-scatters over Z
  int z_scatters_per_layer = 1;     // ... in that many calls, one per linear, posted in turn
  // With dp, where the Z or the D group has no shared memory (it crosses
  // nodes, or shared memory is off), each layer's reduce-scatters are waited
  // for before its D sums are posted (Transformer::reduce_bucket): ors hides
  // them only behind the rest of their own layer's backward.
  bool z_scatters_wait_each_layer = false;
  double d_bucket_s = 0;            // one layer's D bucket (with dp)
};

// Hidden seconds per axis ("x", "y", "z", "d"). Each overlap is capped by the
// compute beside it; the backward pipelines (ors, dp) share the backward's
// compute, and what oar hides is taken out of it first.
std::map<std::string, double> hidden_seconds(const Overlap& o, const OverlapInputs& in);

// Seconds of `items` transfers of `each` seconds, each posted when the
// compute of one more step of `compute` seconds has finished, on one channel
// (transfer i starts at max(end of step i, end of transfer i-1)): how much of
// the transfers ends before the last step's compute plus `tail` does.
double pipeline_hidden(int items, double each, double compute, double tail);

}  // namespace dendrite
