// The overlap model of overlap.h: per-call caps (oar), a pipeline of transfers
// behind the layers' backward (dp, ors) and a one-layer look-ahead (oag).
#include "dendrite/plan/overlap.h"

#include <algorithm>

#include "dendrite/core/check.h"

namespace dendrite {

Overlap Overlap::parse(const std::string& list) {
  Overlap o;
  if (list == "none") return o;
  if (list == "all") return {true, true, true, true};
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, end - start);
    if (item == "oar") o.oar = true;
    else if (item == "ors") o.ors = true;
    else if (item == "oag") o.oag = true;
    else if (item == "dp") o.dp = true;
    else fail("--overlap: unknown overlap '", item, "' in '", list,
              "'; use none, all or a comma list of oar, ors, oag, dp");
    start = end + 1;
  }
  return o;
}

std::string Overlap::str() const {
  if (oar && ors && oag && dp) return "all";
  std::string s;
  for (auto [on, name] : {std::pair{oar, "oar"}, {ors, "ors"}, {oag, "oag"}, {dp, "dp"}})
    if (on) {
      if (!s.empty()) s += ',';
      s += name;
    }
  return s.empty() ? "none" : s;
}

double pipeline_hidden(int items, double each, double compute, double tail) {
  if (items <= 0 || each <= 0) return 0;
  double channel_free = 0;
  for (int i = 0; i < items; ++i) channel_free = std::max((i + 1) * compute, channel_free) + each;
  const double compute_end = items * compute + tail;
  const double exposed = std::max(0.0, channel_free - compute_end);
  return std::clamp(items * each - exposed, 0.0, items * compute + tail);
}

std::map<std::string, double> hidden_seconds(const Overlap& o, const OverlapInputs& in) {
  std::map<std::string, double> hidden;
  const int L = in.layers;
  if (L <= 0) return hidden;
  double oar_layer = 0;  // backward compute of one layer that oar already uses
  if (o.oar)
    for (const OarCall& c : in.oar) {
      const double h = std::min(c.comm_s, c.dweight_s);
      hidden[c.axis] += L * h;
      oar_layer += h;
    }
  // The rest of each layer's backward is what ors, dp and oag can hide behind.
  const double free_layer = std::max(0.0, in.layer_backward_s - oar_layer);
  double z_bwd = 0, d_bwd = 0;
  if (o.ors && in.z_scatters_wait_each_layer) {
    const int n = std::max(1, in.z_scatters_per_layer);
    z_bwd += L * pipeline_hidden(n, in.z_scatter_layer_s / n, free_layer / n, 0);
  } else if (o.ors) {
    z_bwd += pipeline_hidden(L, in.z_scatter_layer_s, free_layer, in.tail_backward_s);
  }
  if (o.dp) d_bwd += pipeline_hidden(L, in.d_bucket_s, free_layer, in.tail_backward_s);
  if (o.oag) {
    hidden["z"] += (L - 1) * std::min(in.z_gather_forward_s, in.layer_forward_s);
    z_bwd += (L - 1) * std::min(in.z_gather_backward_s, free_layer);
  }
  // Together they cannot hide more than the backward compute beside them.
  const double budget = L * free_layer + in.tail_backward_s;
  const double scale = z_bwd + d_bwd > budget ? budget / (z_bwd + d_bwd) : 1.0;
  if (z_bwd > 0) hidden["z"] += scale * z_bwd;
  if (d_bwd > 0) hidden["d"] += scale * d_bwd;
  return hidden;
}

}  // namespace dendrite
