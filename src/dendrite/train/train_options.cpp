// The options of `dendrite train` (trainer.h: TrainOptions): their JSON form,
// which a --config file gives and each checkpoint keeps, and the check that
// a batch splits over the grid and the micro-batches.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "dendrite/core/check.h"
#include "dendrite/core/json_number.h"
#include "dendrite/train/trainer.h"

namespace dendrite {

#define DENDRITE_TRAIN_FIELDS(X)                                                                   \
  X(model)                                                                                         \
  X(data)                                                                                          \
  X(steps) X(batch) X(seq) X(lr) X(min_lr) X(warmup) X(weight_decay) X(beta1) X(beta2) X(adam_eps) \
      X(grad_clip) X(seed) X(out) X(resume) X(save_every) X(stop_at) X(eval_every) X(eval_batches) \
          X(log_every) X(metrics) X(threads) X(grid) X(keep_gathered) X(recompute) X(overlap)      \
              X(keep) X(on_nan) X(timeout) X(goldfish) X(gemm_tune) X(grad_accum) X(precision)     \
                  X(device) X(init_from) X(trace) X(trace_steps) X(progress)

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j;
#define X(f) j[#f] = f;
  DENDRITE_TRAIN_FIELDS(X)
#undef X
  return j;
}

// An option's value as T: a number T can hold (json_number.h); other
// types as nlohmann's get<T> checks them.
template <typename T>
T option_value(const std::string& key, const nlohmann::json& v) {
  DENDRITE_CHECK(json_number_fits<T>(v), "config: key '", key, "' must be ", json_number_kind<T>(),
                 ", not ", v.dump());
  return v.get<T>();
}

void TrainOptions::update_from_json(const nlohmann::json& j) {
  DENDRITE_CHECK(j.is_object(), "config: expected a JSON object of option names and values");
  for (auto& [key, value] : j.items()) {
    bool known = false;
    try {
#define X(f)                                   \
  if (key == #f) {                             \
    f = option_value<decltype(f)>(key, value); \
    known = true;                              \
  }
      DENDRITE_TRAIN_FIELDS(X)
#undef X
    } catch (const nlohmann::json::exception& e) {
      fail("config: key '", key, "' has the wrong type (", e.what(), ")");
    }
    DENDRITE_CHECK(known, "config: unknown key '", key, "'; the keys are the long options of ",
                   "`dendrite train --help` without the dashes (e.g. \"steps\", \"lr\")");
  }
}

void check_batch_split(const TrainOptions& opt, const GridShape& grid) {
  DENDRITE_CHECK(opt.grad_accum >= 1, "train: --grad-accum must be 1 or more micro-batches per ",
                 "step, got ", opt.grad_accum);
  DENDRITE_CHECK(opt.batch % opt.grad_accum == 0, "train: --batch ", opt.batch,
                 " does not split into --grad-accum ", opt.grad_accum,
                 " micro-batches of whole sequences; pass a --batch that is a multiple of ",
                 opt.grad_accum);
  const int micro = opt.batch / opt.grad_accum, split = grid.d * grid.z;
  const std::string what = opt.grad_accum == 1
                               ? str("--batch ", opt.batch)
                               : str("a micro-batch of ", micro, " sequences (--batch ", opt.batch,
                                     " / --grad-accum ", opt.grad_accum, ")");
  DENDRITE_CHECK(micro % split == 0, "train: ", what, " is not divisible by d*z=", split,
                 " on grid ", grid.str(), ": whole sequences stay on one rank; pass a --batch ",
                 "that is a multiple of ", int64_t(opt.grad_accum) * split);
}

}  // namespace dendrite
