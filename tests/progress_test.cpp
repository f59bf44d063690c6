// The progress output of `train` (train/progress.h): the one MFU definition,
// an MFU above 100% never printed as a figure, and the live line only where
// the user's own terminal shows it.
#include "dendrite/train/progress.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "dendrite/core/check.h"
#include "dendrite/core/log.h"
#include "dendrite/model/config.h"

namespace dendrite {
namespace {

TEST(Mfu, ModelFlopsPerSecondOverTheJobsPeak) {
  const ModelConfig m = load_model_config("gpt2-124m");
  const double flops_per_token = m.train_flops_per_token(1024);
  // 1000 tokens/s against a peak of exactly the flops they need: 100%.
  EXPECT_DOUBLE_EQ(model_flops_utilization(m, 1024, 1000, flops_per_token * 1000 / 1e9), 1.0);
  EXPECT_DOUBLE_EQ(model_flops_utilization(m, 1024, 500, flops_per_token * 1000 / 1e9), 0.5);
  EXPECT_EQ(model_flops_utilization(m, 1024, 1000, 0), 0);  // no peak measured
}

TEST(Progress, AnMfuAbove100PercentIsMarkedNotPrintedAsAFigure) {
  StepFigures f;
  f.step = 3, f.total = 10, f.loss = 2.5, f.tokens_per_s = 1000, f.step_ms = 40;
  f.mfu = 0.512;
  const std::string fine = format_step_line(f, 12);
  EXPECT_NE(fine.find("| MFU 51.2% |"), std::string::npos) << fine;
  EXPECT_EQ(fine.find("above the measured peak"), std::string::npos) << fine;
  f.mfu = 1.085;  // two one-thread runs side by side once printed this
  const std::string impossible = format_step_line(f, 12);
  EXPECT_NE(impossible.find("MFU 108.5%?! (above the measured peak)"), std::string::npos)
      << impossible;
}

TEST(Progress, LiveOnlyWhereTheUsersTerminalIs) {
  EXPECT_TRUE(progress_is_live(ProgressMode::kAuto, true, false));
  EXPECT_FALSE(progress_is_live(ProgressMode::kAuto, true, true));  // mpirun's pseudo-terminal
  EXPECT_FALSE(progress_is_live(ProgressMode::kAuto, false, false));
  EXPECT_TRUE(progress_is_live(ProgressMode::kLive, false, true));
  EXPECT_FALSE(progress_is_live(ProgressMode::kLines, true, false));
  EXPECT_EQ(parse_progress_mode("lines"), ProgressMode::kLines);
  EXPECT_THROW(parse_progress_mode("fancy"), Error);
}

TEST(Progress, LaunchersAreToldByTheirEnvironment) {
  for (const char* v :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_ID"})
    unsetenv(v);
  EXPECT_FALSE(started_by_mpi_launcher());
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_TRUE(started_by_mpi_launcher());
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("PMIX_RANK", "0", 1);
  EXPECT_TRUE(started_by_mpi_launcher());
  unsetenv("PMIX_RANK");
}

}  // namespace
}  // namespace dendrite
