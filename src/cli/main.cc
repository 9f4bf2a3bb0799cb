// `loom`: the command-line entry point. Each subcommand lives in its own file (commands.h).
#include <csignal>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "usage_error.h"

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) makes write() fail with EFBIG, which the writers report naming the file,
  // instead of killing the process halfway through a set of files.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"Loom: parallelization plans for deep-learning training"};
  app.require_subcommand(1);
  loom::cli::add_models_command(app);
  loom::cli::add_graph_command(app);
  loom::cli::add_ops_command(app);
  loom::cli::add_comm_command(app);
  loom::cli::add_verify_command(app);
  loom::cli::add_clusters_command(app);
  loom::cli::add_profile_command(app);
  loom::cli::add_calibrate_command(app);
  loom::cli::add_plan_command(app);
  loom::cli::add_compare_command(app);
  loom::cli::add_run_command(app);
  loom::cli::add_solve_iopddl_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& help) {  // --help at any level: the help text, exit 0
    return app.exit(help);
  } catch (const CLI::ParseError& e) {
    loom::cli::report(loom::cli::usage_error(app, e));
    return loom::cli::kUsageError;
  }
  return loom::cli::run_selected(app);
}
