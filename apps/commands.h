// Subcommands of the `dendrite` program. Each registers its options on the
// CLI11 app and returns the function to run after parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace dendrite::app {

using Runner = std::function<int()>;

Runner add_tokenize(CLI::App& app);
Runner add_train(CLI::App& app, int argc, char** argv);
Runner add_generate(CLI::App& app);
Runner add_bench(CLI::App& app);

// Loads a JSON config file given by --config before the other options are
// parsed, so that options on the command line override it.
std::string find_config_arg(int argc, char** argv);

}  // namespace dendrite::app
