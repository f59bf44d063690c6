// Subcommands of the `dendrite` program. Each registers its options on the
// CLI11 app and returns the function to run after parsing. Those that
// communicate get the process's MpiEnv: its rank and size, its options and
// the world communicator their grids split from.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "dendrite/backend/backend.h"
#include "dendrite/comm/grid.h"
#include "dendrite/comm/mpi/env.h"
#include "dendrite/model/config.h"
#include "dendrite/train/hooks.h"

namespace dendrite::app {

using Runner = std::function<int()>;

// What the device did during one training step, for `bench step --anatomy`:
// the tests' program on the emulated GPU passes one (its launches,
// synchronisations, allocations and copies by op); `dendrite` passes none.
struct StepCounter {
  virtual ~StepCounter() = default;
  virtual void begin() = 0;
  // What the device did since begin(), as one JSON object.
  virtual std::string end() = 0;
};

// The whole program: MPI set up, the subcommand parsed and run, any error on
// any rank ending the job. hooks reach `train` (tests inject failures; null
// in `dendrite` itself); counter reaches `bench step` (null in `dendrite`).
int dendrite_main(int argc, char** argv, const TrainHooks* hooks, StepCounter* counter = nullptr);

Runner add_tokenize(CLI::App& app);
Runner add_train(CLI::App& app, int argc, char** argv, const TrainHooks* hooks, MpiEnv& env);
Runner add_generate(CLI::App& app, MpiEnv& env);
Runner add_memorization(CLI::App& app, MpiEnv& env);  // apps/memorization_cmd.cpp
Runner add_bench(CLI::App& app, MpiEnv& env, StepCounter* counter = nullptr);
Runner add_plan(CLI::App& app, MpiEnv& env);       // apps/plan_cmd.cpp
Runner add_calibrate(CLI::App& app, MpiEnv& env);  // apps/calibrate_cmd.cpp
Runner add_export(CLI::App& app, MpiEnv& env);
Runner add_score(CLI::App& app, MpiEnv& env);

// The process grid over every rank of `world` from a --grid text ("x=2,y=2,d=2").
ProcessGrid make_grid(Communicator& world, const std::string& text);
// This rank's backend for a --device text (cpu, cuda, auto), its GPU picked
// by the rank's index on its node and its GPU transport by env's options.
// Collective over env's world.
std::unique_ptr<Backend> make_rank_backend(const std::string& device, MpiEnv& env,
                                           bool gemm_epilogues = true);

// The model a command plans or times: a Hugging Face folder's (a folder that
// holds config.json, read as --init-from reads it), else a preset or a model
// JSON file (load_model_config).
ModelConfig model_config_of(const std::string& model_or_folder);

// Loads a JSON config file given by --config before the other options are
// parsed, so that options on the command line override it.
std::string find_config_arg(int argc, char** argv);

}  // namespace dendrite::app
