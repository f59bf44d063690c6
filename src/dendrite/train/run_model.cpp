// The model of a run of `dendrite train` or `bench step` (trainer.h): the
// overlaps --overlap auto stands for on this node, the model sized for the
// run's micro-batch, and one step's gradients over its micro-batches.
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"
#include "dendrite/train/trainer.h"

namespace dendrite {

std::string resolve_overlap(const std::string& overlap, int ranks_on_node, int threads,
                            std::string* why) {
  if (overlap != "auto") return overlap;
  // The cores this process may run on: all of the node's unless the launcher
  // bound each rank to its own (then they are this rank's alone).
  cpu_set_t set;
  CPU_ZERO(&set);
  const int online = int(std::max(1u, std::thread::hardware_concurrency()));
  const int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : online;
  const bool bound = mine < online;
  const int cores = bound ? mine : online, sharing = bound ? 1 : std::max(1, ranks_on_node);
  const bool spare = cores >= sharing * (threads + 1);
  if (why)
    *why = str(sharing, sharing == 1 ? " rank" : " ranks", " x ", threads, " thread(s) on ", cores,
               " core(s): ",
               spare ? "a core to spare for each progress engine"
                     : "no core to spare for the progress engines");
  return spare ? "all" : "none";
}

std::unique_ptr<Transformer> make_model(const ModelConfig& mc, ProcessGrid& grid, Backend& backend,
                                        const TrainOptions& opt) {
  check_batch_split(opt, grid.shape());
  ModelOptions mo;
  mo.keep_gathered = opt.keep_gathered;
  mo.recompute = opt.recompute;
  mo.fuse_qkv = opt.fuse_qkv;
  mo.fuse_gate_up = opt.fuse_gate_up;
  std::string why;
  const std::string overlap =
      resolve_overlap(opt.overlap, grid.world().ranks_on_node(), omp_get_max_threads(), &why);
  if (overlap != opt.overlap && grid.rank() == 0 && grid.shape().size() > 1)
    log_info(str("overlap auto: ", overlap, " (", why, ")"));
  mo.set_overlap(overlap);
  mo.precision = parse_precision(opt.precision);
  if (mo.precision == Precision::kBF16 && !backend.bf16_gemm_native() && grid.rank() == 0)
    log_info(str("warning: --precision bf16: this CPU lacks ", backend.bf16_gemm_missing(),
                 ", so the bf16 GEMMs widen their operands and run in fp32: bf16's results ",
                 "without its speed"));
  backend.set_gemm_tuning(opt.gemm_tune);
  return std::make_unique<Transformer>(mc, grid, backend, opt.batch / opt.grad_accum, opt.seq, mo);
}

double step_gradients(Transformer& model, const int32_t* inputs, const int32_t* targets,
                      const float* weights, double denominator, int B, int T, int micro_batches) {
  step_gradients_unread(model, inputs, targets, weights, denominator, B, T, micro_batches);
  return model.read_step_totals().loss;
}

void step_gradients_unread(Transformer& model, const int32_t* inputs, const int32_t* targets,
                           const float* weights, double denominator, int B, int T,
                           int micro_batches) {
  model.zero_grads();
  const int micro = B / micro_batches;
  for (int k = 0; k < micro_batches; ++k) {
    // This rank's sequences of micro-batch k: [k * micro + first, ...).
    const size_t first = (size_t(k) * micro + model.first_sequence(micro)) * T;
    model.forward_backward_unread(inputs + first, targets + first,
                                  weights ? weights + first : nullptr, denominator, micro, T,
                                  k + 1 == micro_batches);
  }
}

}  // namespace dendrite
