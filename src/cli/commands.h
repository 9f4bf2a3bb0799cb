// Subcommands of `loom`: each adds itself to the app and records what to run when selected.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "loom/core/error.h"

namespace loom::cli {

void add_ops_command(CLI::App& app);
void add_models_command(CLI::App& app);
void add_graph_command(CLI::App& app);
void add_comm_command(CLI::App& app);    // comm_command.cc
void add_verify_command(CLI::App& app);  // verify_command.cc
void add_clusters_command(CLI::App& app);  // clusters_command.cc
void add_profile_command(CLI::App& app);   // profile_command.cc
void add_calibrate_command(CLI::App& app);  // calibrate_command.cc
void add_plan_command(CLI::App& app);      // plan_command.cc
void add_compare_command(CLI::App& app);   // plan_command.cc
void add_run_command(CLI::App& app);       // run_command.cc
void add_solve_iopddl_command(CLI::App& app);  // solve_iopddl_command.cc

// Registers the action of a subcommand; run_selected runs the one the user chose and returns the exit code.
void on_selected(CLI::App* subcommand, std::function<int()> action);
int run_selected(CLI::App& app);

// Prints "loom: error: ..." (and the hint) to stderr; returns `exit_code` (1: a user error).
int report(const Error& error, int exit_code = 1);

// The exit code of a command line that does not parse (an unknown command or option, a missing or bad
// value), as argparse and torchrun use; report()'s 1 is for input the command could read but not use.
inline constexpr int kUsageError = 2;

}  // namespace loom::cli
