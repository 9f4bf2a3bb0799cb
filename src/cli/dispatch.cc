#include <map>

#include <fmt/format.h>

#include "commands.h"

namespace loom::cli {
namespace {
std::map<CLI::App*, std::function<int()>>& actions() {
  static std::map<CLI::App*, std::function<int()>> table;
  return table;
}
}  // namespace

void on_selected(CLI::App* subcommand, std::function<int()> action) { actions()[subcommand] = std::move(action); }

int run_selected(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands())
    if (auto it = actions().find(sub); it != actions().end()) return it->second();
  return kUsageError;
}

int report(const Error& error, int exit_code) {
  fmt::print(stderr, "loom: error: {}\n", error.message);
  if (!error.hint.empty()) fmt::print(stderr, "hint: {}\n", error.hint);
  return exit_code;
}

}  // namespace loom::cli
