// `loom ops`: the operator registry, one line per type with its family and annotation.
#include <fmt/format.h>

#include "commands.h"
#include "loom/ops/registry.h"

namespace loom::cli {

void add_ops_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("ops", "List the registered operator types");
  on_selected(cmd, [] {
    const ops::OpRegistry& registry = ops::builtin_ops();
    fmt::print("{:<14} {:<28} {}\n", "family", "type", "summary");
    for (const ir::OpDef* def : registry.all()) fmt::print("{:<14} {:<28} {}\n", def->family, def->type, def->summary);
    fmt::print("{} operator types\n", registry.size());
    return 0;
  });
}

}  // namespace loom::cli
