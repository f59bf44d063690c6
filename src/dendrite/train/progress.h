// Progress output of long jobs: a live line (rewritten with \r) on a terminal,
// plain lines otherwise, printed by rank 0 only.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace dendrite {

struct StepFigures {
  int64_t step = 0, total = 0;  // step counts from 1 here: the number of updates done
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, step_ms = 0, mfu = 0;
  double val_loss = -1;  // < 0: not evaluated this step
  bool skipped = false;  // the update was skipped (--on-nan skip-step)
  int64_t skipped_steps = 0;  // updates skipped so far in this run
  double supervised = 1;  // fraction of the batch's target tokens in the loss (Goldfish drops some)
  bool show_supervised = false;  // on the progress line too (the JSON always has it)
  nlohmann::json to_json() const;
};

class Progress {
 public:
  explicit Progress(int64_t steps_to_run);
  // Records a step; prints it when `print` (always refreshes the live line on a terminal).
  void update(const StepFigures& f, bool print);
  // A line of its own (checkpoint saved, ...).
  void note(const std::string& line);
  void finish();

 private:
  std::string format(const StepFigures& f) const;
  int64_t steps_to_run_, seen_ = 0;
  double avg_step_s_ = 0;
  bool terminal_, live_line_open_ = false;
};

std::string format_duration(double seconds);

}  // namespace dendrite
