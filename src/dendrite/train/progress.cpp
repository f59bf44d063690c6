#include "dendrite/train/progress.h"

#include <cstdio>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"

namespace dendrite {

nlohmann::json StepFigures::to_json() const {
  nlohmann::json j = {{"step", step},         {"loss", loss},       {"lr", lr},
                      {"grad_norm", grad_norm}, {"tokens_per_s", tokens_per_s},
                      {"step_ms", step_ms},   {"mfu", mfu},       {"supervised", supervised}};
  if (val_loss >= 0) j["val_loss"] = val_loss;
  if (skipped) j["skipped"] = true;
  if (skipped_steps > 0) j["skipped_steps"] = skipped_steps;
  return j;
}

std::string format_duration(double s) {
  char buf[32];
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

double model_flops_utilization(const ModelConfig& m, int T, double tokens_per_s,
                               double job_peak_gflops) {
  if (job_peak_gflops <= 0) return 0;
  return m.train_flops_per_token(T) * tokens_per_s / 1e9 / job_peak_gflops;
}

ProgressMode parse_progress_mode(const std::string& s) {
  if (s == "auto") return ProgressMode::kAuto;
  if (s == "live") return ProgressMode::kLive;
  if (s == "lines") return ProgressMode::kLines;
  fail("--progress: unknown mode '", s, "'; use auto, live or lines");
}

bool progress_is_live(ProgressMode mode, bool stdout_terminal, bool under_launcher) {
  if (mode == ProgressMode::kLive) return true;
  if (mode == ProgressMode::kLines) return false;
  return stdout_terminal && !under_launcher;
}

Progress::Progress(int64_t steps_to_run, ProgressMode mode)
    : steps_to_run_(steps_to_run),
      terminal_(log_rank() == 0 &&
                progress_is_live(mode, stdout_is_terminal(), started_by_mpi_launcher())) {}

std::string format_step_line(const StepFigures& f, double left_s) {
  char mfu[64];
  if (f.mfu > 1)
    std::snprintf(mfu, sizeof mfu, "MFU %.1f%%?! (above the measured peak)", 100 * f.mfu);
  else
    std::snprintf(mfu, sizeof mfu, "MFU %.1f%%", 100 * f.mfu);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %s | "
                "%.0f ms | left %s",
                static_cast<long long>(f.step), static_cast<long long>(f.total), f.loss, f.lr,
                f.grad_norm, f.tokens_per_s, mfu, f.step_ms, format_duration(left_s).c_str());
  std::string line = buf;
  if (f.show_supervised) {
    std::snprintf(buf, sizeof buf, " | supervised %.3f", f.supervised);
    line += buf;
  }
  if (f.val_loss >= 0) line += str(" | val ", f.val_loss);
  if (f.skipped_steps > 0) line += str(" | skipped ", f.skipped_steps);
  return line;
}

void Progress::update(const StepFigures& f, bool print) {
  ++seen_;
  // The first step pays for page faults and GEMM warm-up; average the rest.
  double s = f.step_ms / 1e3;
  avg_step_s_ = seen_ <= 2 ? s : 0.9 * avg_step_s_ + 0.1 * s;
  if (terminal_) {
    std::printf("\r\033[K%s",
                format_step_line(f, avg_step_s_ * double(steps_to_run_ - seen_)).c_str());
    live_line_open_ = true;
    if (f.val_loss >= 0) {
      std::printf("\n");
      live_line_open_ = false;
    }
    std::fflush(stdout);
  } else if (print) {
    log_info(format_step_line(f, avg_step_s_ * double(steps_to_run_ - seen_)));
  }
}

void Progress::note(const std::string& line) {
  if (live_line_open_) std::printf("\n");
  live_line_open_ = false;
  log_info(line);
}

void Progress::finish() {
  if (live_line_open_) std::printf("\n");
  live_line_open_ = false;
  std::fflush(stdout);
}

}  // namespace dendrite
