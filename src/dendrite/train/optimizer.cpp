#include "dendrite/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "dendrite/core/check.h"

namespace dendrite {

namespace {
Buffer<float> moment(Backend& backend, int64_t n) {
  AllocationPurpose purpose("AdamW's moments");
  return backend.alloc<float>(n);
}
}  // namespace

AdamW::AdamW(Backend& backend, const ParamTable& table, const ops::AdamWConfig& config)
    : be_(backend),
      table_(table),
      tensors_(make_tensor_table(backend, table, false)),
      config_(config),
      m_(moment(backend, table.total())),
      v_(moment(backend, table.total())) {}

float AdamW::clip_factor(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale, bf16* low,
                 int64_t low_count) {
  ++step_;
  for (const ParamSpec& s : table_.specs())
    DENDRITE_CHECK(!low || s.offset + s.numel <= low_count || s.offset >= low_count,
                   "adamw: the bf16 copy ends inside ", s.name);
  be_.adamw_update_tensors(params, grads, m_.data(), v_.data(), tensors_.table.data(),
                           tensors_.count, tensors_.values, lr, static_cast<int>(step_), config_,
                           grad_scale, low, low_count);
}

void AdamW::step(Transformer& model, float lr, float grad_scale) {
  const Transformer::Writable w = model.params_and_copy();
  step(w.params, model.grads(), lr, grad_scale, w.low, w.low_count);
}

}  // namespace dendrite
