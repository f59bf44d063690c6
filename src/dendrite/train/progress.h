// Progress output of long jobs: a live line (rewritten with \r) where the
// user's own terminal shows it, plain lines otherwise, printed by rank 0 only;
// and the one definition of MFU that `train` and `bench step` print.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "dendrite/model/config.h"

namespace dendrite {

// Model flops utilisation: the model's training flops per second
// (ModelConfig::train_flops_per_token of sequences of T tokens, PaLM's count:
// a recomputed forward is not counted) over the job's peak, the backend's
// measured peak in the run's precision (Backend::peak_gflops) times the ranks.
double model_flops_utilization(const ModelConfig& m, int T, double tokens_per_s,
                               double job_peak_gflops);

// How progress is shown: kAuto is live only where stdout is a terminal and no
// MPI launcher started the process (mpirun gives each rank a pseudo-terminal
// even when its own output goes to a file, as under Slurm); kLive and kLines
// force either (`train --progress live|lines|auto`).
enum class ProgressMode { kAuto, kLive, kLines };
ProgressMode parse_progress_mode(const std::string& s);
// Whether a process with stdout_terminal, under an MPI launcher or not, shows
// the live line in `mode` (rank 0 only).
bool progress_is_live(ProgressMode mode, bool stdout_terminal, bool under_launcher);

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

// The progress line of a step; left_s: the estimated time left. An MFU above
// 100% is marked as impossible, never printed as if it were a figure.
std::string format_step_line(const StepFigures& f, double left_s);

class Progress {
 public:
  explicit Progress(int64_t steps_to_run, ProgressMode mode = ProgressMode::kAuto);
  // Records a step; prints it when `print` (always refreshes the live line on a terminal).
  void update(const StepFigures& f, bool print);
  // A line of its own (checkpoint saved, ...).
  void note(const std::string& line);
  void finish();

 private:
  int64_t steps_to_run_, seen_ = 0;
  double avg_step_s_ = 0;
  bool terminal_, live_line_open_ = false;
};

std::string format_duration(double seconds);

}  // namespace dendrite
